// cuda_common/bench.h: device helpers for benchmarks and tools (declarations only, no CUDA headers):
// memory, copies, an L2 flush, event timing and the measured HBM read ceiling. Every call is checked.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace latentkv::bench_cuda {

int device_count();  // 0 when no driver or device
std::string device_name(int device);
int sm_count(int device);

void* alloc(size_t bytes);  // cudaMalloc (never managed memory)
void free(void* p);
void to_device(void* dst, const void* src, size_t bytes);
void to_host(void* dst, const void* src, size_t bytes);
void synchronize();

// A kernel of 8 CTAs on `stream` (null: the legacy default stream) that lets the next kernel of the
// stream start at once (programmatic dependent launch, sm_90 code) on the SMs it leaves idle, spins
// for delay_us, then copies `bytes` from src to dst: for tests that a kernel launched behind it with
// PDL waits before it reads what this one writes.
void delayed_copy(void* dst, const void* src, size_t bytes, double delay_us, void* stream = nullptr);

// Reads a 256 MiB buffer (over 4x the L2) with normal loads so the next kernel starts with a cold
// cache (clean lines only: nothing to write back).
void flush_l2();

// Median device time of fn in microseconds over reps runs after warmup runs; each run is bracketed
// by events, with an L2 flush before it (outside the events) when flush is true, and then
// before_each (if given, also outside the events): e.g. a call that brings only the kernel's code
// back into the L2, to tell cold-code costs from cold-data ones.
double time_us(const std::function<void()>& fn, int reps, int warmup = 3, bool flush = true,
               const std::function<void()>& before_each = nullptr);

// Per-call device time of `calls` calls queued back to back, as a model step issues them: the median
// over reps of (event span / calls), where call(i) queues call i on the legacy default stream. A
// kernel that spins for lead_us is queued before the start event, so that the host has queued
// every call before the first one may start (the span then holds no host latency; call(0) must not
// be a programmatically dependent launch, which could start under that kernel);
// *host_us_per_call (if given) receives the median host time to queue one call, which must stay
// below lead_us / calls for the figure to be the device's (every call is then queued before the
// first starts). No flush between calls.
double stream_time_us(const std::function<void(int)>& call, int calls, int reps, double lead_us,
                      double* host_us_per_call = nullptr);

// The median event-timed span of a kernel that does nothing, with `ctas` CTAs of 256 threads, timed
// as time_us times an op (L2 flushed before each call, so the GPU is busy while the host queues the
// events and the launch): the part of any op's flushed time that no kernel can remove, from the
// start event through the launch, the CTAs' start and exit, to the stop event.
double measure_empty_launch_us(int ctas);

// HBM read bandwidth: a 16-byte-load streaming reduction over a buffer many times the L2 size,
// bytes read / median time, in GB/s (1e9 bytes per second).
double measure_hbm_read_GBps();

}  // namespace latentkv::bench_cuda
