// dense/cuda/source.cuh: dense decode's Source for the shared attention kernel
// (decode/cuda/kernel.cuh): candidate k of (request i, query j) is token k of the request's pages,
// for k below the row's visible count (cache_seqlens[i], less the causal offset).
#pragma once

#include <cstdint>

#include "decode/cuda/kernel.cuh"

namespace latentkv::dense::cuda {

struct DenseArgs {
  const uint8_t* base;            // k_cache bytes: 16-bit rows, or v32_fp8 records
  int64_t stride_page_bytes, stride_token_bytes, stride_head_bytes;
  int64_t page_size, num_pages;
  const int32_t* block_table;     // [b, max_pages]
  int64_t stride_block_table_b;
  const int32_t* cache_seqlens;   // [b]
  int64_t max_pages, s_q;
  bool causal;
};

// kDim: d_qk; kHalf: q, keys and out are f16 (else bf16); kStorage: kDirect16 for 16-bit caches,
// kV32Fp8 for v32_fp8 records (bf16 only); kPacks: the launch packs query tokens (Geometry::pack > 1;
// dense.cu picks the instantiation, so that unpacked launches run without the per-row masks).
// kSplit: the score product's shape (kernel.cuh: score_dqk_half, else score_tokens_half; the split
// needs quantized storage), picked by decode::cuda::split_dqk_pays.
template <int kDim, bool kHalf, decode::cuda::KeyStorage kStore, bool kPacks, bool kSplit = false>
struct DenseSource {
  using Args = DenseArgs;
  static constexpr int kDqk = kDim;
  static constexpr bool kF16 = kHalf;
  static constexpr decode::cuda::KeyStorage kStorage = kStore;
  static constexpr bool kPacksRows = kPacks;
  static constexpr bool kDensePages = true;  // consecutive tokens of each request's pages (sm90 narrow_ws)
  static constexpr bool kSplitDqk = kSplit;
  static_assert(kStore == decode::cuda::KeyStorage::kDirect16 ||
                    (kStore == decode::cuda::KeyStorage::kV32Fp8 && kDim == 576 && !kHalf),
                "fp8 dense decode: v32_fp8 records, bf16 queries");

  int64_t i, kv_head, visible;

  __device__ DenseSource(const Args& a, int64_t r1, int64_t r2, int64_t head) : i(r1), kv_head(head) {
    // Device lengths are not checked by the host (that would synchronise): a length outside
    // [0, max_pages * P] is clamped into it.
    int64_t len = a.cache_seqlens[r1];
    len = len < 0 ? 0 : min(len, a.max_pages * a.page_size);
    const int64_t n = a.causal ? len - (a.s_q - 1 - r2) : len;
    visible = n < 0 ? 0 : n;
  }

  __device__ int64_t candidates() const { return visible; }

  // locate() in two steps (as the sparse decode Source): raw_index() is the one memory access (the
  // block-table entry of candidate k's page), locate_index() the rest, so that a kernel can issue
  // the load early and use it later. k < max_pages * P < 2^31 (checked on the host), so 32-bit
  // division suffices.
  __device__ int32_t raw_index(const Args& a, int64_t k) const { return *raw_index_at(a, k); }
  // Where raw_index() reads (never null here), for a kernel that copies it asynchronously instead
  // (decode/sm90/narrow.cuh).
  __device__ const int32_t* raw_index_at(const Args& a, int64_t k) const {
    const uint32_t blk = static_cast<uint32_t>(k) / static_cast<uint32_t>(a.page_size);
    return a.block_table + i * a.stride_block_table_b + blk;
  }
  __device__ const uint8_t* locate_index(const Args& a, int64_t k, int32_t page, const uint8_t** scale) const {
    return at(a, page, static_cast<uint32_t>(k) % static_cast<uint32_t>(a.page_size), scale);
  }
  // Both steps at once: one division gives the block and the token within it.
  __device__ const uint8_t* locate(const Args& a, int64_t k, const uint8_t** scale) const {
    const uint32_t P = static_cast<uint32_t>(a.page_size);
    const uint32_t blk = static_cast<uint32_t>(k) / P, tok = static_cast<uint32_t>(k) - blk * P;
    return at(a, a.block_table[i * a.stride_block_table_b + blk], tok, scale);
  }

 private:
  // Token tok of page `page` (a block-table entry).
  __device__ const uint8_t* at(const Args& a, int32_t page, uint32_t tok, const uint8_t** scale) const {
    // A block-table entry outside the cache makes its tokens unattended: never read.
    if (page < 0 || page >= a.num_pages) return nullptr;
    const uint8_t* data = a.base + page * a.stride_page_bytes + tok * a.stride_token_bytes +
                          kv_head * a.stride_head_bytes;
    if constexpr (kStore == decode::cuda::KeyStorage::kV32Fp8) *scale = data + 512;
    return data;
  }
};

}  // namespace latentkv::dense::cuda
