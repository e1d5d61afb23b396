// decode/cuda/attend_params.h: what the shared attention kernel (kernel.cuh) and its combine kernel
// (combine.cu) see, whichever op launched them: the query and split geometry, the output addressing,
// and the op's key-side arguments (a Source's Args). No CUDA headers: the ops' host code fills these.
#pragma once

#include <cstdint>

#include "latentkv/numerics.h"  // LKV_HD

namespace latentkv::decode::cuda {

// Rows are query tokens, indexed row = r1 * n2 + r2 (decode: r1 = request, r2 = query token;
// prefill: r1 = query token, n2 = 1). Query heads come in kv-head groups of heads_per_kv.
struct Geometry {
  const uint16_t* q;                            // [rows, h_q, d_qk] through the strides below
  int64_t stride_q_r1, stride_q_r2, stride_q_h;  // elements
  int64_t n1, n2;                               // rows = n1 * n2
  int64_t h_q, heads_per_kv, head_blocks_per_kv;  // head_blocks_per_kv = ceil(heads_per_kv / 64)
  // Query tokens per CTA (dense decode, whose query tokens of a request share every key): a CTA
  // takes `pack` consecutive r2 of one r1, and its row lr is query r2_0 + lr / heads_per_kv, head
  // lr % heads_per_kv (pack x heads_per_kv <= 64, one head block). 1: one query token per CTA.
  // pack_causal: the packed rows' causal limits differ by their query's position (see
  // PackedRows in decode/cuda/kernel.cuh).
  int64_t pack = 1;
  bool pack_causal = false;
  int64_t kv_heads;
  float scale;                                  // softmax scale (natural-log domain)
  // Split-KV: candidate positions [0, candidates) in splits of keys_per_split.
  // unsplit_r1 > 0 (num_splits > 1): r1 in [0, unsplit_r1) run unsplit in a first launch and the
  // others split in a second (DecodePlan::unsplit_b; launch_attend makes the two launches); the
  // workspace then holds the split rows' partials only.
  int64_t num_splits, keys_per_split;
  int64_t unsplit_r1 = 0;
  // The launch's first r1: its CTAs and the combine's warps cover r1 in [r1_begin, r1_begin + n1)
  // (0 except in the second of two launches). The partials are indexed by the absolute query row
  // r1 n2 + r2, so that launch's partial pointers sit r1_begin n2 rows before its workspace.
  int64_t r1_begin = 0;
  float* partial_out;                           // [rows, h_q, num_splits, 512] fp32
  float* partial_lse;                           // [rows, h_q, num_splits]
  float* partial_max;                           // [rows, h_q, num_splits]; null without max_logits
  // Portable kernel on sm_90: how many warps (the last ones) issue a key tile's bulk copies,
  // 32 / copy_warps tokens each: 1, 2, 4 or 8 (launch.h, copy_warps_for).
  int32_t copy_warps = 1;
  // Portable kernel, overlapped layout, token groups: warps 4-7, which have no rows to multiply in
  // CTAs of at most 16 rows, dequantize each next tile alone (kernel.cuh, idle_dequant; launch.h,
  // idle_dequant_for).
  int32_t idle_dequant = 0;
  // The first launch of a two-launch plan (unsplit, a second attention launch behind it), and with
  // pdl_first a call's only launch (unsplit, no combine): its CTAs let the next launch be scheduled
  // as soon as they start (after the entry wait, with pdl_first; cuda_common/pdl.cuh), so that its
  // CTAs fill SMs as this launch's last wave drains. A launch with a combine behind it lets the
  // combine in only once all of its CTAs have exited: a combine let in early piles its CTAs onto
  // the few idle SMs and runs slower there (bench/NOTES.md, v16).
  int32_t early_dependents = 0;
  // The call's first launch is programmatically dependent on whatever kernel the caller queued
  // ahead of the call (launch.h, first_launch_pdl): that launch (r1_begin == 0) waits for it before
  // anything else (waits_at_entry), and the call's last kernel lets the next call's first launch in
  // early (an unsplit launch as its CTAs start, the combine once its CTAs have passed their wait).
  int32_t pdl_first = 0;
};

// Whether a launch of geometry g is a call's first with PDL, which waits at entry (launch.h,
// first_launch_pdl).
LKV_HD bool waits_at_entry(const Geometry& g) { return g.pdl_first != 0 && g.r1_begin == 0; }

// Where the results go. out's element type (bf16 or f16) is the Source's.
struct OutRef {
  uint16_t* out;                                // [rows, h_q, 512]
  int64_t stride_out_r1, stride_out_r2, stride_out_h;
  float* lse;                                   // natural log; +inf for a query with no valid key
  int64_t stride_lse_r1, stride_lse_r2, stride_lse_h;
  float* max_logits;                            // may be null; -inf for a query with no valid key
  int64_t stride_max_r1, stride_max_r2, stride_max_h;
  const float* sink;                            // [h_q]; may be null
};

// How many splits a launch cuts each row's candidates into (prefill and dense plan their own with
// the decode planner's rule; sparse decode takes a DecodePlan).
struct SplitPlan {
  int64_t num_splits, keys_per_split;
  int64_t unsplit_r1 = 0;  // DecodePlan::unsplit_b
};

template <class Args>
struct KernelParams {
  Args src;
  Geometry g;
  OutRef o;
#if defined(LKV_SM90_TRACE)
  unsigned long long* trace = nullptr;  // [CTAs][sm90::kTracePhases] phase stamps, or null
#endif
};

// Decode-shaped rows, row = (request i, query j), from a parameter struct with decode's field names
// (sparse and dense decode): q and out [b, s_q, h_q, ...], lse [b, h_q, s_q] (any strides).
template <class P>
void set_decode_rows(const P& p, Geometry& g, OutRef& o) {
  g.q = p.q;
  g.stride_q_r1 = p.stride_q_b;
  g.stride_q_r2 = p.stride_q_s;
  g.stride_q_h = p.stride_q_h;
  g.n1 = p.b;
  g.n2 = p.s_q;
  g.h_q = p.h_q;
  g.scale = p.scale;
  o.out = p.out;
  o.stride_out_r1 = p.stride_out_b;
  o.stride_out_r2 = p.stride_out_s;
  o.stride_out_h = p.stride_out_h;
  o.lse = p.lse;
  o.stride_lse_r1 = p.stride_lse_b;
  o.stride_lse_r2 = p.stride_lse_s;
  o.stride_lse_h = p.stride_lse_h;
}

// CTA row groups of a launch: n1 x ceil(n2 / pack).
inline int64_t row_groups(const Geometry& g) { return g.n1 * ((g.n2 + g.pack - 1) / g.pack); }

// Scratch of a split launch: partial outputs, then LSEs, then (with max_logits) maxima, each
// 256-byte aligned.
inline size_t split_workspace_bytes(int64_t rows, int64_t h_q, int64_t num_splits, bool with_max) {
  if (num_splits <= 1) return 0;
  const size_t n = static_cast<size_t>(rows * h_q * num_splits);
  const auto round = [](size_t x) { return (x + 255) / 256 * 256; };
  return round(n * 512 * sizeof(float)) + round(n * sizeof(float)) + (with_max ? round(n * sizeof(float)) : 0);
}

// Points the geometry's partial buffers into `ws` (laid out as split_workspace_bytes says for the
// split rows, (n1 - unsplit_r1) x n2).
inline void place_split_workspace(Geometry& g, void* ws, bool with_max) {
  if (g.num_splits <= 1) return;
  const size_t n = static_cast<size_t>((g.n1 - g.unsplit_r1) * g.n2 * g.h_q * g.num_splits);
  const auto round = [](size_t x) { return (x + 255) / 256 * 256; };
  uint8_t* base = static_cast<uint8_t*>(ws);
  g.partial_out = reinterpret_cast<float*>(base);
  g.partial_lse = reinterpret_cast<float*>(base + round(n * 512 * sizeof(float)));
  g.partial_max = with_max ? reinterpret_cast<float*>(base + round(n * 512 * sizeof(float)) +
                                                      round(n * sizeof(float)))
                           : nullptr;
}

}  // namespace latentkv::decode::cuda
