// latentkv/prefill.h: sparse MLA prefill over a flat bf16 KV tensor (SPEC.md section 5, FlashMLA's
// flash_mla_sparse_fwd).
//
// Per query token t and head h: the attended set is the valid entries among
// indices[t][0][:topk_length[t]], an entry being valid iff it lies in [0, s_kv) (anything else is
// skipped, never read). K of a token is its kv row (d_qk wide) and V its first d_v = 512 dims.
// s = sm_scale * q . k; max_logits = max s; lse = ln(sum exp(s)) (natural log);
// out = softmax(s) @ V. With a sink: out *= 1 / (1 + exp(sink[h] - lse)), lse and max_logits
// unchanged. A query with no valid key gets out = 0, max_logits = -inf, lse = +inf.
//
// The batched form runs several independent sequences in one call: sequence n owns query rows
// [seq_offsets_q[n], seq_offsets_q[n + 1]) and kv rows [seq_offsets_kv[n], seq_offsets_kv[n + 1]),
// and its indices count from the start of its own kv segment (valid iff in [0, segment length)).
#pragma once

#include <cstdint>

#include "latentkv/tensor.h"

namespace latentkv {

struct SparsePrefillArgs {
  TensorView q;            // bf16 [s_q, h_q, d_qk]; d_qk >= d_v (512 for V4, 576 for V3.2)
  TensorView kv;           // bf16 [s_kv, 1, d_qk]
  TensorView indices;      // i32 [s_q, 1, topk]; an entry outside [0, s_kv) (or its segment) is skipped
  float sm_scale = 0.0f;   // required, finite and > 0 (natural-log domain)
  int64_t d_v = 512;       // must be 512
  TensorView attn_sink;    // f32 [h_q]; may be absent (data == nullptr)
  TensorView topk_length;  // i32 [s_q], per query token; may be absent (then topk)
  TensorView out;          // bf16 [s_q, h_q, d_v]
  TensorView max_logits;   // f32 [s_q, h_q]; -inf for a query with no valid key
  TensorView lse;          // f32 [s_q, h_q]; natural log, +inf for a query with no valid key
};

enum class PrefillImpl : uint8_t { kAuto, kCpuOracle, kCpuFast, kCuda };

// One sequence: every query row may attend any kv row.
void sparse_prefill(const SparsePrefillArgs& args, Stream stream = nullptr,
                    PrefillImpl impl = PrefillImpl::kAuto);

// Several sequences packed along s_q and s_kv. seq_offsets_q and seq_offsets_kv are i64
// [num_seqs + 1] on the tensors' device, each starting at 0, non-decreasing, ending at s_q and
// s_kv respectively (a sequence may have no query rows or no kv rows).
void sparse_prefill_batched(const SparsePrefillArgs& args, const TensorView& seq_offsets_q,
                            const TensorView& seq_offsets_kv, Stream stream = nullptr,
                            PrefillImpl impl = PrefillImpl::kAuto);

}  // namespace latentkv
