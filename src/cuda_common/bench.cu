// Device helpers for benchmarks (see bench.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "cuda_common/bench.h"
#include "cuda_common/cuda_check.h"
#include "cuda_common/pdl.cuh"

namespace latentkv::bench_cuda {
namespace {

__global__ void read_kernel(const float4* __restrict__ src, size_t n, float* __restrict__ sink) {
  float acc = 0.0f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float4 v = __ldcs(src + i);
    acc += (v.x + v.y) + (v.z + v.w);
  }
  // Never true for the buffer measured (every float 0.747), but the compiler cannot know that:
  // the condition keeps the loads alive.
  if (acc == 1.2345f) sink[blockIdx.x] = acc;
}

// Plain (normal-priority) loads: lines loaded as evict-first (ld.global.cs) would preferentially
// replace each other rather than the benchmark's own inputs, and the flush would not flush.
__global__ void flush_kernel(const float4* __restrict__ src, size_t n, float* __restrict__ sink) {
  float acc = 0.0f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float4 v = src[i];
    acc += (v.x + v.y) + (v.z + v.w);
  }
  if (acc == 1.2345f) sink[blockIdx.x] = acc;  // never true (see read_kernel); keeps the loads
}

// A few CTAs (all resident at once, most SMs left idle: the dependent grid's CTAs were seen to start
// only on SMs without one of these, bench/NOTES.md v30): each lets the next kernel in at once,
// waits `delay_ns` by the global timer, then copies its share of the bytes (16 bytes at a time
// where src and dst allow it).
__global__ void delayed_copy_kernel(uint8_t* __restrict__ dst, const uint8_t* __restrict__ src,
                                    size_t bytes, unsigned long long delay_ns) {
  cuda_common::pdl_launch_dependents();
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < delay_ns);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  size_t done = 0;
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) % 16 == 0) {
    done = bytes / 16 * 16;
    for (size_t i = first; i < bytes / 16; i += stride)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  }
  for (size_t i = done + first; i < bytes; i += stride) dst[i] = src[i];
}

// Does nothing: the event-timed span of a launch with no work (measure_empty_launch_us).
__global__ void empty_kernel() {}

void* g_flush = nullptr;
float* g_flush_sink = nullptr;
constexpr size_t kFlushBytes = size_t{256} << 20;  // > 4x the H200's 60 MB L2

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  LKV_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

int sm_count(int device) {
  int n = 0;
  LKV_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

void* alloc(size_t bytes) {
  void* p = nullptr;
  LKV_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
  return p;
}
void free(void* p) { LKV_CUDA_CHECK(cudaFree(p)); }
void to_device(void* dst, const void* src, size_t bytes) {
  LKV_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void to_host(void* dst, const void* src, size_t bytes) {
  LKV_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void synchronize() { LKV_CUDA_CHECK(cudaDeviceSynchronize()); }

void delayed_copy(void* dst, const void* src, size_t bytes, double delay_us, void* stream) {
  int device = 0;
  LKV_CUDA_CHECK(cudaGetDevice(&device));
  delayed_copy_kernel<<<std::min(8, sm_count(device)), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), bytes,
      static_cast<unsigned long long>(delay_us * 1000.0));
  LKV_CUDA_CHECK_LAUNCH();
}

// Reads (not writes) the flush buffer with normal loads: the L2 ends up full of clean lines of the
// flush buffer, so the timed call neither finds its inputs cached nor pays for writing back dirty
// lines of the flush.
void flush_l2() {
  if (!g_flush) {
    g_flush = alloc(kFlushBytes);
    g_flush_sink = static_cast<float*>(alloc(sizeof(float) * 65536));
    LKV_CUDA_CHECK(cudaMemset(g_flush, 0x3f, kFlushBytes));
  }
  int device = 0;
  LKV_CUDA_CHECK(cudaGetDevice(&device));
  flush_kernel<<<sm_count(device) * 8, 256>>>(static_cast<const float4*>(g_flush),
                                              kFlushBytes / sizeof(float4), g_flush_sink);
  LKV_CUDA_CHECK_LAUNCH();
}

namespace {
// Two events on the legacy default stream: the device time from start() to span_ms().
class EventSpan {
 public:
  EventSpan() {
    LKV_CUDA_CHECK(cudaEventCreate(&start_));
    LKV_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventSpan() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventSpan(const EventSpan&) = delete;
  EventSpan& operator=(const EventSpan&) = delete;
  void start() { LKV_CUDA_CHECK(cudaEventRecord(start_)); }
  float span_ms() {
    LKV_CUDA_CHECK(cudaEventRecord(stop_));
    LKV_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    LKV_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_, stop_;
};

// The middle value, or the mean of the two middle values for an even count (the reps are 10-50).
template <typename T>
double median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? static_cast<double>(v[n / 2]) : 0.5 * (static_cast<double>(v[n / 2 - 1]) + v[n / 2]);
}
}  // namespace

double time_us(const std::function<void()>& fn, int reps, int warmup, bool flush,
               const std::function<void()>& before_each) {
  for (int i = 0; i < warmup; ++i) fn();
  EventSpan span;
  std::vector<float> ms(static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    if (flush) flush_l2();
    if (before_each) before_each();
    span.start();
    fn();
    ms[r] = span.span_ms();
  }
  return 1000.0 * median(ms);
}

double stream_time_us(const std::function<void(int)>& call, int calls, int reps, double lead_us,
                      double* host_us_per_call) {
  for (int i = 0; i < calls; ++i) call(i);  // warm-up
  EventSpan span;
  std::vector<float> ms(static_cast<size_t>(reps));
  std::vector<double> host(static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    delayed_copy(nullptr, nullptr, 0, lead_us);
    span.start();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) call(i);
    host[r] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
    ms[r] = span.span_ms();
  }
  if (host_us_per_call) *host_us_per_call = median(host);
  return 1000.0 * median(ms) / calls;
}

double measure_empty_launch_us(int ctas) {
  LKV_CHECK(ctas >= 1, "measure_empty_launch_us: ctas must be >= 1, got ", ctas);
  return time_us(
      [&] {
        empty_kernel<<<ctas, 256>>>();
        LKV_CUDA_CHECK_LAUNCH();
      },
      20);
}

double measure_hbm_read_GBps() {
  const size_t bytes = size_t{4} << 30;
  const size_t n = bytes / sizeof(float4);
  void* buf = alloc(bytes);
  void* sink = alloc(sizeof(float) * 65536);
  LKV_CUDA_CHECK(cudaMemset(buf, 0x3f, bytes));  // not zeros: see docs/benchmarks.md
  int device = 0;
  LKV_CUDA_CHECK(cudaGetDevice(&device));
  const int blocks = sm_count(device) * 8;
  const double us = time_us(
      [&] {
        read_kernel<<<blocks, 256>>>(static_cast<const float4*>(buf), n, static_cast<float*>(sink));
        LKV_CUDA_CHECK_LAUNCH();
      },
      20, 3, false);
  free(sink);
  free(buf);
  return static_cast<double>(bytes) / (us * 1e-6) / 1e9;
}

}  // namespace latentkv::bench_cuda
