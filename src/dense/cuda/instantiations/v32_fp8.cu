// dense decode over a v32_fp8 cache (unpacked and packed; one cache kind per file so they compile in parallel).
#include "decode/cuda/attend_launch.cuh"
#include "dense/cuda/launch.h"
#include "dense/cuda/source.cuh"

namespace latentkv::dense::cuda {

template <>
void launch_dense_fp8<false>(const decode::cuda::KernelParams<DenseArgs>& p, Stream stream) {
  decode::cuda::launch_attend<DenseSource<576, false, decode::cuda::KeyStorage::kV32Fp8, false>>(p, stream);
}
template <>
void launch_dense_fp8<true>(const decode::cuda::KernelParams<DenseArgs>& p, Stream stream) {
  decode::cuda::launch_attend<DenseSource<576, false, decode::cuda::KeyStorage::kV32Fp8, true>>(p, stream);
}

}  // namespace latentkv::dense::cuda
