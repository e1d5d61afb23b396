// prefill/cuda/source.cuh: sparse prefill's Source for the shared attention kernel
// (decode/cuda/kernel.cuh): candidate k of query token t is the kv row indices[t][k] of t's
// sequence segment; an index outside the segment, or k beyond topk_length[t], is not attended.
#pragma once

#include <cstdint>

#include "decode/cuda/kernel.cuh"
#include "prefill/params.h"

namespace latentkv::prefill::cuda {

struct PrefillArgs {
  const uint8_t* kv;              // bf16 rows [s_kv, d_qk]
  int64_t stride_kv_bytes;        // bytes between rows
  const int32_t* indices;         // [s_q, 1, topk]
  int64_t stride_indices_s;
  const int32_t* topk_length;     // [s_q]; may be null
  int64_t topk, s_kv;
  const int64_t* seq_offsets_q;   // [num_seqs + 1]; null: one sequence
  const int64_t* seq_offsets_kv;
  int64_t num_seqs;
};

template <int kDim>
struct PrefillSource {
  using Args = PrefillArgs;
  static constexpr int kDqk = kDim;
  static constexpr bool kF16 = false;
  static constexpr decode::cuda::KeyStorage kStorage = decode::cuda::KeyStorage::kDirect16;
  static constexpr bool kPacksRows = false;  // one query token per CTA (Geometry::pack 1)
  static constexpr bool kDensePages = false;  // a gathered list (decode/sm90/launch.h narrow_ws)
  static constexpr bool kSplitDqk = false;   // kernel.cuh, score_tokens_half

  int64_t t, count, seg_begin, seg_len;

  __device__ PrefillSource(const Args& a, int64_t r1, int64_t /*r2*/, int64_t /*kv_head*/) : t(r1) {
    const int64_t n = a.topk_length ? a.topk_length[r1] : a.topk;
    count = n < 0 ? 0 : (n > a.topk ? a.topk : n);
    seg_begin = 0;
    seg_len = a.s_kv;
    if (a.seq_offsets_q) {
      // The sequence n with offsets_q[n] <= t < offsets_q[n + 1]. Device offsets are not checked
      // by the host (that would synchronise): whatever they hold, the segment is clamped into
      // [0, s_kv), so no kv row outside the tensor is ever read.
      int64_t lo = 0, hi = a.num_seqs - 1;
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (a.seq_offsets_q[mid] <= r1) lo = mid;
        else hi = mid - 1;
      }
      const int64_t b = min(max(a.seq_offsets_kv[lo], int64_t{0}), a.s_kv);
      const int64_t e = min(max(a.seq_offsets_kv[lo + 1], b), a.s_kv);
      seg_begin = b;
      seg_len = e - b;
    }
  }

  __device__ int64_t candidates() const { return count; }

  // locate() in two steps (as the sparse decode Source): raw_index() is the one memory access,
  // locate_index() the rest, so that a kernel can issue the load early and use it later.
  __device__ int32_t raw_index(const Args& a, int64_t k) const { return a.indices[t * a.stride_indices_s + k]; }
  __device__ const uint8_t* locate_index(const Args& a, int64_t /*k*/, int32_t idx, const uint8_t** /*scale*/) const {
    if (idx < 0 || idx >= seg_len) return nullptr;
    return a.kv + (seg_begin + idx) * a.stride_kv_bytes;
  }
  __device__ const uint8_t* locate(const Args& a, int64_t k, const uint8_t** scale) const {
    return locate_index(a, k, raw_index(a, k), scale);
  }
};

}  // namespace latentkv::prefill::cuda
