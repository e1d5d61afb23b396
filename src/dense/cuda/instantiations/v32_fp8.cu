// dense decode over a v32_fp8 cache (one instantiation per file so they compile in parallel).
#include "decode/cuda/attend_launch.cuh"
#include "dense/cuda/launch.h"
#include "dense/cuda/source.cuh"

namespace latentkv::dense::cuda {

void launch_dense_fp8(const decode::cuda::KernelParams<DenseArgs>& p, Stream stream) {
  decode::cuda::launch_attend<DenseSource<576, false, decode::cuda::KeyStorage::kV32Fp8>>(p, stream);
}

}  // namespace latentkv::dense::cuda
