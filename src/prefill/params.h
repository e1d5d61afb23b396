// prefill/params.h: sparse_prefill's parameters as every backend sees them, and the shared helpers
// that locate a query row's kv segment and decide which candidates it attends.
#pragma once

#include <cstdint>

#include "latentkv/numerics.h"

namespace latentkv::prefill {

inline constexpr int kDimV = 512;

struct Params {
  const uint16_t* q;              // [s_q, h_q, d_qk] bf16
  int64_t stride_q_s, stride_q_h;
  const uint16_t* kv;             // [s_kv, 1, d_qk] bf16
  int64_t stride_kv_s;
  const int32_t* indices;         // [s_q, 1, topk]; relative to the row's kv segment
  int64_t stride_indices_s;
  const int32_t* topk_length;     // [s_q]; may be null (then topk)
  const float* sink;              // [h_q]; may be null
  const int64_t* seq_offsets_q;   // [num_seqs + 1]; null: one sequence covering everything
  const int64_t* seq_offsets_kv;  // [num_seqs + 1]; null iff seq_offsets_q is
  int64_t num_seqs;
  uint16_t* out;                  // [s_q, h_q, 512] bf16
  int64_t stride_out_s, stride_out_h;
  float* max_logits;              // [s_q, h_q]
  int64_t stride_max_logits_s;
  float* lse;                     // [s_q, h_q]
  int64_t stride_lse_s;
  int64_t s_q, s_kv, h_q, topk;
  int d_qk;
  float sm_scale;                 // natural-log domain
};

// The kv rows a query row may read: [begin, begin + len).
struct KvSegment {
  int64_t begin, len;
};

// The segment of query row `row`: its sequence's kv rows (binary search over the offsets; a row
// belongs to the sequence n with offsets_q[n] <= row < offsets_q[n + 1]).
LKV_HD KvSegment kv_segment(const Params& p, int64_t row) {
  if (!p.seq_offsets_q) return {0, p.s_kv};
  int64_t lo = 0, hi = p.num_seqs - 1;  // invariant: offsets_q[lo] <= row < offsets_q[hi + 1]
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (p.seq_offsets_q[mid] <= row) lo = mid;
    else hi = mid - 1;
  }
  return {p.seq_offsets_kv[lo], p.seq_offsets_kv[lo + 1] - p.seq_offsets_kv[lo]};
}

// Number of candidates of row `row` that are considered (topk_length clamps, never extends).
LKV_HD int64_t valid_count(const Params& p, int64_t row) {
  if (!p.topk_length) return p.topk;
  const int64_t n = p.topk_length[row];
  return n < 0 ? 0 : (n > p.topk ? p.topk : n);
}

// The absolute kv row behind candidate k of `row`, or -1 when it is not attended (beyond the
// length, or an index outside the row's segment).
LKV_HD int64_t candidate_kv_row(const Params& p, int64_t row, int64_t k, int64_t count,
                                KvSegment seg) {
  if (k >= count) return -1;
  const int64_t idx = p.indices[row * p.stride_indices_s + k];
  return (idx >= 0 && idx < seg.len) ? seg.begin + idx : -1;
}

}  // namespace latentkv::prefill
