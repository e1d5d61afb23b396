// decode/cuda/source.cuh: sparse decode's Source for the shared attention kernel: candidate k of
// (request i, query j) is position k of the main cache's indices, then of the extra cache's; a
// candidate beyond its cache's topk_length or with an index outside its cache is not attended.
#pragma once

#include <cstdint>

#include "decode/cuda/kernel.cuh"
#include "decode/params.h"

namespace latentkv::decode::cuda {

struct SparseArgs {
  CacheRef main, extra;  // extra.topk == 0 when there is no extra cache
};

// kSplit: the score product's shape (kernel.cuh: score_dqk_half, else score_tokens_half), which
// launch_sparse picks by split_dqk_pays. FE: the extra cache's format, F's own or, with v41_fp8,
// v41_fp4 (DeepSeek V4.1's pairing: KeyStorage::kV41Mixed; every kernel).
template <CacheFormat F, bool kSplit, CacheFormat FE = F>
struct SparseSource {
  static_assert(F == CacheFormat::v32_fp8 || F == CacheFormat::v4_fp8 || F == CacheFormat::v41_fp8,
                "fp8 decode formats");
  static_assert(FE == F || (F == CacheFormat::v41_fp8 && FE == CacheFormat::v41_fp4), "the extra cache's format");
  static constexpr bool kFp4Extra = FE == CacheFormat::v41_fp4;
  using Args = SparseArgs;
  static constexpr int kDqk = F == CacheFormat::v32_fp8 ? 576 : 512;
  static constexpr bool kF16 = false;
  static constexpr KeyStorage kStorage = kFp4Extra                  ? KeyStorage::kV41Mixed
                                         : F == CacheFormat::v32_fp8 ? KeyStorage::kV32Fp8
                                         : F == CacheFormat::v4_fp8  ? KeyStorage::kV4Fp8
                                                                     : KeyStorage::kV41Fp8;
  static constexpr bool kPacksRows = false;  // one query token per CTA (Geometry::pack 1)
  static constexpr bool kDensePages = false;  // a gathered list (decode/sm90/launch.h narrow_ws)
  static constexpr bool kSplitDqk = kSplit;

  int64_t i, j, main_count, extra_count, total;

  __device__ SparseSource(const Args& a, int64_t r1, int64_t r2, int64_t /*kv_head*/)
      : i(r1), j(r2), main_count(valid_count(a.main, r1)),
        extra_count(a.extra.topk > 0 ? valid_count(a.extra, r1) : 0),
        total(a.main.topk + a.extra.topk) {}

  // Candidate positions: every index slot of both caches (lengths are applied per candidate).
  __device__ int64_t candidates() const { return total; }

  // Asks L2 for the index lines of candidates [k0, k1) of both caches (thread t of nt takes every
  // nt-th line), so that the resolves that follow hit L2. Only lines holding indices in range are
  // touched.
  __device__ void prefetch_indices(const Args& a, int64_t k0, int64_t k1, int t, int nt) const {
    auto span = [&](const CacheRef& c, int64_t b0, int64_t b1) {  // candidates [b0, b1) of cache c
      if (b1 <= b0) return;
      const int32_t* row = c.indices + i * c.stride_idx_b + j * c.stride_idx_s;
      const uintptr_t first = reinterpret_cast<uintptr_t>(row + b0) & ~uintptr_t{127};
      const uintptr_t last = reinterpret_cast<uintptr_t>(row + b1 - 1);
      for (uintptr_t l = first + static_cast<uintptr_t>(t) * 128; l <= last; l += static_cast<uintptr_t>(nt) * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(l));
    };
    span(a.main, k0, min(k1, a.main.topk));
    if (a.extra.topk > 0) span(a.extra, max(k0, a.main.topk) - a.main.topk, k1 - a.main.topk);
  }

  // locate() in two steps, so that a caller can issue the index load early and use it later:
  // raw_index() is the one memory access (the int32 index of candidate k, or -1 when k is beyond its
  // cache's valid count), locate_index() the rest (no memory access).
  __device__ int32_t raw_index(const Args& a, int64_t k) const {
    const bool extra = k >= a.main.topk;
    const CacheRef& c = extra ? a.extra : a.main;
    const int64_t kk = extra ? k - a.main.topk : k;
    if (kk >= (extra ? extra_count : main_count)) return -1;
    return c.indices[i * c.stride_idx_b + j * c.stride_idx_s + kk];
  }
  // Where raw_index() reads candidate k's index (null where it gives -1 without a read), for a
  // kernel that copies the index asynchronously instead (decode/sm90/narrow.cuh). (raw_index keeps
  // its own body: written through this one, every sparse kernel compiled to different SASS.)
  __device__ const int32_t* raw_index_at(const Args& a, int64_t k) const {
    const bool extra = k >= a.main.topk;
    const CacheRef& c = extra ? a.extra : a.main;
    const int64_t kk = extra ? k - a.main.topk : k;
    if (kk >= (extra ? extra_count : main_count)) return nullptr;
    return c.indices + i * c.stride_idx_b + j * c.stride_idx_s + kk;
  }
  __device__ const uint8_t* locate_index(const Args& a, int64_t k, int32_t index, const uint8_t** scale) const {
    const bool extra = k >= a.main.topk;
    const CacheRef& c = extra ? a.extra : a.main;
    if (index < 0 || index >= c.num_slots) return nullptr;
    // Slots come from int32 indices and the host checks that page sizes fit in 32 bits, so a
    // 32-bit division suffices (a 64-bit one costs several times more).
    const uint32_t s = static_cast<uint32_t>(index), P = static_cast<uint32_t>(c.page_size);
    const uint32_t page = s / P, tok = s - page * P;
    const uint8_t* base = c.base + static_cast<int64_t>(page) * c.page_stride;
    if constexpr (kFp4Extra) {
      // (kernel.cuh is_fp4_record tells the kinds apart by these scale offsets: 256 and 512.)
      const uint8_t* data = base + tok * (extra ? 288u : 528u);
      *scale = data + (extra ? 256 : 512);
      return data;
    } else if constexpr (F == CacheFormat::v4_fp8) {
      *scale = base + P * 576u + tok * 8u;
      return base + tok * 576u;
    } else if constexpr (F == CacheFormat::v41_fp8) {
      const uint8_t* data = base + tok * 528u;
      *scale = data + 512;
      return data;
    } else {
      const uint8_t* data = base + tok * 656u;
      *scale = data + 512;
      return data;
    }
  }
  __device__ const uint8_t* locate(const Args& a, int64_t k, const uint8_t** scale) const {
    return locate_index(a, k, raw_index(a, k), scale);
  }
};

}  // namespace latentkv::decode::cuda
