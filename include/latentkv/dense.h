// latentkv/dense.h: dense MLA decode over a paged cache (SPEC.md section 6, FlashMLA's
// flash_mla_with_kvcache without indices).
//
// Request i attends to the first len = cache_seqlens[i] tokens of its pages; token t lives at page
// block_table[i][t / P], offset t % P. With causal, masking is bottom-right aligned: query row j of
// s_q sees keys [0, len - (s_q - 1 - j)). Query head h reads kv head h / (h_q / h_kv). K of a token
// is its d_qk-wide row and V its first 512 dims. s = softmax_scale * q . k; lse = ln(sum exp(s))
// (natural log); out = softmax(s) @ V. A row that sees no key (len 0, or an early causal row) gets
// out = 0 and lse = +inf. Block-table entries at or beyond ceil(len / P) are never read.
#pragma once

#include <cstdint>

#include "latentkv/tensor.h"

namespace latentkv {

struct DenseDecodeArgs {
  TensorView q;              // bf16 or f16 [b, s_q, h_q, d_qk]; d_qk = 576 with fp8
  TensorView k_cache;        // same dtype as q [num_pages, P, h_kv, d_qk] (any P), or with fp8:
                             // u8 v32_fp8 records [num_pages, P, 1, 656] (any page stride)
  bool fp8 = false;          // k_cache holds v32_fp8 records (h_kv = 1, d_qk = 576)
  TensorView block_table;    // i32 [b, max_pages]
  TensorView cache_seqlens;  // i32 [b]; each in [0, max_pages * P]
  bool causal = false;       // bottom-right aligned
  float softmax_scale = 0.0f;  // 0: d_qk^-0.5
  int64_t d_v = 512;         // must be 512
  TensorView out;            // same dtype as q [b, s_q, h_q, d_v]
  TensorView lse;            // f32 [b, h_q, s_q], any strides with distinct elements
};

enum class DenseImpl : uint8_t { kAuto, kCpuOracle, kCpuFast, kCuda };

void dense_decode(const DenseDecodeArgs& args, Stream stream = nullptr,
                  DenseImpl impl = DenseImpl::kAuto);

}  // namespace latentkv
