// prefill/cuda/prefill.cu: sparse prefill's CUDA host side: splits from the shared planner, the
// parameters mapped onto the attention kernel's geometry and output addressing, the launch.
#include "decode/plan.h"
#include "latentkv/decode.h"
#include "prefill/cuda/launch.h"
#include "prefill/cuda/source.cuh"

namespace latentkv::prefill::cuda {

using decode::cuda::Geometry;
using decode::cuda::KernelParams;
using decode::cuda::OutRef;

SplitPlan plan_splits(const Params& p, int num_sms) {
  // The decode planner's rule with one query token per row: split the candidates only when the
  // rows x head blocks leave SMs idle. bf16 keys run one CTA per SM whatever its rows (the narrow
  // Hopper kernel, two per SM, takes quantized keys only).
  const DecodePlan d = plan_decode_slots(p.s_q, 1, p.h_q, p.topk, 0, num_sms, DecodePlanKernel::kAuto,
                                         plan_ctas_per_sm(DecodePlanKernel::kAuto, p.h_q, false, false));
  return {d.num_splits, d.keys_per_split, d.unsplit_b};
}

size_t workspace_bytes(const Params& p, const SplitPlan& plan) {
  return decode::cuda::split_workspace_bytes(p.s_q - plan.unsplit_r1, p.h_q, plan.num_splits, /*with_max=*/true);
}

void sparse_prefill(const Params& p, const SplitPlan& plan, void* ws, Stream stream) {
  KernelParams<PrefillArgs> k{};
  PrefillArgs& a = k.src;
  a.kv = reinterpret_cast<const uint8_t*>(p.kv);
  a.stride_kv_bytes = p.stride_kv_s * 2;
  a.indices = p.indices;
  a.stride_indices_s = p.stride_indices_s;
  a.topk_length = p.topk_length;
  a.topk = p.topk;
  a.s_kv = p.s_kv;
  a.seq_offsets_q = p.seq_offsets_q;
  a.seq_offsets_kv = p.seq_offsets_kv;
  a.num_seqs = p.num_seqs;
  Geometry& g = k.g;
  g.q = p.q;
  g.stride_q_r1 = p.stride_q_s;
  g.stride_q_r2 = 0;
  g.stride_q_h = p.stride_q_h;
  g.n1 = p.s_q;
  g.n2 = 1;
  g.h_q = p.h_q;
  g.heads_per_kv = p.h_q;
  g.head_blocks_per_kv = (p.h_q + decode::cuda::kHeadsPerCta - 1) / decode::cuda::kHeadsPerCta;
  g.kv_heads = 1;
  g.scale = p.sm_scale;
  g.num_splits = plan.num_splits;
  g.keys_per_split = plan.keys_per_split;
  g.unsplit_r1 = plan.num_splits > 1 ? plan.unsplit_r1 : 0;
  decode::cuda::place_split_workspace(g, ws, /*with_max=*/true);
  OutRef& o = k.o;
  o.out = p.out;
  o.stride_out_r1 = p.stride_out_s;
  o.stride_out_h = p.stride_out_h;
  o.lse = p.lse;
  o.stride_lse_r1 = p.stride_lse_s;
  o.stride_lse_h = 1;
  o.max_logits = p.max_logits;
  o.stride_max_r1 = p.stride_max_logits_s;
  o.stride_max_h = 1;
  o.sink = p.sink;
  if (p.d_qk == 576) launch_prefill<576>(k, stream);
  else launch_prefill<512>(k, stream);
}

}  // namespace latentkv::prefill::cuda
