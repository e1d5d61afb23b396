// sparse decode over a v41_fp8 cache with a v41_fp4 extra cache (DeepSeek V4.1's pairing; one
// instantiation per file so they compile in parallel). The portable kernel on every device
// (attend_launch.cuh: KeyStorage::kV41Mixed), with its score product chosen as for v41_fp8.
#include "decode/cuda/attend_launch.cuh"
#include "decode/cuda/launch.h"
#include "decode/cuda/source.cuh"

namespace latentkv::decode::cuda {

void launch_sparse_v41_fp4_extra(const KernelParams<SparseArgs>& p, Stream stream) {
  if (split_dqk_pays(p.g))
    launch_attend<SparseSource<CacheFormat::v41_fp8, true, CacheFormat::v41_fp4>>(p, stream);
  else
    launch_attend<SparseSource<CacheFormat::v41_fp8, false, CacheFormat::v41_fp4>>(p, stream);
}

}  // namespace latentkv::decode::cuda
