// testing/decode_workload.h: seeded sparse_decode inputs in host memory, and the comparison of one
// backend's outputs with a reference's, shared by the CPU tests, the CUDA tests and the benchmarks.
//
// A workload is: q ~ randn (bf16), a paged cache whose every slot holds the format's quantization of
// a randn latent, indices drawn uniformly from the cache's slots (as FlashMLA's tests draw them;
// repeats are possible and legal), optional per-request lengths, sinks and an extra cache with its
// own page size. Options bend it into the corner cases of SPEC.md section 4: adversarial index
// values, every index invalid, zero lengths, infinite sinks, NaN bytes in every record that no
// attended index references. The outputs come poisoned (bf16 NaN, fp32 NaN) so that an element a
// backend forgets to write shows up in nan_out / lse_mismatch.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "latentkv/decode.h"
#include "latentkv/formats.h"

namespace latentkv::testing {

// The invalid index values a caller can pass, picked by r: FlashMLA's -1, other negatives, one past
// the end (`end`), and the extremes of int32 (which overflow naive slot or row arithmetic).
inline int32_t invalid_index(uint64_t r, int64_t end) {
  const int32_t values[5] = {INT32_MIN, -2, static_cast<int32_t>(end), INT32_MAX, -1};
  return values[r % 5];
}

struct DecodeWorkloadOptions {
  int64_t b = 2, s_q = 1, h_q = 16, topk = 64, page_size = 64;
  CacheFormat format = CacheFormat::v32_fp8;
  int64_t num_pages = 0;          // 0: enough pages for b * topk * 2 tokens
  bool topk_length = false;       // per-request lengths (request 0 gets topk, others random)
  bool sink = false;              // attn_sink [h_q]
  bool extra = false;             // an extra cache with its own indices
  int64_t extra_topk = 0;         // 0 with extra: 64
  int64_t extra_page_size = 64;
  std::optional<CacheFormat> extra_format;  // absent: format (v41_fp4 with a v41_fp8 format)
  bool extra_topk_length = false;
  bool nan_unused = false;        // every record no attended index references holds NaN bytes
  bool adversarial = false;       // ~10% of indices become INT_MIN, -2, num_slots, INT_MAX or -1
  bool all_invalid = false;       // every index (main and extra) is invalid
  bool zero_lengths = false;      // topk_length (and extra_topk_length) 0 for the even requests
  float sink_special = 0.0f;      // 0: random sinks; +inf or -inf: every sink that value
  uint64_t seed = 1;
  int64_t page_pad_bytes = 0;     // extra bytes after every page (the stride is then rounded to 16)
};

struct DecodeWorkload {
  DecodeWorkloadOptions opt;
  int64_t d_qk = 0;
  int64_t num_pages = 0, page_stride = 0;              // main cache; stride in bytes
  int64_t extra_num_pages = 0, extra_page_stride = 0;  // extra cache (0 when absent)
  std::vector<uint16_t> q;                 // [b, s_q, h_q, d_qk] bf16
  std::vector<uint8_t> kv, extra_kv;       // [num_pages, page_stride] bytes
  std::vector<int32_t> indices;            // [b, s_q, topk]
  std::vector<int32_t> extra_indices;      // [b, s_q, extra_topk]
  std::vector<int32_t> topk_length;        // [b]
  std::vector<int32_t> extra_topk_length;  // [b]
  std::vector<float> sink;                 // [h_q]
  std::vector<uint16_t> out;               // [b, s_q, h_q, 512] bf16, poisoned with NaN
  std::vector<float> lse;                  // [b, h_q, s_q], poisoned with NaN

  int64_t topk() const { return opt.topk; }
  int64_t extra_topk() const;  // 0 without an extra cache
  CacheFormat extra_format() const { return opt.extra_format.value_or(opt.format); }
  int64_t num_slots() const { return num_pages * opt.page_size; }
  int64_t extra_num_slots() const { return extra_num_pages * opt.extra_page_size; }

  // Host views over the vectors. Absent optionals have data == nullptr; caches are 4-D
  // [num_pages, P, 1, bpt] with strides {page_stride, bpt, bpt, 1}; softmax_scale 0 (d_qk^-0.5).
  SparseDecodeArgs args();
  // Refills out and lse with the poison values.
  void poison_outputs();
  // Sets every index outside its cache (other than -1 already) to -1; returns how many it changed.
  // The ops must skip such values exactly as they skip -1.
  int64_t invalid_indices_to_minus_one();
};

DecodeWorkload make_decode_workload(const DecodeWorkloadOptions& opt);

// How a backend's outputs differ from a reference's (usually the float64 oracle's).
// How a backend's attention outputs differ from a reference's (sparse decode, sparse prefill and
// dense decode alike).
struct AttentionDiff {
  double max_abs = 0;   // max |out - ref| over every output element
  double max_rel = 0;   // max_abs / max |ref| over the tensor (max_abs when ref is all zero)
  double cos_sim = 1;   // cosine similarity of the outputs as flat vectors (1 if both zero)
  double max_lse_err = 0;      // max |lse - ref| over finite reference values
  int64_t lse_mismatch = 0;    // beyond 1e-5 + 1e-5 |ref| (finite), or in class (+inf, -inf, NaN)
  int64_t max_logits_mismatch = 0;  // the same rule for max_logits (prefill only)
  int64_t mask_mismatch = 0;   // rows whose lonely pattern (lse +inf, out all zero) differs
  int64_t nan_out = 0;         // NaN elements in out
};
using DecodeDiff = AttentionDiff;

// The comparison behind compare_decode, compare_prefill and compare_dense: `rows` output rows of
// 512 values (bf16, or f16 when f16) in the same order in both outputs; row r's lse (and
// max_logits, when given) at index lse_at(r).
AttentionDiff compare_attention_rows(int64_t rows, bool f16, const std::vector<uint16_t>& out,
                                     const std::vector<uint16_t>& ref_out,
                                     const std::vector<float>& lse,
                                     const std::vector<float>& ref_lse,
                                     const std::function<int64_t(int64_t)>& lse_at,
                                     const std::vector<float>* max_logits = nullptr,
                                     const std::vector<float>* ref_max_logits = nullptr);

DecodeDiff compare_decode(const DecodeWorkload& w, const std::vector<uint16_t>& out,
                          const std::vector<float>& lse, const std::vector<uint16_t>& ref_out,
                          const std::vector<float>& ref_lse);

// Tolerances fitted to bf16 outputs. Rounding the output to bf16 alone moves each element by up to
// 2^-9 of its magnitude, so a correct backend differs from the float64 oracle by about that much
// plus its own accumulation error: an fp32 backend (fp32 scores, fp32 softmax and accumulation, or
// bf16 probabilities times bf16 V on tensor cores) lands within ~1e-2 of max |ref| and above 0.9999
// cosine similarity. A wrong index, a missed token or a bad scale moves either far beyond that.
inline constexpr double kDecodeMaxRelTol = 1e-2;
inline constexpr double kDecodeCosTol = 0.9999;

// True when no NaN, no lse or lonely-query mismatch, max_rel <= max_rel_tol and cos_sim >= cos_tol.
bool decode_close(const DecodeDiff& d, double max_rel_tol = kDecodeMaxRelTol,
                  double cos_tol = kDecodeCosTol);

}  // namespace latentkv::testing
