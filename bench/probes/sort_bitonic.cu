// Probe: what a sort pass over sparse decode's index lists would cost with a plain bitonic sort in
// one CTA's shared memory per list (bench/NOTES.md v59 item 4): rows x k int32 keys sorted as
// unsigned (negative indices last), timed by CUDA events over the whole grid, median of 50 after 5
// warm-ups; the result checked against std::sort on the host. Two forms: a barrier per stage over
// shared memory (sort_rows), and 8 keys a thread in registers (sort_rows_reg).
//   nvcc -O3 -arch=sm_90a -o /tmp/sortprobe bench/probes/sort_bitonic.cu && /tmp/sortprobe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

// keys: n (a power of two) u32 per row in shared memory; `threads` threads per CTA.
__global__ void sort_rows(const int32_t* in, int32_t* out, int k, int n) {
  extern __shared__ uint32_t s[];
  const int32_t* src = in + static_cast<int64_t>(blockIdx.x) * k;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = i < k ? static_cast<uint32_t>(src[i]) : 0xffffffffu;
  __syncthreads();
  for (int size = 2; size <= n; size <<= 1) {
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int t = threadIdx.x; t < n / 2; t += blockDim.x) {
        const int i = 2 * t - (t & (stride - 1)), j = i + stride;
        const bool up = (i & size) == 0;
        const uint32_t a = s[i], b = s[j];
        if ((a > b) == up) {
          s[i] = b;
          s[j] = a;
        }
      }
      __syncthreads();
    }
  }
  int32_t* dst = out + static_cast<int64_t>(blockIdx.x) * k;
  for (int i = threadIdx.x; i < k; i += blockDim.x) dst[i] = static_cast<int32_t>(s[i]);
}


// The same network with 8 keys a thread in registers (thread t holds positions 8 t .. 8 t + 7, one
// warp 256 positions): strides below 8 within a thread, 8-128 by shuffles within a warp, 256 and up
// through shared memory ([key r][thread], double-buffered: one barrier a stage); the network
// unrolled for kN keys (compile-time strides keep v[] in registers).
__device__ __forceinline__ void keep(uint32_t& v, uint32_t w, bool take_min) { v = take_min ? min(v, w) : max(v, w); }

template <int kN>  // keys a row, padded: kN / 8 threads
__global__ void sort_rows_reg(const int32_t* in, int32_t* out, int k) {
  constexpr int kThreads = kN / 8;
  __shared__ uint32_t s[2][8][kThreads];
  const int t = threadIdx.x;
  const int32_t* src = in + static_cast<int64_t>(blockIdx.x) * k;
  uint32_t v[8];
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int pos = 8 * t + r;
    v[r] = pos < k ? static_cast<uint32_t>(src[pos]) : 0xffffffffu;
  }
  int buf = 0;
#pragma unroll
  for (int size = 2; size <= kN; size <<= 1) {
#pragma unroll
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      if (stride < 8) {
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int j = r ^ stride;
          if (j > r) {
            const bool up = ((8 * t + r) & size) == 0;
            const uint32_t a = v[r], b = v[j];
            v[r] = up ? min(a, b) : max(a, b);
            v[j] = up ? max(a, b) : min(a, b);
          }
        }
      } else if (stride < 256) {
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int pos = 8 * t + r;
          const uint32_t w = __shfl_xor_sync(0xffffffffu, v[r], stride / 8);
          keep(v[r], w, ((pos & stride) == 0) == ((pos & size) == 0));
        }
      } else {
#pragma unroll
        for (int r = 0; r < 8; ++r) s[buf][r][t] = v[r];
        __syncthreads();
        const int tx = t ^ (stride / 8);
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int pos = 8 * t + r;
          keep(v[r], s[buf][r][tx], ((pos & stride) == 0) == ((pos & size) == 0));
        }
        buf ^= 1;
      }
    }
  }
  int32_t* dst = out + static_cast<int64_t>(blockIdx.x) * k;
#pragma unroll
  for (int r = 0; r < 8; ++r)
    if (8 * t + r < k) dst[8 * t + r] = static_cast<int32_t>(v[r]);
}

__global__ void empty_kernel() {}

// Median event-timed µs of 50 calls of launch() after 5 warm-ups.
template <class Launch>
float median_us(Launch launch) {
  std::vector<float> ts;
  for (int r = 0; r < 55; ++r) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a);
    launch();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    if (r >= 5) ts.push_back(ms * 1000.f);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

// Whether every row of the device output equals std::sort of the host input's row (as unsigned).
bool rows_sorted(const std::vector<int32_t>& h, const int32_t* dout, int rows, int k) {
  std::vector<int32_t> got(h.size());
  cudaMemcpy(got.data(), dout, h.size() * 4, cudaMemcpyDeviceToHost);
  bool ok = cudaGetLastError() == cudaSuccess;
  for (int r = 0; r < rows && ok; ++r) {
    std::vector<uint32_t> want(static_cast<size_t>(k));
    for (int i = 0; i < k; ++i) want[i] = static_cast<uint32_t>(h[static_cast<size_t>(r) * k + i]);
    std::sort(want.begin(), want.end());
    for (int i = 0; i < k; ++i) ok = ok && static_cast<uint32_t>(got[static_cast<size_t>(r) * k + i]) == want[i];
  }
  return ok;
}

int main() {
  struct Shape { const char* name; int rows, k; };
  const Shape shapes[] = {{"V3.2 b 128 / tensor-parallel (256 x 2048)", 256, 2048},
                          {"V4 b 128 main (256 x 128)", 256, 128},
                          {"V4 b 128 extra 512 (256 x 512)", 256, 512},
                          {"peak b 148 (296 x 16384)", 296, 16384}};
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  std::printf("%s\n", prop.name);
  cudaFuncSetAttribute(sort_rows, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536);
  // The event-timed floor: an empty launch of 256 CTAs.
  std::printf("%-44s %5d threads %8.1f us\n", "empty launch (256 CTAs)", 256,
              median_us([] { empty_kernel<<<256, 256>>>(); }));
  for (const Shape& sh : shapes) {
    int n = 1;
    while (n < sh.k) n <<= 1;
    std::vector<int32_t> h(static_cast<size_t>(sh.rows) * sh.k);
    std::mt19937 rng(7);
    for (auto& v : h) v = static_cast<int32_t>(rng() % (2u * std::max(sh.k, 2048))) - (rng() % 64 == 0 ? 1 << 30 : 0);
    int32_t *din, *dout;
    cudaMalloc(&din, h.size() * 4);
    cudaMalloc(&dout, h.size() * 4);
    cudaMemcpy(din, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
    for (int threads : {256, 512, 1024}) {
      if (threads > n / 2 && threads != 256) continue;
      const float us = median_us([&] { sort_rows<<<sh.rows, threads, n * 4>>>(din, dout, sh.k, n); });
      std::printf("%-44s %5d threads %8.1f us %s\n", sh.name, threads, us,
                  rows_sorted(h, dout, sh.rows, sh.k) ? "ok" : "WRONG");
    }
    if (n <= 2048) {  // the register form: n / 8 threads, at least a warp
      const float us = median_us([&] {
        if (n <= 256) sort_rows_reg<256><<<sh.rows, 32>>>(din, dout, sh.k);
        else if (n == 512) sort_rows_reg<512><<<sh.rows, 64>>>(din, dout, sh.k);
        else if (n == 1024) sort_rows_reg<1024><<<sh.rows, 128>>>(din, dout, sh.k);
        else sort_rows_reg<2048><<<sh.rows, 256>>>(din, dout, sh.k);
      });
      std::printf("%-44s %5d threads %8.1f us %s (registers)\n", sh.name, std::max(32, n / 8), us,
                  rows_sorted(h, dout, sh.rows, sh.k) ? "ok" : "WRONG");
    }
    cudaFree(din);
    cudaFree(dout);
  }
  return 0;
}
