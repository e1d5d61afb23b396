// Whether a device runs the Hopper sparse decode kernel (see launch.h).
#include "cuda_common/device_cache.h"
#include "decode/sm90/config.h"
#include "decode/sm90/launch.h"

namespace latentkv::decode::sm90 {

bool usable(int device) {
  // The binary carries sm_90a code only for compute capability 9.0 exactly (sm_90a code does not
  // run on later architectures).
  return cuda_common::compute_capability(device) == 90 &&
         cuda_common::max_smem_per_block(device) >= Layout<576>::total;
}

}  // namespace latentkv::decode::sm90
