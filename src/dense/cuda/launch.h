// dense/cuda/launch.h: the CUDA backend of dense_decode (declarations only; no CUDA headers).
#pragma once

#include "decode/cuda/attend_params.h"
#include "dense/params.h"
#include "latentkv/tensor.h"

namespace latentkv::dense::cuda {

struct DenseArgs;

// Splits of the candidates, by the decode planner's rule.
using decode::cuda::SplitPlan;
SplitPlan plan_splits(const Params& p, int num_sms);
size_t workspace_bytes(const Params& p, const SplitPlan& plan);

// The attention kernel, then (with splits) the combine kernel, on `stream`; `ws` holds
// workspace_bytes(p, plan) bytes. No host synchronisation.
void dense_decode(const Params& p, const SplitPlan& plan, void* ws, Stream stream);

// Whether a request's query tokens share CTAs (up to 64 / heads_per_kv of them, reading the
// request's pages once; dense.cu): on unless LKV_DENSE_PACK=0 (read once per process) or
// set_pack_allowed(false). For finite caches results agree either way within the split plan's
// rounding (docs/dense.md: a non-finite key can reach earlier packed causal rows through 0 x NaN).
bool pack_allowed();
void set_pack_allowed(bool allowed);

// Instantiations (instantiations/*.cu): 16-bit caches of d_qk 512 or 576 in bf16 or f16, and
// v32_fp8 records; kPacks: Geometry::pack > 1 (each file holds both).
template <int kDqk, bool kF16, bool kPacks>
void launch_dense16(const decode::cuda::KernelParams<DenseArgs>& p, Stream stream);
template <bool kPacks>
void launch_dense_fp8(const decode::cuda::KernelParams<DenseArgs>& p, Stream stream);

}  // namespace latentkv::dense::cuda
