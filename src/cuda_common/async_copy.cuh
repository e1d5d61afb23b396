// cuda_common/async_copy.cuh: asynchronous global -> shared copies (cp.async, sm_80+) and L2
// prefetch hints, for kernels that want a load off their critical path.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace latentkv::cuda_common {

__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Copies of 4 or 8 bytes (both addresses aligned to the size) that complete in the background; the
// issuing thread waits for its own with cp_async_wait_all(), and other threads read the bytes only
// after a barrier that follows that wait.
__device__ __forceinline__ void cp_async_4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(shared_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(shared_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// The same in groups: commit closes this thread's group of copies; wait_group<N> returns once at
// most N of its groups, the newest, are still in flight. (decode/cuda/kernel.cuh has its own pair
// without the memory clobber: there a barrier follows every wait, and its kernels were measured
// with that form; here the issuing thread may read the bytes right after the wait, so the compiler
// must not move that read above it.)
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Asks L2 to fetch the 128-byte line holding p (a global address). A hint: no value comes back,
// nothing waits for it, and a line another kernel writes meanwhile stays coherent (L2 is the
// point of coherence for global memory).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// Thread t of `threads` prefetches lines t, t + threads, ... of the `bytes` bytes at p.
__device__ __forceinline__ void prefetch_l2_range(const void* p, int64_t bytes, int64_t t, int64_t threads) {
  if (bytes <= 0) return;
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{127};
  const int64_t lines = static_cast<int64_t>((reinterpret_cast<uintptr_t>(p) + bytes - 1 - first) / 128) + 1;
  for (int64_t i = t; i < lines; i += threads) prefetch_l2(reinterpret_cast<const void*>(first + 128 * i));
}

}  // namespace latentkv::cuda_common
