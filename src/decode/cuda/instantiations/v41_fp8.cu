// sparse decode over v41_fp8 caches (one instantiation per file so they compile in parallel).
#include "decode/cuda/attend_launch.cuh"
#include "decode/cuda/launch.h"
#include "decode/cuda/source.cuh"

namespace latentkv::decode::cuda {

template <>
void launch_sparse<CacheFormat::v41_fp8>(const KernelParams<SparseArgs>& p, Stream stream) {
  // As v4_fp8 (the same d_qk): one Source for the Hopper kernel; the portable one's score product
  // by split_dqk_pays.
  if (split_dqk_pays(p.g)) launch_attend<SparseSource<CacheFormat::v41_fp8, true>>(p, stream);
  else launch_attend<SparseSource<CacheFormat::v41_fp8, true>, SparseSource<CacheFormat::v41_fp8, false>>(p, stream);
}

}  // namespace latentkv::decode::cuda
