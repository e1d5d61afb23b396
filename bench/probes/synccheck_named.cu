// Does compute-sanitizer's synccheck accept a named barrier that the two warpgroups of a CTA reach
// from different places in the code? `bar.sync` is `barrier.sync.aligned`, which promises that every
// participating thread executes the same instruction; the plain `barrier.sync` makes no such
// promise. decode/sm90/kernel.cuh's warpgroups each run their own loop and meet at barriers 1 and 2
// from their own branch (with `bar.sync` until bench/NOTES.md v69).
//   nvcc -O3 -arch=sm_90a -lineinfo -o /tmp/scprobe bench/probes/synccheck_named.cu
//   compute-sanitizer --tool synccheck /tmp/scprobe MODE
// MODE 0: one barrier site after the branch (every thread at the same instruction);
// MODE 1: each warpgroup's own `bar.sync 1, 256` inside its branch, in a loop, as kernel.cuh;
// MODE 2: warpgroup 1 `bar.arrive 1, 256`, warpgroup 0 `bar.sync 1, 256` (producer / consumer);
// MODE 3: as MODE 1 with `barrier.sync` (not .aligned) in both branches.
// Each round warpgroup 1 writes a word that warpgroup 0 reads after the barrier; the program checks
// every value read, so a barrier that did not hold would show as a wrong sum.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__device__ __forceinline__ void bar_sync(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void bar_arrive(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }
// Without .aligned (bar.sync is barrier.sync.aligned, which promises that every thread executes the
// same instruction): threads may meet from different instructions.
template <int kId>
__device__ __forceinline__ void barrier_sync() { asm volatile("barrier.sync %0, 256;\n" ::"n"(kId) : "memory"); }

__global__ void probe(int mode, int rounds, int* out) {
  __shared__ int word[2];
  const int wg = threadIdx.x / 128;
  int sum = 0;
  if (mode == 0) {
    for (int r = 0; r < rounds; ++r) {
      if (wg == 1 && threadIdx.x == 128) word[r & 1] = r;
      bar_sync(1);
      if (wg == 0) sum += word[r & 1];
      bar_sync(2);
    }
  } else if (wg == 0) {
    for (int r = 0; r < rounds; ++r) {
      if (mode == 3) barrier_sync<1>();
      else bar_sync(1);
      sum += word[r & 1];
      if (mode == 1) bar_sync(2);
      else if (mode == 3) barrier_sync<2>();
      else bar_arrive(2);
    }
  } else {
    for (int r = 0; r < rounds; ++r) {
      if (threadIdx.x == 128) word[r & 1] = r;
      if (mode == 1) bar_sync(1);
      else if (mode == 3) barrier_sync<1>();
      else bar_arrive(1);
      if (mode == 3) barrier_sync<2>();
      else bar_sync(2);
    }
  }
  if (wg == 0) atomicAdd(out, sum);
}

int main(int argc, char** argv) {
  const int mode = argc > 1 ? atoi(argv[1]) : 1;
  const int rounds = 8, blocks = 4;
  int* out;
  cudaMalloc(&out, sizeof(int));
  cudaMemset(out, 0, sizeof(int));
  probe<<<blocks, 256>>>(mode, rounds, out);
  const cudaError_t e = cudaDeviceSynchronize();
  int got = -1;
  cudaMemcpy(&got, out, sizeof(int), cudaMemcpyDeviceToHost);
  const int want = blocks * 128 * (rounds * (rounds - 1) / 2);
  printf("mode %d: %s, sum %d (want %d) %s\n", mode, cudaGetErrorString(e), got, want, got == want ? "ok" : "WRONG");
  return got == want && e == cudaSuccess ? 0 : 1;
}
