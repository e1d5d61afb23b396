// sparse decode kernel for v4_fp8 caches (one instantiation per file so they compile in parallel).
#include "cuda_common/cuda_check.h"
#include "decode/cuda/kernel.cuh"
#include "decode/cuda/launch.h"

namespace latentkv::decode::cuda {

template <>
void launch_decode_kernel<CacheFormat::v4_fp8>(const Params& p, Stream stream) {
  constexpr int kSmem = SmemLayout<FormatTraits<CacheFormat::v4_fp8>::kDqk>::total;
  // Set on every launch: the attribute belongs to the current device, and setting it is cheap.
  LKV_CUDA_CHECK(cudaFuncSetAttribute(sparse_decode_kernel<CacheFormat::v4_fp8>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(p.b * p.s_q),
                  static_cast<unsigned>((p.h_q + kHeadsPerCta - 1) / kHeadsPerCta),
                  static_cast<unsigned>(p.num_splits));
  sparse_decode_kernel<CacheFormat::v4_fp8>
      <<<grid, kThreads, kSmem, static_cast<cudaStream_t>(stream)>>>(p);
  LKV_CUDA_CHECK_LAUNCH();
}

}  // namespace latentkv::decode::cuda
