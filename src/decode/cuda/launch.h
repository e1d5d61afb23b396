// decode/cuda/launch.h: the CUDA backend of sparse_decode (declarations only; no CUDA headers).
#pragma once

#include "decode/cuda/attend_params.h"
#include "decode/params.h"
#include "latentkv/tensor.h"

namespace latentkv::decode::cuda {

struct SparseArgs;

// Main kernel, then (with splits) the combine kernel, on `stream`. No host synchronisation.
// p.partial_out / p.partial_lse hold the split scratch when p.num_splits > 1.
void sparse_decode(const Params& p, Stream stream);

// One instantiation per format (instantiations/*.cu).
template <CacheFormat F>
void launch_sparse(const KernelParams<SparseArgs>& p, Stream stream);

}  // namespace latentkv::decode::cuda
