// dense decode over a f16 cache with d_qk = 512 (unpacked and packed; one cache kind per file so they compile in parallel).
#include "decode/cuda/attend_launch.cuh"
#include "dense/cuda/launch.h"
#include "dense/cuda/source.cuh"

namespace latentkv::dense::cuda {

template <>
void launch_dense16<512, true, false>(const decode::cuda::KernelParams<DenseArgs>& p, Stream stream) {
  decode::cuda::launch_attend<DenseSource<512, true, decode::cuda::KeyStorage::kDirect16, false>>(p, stream);
}
template <>
void launch_dense16<512, true, true>(const decode::cuda::KernelParams<DenseArgs>& p, Stream stream) {
  decode::cuda::launch_attend<DenseSource<512, true, decode::cuda::KeyStorage::kDirect16, true>>(p, stream);
}

}  // namespace latentkv::dense::cuda
