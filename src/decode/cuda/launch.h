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

// Whether quantized caches may use the wide (overlapped-dequantization) layout where the device has
// room for it; tests turn it off to exercise the narrow layout on such devices (combine.cu).
void set_wide_layout_allowed(bool allowed);
bool wide_layout_allowed();

// One instantiation per format (instantiations/*.cu).
template <CacheFormat F>
void launch_sparse(const KernelParams<SparseArgs>& p, Stream stream);

}  // namespace latentkv::decode::cuda
