// compress_kv kernel, int8 payload (one instantiation per file so they compile in parallel).
#include "compress/cuda/kernel.cuh"
#include "compress/cuda/launch.h"
#include "cuda_common/cuda_check.h"

namespace latentkv::compress::cuda {

template <>
void launch_compress_kernel<false>(const Params& p, const SplitPlan& plan, float* partials,
                                 int* counters, bool cluster, Stream stream) {
  const dim3 grid(static_cast<unsigned>(p.num_outputs), static_cast<unsigned>(plan.num_splits));
  const auto s = static_cast<cudaStream_t>(stream);
  if (cluster) {
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = dim3(kThreads);
    config.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = static_cast<unsigned>(plan.num_splits);
    attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    LKV_CUDA_CHECK(cudaLaunchKernelEx(&config, compress_kernel<false, true>, p, plan, partials, counters));
  } else {
    compress_kernel<false><<<grid, kThreads, 0, s>>>(p, plan, partials, counters);
  }
  LKV_CUDA_CHECK_LAUNCH();
}

template <>
bool cluster_launch_fits<false>(const Params& p, const SplitPlan& plan, int device) {
  return cluster_fits(compress_kernel<false, true>, device, p.num_outputs, plan.num_splits);
}

}  // namespace latentkv::compress::cuda
