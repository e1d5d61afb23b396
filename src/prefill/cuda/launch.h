// prefill/cuda/launch.h: the CUDA backend of sparse_prefill (declarations only; no CUDA headers).
#pragma once

#include "decode/cuda/attend_params.h"
#include "latentkv/tensor.h"
#include "prefill/params.h"

namespace latentkv::prefill::cuda {

struct PrefillArgs;

// Splits of the candidates, by the decode planner's rule.
using decode::cuda::SplitPlan;
SplitPlan plan_splits(const Params& p, int num_sms);
size_t workspace_bytes(const Params& p, const SplitPlan& plan);

// The attention kernel, then (with splits) the combine kernel, on `stream`; `ws` holds
// workspace_bytes(p, plan) bytes. No host synchronisation.
void sparse_prefill(const Params& p, const SplitPlan& plan, void* ws, Stream stream);

// One instantiation per d_qk (instantiations/*.cu).
template <int kDqk>
void launch_prefill(const decode::cuda::KernelParams<PrefillArgs>& p, Stream stream);

}  // namespace latentkv::prefill::cuda
