// The phase stamps of the Hopper kernel (launch.h: set_trace, mark_trace, last_trace), compiled in
// with the CMake option LKV_SM90_TRACE; without it the functions say so.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "cuda_common/cuda_check.h"
#include "decode/sm90/launch.h"
#include "latentkv/error.h"

namespace latentkv::decode::sm90 {

#if defined(LKV_SM90_TRACE)
namespace {

// One buffer for the process: the stamps of every launch of the traced call, one after another
// ([used][kTracePhases] of [capacity][kTracePhases]), zeroed when tracing is turned on; the two
// marks in a buffer of their own, so that growing the stamps' buffer cannot lose them.
struct TraceState {
  std::mutex mu;
  std::atomic<bool> on{false};
  unsigned long long* buf = nullptr;
  unsigned long long* marks = nullptr;  // [2]
  int64_t capacity = 0;                 // CTAs
  int64_t used = 0;                     // CTAs stamped by the traced call so far
  std::vector<int64_t> launches;        // their grids
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

// Room for `ctas` CTAs in all, keeping the stamps so far (the bench's traced calls run on the
// legacy default stream, so the synchronisation only waits for the call's earlier launches).
void reserve(TraceState& t, int64_t ctas) {
  if (t.marks == nullptr) {
    LKV_CUDA_CHECK(cudaMalloc(&t.marks, 2 * sizeof(unsigned long long)));
    LKV_CUDA_CHECK(cudaMemset(t.marks, 0, 2 * sizeof(unsigned long long)));
  }
  if (ctas <= t.capacity) return;
  const int64_t cap = std::max<int64_t>({ctas, 2 * t.capacity, 4096});
  unsigned long long* buf = nullptr;
  LKV_CUDA_CHECK(cudaDeviceSynchronize());
  LKV_CUDA_CHECK(cudaMalloc(&buf, sizeof(unsigned long long) * cap * kTracePhases));
  LKV_CUDA_CHECK(cudaMemset(buf, 0, sizeof(unsigned long long) * cap * kTracePhases));
  if (t.buf != nullptr) {
    LKV_CUDA_CHECK(cudaMemcpy(buf, t.buf, sizeof(unsigned long long) * t.used * kTracePhases,
                              cudaMemcpyDeviceToDevice));
    LKV_CUDA_CHECK(cudaFree(t.buf));
  }
  t.buf = buf;
  t.capacity = cap;
}

}  // namespace

bool trace_built() { return true; }

void set_trace(bool on) {
  TraceState& t = state();
  std::lock_guard<std::mutex> lock(t.mu);
  if (on) {
    // A fresh call: no launches yet, every stamp and mark 0 (zeroed here, before the call, so that
    // nothing is queued between its kernels).
    reserve(t, 1);
    LKV_CUDA_CHECK(cudaDeviceSynchronize());
    LKV_CUDA_CHECK(cudaMemset(t.buf, 0, sizeof(unsigned long long) * t.capacity * kTracePhases));
    LKV_CUDA_CHECK(cudaMemset(t.marks, 0, 2 * sizeof(unsigned long long)));
    LKV_CUDA_CHECK(cudaDeviceSynchronize());
    t.used = 0;
    t.launches.clear();
  }
  t.on.store(on);
}

unsigned long long* trace_buffer(int64_t ctas) {
  TraceState& t = state();
  if (!t.on.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard<std::mutex> lock(t.mu);
  reserve(t, t.used + ctas);
  unsigned long long* slice = t.buf + t.used * kTracePhases;
  t.used += ctas;
  t.launches.push_back(ctas);
  return slice;
}

void mark_trace(int which) {
  LKV_CHECK(which == 0 || which == 1, "mark_trace: which must be 0 or 1, got ", which);
  TraceState& t = state();
  std::lock_guard<std::mutex> lock(t.mu);
  reserve(t, 1);
  mark_kernel<<<1, 1>>>(t.marks + which);
  LKV_CUDA_CHECK_LAUNCH();
}

KernelTrace last_trace() {
  TraceState& t = state();
  std::lock_guard<std::mutex> lock(t.mu);
  KernelTrace r;
  if (t.buf == nullptr) return r;
  LKV_CUDA_CHECK(cudaDeviceSynchronize());
  r.ctas = t.used;
  r.launches = t.launches;
  r.stamps.resize(static_cast<size_t>(r.ctas * kTracePhases));
  if (!r.stamps.empty())
    LKV_CUDA_CHECK(cudaMemcpy(r.stamps.data(), t.buf, r.stamps.size() * sizeof(unsigned long long),
                              cudaMemcpyDeviceToHost));
  unsigned long long marks[2];
  LKV_CUDA_CHECK(cudaMemcpy(marks, t.marks, sizeof(marks), cudaMemcpyDeviceToHost));
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
