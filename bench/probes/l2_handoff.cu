// Probe: how long one CTA takes to read back, from L2, partials that another CTA has just written
// and published with a release atomic (the compressor's split merge, src/compress/cuda/kernel.cuh),
// against the same read of lines written earlier or never written. bench/NOTES.md v35 found the
// finishing CTA's read of 6-24 KB of partials takes ~1 us whatever the size.
//
// Build and run on the device: nvcc -O3 -arch=sm_90a -o /tmp/l2h bench/probes/l2_handoff.cu && /tmp/l2h
// Two CTAs of 256 threads (on different SMs, checked through %smid): CTA 0 writes `kBytes`, then
// one thread's atom.add.release.gpu on a flag; CTA 1 waits for the flag with ld.acquire.gpu, then
// every thread loads its 16-byte pieces with ld.global.cg (all issued before any is used) and the
// CTA meets at a barrier. %globaltimer around the read, thread 0 of CTA 1. Modes:
//   0 fresh:   the lines CTA 0 wrote in this launch (the compressor's case);
//   1 old:     lines written by an earlier launch (clean in L2), CTA 0 writes elsewhere;
//   2 own:     lines CTA 1 itself wrote in this launch before the wait;
//   3 cold:    lines not touched since a 256 MiB flush (HBM).
// kPieces x 16 B per thread: 6 pieces x 256 threads = 24 KB (the 4-split merge), 1 piece = 4 KB.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

constexpr int kThreads = 256;

template <int kPieces>
__global__ void handoff(float4* fresh, float4* old, float4* cold, int* flag, int mode,
                        unsigned long long* out_ns, int* smid) {
  const int tid = threadIdx.x;
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  if (tid == 0) smid[blockIdx.x] = static_cast<int>(s);
  float4* src = mode == 0 ? fresh : mode == 1 ? old : mode == 2 ? fresh : cold;
  if (blockIdx.x == 0) {
    if (mode != 2)
      for (int q = 0; q < kPieces; ++q) fresh[q * kThreads + tid] = make_float4(1.f, 2.f, 3.f, float(q));
    __syncthreads();
    if (tid == 0) asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(flag) : "memory");
    return;
  }
  if (mode == 2)
    for (int q = 0; q < kPieces; ++q) fresh[q * kThreads + tid] = make_float4(1.f, 2.f, 3.f, float(q));
  if (tid == 0) {
    int v = 0;
    do {
      asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    } while (v == 0);
  }
  __syncthreads();
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0) : : "memory");
  float4 v[kPieces];
#pragma unroll
  for (int q = 0; q < kPieces; ++q) v[q] = __ldcg(src + q * kThreads + tid);
  float acc = 0.f;
#pragma unroll
  for (int q = 0; q < kPieces; ++q) acc += v[q].x + v[q].y + v[q].z + v[q].w;
  __shared__ float sink[kThreads];
  sink[tid] = acc;  // a store the barrier orders: every thread's loads land before it
  __syncthreads();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1) : "f"(acc) : "memory");
  if (tid == 0) out_ns[0] = t1 - t0;
  if (sink[(tid + 1) % kThreads] == -1.f) out_ns[1] = 1;  // keeps the loads and the store
}

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e = (x);                                                           \
    if (e != cudaSuccess) {                                                        \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e));                          \
      return 1;                                                                    \
    }                                                                              \
  } while (0)

template <int kPieces>
int run(const char* label) {
  const size_t piece_bytes = size_t{16} * kThreads * kPieces;
  const size_t flush_bytes = size_t{256} << 20;
  char *fresh, *old, *cold, *flush;
  int *flag, *smid;
  unsigned long long* out;
  CK(cudaMalloc(&fresh, piece_bytes));
  CK(cudaMalloc(&old, piece_bytes));
  CK(cudaMalloc(&cold, piece_bytes));
  CK(cudaMalloc(&flush, flush_bytes));
  CK(cudaMalloc(&flag, sizeof(int)));
  CK(cudaMalloc(&smid, 2 * sizeof(int)));
  CK(cudaMalloc(&out, 2 * sizeof(unsigned long long)));
  const char* names[4] = {"fresh (other SM, this launch)", "old (written by an earlier launch)",
                          "own (this CTA, this launch)", "cold (after a flush)"};
  for (int mode = 0; mode < 4; ++mode) {
    std::vector<double> ns;
    int sm[2] = {0, 0};
    for (int rep = 0; rep < 25; ++rep) {
      CK(cudaMemset(flush, rep, flush_bytes));  // evicts the probe's lines (a write of 256 MiB)
      CK(cudaMemset(old, 1, piece_bytes));      // old: written before this launch, now in L2
      CK(cudaMemset(flag, 0, sizeof(int)));
      CK(cudaDeviceSynchronize());
      handoff<kPieces><<<2, kThreads>>>(reinterpret_cast<float4*>(fresh), reinterpret_cast<float4*>(old),
                                        reinterpret_cast<float4*>(cold), flag, mode, out, smid);
      CK(cudaGetLastError());
      unsigned long long h[2];
      CK(cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(sm, smid, sizeof(sm), cudaMemcpyDeviceToHost));
      if (rep >= 5) ns.push_back(static_cast<double>(h[0]));
    }
    std::sort(ns.begin(), ns.end());
    std::printf("%-6s %-36s median %7.0f ns  min %7.0f  max %7.0f  (SMs %d, %d)\n", label, names[mode],
                ns[ns.size() / 2], ns.front(), ns.back(), sm[0], sm[1]);
  }
  cudaFree(fresh);
  cudaFree(old);
  cudaFree(cold);
  cudaFree(flush);
  cudaFree(flag);
  cudaFree(smid);
  cudaFree(out);
  return 0;
}

int main() {
  if (run<6>("24 KB") != 0) return 1;
  if (run<1>("4 KB") != 0) return 1;
  return 0;
}
