// compress_kv kernel, int8 payload (one instantiation per file so they compile in parallel).
#include "compress/cuda/kernel.cuh"
#include "compress/cuda/launch.h"

namespace latentkv::compress::cuda {

template <>
void launch_compress_kernel<false>(const Params& p, const SplitPlan& plan, float* partials, int* counters,
                                   bool cluster, bool pdl, unsigned long long* trace, Stream stream) {
  launch_compress<false>(p, plan, partials, counters, cluster, pdl, trace, static_cast<cudaStream_t>(stream));
}

template <>
bool cluster_launch_fits<false>(const Params& p, const SplitPlan& plan, int device) {
  return cluster_fits_for<false>(p, plan, device);
}

}  // namespace latentkv::compress::cuda
