// Racecheck and a named barrier of part of the CTA (bench/NOTES.md v41 item 3, Next item 1). The
// narrow Hopper kernel (src/decode/sm90/narrow.cuh) first exchanged its block maxima among
// warpgroup 0 at `bar.sync 1, 128`, and racecheck then reported RAW hazards between warpgroup 0's
// writes before a later __syncthreads and warpgroup 1's reads after it. This probe has that pattern
// alone, with 256 threads: each round, warpgroup 0 (threads 0-127) writes a word per thread and meets
// at barrier 1 (128 threads, `partial`; 256 threads with warpgroup 1 meeting it too, `whole`), warp 0
// then writes a second word; a __syncthreads; warpgroup 1 reads both words; a __syncthreads closes
// the round. Every read must return its round's value (printed); what racecheck reports for each
// form tells whether it credits the __syncthreads after a partial named barrier. `own`: warpgroup 1
// meets a partial barrier of its own (barrier 2, 128 threads) in its branch, so that every warp
// meets as many barriers as every other, none of them shared by both warpgroups but the
// __syncthreads (whether racecheck goes by the count of barriers each warp has met; bench/NOTES.md
// v53, the portable kernel's value sharing).
//   nvcc -arch=sm_90a -o /tmp/probe bench/probes/racecheck_partial_barrier.cu
//   compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/probe partial
//   compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/probe whole
//   compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/probe own
#include <cstdio>
#include <cstring>

enum Form { kWhole, kPartial, kOwn };

__global__ void exchange(float* out, Form form) {
  const bool partial = form != kWhole;
  __shared__ float first[128], second[32];
  const int tid = threadIdx.x, wg = tid / 128;
  for (int round = 0; round < 4; ++round) {
    if (wg == 0) {
      first[tid] = static_cast<float>(round + 1);
      if (partial) asm volatile("bar.sync 1, 128;" ::: "memory");
      else asm volatile("bar.sync 1, 256;" ::: "memory");
      if (tid < 32) second[tid] = static_cast<float>(first[(tid + 1) % 128] + 10.0f);
    } else if (form == kWhole) {
      asm volatile("bar.sync 1, 256;" ::: "memory");
    } else if (form == kOwn) {
      asm volatile("bar.sync 2, 128;" ::: "memory");
    }
    __syncthreads();
    if (wg == 1) out[round * 128 + tid - 128] = first[tid - 128] + second[(tid - 128) % 32];
    __syncthreads();
  }
}

int main(int argc, char** argv) {
  const char* name = argc > 1 ? argv[1] : "whole";
  const Form form = std::strcmp(name, "partial") == 0 ? kPartial : std::strcmp(name, "own") == 0 ? kOwn : kWhole;
  float* out = nullptr;
  cudaMalloc(&out, 4 * 128 * sizeof(float));
  exchange<<<1, 256>>>(out, form);
  const cudaError_t e = cudaDeviceSynchronize();
  float host[4 * 128];
  cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int round = 0; round < 4; ++round)
    for (int i = 0; i < 128; ++i) wrong += host[round * 128 + i] != 2.0f * (round + 1) + 10.0f;
  std::printf("%s: %s, %d of %d reads differ from their round's value\n", name,
              cudaGetErrorString(e), wrong, 4 * 128);
  cudaFree(out);
  return e == cudaSuccess && wrong == 0 ? 0 : 1;
}
