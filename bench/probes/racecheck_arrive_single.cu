// The one-barrier form of racecheck_arrive.cu (which has the two-barrier hand-off of the
// warp-specialised decode kernel): each round, warp 1 reads a shared word, then arrives at named
// barrier 1; warp 0 syncs on barrier 1, then overwrites the word; a __syncthreads closes the round. With `arrive` set the read is
// ordered by the arrive alone; otherwise warp 1 syncs too (the two-warpgroup kernel's form).
//   nvcc -arch=sm_90a -o /tmp/probe bench/probes/racecheck_arrive_single.cu
//   compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/probe arrive
//   compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/probe sync
#include <cstdio>
#include <cstring>

__global__ void handoff(float* out, bool arrive) {
  __shared__ float word[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 0) word[lane] = 1.0f;
  __syncthreads();
  for (int round = 0; round < 4; ++round) {
    if (warp == 1) {
      out[round * 32 + lane] = word[lane];  // the read
      if (arrive) asm volatile("bar.arrive 1, 64;" ::: "memory");
      else asm volatile("bar.sync 1, 64;" ::: "memory");
    } else {
      asm volatile("bar.sync 1, 64;" ::: "memory");
      word[lane] = static_cast<float>(round + 2);  // the write after the barrier
    }
    __syncthreads();  // the next round starts with both warps past this one's accesses
  }
}

int main(int argc, char** argv) {
  const bool arrive = argc > 1 && std::strcmp(argv[1], "arrive") == 0;
  float* out = nullptr;
  cudaMalloc(&out, 4 * 32 * sizeof(float));
  handoff<<<1, 64>>>(out, arrive);
  const cudaError_t e = cudaDeviceSynchronize();
  float host[128];
  cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  std::printf("%s: %s, reads %g %g %g %g\n", arrive ? "arrive" : "sync", cudaGetErrorString(e), host[0], host[32],
              host[64], host[96]);
  cudaFree(out);
  return e == cudaSuccess ? 0 : 1;
}
