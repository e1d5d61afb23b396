// compress_kv kernel, int8 payload (one instantiation per file so they compile in parallel).
#include "compress/cuda/kernel.cuh"
#include "compress/cuda/launch.h"
#include "cuda_common/cuda_check.h"

namespace latentkv::compress::cuda {

template <>
void launch_compress_kernel<false>(const Params& p, const SplitPlan& plan, float* partials,
                                 int* counters, Stream stream) {
  const dim3 grid(static_cast<unsigned>(p.num_outputs), static_cast<unsigned>(plan.num_splits));
  compress_kernel<false><<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(p, plan, partials,
                                                                              counters);
  LKV_CUDA_CHECK_LAUNCH();
}

}  // namespace latentkv::compress::cuda
