// Does compute-sanitizer racecheck order a bar.arrive before a bar.sync of the same named barrier?
// PTX orders them: a thread's memory accesses before barrier.cta.arrive are performed relative to
// every participating thread once the barrier completes. This probe is the warp-specialised
// decode kernel's alpha hand-off in miniature: warp 0 (the scorer) writes a shared word and
// arrives at named barrier 1; warp 1 syncs there, reads the word and arrives at barrier 2, at
// which warp 0 syncs before it overwrites the word for the next block. A third warp (the
// producer), present with `idle`, takes part in neither barrier.
//   nvcc -arch=sm_90a -o /tmp/probe bench/probes/racecheck_arrive.cu
//   compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/probe [idle]
#include <cstdio>
#include <cstring>

__global__ void handoff(float* out, int blocks) {
  __shared__ float word[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 0) {
    for (int n = 0; n < blocks; ++n) {
      if (n > 0) asm volatile("bar.sync 2, 64;" ::: "memory");  // the reader is done with block n - 1
      word[lane] = static_cast<float>(n + 1);
      asm volatile("bar.arrive 1, 64;" ::: "memory");  // block n's word is ready
    }
  } else if (warp == 1) {
    for (int n = 0; n < blocks; ++n) {
      asm volatile("bar.sync 1, 64;" ::: "memory");
      out[n * 32 + lane] = word[lane];
      if (n + 1 < blocks) asm volatile("bar.arrive 2, 64;" ::: "memory");
    }
  }
  __syncthreads();
}

int main(int argc, char** argv) {
  const bool idle = argc > 1 && std::strcmp(argv[1], "idle") == 0;
  constexpr int kBlocks = 4;
  float* out = nullptr;
  cudaMalloc(&out, kBlocks * 32 * sizeof(float));
  handoff<<<1, idle ? 96 : 64>>>(out, kBlocks);
  const cudaError_t e = cudaDeviceSynchronize();
  float host[kBlocks * 32];
  cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  std::printf("%s: %s, reads %g %g %g %g\n", idle ? "96 threads" : "64 threads", cudaGetErrorString(e), host[0],
              host[32], host[64], host[96]);
  cudaFree(out);
  return e == cudaSuccess ? 0 : 1;
}
