// decode/cuda/decode.cu: the CUDA backend's host side: the combine kernel and the launches.
#include <cuda_runtime.h>

#include "cuda_common/cuda_check.h"
#include "decode/cuda/kernel.cuh"
#include "decode/cuda/launch.h"

namespace latentkv::decode::cuda {

// ---- combine ------------------------------------------------------------------------------------
// One warp per (request, query token, head): merges the splits' normalised outputs by their LSEs,
// applies the sink, writes out (bf16) and lse. Each lane owns 16 of the 512 dims.
__global__ void __launch_bounds__(256) combine_kernel(const Params p) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.b * p.s_q * p.h_q) return;
  const int64_t h = row % p.h_q, ij = row / p.h_q, i = ij / p.s_q, j = ij % p.s_q;
  const float* lses = p.partial_lse + row * p.num_splits;
  float m = -INFINITY;
  bool nan = false;  // fmaxf skips NaN: a NaN split must still poison the row, as on the CPU
  for (int64_t s = 0; s < p.num_splits; ++s) {
    m = fmaxf(m, lses[s]);
    nan |= lses[s] != lses[s];
  }
  if (nan) m = NAN;
  float acc[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) acc[k] = 0.0f;
  float total = 0.0f;
  if (m != -INFINITY) {
    for (int64_t s = 0; s < p.num_splits; ++s) {
      if (lses[s] == -INFINITY) continue;
      const float w = expf(lses[s] - m);
      total += w;
      const float4* src = reinterpret_cast<const float4*>(p.partial_out + (row * p.num_splits + s) * kDimV + lane * 16);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 v = src[q];
        acc[4 * q] += w * v.x;
        acc[4 * q + 1] += w * v.y;
        acc[4 * q + 2] += w * v.z;
        acc[4 * q + 3] += w * v.w;
      }
    }
  }
  const bool lonely = m == -INFINITY;
  const float lse = lonely ? INFINITY : m + logf(total);
  float factor = lonely ? 0.0f : 1.0f / total;
  if (!lonely && p.sink) {
    const float sink = p.sink[h];
    factor *= (sink == INFINITY) ? 0.0f : 1.0f / (1.0f + expf(sink - lse));
  }
  uint16_t* o = p.out + i * p.stride_out_b + j * p.stride_out_s + h * p.stride_out_h + lane * 16;
  uint32_t packed[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) packed[k] = pack_bf16(acc[2 * k] * factor, acc[2 * k + 1] * factor);
  reinterpret_cast<uint4*>(o)[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  reinterpret_cast<uint4*>(o)[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
  if (lane == 0) p.lse[i * p.stride_lse_b + h * p.stride_lse_h + j] = lse;
}

void sparse_decode(const Params& p, Stream stream) {
  if (p.format == CacheFormat::v32_fp8) launch_decode_kernel<CacheFormat::v32_fp8>(p, stream);
  else launch_decode_kernel<CacheFormat::v4_fp8>(p, stream);
  if (p.num_splits > 1) {
    const int64_t rows = p.b * p.s_q * p.h_q;
    constexpr int kWarpsPerBlock = 8;
    combine_kernel<<<static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
                     kWarpsPerBlock * 32, 0, static_cast<cudaStream_t>(stream)>>>(p);
    LKV_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace latentkv::decode::cuda
