// sparse prefill with d_qk = 512 (one instantiation per file so they compile in parallel).
#include "decode/cuda/attend_launch.cuh"
#include "prefill/cuda/launch.h"
#include "prefill/cuda/source.cuh"

namespace latentkv::prefill::cuda {

template <>
void launch_prefill<512>(const decode::cuda::KernelParams<PrefillArgs>& p, Stream stream) {
  decode::cuda::launch_attend<PrefillSource<512>>(p, stream);
}

}  // namespace latentkv::prefill::cuda
