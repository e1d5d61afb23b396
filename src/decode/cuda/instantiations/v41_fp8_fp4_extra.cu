// sparse decode over a v41_fp8 cache with a v41_fp4 extra cache (DeepSeek V4.1's pairing; one
// instantiation per file so they compile in parallel). KeyStorage::kV41Mixed: the Hopper kernel on
// sm_90, the portable kernel elsewhere, the compact one where the portable layout does not fit;
// as v41_fp8.cu, one Source for the Hopper kernel and the portable one's score product by
// split_dqk_pays.
#include "decode/cuda/attend_launch.cuh"
#include "decode/cuda/launch.h"
#include "decode/cuda/source.cuh"

namespace latentkv::decode::cuda {

void launch_sparse_v41_fp4_extra(const KernelParams<SparseArgs>& p, Stream stream) {
  using Split = SparseSource<CacheFormat::v41_fp8, true, CacheFormat::v41_fp4>;
  using Whole = SparseSource<CacheFormat::v41_fp8, false, CacheFormat::v41_fp4>;
  if (split_dqk_pays(p.g)) launch_attend<Split>(p, stream);
  else launch_attend<Split, Whole>(p, stream);
}

}  // namespace latentkv::decode::cuda
