// dense decode over a v32_fp8 cache (unpacked and packed; one cache kind per file so they compile in parallel).
#include "decode/cuda/attend_launch.cuh"
#include "dense/cuda/launch.h"
#include "dense/cuda/source.cuh"

namespace latentkv::dense::cuda {

// Packed or not, each with the score product split over d_qk where a CTA's rows are all real.
template <>
void launch_dense_fp8<false>(const decode::cuda::KernelParams<DenseArgs>& p, Stream stream) {
  using decode::cuda::KeyStorage;
  if (decode::cuda::split_dqk_pays(p.g))
    decode::cuda::launch_attend<DenseSource<576, false, KeyStorage::kV32Fp8, false, true>>(p, stream);
  else
    decode::cuda::launch_attend<DenseSource<576, false, KeyStorage::kV32Fp8, false, true>,
                                DenseSource<576, false, KeyStorage::kV32Fp8, false, false>>(p, stream);
}
template <>
void launch_dense_fp8<true>(const decode::cuda::KernelParams<DenseArgs>& p, Stream stream) {
  using decode::cuda::KeyStorage;
  if (decode::cuda::split_dqk_pays(p.g))
    decode::cuda::launch_attend<DenseSource<576, false, KeyStorage::kV32Fp8, true, true>>(p, stream);
  else
    decode::cuda::launch_attend<DenseSource<576, false, KeyStorage::kV32Fp8, true, true>,
                                DenseSource<576, false, KeyStorage::kV32Fp8, true, false>>(p, stream);
}

}  // namespace latentkv::dense::cuda
