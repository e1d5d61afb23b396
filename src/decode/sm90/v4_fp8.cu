// The Hopper sparse decode kernel for v4_fp8 caches.
#include "decode/sm90/launch.cuh"

namespace latentkv::decode::sm90 {

template <>
void launch<CacheFormat::v4_fp8>(const cuda::KernelParams<cuda::SparseArgs>& p, Stream stream) {
  launch_format<CacheFormat::v4_fp8>(p, stream);
}

}  // namespace latentkv::decode::sm90
