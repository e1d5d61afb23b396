// decode/cuda/launch.h: the CUDA backend of sparse_decode (declarations only; no CUDA headers).
#pragma once

#include <cstddef>

#include "decode/params.h"
#include "latentkv/tensor.h"

namespace latentkv::decode::cuda {

// Main kernel, then (with splits) the combine kernel, on `stream`. No host synchronisation.
void sparse_decode(const Params& p, Stream stream);

template <CacheFormat F>
void launch_decode_kernel(const Params& p, Stream stream);

}  // namespace latentkv::decode::cuda
