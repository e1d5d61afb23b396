// decode/params.h: sparse decode's parameters as every backend sees them, and the shared helpers
// for index validity and token dequantization.
#pragma once

#include <cstdint>

#include "formats/record_codec.h"
#include "latentkv/formats.h"
#include "latentkv/numerics.h"

namespace latentkv::decode {

inline constexpr int kDimV = 512;

// One paged cache and its indices.
struct CacheRef {
  const uint8_t* base;          // cache bytes
  int64_t page_size;            // P
  int64_t page_stride;          // bytes between pages
  int64_t num_slots;            // num_pages * P: indices outside [0, num_slots) are skipped
  const int32_t* indices;       // [b, s_q, topk]
  int64_t stride_idx_b, stride_idx_s;
  int64_t topk;                 // 0 when the cache is absent
  const int32_t* topk_length;   // [b]; may be null (then topk)
  CacheFormat format;           // its records' format (the extra cache's may differ from the main's)
};

struct Params {
  const uint16_t* q;            // [b, s_q, h_q, d_qk] bf16
  int64_t stride_q_b, stride_q_s, stride_q_h;
  CacheRef main, extra;
  const float* sink;            // [h_q]; may be null
  uint16_t* out;                // [b, s_q, h_q, 512] bf16
  int64_t stride_out_b, stride_out_s, stride_out_h;
  float* lse;                   // [b, h_q, s_q], any strides whose elements are distinct
  int64_t stride_lse_b, stride_lse_h, stride_lse_s;
  int64_t b, s_q, h_q;
  int d_qk;
  CacheFormat format;           // main.format (the CUDA kernels take extra.format == format)
  float scale;                  // softmax scale (natural-log domain)
  // Split-KV (GPU): candidate positions [0, main.topk + extra.topk) in splits of keys_per_split.
  // unsplit_b > 0 (num_splits > 1): requests [0, unsplit_b) run unsplit in a launch of their own
  // (DecodePlan::unsplit_b), and only the others have partials.
  int64_t num_splits, keys_per_split, unsplit_b;
  float* partial_out;           // [b - unsplit_b, s_q, h_q, num_splits, 512]
  float* partial_lse;           // [b - unsplit_b, s_q, h_q, num_splits]
};

// Number of candidates of request i that are considered (topk_length clamps, never extends).
LKV_HD int64_t valid_count(const CacheRef& c, int64_t i) {
  if (!c.topk_length) return c.topk;
  const int64_t n = c.topk_length[i];
  return n < 0 ? 0 : (n > c.topk ? c.topk : n);
}

// The slot behind candidate k of (i, j), or -1 when it is not attended (beyond the length, or an
// index outside the cache).
LKV_HD int64_t candidate_slot(const CacheRef& c, int64_t i, int64_t j, int64_t k, int64_t count) {
  if (k >= count) return -1;
  const int64_t s = c.indices[i * c.stride_idx_b + j * c.stride_idx_s + k];
  return (s >= 0 && s < c.num_slots) ? s : -1;
}

// Dequantizes the record of `slot` to bf16 bits [d_qk] through the shared codec (exact: payload
// times its group's scale, a power of two, or for v41_fp4 an e4m3 value, whose product with an e2m1
// code bf16 holds exactly; SPEC.md section 1).
template <CacheFormat F>
LKV_HD void dequantize_token(const CacheRef& c, int64_t slot, uint16_t* out) {
  const formats::RecordByteOffsets o =
      formats::record_byte_offsets(F, c.page_size, c.page_stride, slot);
  constexpr formats::CodecLayout L = formats::codec_layout(F);
  for (int u = 0; u < L.num_units; ++u)
    formats::decode_unit<F>(u, c.base + o.data, c.base + o.scale, out);
}

inline void dequantize_token(const CacheRef& c, int64_t slot, uint16_t* out) {
  switch (c.format) {
    case CacheFormat::v32_fp8: return dequantize_token<CacheFormat::v32_fp8>(c, slot, out);
    case CacheFormat::v4_fp8: return dequantize_token<CacheFormat::v4_fp8>(c, slot, out);
    case CacheFormat::v4_int8: return dequantize_token<CacheFormat::v4_int8>(c, slot, out);
    case CacheFormat::v41_fp8: return dequantize_token<CacheFormat::v41_fp8>(c, slot, out);
    case CacheFormat::v41_fp4: return dequantize_token<CacheFormat::v41_fp4>(c, slot, out);
  }
}

}  // namespace latentkv::decode
