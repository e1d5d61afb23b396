// decode/cuda/launch.h: the CUDA backend of sparse_decode (declarations only; no CUDA headers).
#pragma once

#include <cstddef>

#include "decode/params.h"
#include "latentkv/tensor.h"

namespace latentkv::decode::cuda {

int sm_count(int device);

// Scratch owned by latentkv, one per (device, stream), grown on demand.
void* cached_workspace(size_t bytes, int device, Stream stream);

// Main kernel, then (with splits) the combine kernel, on `stream`. No host synchronisation.
void sparse_decode(const Params& p, Stream stream);

template <CacheFormat F>
void launch_decode_kernel(const Params& p, Stream stream);

}  // namespace latentkv::decode::cuda
