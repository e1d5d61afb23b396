// The phase stamps of the Hopper kernel (launch.h: set_trace, mark_trace, last_trace), compiled in
// with the CMake option LKV_SM90_TRACE; without it the functions say so.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "cuda_common/cuda_check.h"
#include "decode/sm90/launch.h"
#include "latentkv/error.h"

namespace latentkv::decode::sm90 {

#if defined(LKV_SM90_TRACE)
namespace {

// One buffer for the process: [capacity][kTracePhases] stamps, then the two marks.
struct TraceState {
  std::mutex mu;
  std::atomic<bool> on{false};
  unsigned long long* buf = nullptr;
  int64_t capacity = 0;  // CTAs
  int64_t last_ctas = 0;
};
TraceState& state() {
  static TraceState t;
  return t;
}

__global__ void mark_kernel(unsigned long long* slot) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  *slot = t;
}

// Room for `ctas` CTAs (reallocated larger when needed; the device is idle then, since the
// traced calls are the bench's and it synchronises around them).
void reserve(TraceState& t, int64_t ctas) {
  if (ctas <= t.capacity) return;
  LKV_CUDA_CHECK(cudaDeviceSynchronize());
  if (t.buf != nullptr) LKV_CUDA_CHECK(cudaFree(t.buf));
  const int64_t cap = std::max<int64_t>(ctas, 4096);
  LKV_CUDA_CHECK(cudaMalloc(&t.buf, sizeof(unsigned long long) * (cap * kTracePhases + 2)));
  LKV_CUDA_CHECK(cudaMemset(t.buf, 0, sizeof(unsigned long long) * (cap * kTracePhases + 2)));
  t.capacity = cap;
}

}  // namespace

bool trace_built() { return true; }

void set_trace(bool on) {
  TraceState& t = state();
  std::lock_guard<std::mutex> lock(t.mu);
  if (on) t.last_ctas = 0;  // a traced call that never reaches the kernel reports no stamps
  t.on.store(on);
}

unsigned long long* trace_buffer(int64_t ctas, cudaStream_t stream) {
  TraceState& t = state();
  if (!t.on.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard<std::mutex> lock(t.mu);
  reserve(t, ctas);
  LKV_CUDA_CHECK(cudaMemsetAsync(t.buf, 0, sizeof(unsigned long long) * ctas * kTracePhases, stream));
  t.last_ctas = ctas;
  return t.buf;
}

void mark_trace(int which) {
  LKV_CHECK(which == 0 || which == 1, "mark_trace: which must be 0 or 1, got ", which);
  TraceState& t = state();
  std::lock_guard<std::mutex> lock(t.mu);
  reserve(t, 1);
  mark_kernel<<<1, 1>>>(t.buf + t.capacity * kTracePhases + which);
  LKV_CUDA_CHECK_LAUNCH();
}

KernelTrace last_trace() {
  TraceState& t = state();
  std::lock_guard<std::mutex> lock(t.mu);
  KernelTrace r;
  if (t.buf == nullptr) return r;
  LKV_CUDA_CHECK(cudaDeviceSynchronize());
  r.ctas = t.last_ctas;
  r.stamps.resize(static_cast<size_t>(r.ctas * kTracePhases));
  if (!r.stamps.empty())
    LKV_CUDA_CHECK(cudaMemcpy(r.stamps.data(), t.buf, r.stamps.size() * sizeof(unsigned long long),
                              cudaMemcpyDeviceToHost));
  unsigned long long marks[2];
  LKV_CUDA_CHECK(cudaMemcpy(marks, t.buf + t.capacity * kTracePhases, sizeof(marks), cudaMemcpyDeviceToHost));
  r.before = marks[0];
  r.after = marks[1];
  return r;
}

#else

bool trace_built() { return false; }
void set_trace(bool on) {
  LKV_CHECK(!on, "the Hopper kernel's phase stamps need a build with the CMake option LKV_SM90_TRACE=ON");
}
void mark_trace(int) { set_trace(true); }
KernelTrace last_trace() { return {}; }

#endif

}  // namespace latentkv::decode::sm90
