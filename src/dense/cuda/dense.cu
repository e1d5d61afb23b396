// dense/cuda/dense.cu: dense decode's CUDA host side: splits from the shared planner, the
// parameters mapped onto the attention kernel's geometry and output addressing, the launch.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "dense/cuda/launch.h"
#include "dense/cuda/source.cuh"
#include "decode/plan.h"
#include "latentkv/decode.h"

namespace latentkv::dense::cuda {

using decode::cuda::Geometry;
using decode::cuda::KernelParams;
using decode::cuda::kHeadsPerCta;

namespace {
int64_t head_blocks_per_kv(const Params& p) {
  return (p.h_q / p.h_kv + kHeadsPerCta - 1) / kHeadsPerCta;
}
std::atomic<bool>& pack_flag() {
  static std::atomic<bool> flag{[] {
    const char* e = std::getenv("LKV_DENSE_PACK");
    return !(e && std::strcmp(e, "0") == 0);
  }()};
  return flag;
}
// Query tokens per CTA: a request's s_q query tokens share every key, so up to 64 / heads_per_kv of
// them run in one CTA, which reads the request's pages once for all of them (Geometry::pack).
int64_t pack_of(const Params& p) {
  const int64_t heads = p.h_q / p.h_kv;
  if (!pack_allowed() || p.s_q <= 1 || heads > kHeadsPerCta / 2) return 1;
  return std::min<int64_t>(p.s_q, kHeadsPerCta / heads);
}
}  // namespace

bool pack_allowed() { return pack_flag().load(std::memory_order_relaxed); }
void set_pack_allowed(bool allowed) { pack_flag().store(allowed, std::memory_order_relaxed); }

SplitPlan plan_splits(const Params& p, int num_sms) {
  // No page to read (max_pages 0): one split that attends nothing (out 0, lse +inf).
  if (p.max_pages * p.page_size == 0) return {1, 1};
  // The decode planner's rule; the candidates are every token a request could hold (lengths live
  // on the device, and reading them would synchronise). Splits past a request's length end at once.
  // f16 queries always run the portable kernel; bf16 the one the current device picks.
  // The CTAs' rows (heads of one head block times packed query tokens) tell whether the narrow
  // Hopper kernel runs them, two per SM (plan_ctas_per_sm).
  const int64_t pack = pack_of(p);
  const DecodePlanKernel kernel = p.dtype == Half::f16 ? DecodePlanKernel::kPortable : DecodePlanKernel::kAuto;
  const int64_t cta_rows = std::min<int64_t>(p.h_q / p.h_kv, kHeadsPerCta) * pack;
  const DecodePlan d = plan_decode_slots(p.b, (p.s_q + pack - 1) / pack, p.h_kv * head_blocks_per_kv(p) * kHeadsPerCta,
                                         p.max_pages * p.page_size, 0, num_sms, kernel,
                                         plan_ctas_per_sm(kernel, cta_rows, p.fp8, true));
  return {d.num_splits, d.keys_per_split, d.unsplit_b};
}

size_t workspace_bytes(const Params& p, const SplitPlan& plan) {
  return decode::cuda::split_workspace_bytes((p.b - plan.unsplit_r1) * p.s_q, p.h_q, plan.num_splits, false);
}

// The instantiation for the cache's dtype and d_qk; kPacks: the packed-rows kernel (pack > 1).
template <bool kPacks>
void launch_instance(const Params& p, bool f16, const decode::cuda::KernelParams<DenseArgs>& k, Stream stream) {
  if (p.fp8) launch_dense_fp8<kPacks>(k, stream);
  else if (p.d_qk == 576) f16 ? launch_dense16<576, true, kPacks>(k, stream) : launch_dense16<576, false, kPacks>(k, stream);
  else f16 ? launch_dense16<512, true, kPacks>(k, stream) : launch_dense16<512, false, kPacks>(k, stream);
}

void dense_decode(const Params& p, const SplitPlan& plan, void* ws, Stream stream) {
  KernelParams<DenseArgs> k{};
  DenseArgs& a = k.src;
  if (p.fp8) {
    a.base = p.k_cache_fp8;
    a.stride_page_bytes = p.page_stride_fp8;
    a.stride_token_bytes = 656;
    a.stride_head_bytes = 0;
  } else {
    a.base = reinterpret_cast<const uint8_t*>(p.k_cache);
    a.stride_page_bytes = p.stride_k_page * 2;
    a.stride_token_bytes = p.stride_k_token * 2;
    a.stride_head_bytes = p.stride_k_head * 2;
  }
  a.page_size = p.page_size;
  a.num_pages = p.num_pages;
  a.block_table = p.block_table;
  a.stride_block_table_b = p.stride_block_table_b;
  a.cache_seqlens = p.cache_seqlens;
  a.max_pages = p.max_pages;
  a.s_q = p.s_q;
  a.causal = p.causal;
  Geometry& g = k.g;
  decode::cuda::set_decode_rows(p, g, k.o);
  g.heads_per_kv = p.h_q / p.h_kv;
  g.pack = pack_of(p);
  g.pack_causal = p.causal && g.pack > 1;
  g.head_blocks_per_kv = head_blocks_per_kv(p);
  g.kv_heads = p.h_kv;
  g.num_splits = plan.num_splits;
  g.keys_per_split = plan.keys_per_split;
  g.unsplit_r1 = plan.num_splits > 1 ? plan.unsplit_r1 : 0;
  decode::cuda::place_split_workspace(g, ws, false);
  const bool f16 = p.dtype == Half::f16;
  if (g.pack > 1) launch_instance<true>(p, f16, k, stream);
  else launch_instance<false>(p, f16, k, stream);
}

}  // namespace latentkv::dense::cuda
