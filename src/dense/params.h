// dense/params.h: dense_decode's parameters as every backend sees them, and the shared helpers for
// causal visibility, token addressing and key loading (bf16, f16 or v32_fp8 records).
#pragma once

#include <cstdint>

#include "latentkv/numerics.h"
#include "formats/record_codec.h"
#include "latentkv/formats.h"
#include "latentkv/numerics.h"

namespace latentkv::dense {

inline constexpr int kDimV = 512;

// The element type of q, out and (without fp8) k_cache.
enum class Half : uint8_t { bf16, f16 };

struct Params {
  const uint16_t* q;             // [b, s_q, h_q, d_qk] bf16 or f16
  int64_t stride_q_b, stride_q_s, stride_q_h;
  Half dtype;                    // of q, out and a 16-bit k_cache
  bool fp8;                      // k_cache holds v32_fp8 records
  const uint16_t* k_cache;       // [num_pages, P, h_kv, d_qk] bf16 or f16; null with fp8
  int64_t stride_k_page, stride_k_token, stride_k_head;  // elements
  const uint8_t* k_cache_fp8;    // v32_fp8 records [num_pages, P, 1, 656]; null without fp8
  int64_t page_stride_fp8;       // bytes between pages
  const int32_t* block_table;    // [b, max_pages]
  int64_t stride_block_table_b;
  const int32_t* cache_seqlens;  // [b]
  uint16_t* out;                 // [b, s_q, h_q, 512], dtype of q
  int64_t stride_out_b, stride_out_s, stride_out_h;
  float* lse;                    // [b, h_q, s_q], any strides whose elements are distinct
  int64_t stride_lse_b, stride_lse_h, stride_lse_s;
  int64_t b, s_q, h_q, h_kv, page_size, num_pages, max_pages;
  int d_qk;
  bool causal;
  float scale;                   // softmax scale (natural-log domain)
};

LKV_HD float half_to_f32(Half t, uint16_t x) {
  return t == Half::f16 ? num::f16_to_f32(x) : num::bf16_to_f32(x);
}
LKV_HD uint16_t f32_to_half(Half t, float x) {
  return t == Half::f16 ? num::f32_to_f16(x) : num::f32_to_bf16(x);
}

// Keys that query row j of request i sees: the first `len` tokens, and with causal masking
// (bottom-right aligned) len - (s_q - 1 - j) of them, never fewer than 0.
LKV_HD int64_t visible_keys(const Params& p, int64_t i, int64_t j) {
  const int64_t len = p.cache_seqlens[i];
  const int64_t n = p.causal ? len - (p.s_q - 1 - j) : len;
  return n < 0 ? 0 : n;
}

// Flat slot of token t of request i (t < cache_seqlens[i], so its block-table entry was validated).
LKV_HD int64_t token_slot(const Params& p, int64_t i, int64_t t) {
  const int64_t page = p.block_table[i * p.stride_block_table_b + t / p.page_size];
  return page * p.page_size + t % p.page_size;
}

// K of token t of request i for kv head `kv_head`, d_qk values as fp32 (exact: bf16, f16 and the
// dequantized v32_fp8 record are all fp32 values).
inline void load_key(const Params& p, int64_t i, int64_t t, int64_t kv_head, float* k) {
  const int64_t slot = token_slot(p, i, t);
  if (p.fp8) {
    constexpr CacheFormat F = CacheFormat::v32_fp8;
    constexpr formats::CodecLayout L = formats::codec_layout(F);
    uint16_t row[L.d_qk];
    const formats::RecordByteOffsets o =
        formats::record_byte_offsets(F, p.page_size, p.page_stride_fp8, slot);
    for (int u = 0; u < L.num_units; ++u)
      formats::decode_unit<F>(u, p.k_cache_fp8 + o.data, p.k_cache_fp8 + o.scale, row);
    for (int d = 0; d < L.d_qk; ++d) k[d] = num::bf16_to_f32(row[d]);
    return;
  }
  const uint16_t* src = p.k_cache + (slot / p.page_size) * p.stride_k_page +
                        (slot % p.page_size) * p.stride_k_token + kv_head * p.stride_k_head;
  for (int d = 0; d < p.d_qk; ++d) k[d] = half_to_f32(p.dtype, src[d]);
}

}  // namespace latentkv::dense
