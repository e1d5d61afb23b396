// testing/attention_workload.h: seeded inputs in host memory for sparse_prefill and dense_decode,
// and the comparison of one backend's outputs with a reference's (usually the float64 oracle's),
// shared by the CPU tests and (later) the CUDA tests and benchmarks.
//
// Prefill: q and kv ~ randn rounded to bf16, indices drawn uniformly from each query row's kv
// segment (repeats are possible and legal), optional per-row lengths, sinks and several packed
// sequences. Dense: q ~ randn, a paged cache (bf16, f16 or v32_fp8 records, the latter written by
// latentkv::quantize) whose pages are handed to requests in a random order, random lengths. Options
// bend both into the corner cases of SPEC.md sections 5 and 6: adversarial index values, all
// indices invalid, zero lengths, infinite sinks, NaN in every kv row / cache slot nothing reads,
// garbage block-table entries beyond the pages a request needs. Outputs come poisoned (NaN) so an
// element a backend forgets to write shows up in nan_out / lse_mismatch.
//
// The tolerances are those of sparse_decode (testing::kDecodeMaxRelTol, kDecodeCosTol; see
// decode_workload.h): the outputs are bf16 or f16 and an fp32 backend lands well inside them.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "latentkv/dense.h"
#include "latentkv/prefill.h"
#include "testing/decode_workload.h"

namespace latentkv::testing {

// ---- sparse_prefill ----------------------------------------------------------------------------

struct PrefillWorkloadOptions {
  int64_t s_q = 8, s_kv = 256, h_q = 16, d_qk = 576, topk = 64;
  // Several packed sequences: query rows and kv rows per sequence (sums give s_q and s_kv, which
  // are then ignored). Empty: one sequence.
  std::vector<int64_t> seq_q, seq_kv;
  bool topk_length = false;   // per-row lengths (row 0 gets topk, the others random in [0, topk])
  bool sink = false;          // attn_sink [h_q]
  float sink_special = 0.0f;  // 0: random sinks; +inf or -inf: every sink that value
  bool adversarial = false;   // ~10% of indices become INT_MIN, -2, the segment length, INT_MAX or -1
  bool all_invalid = false;   // every index invalid
  bool zero_lengths = false;  // topk_length 0 on the even rows
  bool nan_unused = false;    // every kv row that no attended index references holds bf16 NaN
  float sm_scale = 0.0f;      // 0: d_qk^-0.5
  // Row maxima that rise along the candidates: each quarter of a segment's kv rows scaled by 4x the
  // previous one (1, 4, 16, 64) and every row's candidates sorted by index, so that the blocks of 64
  // where a quarter starts raise a row's maximum by more than 8 in log2 units (a factor 2^8) and
  // the others by less (the online softmax's rescale paths, and the max logit, are then exercised
  // past the first block).
  bool rising_scores = false;
  uint64_t seed = 1;
};

struct PrefillWorkload {
  PrefillWorkloadOptions opt;
  int64_t s_q = 0, s_kv = 0;
  std::vector<uint16_t> q;               // [s_q, h_q, d_qk] bf16
  std::vector<uint16_t> kv;              // [s_kv, 1, d_qk] bf16
  std::vector<int32_t> indices;          // [s_q, 1, topk], relative to the row's kv segment
  std::vector<int32_t> topk_length;      // [s_q]
  std::vector<float> sink;               // [h_q]
  std::vector<int64_t> seq_offsets_q;    // [num_seqs + 1]; empty for one sequence
  std::vector<int64_t> seq_offsets_kv;   // [num_seqs + 1]
  std::vector<uint16_t> out;             // [s_q, h_q, 512] bf16, poisoned with NaN
  std::vector<float> max_logits, lse;    // [s_q, h_q], poisoned with NaN

  bool batched() const { return !seq_offsets_q.empty(); }
  // The kv segment [begin, begin + len) of query row `row`.
  std::pair<int64_t, int64_t> segment(int64_t row) const;
  // Host views over the vectors; absent optionals have data == nullptr.
  SparsePrefillArgs args();
  void poison_outputs();
  // Runs sparse_prefill (or sparse_prefill_batched when batched()) on poisoned outputs.
  void run(PrefillImpl impl);
};

PrefillWorkload make_prefill_workload(const PrefillWorkloadOptions& opt);

// ---- dense_decode ------------------------------------------------------------------------------

struct DenseWorkloadOptions {
  int64_t b = 2, s_q = 1, h_q = 16, h_kv = 1, d_qk = 576, page_size = 64;
  int64_t max_len = 300;           // request 0 gets max_len, the others a random length in [0, max_len]
  std::vector<int32_t> lengths;    // explicit lengths [b] instead
  bool f16 = false;                // q, out and the 16-bit cache are f16 rather than bf16
  bool fp8 = false;                // a v32_fp8 cache (h_kv 1, d_qk 576)
  bool causal = false;
  bool zero_lengths = false;       // length 0 for the even requests
  bool garbage_block_table = false;  // entries beyond the needed blocks: INT_MIN, -1, num_pages, INT_MAX
  bool nan_unused = false;         // every cache slot that no request reads holds NaN
  int64_t spare_pages = 2;         // pages that no request owns
  float softmax_scale = 0.0f;      // 0: d_qk^-0.5
  uint64_t seed = 1;
};

struct DenseWorkload {
  DenseWorkloadOptions opt;
  int64_t num_pages = 0, max_pages = 0, page_stride_fp8 = 0;
  std::vector<uint16_t> q;          // [b, s_q, h_q, d_qk] bf16 or f16
  std::vector<uint16_t> k_cache;    // [num_pages, P, h_kv, d_qk] (16-bit caches)
  std::vector<uint8_t> k_cache_fp8; // [num_pages, page_stride_fp8] bytes (v32_fp8)
  std::vector<int32_t> block_table; // [b, max_pages]
  std::vector<int32_t> cache_seqlens;  // [b]
  std::vector<uint16_t> out;        // [b, s_q, h_q, 512], poisoned with NaN
  std::vector<float> lse;           // [b, h_q, s_q], poisoned with NaN

  DenseDecodeArgs args();
  void poison_outputs();
  void run(DenseImpl impl);
};

DenseWorkload make_dense_workload(const DenseWorkloadOptions& opt);

// ---- comparison --------------------------------------------------------------------------------


AttentionDiff compare_prefill(const PrefillWorkload& w, const std::vector<uint16_t>& out,
                              const std::vector<float>& max_logits, const std::vector<float>& lse,
                              const std::vector<uint16_t>& ref_out,
                              const std::vector<float>& ref_max_logits,
                              const std::vector<float>& ref_lse);

AttentionDiff compare_dense(const DenseWorkload& w, const std::vector<uint16_t>& out,
                            const std::vector<float>& lse, const std::vector<uint16_t>& ref_out,
                            const std::vector<float>& ref_lse);

// True when no NaN, no lse / max_logits / lonely mismatch, max_rel <= max_rel_tol and
// cos_sim >= cos_tol.
bool attention_close(const AttentionDiff& d, double max_rel_tol = kDecodeMaxRelTol,
                     double cos_tol = kDecodeCosTol);

}  // namespace latentkv::testing
