// decode/sm90/kernel.cuh: the Hopper (sm_90a) MLA attention kernel, the wgmma counterpart of the
// portable kernel (decode/cuda/kernel.cuh) for the same Source policies with bf16 queries: sparse
// decode (v32_fp8 / v4_fp8 records), sparse prefill (bf16 rows) and dense decode (bf16 pages or
// v32_fp8 records). Same parameters, split plan and combine; the tensor-core products are wgmma with
// both key operands read from one bf16 key tile in shared memory.
//
// Grid: (rows x kv heads x head blocks, head block fastest; num_splits); 256 threads = 2
// warpgroups; one CTA per SM (227 KB of shared memory). A CTA takes one query row, 64 heads of one
// kv head and one split of the row's candidates, in blocks of 64 tokens with two key stages:
//   iteration n (stage s = n & 1 holds block n, dequantized):
//     WG0: issue S = Q K_s^T (36 or 32 x wgmma m64n64k16, both operands in shared memory)
//     all: dequantize block n + 1 (raw records already in registers) into stage s ^ 1, then issue
//          the loads of block n + 2's records (in flight until iteration n + 1); with V3.2 records
//          WG0 converts (and reloads) only the first of its two tokens here (kSplitWide);
//          16-bit keys instead start their asynchronous copies (cp.async) of block n + 1 here
//     WG1: warps 4-5 compute block n + 3's candidate pointers (16-bit keys: resolve block n + 2)
//     WG0: wait for S; online softmax (log2 domain); P to registers (bf16) and to shared memory
//     -- barrier 1 -- warps 4-5 store block n + 3's pointers and attended mask
//     WG0: O[:, 0:256] += P V_s (wgmma m64n256k16, P from registers, after its rescale); WG1:
//     O[:, 256:512] += P V_s (P from shared memory); V is the first 512 dims of the same key tile,
//     read transposed; V3.2 records: WG0 converts its second token of block n + 1 meanwhile
//     wait for the products (16-bit keys: and for block n + 1's copies) -- barrier 2 --
// The tensor pipe idles only during the softmax and the barriers; dequantization runs on the CUDA
// cores while the products run.
// CTA pairs (kPair, opt-in: launch.h): the two head blocks of a row form a cluster; warpgroup 1 of
// each CTA dequantizes half of every block's tokens into both CTAs' stages (warpgroup 0 converts
// nothing), and barrier 2 becomes the cluster barrier.
//
// Record loads and dequantization: decode/sm90/records.cuh, decode/sm90/dequant.cuh.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_common/pdl.cuh"
#include "decode/cuda/source.cuh"
#include "decode/sm90/config.h"
#include "decode/sm90/records.cuh"
#include "decode/sm90/launch.h"  // kTracePhases
#include "decode/sm90/ptx.cuh"

namespace latentkv::decode::sm90 {

using cuda::KernelParams;
using cuda::KeyStorage;

// 2^x with subnormal results flushed to zero: a probability below 2^-126 of the row's largest
// contributes nothing a bf16 P could carry (CUDA's exp2f adds a rescaling path for them).
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}


// What a CTA works on, from its grid position (x: row group, kv head and head block, head block
// fastest; y: split): the query rows of one row group (one query (r1, r2), or with Geometry::pack
// several of one r1: cuda::PackedRows), up to 64 heads h0.. of one kv head per query, one split of
// the candidates. CTA row lr < rows_here is query pr.r2(lr, heads_here), head h0 +
// pr.head(lr, heads_here).
template <bool kPacks>  // Source::kPacksRows
struct CtaWork {
  cuda::PackedRows<kPacks> pr;
  int64_t kv_head, heads_here, h0, rows_here, r1, split;
  __device__ __forceinline__ explicit CtaWork(const cuda::Geometry& g)
      : pr(g, blockIdx.x / (g.kv_heads * g.head_blocks_per_kv)) {
    const int64_t hb = blockIdx.x % (g.kv_heads * g.head_blocks_per_kv);
    kv_head = hb / g.head_blocks_per_kv;
    const int64_t hb0 = (hb % g.head_blocks_per_kv) * kHeads;  // first head of the CTA in its group
    heads_here = min(static_cast<int64_t>(kHeads), g.heads_per_kv - hb0);
    h0 = kv_head * g.heads_per_kv + hb0;  // first query head of the CTA
    rows_here = pr.count * heads_here;
    r1 = pr.r1;
    split = blockIdx.y;
  }
  __device__ __forceinline__ int64_t r2(int lr) const { return pr.r2(lr, heads_here); }
  __device__ __forceinline__ int64_t head(int lr) const { return h0 + pr.head(lr, heads_here); }
};

// Q of the CTA's rows to shared memory (swizzled chunks) by cp.async, every 16-byte copy in flight
// at once in one commit group, which the caller waits for and fences to the async proxy before the
// first score product; rows past the CTA's are zeroed by plain stores. (A loop of plain loads and
// stores ran each load under its own branch, so the loads could take several rounds of memory
// latency: cp.async was 4-5% faster at b 2, bench/NOTES.md, v17.)
template <int kDqk, int kNumThreads, bool kPacks>
__device__ __forceinline__ void load_q(uint8_t* sQ, const cuda::Geometry& g, const CtaWork<kPacks>& w, int tid) {
  const uint16_t* first = g.q + w.r1 * g.stride_q_r1 + w.pr.r2_0 * g.stride_q_r2;
  constexpr int kUnits = kDqk / 8;  // 16-byte units of a row
  for (int c = tid; c < kHeads * kUnits; c += kNumThreads) {
    const int row = c / kUnits, dim = (c % kUnits) * 8;
    uint8_t* to = sQ + (dim / 64) * kChunkBytes + sw128_offset(row, dim % 64);
    if (row >= w.rows_here) {
      *reinterpret_cast<uint4*>(to) = make_uint4(0, 0, 0, 0);
      continue;
    }
    cuda::cp_async_16(to, first + w.pr.query(row, w.heads_here) * g.stride_q_r2 + w.head(row) * g.stride_q_h + dim);
  }
  cuda::cp_async_commit();
}

// Block n's attended tokens (bit t: token t), as resolve_store left them in sValid[n % 4].
__device__ __forceinline__ uint64_t block_attended(const uint32_t* sValid, int64_t n) {
  return static_cast<uint64_t>(sValid[(n & 3) * 2]) | (static_cast<uint64_t>(sValid[(n & 3) * 2 + 1]) << 32);
}

// PackedRows::row_limit of this thread's rows r0 and r0 + 8.
template <bool kPacks>
__device__ __forceinline__ void row_limits(const cuda::Geometry& g, const CtaWork<kPacks>& w, int r0, int64_t visible,
                                           int64_t k_begin, int64_t (&lim)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) lim[r] = w.pr.row_limit(g, r0 + 8 * r, w.heads_here, w.rows_here, visible, k_begin);
}
// The attended mask of a block starting at candidate `base` (relative to k_begin) for a row that
// sees the candidates below `lim`.
__device__ __forceinline__ uint64_t row_mask(uint64_t valid, int64_t lim, int64_t base) {
  const int64_t n = lim - base;
  return n >= 64 ? valid : n <= 0 ? 0ull : valid & ((1ull << n) - 1ull);
}

// S = Q K^T for the 64 tokens of one key stage, issued (asynchronous; the caller commits and
// waits). Descriptors advance by adding the byte offset / 16 to the start-address field.
template <int kQkSteps>
__device__ __forceinline__ void issue_scores(float (&s)[32], const uint8_t* sQ, const uint8_t* kstage) {
  const uint64_t dq = smem_desc(sQ, 16, 1024), dk = smem_desc(kstage, 16, 1024);
  wgmma_fence();
#pragma unroll
  for (int st = 0; st < kQkSteps; ++st) {
    const uint32_t off = (st / 4) * kChunkBytes + (st % 4) * 32;
    wgmma_m64n64k16_ss(s, dq + (off >> 4), dk + (off >> 4), st > 0);
  }
}

// One block's online softmax (log2 domain) on a score fragment: s[4 j + e] is row r0 + 8 (e / 2),
// token 8 j + 2 t4 + (e % 2); tokens whose bit in `valid` is clear score -inf. Leaves the
// probabilities in s, the per-row rescale of the previous blocks in alpha, and updates the running
// exponent bases (row_max: at most kRescaleSlack below the row maxima, config.h), the true maxima
// (row_top) and the (per-thread partial) sums.
__device__ __forceinline__ void online_softmax(float (&s)[32], const uint64_t (&valid)[2], float scale_log2, int t4,
                                               float (&row_max)[2], float (&row_sum)[2], float (&row_top)[2],
                                               float (&alpha)[2]) {
  // Scores stay unscaled until the exponent: the scale is positive (every op checks it) and
  // rounding is monotonic, so the largest scaled score is the scaled largest raw score, and
  // exp2(score x scale - max) is one fma (one rounding instead of two).
  float tile_max[2] = {-INFINITY, -INFINITY};
  // This thread's tokens are 2 t4 + (8 j + e % 2): one variable shift, then constant bit tests.
  // valid[r]: the attended tokens of row r0 + 8 r (the same for both unless packed causal rows).
  if ((valid[0] & valid[1]) == ~uint64_t{0}) {
    // Every token attended (a whole block of valid candidates: every block of a request but its
    // last partial one): no masks, which are an FSEL per score and the bit tests, ~45 of the
    // softmax's ~360 instructions per warp and block. Same maxima in the same order, so the same
    // bytes. Against masking every block, one alternating run: V3.2 decode 0.8-1.6%, dense fp8
    // pages 0.1-1.6% faster, V4 level (bench/NOTES.md v22).
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) tile_max[e / 2] = fmaxf(tile_max[e / 2], s[4 * j + e]);
  } else {
    const uint64_t mine[2] = {valid[0] >> (2 * t4), valid[1] >> (2 * t4)};
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float v = ((mine[e / 2] >> (8 * j + e % 2)) & 1) ? s[4 * j + e] : -INFINITY;
        s[4 * j + e] = v;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], v);
      }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    tile_max[r] *= scale_log2;  // -inf stays -inf
    // The base moves only by more than the slack (from -inf: to any attended maximum), so most
    // blocks leave alpha at exactly 1 and rescale_o skips.
    row_top[r] = fmaxf(row_top[r], tile_max[r]);
    const float new_max = tile_max[r] > row_max[r] + kRescaleSlack ? tile_max[r] : row_max[r];
    alpha[r] = new_max == -INFINITY ? 1.0f : exp2_ftz(row_max[r] - new_max);
    row_max[r] = new_max;
    row_sum[r] *= alpha[r];
  }
  // A row with nothing attended yet subtracts 0 instead of its -inf maximum: its scores are all
  // -inf, and exp2(-inf - 0) = 0 without a per-score test (-inf - -inf would be NaN). Otherwise
  // the maximum is finite and a -inf score gives exp2(-inf) = 0 as well.
  const float sub_max[2] = {row_max[0] == -INFINITY ? 0.0f : row_max[0],
                            row_max[1] == -INFINITY ? 0.0f : row_max[1]};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float pr = exp2_ftz(fmaf(s[4 * j + e], scale_log2, -sub_max[e / 2]));
      s[4 * j + e] = pr;
      row_sum[e / 2] += pr;
    }
}

// P as bf16: the value product's A fragments (k-steps of 16 tokens) in pa, and the swizzled P tile
// in shared memory for the other warpgroup; alpha beside it. kStmatrix: the tile written by four
// stmatrix .x4 per thread instead of sixteen 4-byte stores and their swizzled addresses (the
// kernel's choice per storage: attend_kernel, kStmatrixP).
template <bool kStmatrix = false>
__device__ __forceinline__ void store_p(const float (&s)[32], uint32_t (&pa)[4][4], const float (&alpha)[2],
                                        uint8_t* sP, float* sAlpha, int r0, int t4) {
#pragma unroll
  for (int st = 0; st < 4; ++st) {
    pa[st][0] = cuda::pack_bf16(s[8 * st + 0], s[8 * st + 1]);
    pa[st][1] = cuda::pack_bf16(s[8 * st + 2], s[8 * st + 3]);
    pa[st][2] = cuda::pack_bf16(s[8 * st + 4], s[8 * st + 5]);
    pa[st][3] = cuda::pack_bf16(s[8 * st + 6], s[8 * st + 7]);
    if constexpr (kStmatrix) {
      // One stmatrix per k-step: matrix 0 rows r0 - gr .. + 7 / columns 16 st .. + 7 (pa[st][0]),
      // 1 the next 8 rows (pa[st][1]), 2 and 3 the same rows 8 columns on; lane l addresses row
      // l % 8 of matrix l / 8. Same bytes as the 4-byte stores.
      const int lane = threadIdx.x % 32;
      const uint32_t row = static_cast<uint32_t>((r0 & ~15) + (lane & 15));
      stmatrix_x4(static_cast<uint32_t>(__cvta_generic_to_shared(sP)) + sw128_offset(row, 16 * st + 8 * (lane >> 4)),
                  pa[st]);
    } else {
      const int c0 = 16 * st + 2 * t4;
      *reinterpret_cast<uint32_t*>(sP + sw128_offset(r0, c0)) = pa[st][0];
      *reinterpret_cast<uint32_t*>(sP + sw128_offset(r0 + 8, c0)) = pa[st][1];
      *reinterpret_cast<uint32_t*>(sP + sw128_offset(r0, c0 + 8)) = pa[st][2];
      *reinterpret_cast<uint32_t*>(sP + sw128_offset(r0 + 8, c0 + 8)) = pa[st][3];
    }
  }
  if (t4 == 0) {
    sAlpha[r0] = alpha[0];
    sAlpha[r0 + 8] = alpha[1];
  }
}

// The rows' final exponent bases and sums (the sums reduced over the quad that shares a row) to
// shared memory for both warpgroups' epilogues, and their true maxima (for max_logits) into the
// alpha array right before them, which no product reads any more.
__device__ __forceinline__ void publish_row_stats(const float (&row_max)[2], float (&row_sum)[2],
                                                  const float (&row_top)[2], float* sRowMax, float* sRowSum, int r0,
                                                  int t4) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
  }
  if (t4 == 0) {
    sRowMax[r0] = row_max[0];
    sRowMax[r0 + 8] = row_max[1];
    sRowSum[r0] = row_sum[0];
    sRowSum[r0 + 8] = row_sum[1];
    sRowMax[r0 - kHeads] = row_top[0];  // the true maxima, in alpha's array right before the stats
    sRowMax[r0 + 8 - kHeads] = row_top[1];
  }
}

// Keeps the compiler from reusing P's registers before the value product that reads them is waited
// for.
__device__ __forceinline__ void fence_p(uint32_t (&pa)[4][4]) {
#pragma unroll
  for (int st = 0; st < 4; ++st)
#pragma unroll
    for (int k = 0; k < 4; ++k) asm volatile("" : "+r"(pa[st][k])::"memory");
}

// O's rows r0 (a0) and r0 + 8 (a1) rescaled by the block's alpha, skipped by warps whose rows all kept
// their maximum (multiplying by 1 changes nothing).
__device__ __forceinline__ void rescale_o(float (&o)[128], float a0, float a1) {
  if (__any_sync(0xffffffffu, a0 != 1.0f || a1 != 1.0f)) {
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] *= ((i / 2) % 2) ? a1 : a0;
  }
}

// O[:, 0:256] += P V for the first warpgroup: its rows rescaled first, then P from registers, V the
// first 512 dims of the key stage read transposed (issued; the caller commits and waits).
__device__ __forceinline__ void issue_values_from_registers(float (&o)[128], const float (&alpha)[2],
                                                            const uint32_t (&pa)[4][4], const uint8_t* kstage) {
  rescale_o(o, alpha[0], alpha[1]);
  const uint64_t dv = smem_desc(kstage, kChunkBytes, 1024);
  wgmma_fence();
#pragma unroll
  for (int st = 0; st < 4; ++st) wgmma_m64n256k16_rs_tb(o, pa[st], dv + (st * 2048 >> 4), true);
}

// O[:, 256:512] += P V for the second warpgroup: its rows rescaled first by the block's alpha
// (a0, a1, from shared memory), then P from shared memory, V dims 256.. of the key stage read
// transposed (issued; the caller commits and waits).
__device__ __forceinline__ void issue_values_from_smem(float (&o)[128], float a0, float a1, const uint8_t* sP,
                                                       const uint8_t* kstage) {
  rescale_o(o, a0, a1);
  const uint64_t dp = smem_desc(sP, 16, 1024), dv = smem_desc(kstage + 4 * kChunkBytes, kChunkBytes, 1024);
  wgmma_fence();
#pragma unroll
  for (int st = 0; st < 4; ++st) wgmma_m64n256k16_ss_tb(o, dp + (st * 32 >> 4), dv + (st * 2048 >> 4), true);
}

// Row hr's end (the portable kernel's rules): a sum of exactly 0 is lonely (no attended key; NaN
// is not); lse and the max logit in natural log (the split's own when split); the factor its O row
// is scaled by, 1 / sum times the sink's share, which applies only without splits.
struct RowEnd {
  bool lonely;
  float lse, max_logit, factor;
};
// m: the row's final exponent base, sum: its sum against that base, top: its true maximum (all
// log2 domain).
__device__ __forceinline__ RowEnd row_end_of(float m, float sum, float top, int64_t h, bool unsplit,
                                             const float* sink) {
  RowEnd e;
  e.lonely = sum == 0.0f;
  e.lse = e.lonely ? -INFINITY : (m + __log2f(sum)) * cuda::kLn2;
  e.max_logit = e.lonely ? -INFINITY : top * cuda::kLn2;
  e.factor = e.lonely ? 0.0f : 1.0f / sum;
  if (unsplit && !e.lonely && sink) {
    const float sk = sink[h];
    e.factor *= (sk == INFINITY) ? 0.0f : 1.0f / (1.0f + expf(sk - e.lse));
  }
  return e;
}
__device__ __forceinline__ RowEnd row_end(const float* sRowMax, const float* sRowSum, int hr, int64_t h,
                                          bool unsplit, const float* sink) {
  // The true maximum sits kHeads floats before the bases (publish_row_stats).
  return row_end_of(sRowMax[hr], sRowSum[hr], sRowMax[hr - kHeads], h, unsplit, sink);
}

// An unsplit row's lse (+inf when lonely) and max logit.
__device__ __forceinline__ void write_row_lse(const cuda::OutRef& o, int64_t r1, int64_t r2, int64_t h,
                                              const RowEnd& e) {
  o.lse[r1 * o.stride_lse_r1 + r2 * o.stride_lse_r2 + h * o.stride_lse_h] = e.lonely ? INFINITY : e.lse;
  if (o.max_logits) o.max_logits[r1 * o.stride_max_r1 + r2 * o.stride_max_r2 + h * o.stride_max_h] = e.max_logit;
}

// The end of a CTA: warpgroup `wg` normalises its rows r0 and r0 + 8 (O fragment `o`, row maxima
// and sums in shared memory) and writes its 256 dims of out (or the split partials), and warpgroup
// 0 writes lse and max_logits (row_end's rules).
// Split launches of the single-role kernel use write_partials_wide instead (below); the opt-in
// warp-specialised kernel keeps these 8-byte partial stores (it spills with the wide ones).
template <class Args, bool kPacks>
__device__ __forceinline__ void write_rows(const KernelParams<Args>& p, const float (&o)[128],
                                           const float* sRowMax, const float* sRowSum, int r0, int t4,
                                           int wg, const CtaWork<kPacks>& w) {
  const cuda::Geometry& g = p.g;
  const cuda::OutRef& out_ref = p.o;
  const int64_t r1 = w.r1, split = w.split;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int hr = r0 + 8 * r;
    if (hr >= w.rows_here) continue;
    const int64_t h = w.head(hr), r2 = w.r2(hr);
    const RowEnd e = row_end(sRowMax, sRowSum, hr, h, g.num_splits == 1, out_ref.sink);
    const float factor = e.factor;
    if (g.num_splits == 1) {
      uint16_t* out = out_ref.out + r1 * out_ref.stride_out_r1 + r2 * out_ref.stride_out_r2 +
                      h * out_ref.stride_out_h + 256 * wg;
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<uint32_t*>(out + 8 * j + 2 * t4) =
            cuda::pack_bf16(o[4 * j + 2 * r] * factor, o[4 * j + 2 * r + 1] * factor);
      if (wg == 0 && t4 == 0) write_row_lse(out_ref, r1, r2, h, e);
    } else {
      const int64_t prow = (w.pr.row(g, hr, w.heads_here) * g.h_q + h) * g.num_splits + split;
      float* out = g.partial_out + prow * kDimV + 256 * wg;
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<float2*>(out + 8 * j + 2 * t4) =
            make_float2(o[4 * j + 2 * r] * factor, o[4 * j + 2 * r + 1] * factor);
      if (wg == 0 && t4 == 0) {
        g.partial_lse[prow] = e.lse;
        if (g.partial_max) g.partial_max[prow] = e.max_logit;
      }
    }
  }
}

// write_partials_wide: a split launch's (num_splits > 1) f32 partials by 16-byte stores. For columns
// 16 jj .. 16 jj + 15 the quad holds A = columns 2 t4, 2 t4 + 1 (fragment j = 2 jj) and B = the same
// 8 further on (j = 2 jj + 1). Lanes t4 and t4 ^ 1 swap one pair (even lanes send B, odd ones A), so
// that even lanes hold columns 2 t4 .. 2 t4 + 3 (A, then the partner's A) and odd lanes 2 t4 + 6 ..
// 2 t4 + 9 (the partner's B, then B): each warp store writes 64 contiguous bytes of each of its 8
// rows instead of 32, in half the instructions of write_rows' 8-byte stores. Against those, two
// alternations in one run: V4 / V4.1 b 2 with one-block splits 4.8-6.8% faster, V3.2 b 2 level to
// 2.8% faster, b 64 / b 74 level (bench/NOTES.md v29; the epilogue of a b 2 split CTA, 128 KB of
// f32 partials, took ~3.6 µs with the 8-byte stores).
// Every lane of the warp shuffles (a constant full mask), rows that do not exist included, and only
// the stores and the lse are guarded by the row: shuffles over the live rows' mask compiled to a
// convergence check, a converged path and an out-of-line divergent copy of all 32 stores (v29 Next
// item 2); this form is 10% less machine code (the v32 object's two kernels 16,440 -> 14,704
// instructions) in the same time (geomean 0.999 over 28 cases x 2 alternations, v31).
template <class Args, bool kPacks>
__device__ __forceinline__ void write_partials_wide(const KernelParams<Args>& p, const float (&o)[128],
                                                    const float* sRowMax, const float* sRowSum, int r0,
                                                    int t4, int wg, const CtaWork<kPacks>& w) {
  const cuda::Geometry& g = p.g;
  const bool odd = t4 & 1;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int hr = r0 + 8 * r;
    const bool here = hr < w.rows_here;  // a quad shares its row
    float factor = 0.0f;
    float* out = g.partial_out;
    if (here) {
      const int64_t h = w.head(hr);
      const RowEnd e = row_end(sRowMax, sRowSum, hr, h, false, p.o.sink);
      factor = e.factor;
      const int64_t prow = (w.pr.row(g, hr, w.heads_here) * g.h_q + h) * g.num_splits + w.split;
      out = g.partial_out + prow * kDimV + 256 * wg;
      if (wg == 0 && t4 == 0) {
        g.partial_lse[prow] = e.lse;
        if (g.partial_max) g.partial_max[prow] = e.max_logit;
      }
    }
#pragma unroll
    for (int jj = 0; jj < 16; ++jj) {
      const float ax = o[8 * jj + 2 * r] * factor, ay = o[8 * jj + 2 * r + 1] * factor;
      const float bx = o[8 * jj + 4 + 2 * r] * factor, by = o[8 * jj + 4 + 2 * r + 1] * factor;
      const float rx = __shfl_xor_sync(0xffffffffu, odd ? ax : bx, 1);
      const float ry = __shfl_xor_sync(0xffffffffu, odd ? ay : by, 1);
      const float4 v = odd ? make_float4(rx, ry, bx, by) : make_float4(ax, ay, rx, ry);
      if (here) *reinterpret_cast<float4*>(out + 16 * jj + 2 * t4 + (odd ? 6 : 0)) = v;
    }
  }
}

// write_rows_staged does the same for an unsplit launch's bf16 rows through `stage`, this warp's
// 8 KB window of shared memory that nothing else reads or writes any more. The fragment holds each
// row's values in 4-byte pieces, so a direct store instruction touches 8 rows with 16 bytes each;
// through the window every store instruction writes 512 contiguous bytes of one row with 16-byte
// stores. The window's 16-byte chunks are XOR-swizzled by row (chunk j of row r at j ^ (r % 8)) so
// that the fragment's writes and the row reads are both free of bank conflicts. Same values, same
// bytes: only the store pattern changes (out's rows are 16-byte aligned: the ops check them).
// Measured against write_rows (bench/NOTES.md v18): V4 b 64 4-9% faster, V3.2 b 128 3%, prefill 3-6%,
// dense 0-1%; the same for the f32 partials of split launches was 1-3% slower on V4 b 2 h_q 128 and
// 2% on the V4 h_q 128 peak, so those keep the direct stores.
template <class Args, bool kPacks>
__device__ __forceinline__ void write_rows_staged(const KernelParams<Args>& p, const float (&o)[128],
                                                  const float* sRowMax, const float* sRowSum, int r0, int t4,
                                                  int wg, const CtaWork<kPacks>& w, uint8_t* stage) {
  const cuda::OutRef& out_ref = p.o;
  const int64_t r1 = w.r1;
  float factor[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int hr = r0 + 8 * r;
    factor[r] = 0.0f;
    if (hr >= w.rows_here) continue;
    const int64_t h = w.head(hr), r2 = w.r2(hr);
    const RowEnd e = row_end(sRowMax, sRowSum, hr, h, true, out_ref.sink);
    factor[r] = e.factor;
    if (wg == 0 && t4 == 0) write_row_lse(out_ref, r1, r2, h, e);
  }

  // ---- The warp's 16 rows (16 wq + i, i = gr + 8 r) into its window, then out row by row.
  const int lane = threadIdx.x % 32, gr = lane / 4, row0 = r0 - gr;  // row0 = 16 wq
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int j = 0; j < 32; ++j)
      *reinterpret_cast<uint32_t*>(stage + (gr + 8 * r) * 512 + (j ^ gr) * 16 + 4 * t4) =
          cuda::pack_bf16(o[4 * j + 2 * r] * factor[r], o[4 * j + 2 * r + 1] * factor[r]);
  __syncwarp();
  for (int i = 0; i < 16; ++i) {
    const int hr = row0 + i;
    if (hr >= w.rows_here) break;  // the rows past rows_here are the last ones
    const uint4 v = *reinterpret_cast<const uint4*>(stage + i * 512 + (lane ^ (i % 8)) * 16);
    uint16_t* out = out_ref.out + r1 * out_ref.stride_out_r1 + w.r2(hr) * out_ref.stride_out_r2 +
                    w.head(hr) * out_ref.stride_out_h + 256 * wg;
    *reinterpret_cast<uint4*>(out + 8 * lane) = v;
  }
}

template <class Source, bool kPair>
__global__ void __launch_bounds__(kThreads, 1) attend_kernel(const KernelParams<typename Source::Args> p) {
#if defined(LKV_SM90_WGMMA)
  // Programmatic dependent launch, as in the portable kernel (decode/cuda/kernel.cuh).
  if (cuda::waits_at_entry(p.g)) cuda_common::pdl_wait();
  if (p.g.early_dependents) cuda_common::pdl_launch_dependents();
  const cuda_common::PdlWaitAtExit pdl_wait_at_exit;
  static_assert(!Source::kF16, "the sm90 kernel multiplies bf16; f16 queries run the portable kernel");
  constexpr int kDqk = Source::kDqk;
  constexpr KeyStorage kStorage = Source::kStorage;
  constexpr bool kDirect = kStorage == KeyStorage::kDirect16;
  // Quantized keys without a pair: every thread reads block n + 2's record pointers before it
  // dequantizes block n + 1 (whose shared-memory stores would queue ahead of those reads), issues
  // the loads after it, and warpgroup 0 reads the block's attended mask before the loads (not
  // behind them). Against reading both after the dequantization, one alternating run: V3.2 b 64 and
  // b 128 4%, V4 b 64 1.1-3.5%, the peak cases 3.3-3.9% faster (bench/NOTES.md v20).
  // CTA pairs (where only warpgroup 1 converts) read them in the same order.
  constexpr bool kPointersFirst = !kDirect;
  // V3.2 records (sparse decode, dense fp8 pages) are gathered wide: every token by 8 lanes, two
  // tokens per lane (records.cuh lanes8), so that each load instruction reads 128-byte runs, not
  // the 4-lane layout's 64 bytes of 8 tokens: fewer cache-line lookups in the L1's data pipe, the
  // busiest unit in the profile (73%). Against the 4-lane layout, one alternating run: V3.2 decode
  // 1.3-4.0%, dense fp8 pages 0.8-3.6% faster. V4 records (576 bytes, scales apart) measured up to
  // 4.7% slower wide and keep 4 lanes (bench/NOTES.md v21).
  constexpr bool kWide = kPointersFirst && kStorage == KeyStorage::kV32Fp8;
  // P's shared copy by stmatrix (store_p) for V4 and V4.1 records: against the 4-byte stores, one
  // alternating run each: V4 1.3-1.7% faster (bench/NOTES.md v22), V4.1 1.2-2.2% at b >= 64 and
  // 2.8-3.4% on the peaks (v27); V3.2 decode level to 1.0% slower (the h_q 128 peak), dense fp8
  // pages -0.4 to +0.7%, so those keep the stores. V4.1's pairing with an fp4 extra cache
  // (kV41Mixed) as V4.1 (not measured apart).
  constexpr bool kStmatrixP =
      kStorage == KeyStorage::kV4Fp8 || kStorage == KeyStorage::kV41Fp8 || kStorage == KeyStorage::kV41Mixed;
  // V3.2 records: warpgroup 0 converts its first token of block n + 1 (a) while the score product
  // runs and its second (b) right after issuing the value product, instead of both before the
  // softmax: in the v23 profile warpgroup 0 waited out the value products with nothing to do (~22%
  // of its block) while its conversion was ~39% of its chain. Each token's next records are loaded
  // right after its conversion. Against converting both early, one alternating run: V3.2 decode
  // 1.4-2.7% (the peaks included), dense fp8 pages 3.6-5.6% faster (bench/NOTES.md v24). Measured
  // and dropped there: token b's records loaded early in the iteration (every record load shares
  // one scoreboard, so token a's conversion waits for b's late loads: ~13% of warpgroup 0's
  // samples) 4-11% slower (b 2 faster); warpgroup 1 split as well, 1-10% slower. With the record
  // prefetch below (v25) both again: warpgroup 1 split 2.9-9.4% slower, token b loaded early
  // 1.7-7.1% slower on V3.2 decode (b 2 level), although token a's conversion still waits ~14% of
  // warpgroup 0's loop on that scoreboard (code at a6e94d1 and c479dd2).
  constexpr bool kSplitWide = kWide && !kPair;
  static_assert(!(kPair && kDirect), "CTA pairs share dequantized records; 16-bit keys are copied, not shared");
  // Quantized records go through registers (Raw); 16-bit keys are copied straight into the stage.
  constexpr KeyStorage kRawStorage = kDirect ? KeyStorage::kV32Fp8 : kStorage;
  using L = Layout<kDqk>;
  constexpr int kQkSteps = kDqk / 16;

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t base_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint8_t* smem = smem_raw + ((1024u - (base_addr & 1023u)) & 1023u);
  // A CTA pair: this CTA's rank in the cluster and where its shared memory sits in the peer's.
  const uint32_t rank = kPair ? cluster_ctarank() : 0u;
  const uint32_t peer_delta = kPair ? map_shared_rank(base_addr, rank ^ 1u) - base_addr : 0u;
  uint8_t* sQ = smem + L::q_off;
  uint8_t* sK = smem + L::k_off;
  uint8_t* sP = smem + L::p_off;
  // Key pointers: quantized storage keeps one block's record and scale pointers ([64] records, then
  // [64] scales); 16-bit keys keep two blocks' record pointers ([2][64]), since block n + 1's copies
  // start while block n + 2 is being resolved.
  const uint8_t** sData = reinterpret_cast<const uint8_t**>(smem + L::ptr_off);
  uint32_t* sValid = reinterpret_cast<uint32_t*>(smem + L::valid_off);  // [4 blocks][2 words]
  float* sAlpha = reinterpret_cast<float*>(smem + L::alpha_off);
  float* sRowMax = reinterpret_cast<float*>(smem + L::stat_off);
  float* sRowSum = sRowMax + kHeads;

  const cuda::Geometry& g = p.g;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  // The warpgroup index, visibly uniform across each warp to the compiler.
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), wq = warp % 4;  // warpgroup, warp within it (rows 16 wq..)
  const int gr = lane / 4, t4 = lane % 4;
  const int tok_l = 8 * warp + lane % 8, part = lane / 8;  // this lane's token and chunk column
  const CtaWork<Source::kPacksRows> w(g);
  const int64_t kv_head = w.kv_head, r1 = w.r1, split = w.split;
  // Phase stamps (launch.h, set_trace; built only with LKV_SM90_TRACE): thread 0's view.
#if defined(LKV_SM90_TRACE)
  auto stamp = [&](int phase) {
    if (p.trace != nullptr && tid == 0) {
      unsigned long long t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      p.trace[(static_cast<uint64_t>(blockIdx.y) * gridDim.x + blockIdx.x) * kTracePhases + phase] = t;
    }
  };
#else
  auto stamp = [](int) {};
#endif
  stamp(0);

  // ---- Q to shared memory, zero rows past the CTA's. Quantized keys issue Q's copies after the
  // prologue's index loads (below), so that those do not queue behind the CTA's 64-72 KB of Q: with
  // the two blocks' records loaded together, 0.4-3.5% faster on V4 b 2 / b 64 and ~1% on V3.2 b 128;
  // the same order on 16-bit keys (prefill, dense bf16) was 0.5-1.8% slower on prefill's h_q 64 cases
  // without lengths (bench/NOTES.md v19).
  if constexpr (kDirect) load_q<kDqk, kThreads>(sQ, g, w, tid);

  const Source src(p.src, r1, w.pr.r2_last(), kv_head);
  const int64_t k_begin = split * g.keys_per_split;
  const int64_t k_end = min(src.candidates(), k_begin + g.keys_per_split);
  const int64_t nb = k_end > k_begin ? (k_end - k_begin + kBlockTokens - 1) / kBlockTokens : 0;
  const float scale_log2 = g.scale * cuda::kLog2e;

  // Warps 4 and 5 resolve a block's 64 candidates: pointers to sData (/ sScale), attended mask to
  // sValid[block % 4]. Quantized storage: every thread then loads its part of one token's record
  // into registers (lane l of warp w: token 8 w + l % 8, chunks l / 8 + 4 i; kWide: two tokens of 8
  // lanes each, records.cuh lanes8) and later dequantizes it. 16-bit keys: the same threads copy the
  // same parts straight into the stage (cp.async).
  // Quantized storage resolves three blocks ahead in two steps: the pointers are computed into
  // registers before barrier 1 (their index loads in flight meanwhile) and stored after it, when
  // every thread has issued its loads from the previous pointers; so each block's records are
  // loaded right after the block before it is dequantized, a whole iteration before they are used.
  const uint8_t* res_data = nullptr;  // warps 4-5: the resolved token's record and scale
  const uint8_t* res_scale = nullptr;
  auto resolve_compute = [&](int64_t blk) {
    if (warp != 4 && warp != 5) return;
    const int64_t k = k_begin + blk * kBlockTokens + (tid - 128);
    res_scale = nullptr;
    res_data = k < k_end ? src.locate(p.src, k, &res_scale) : nullptr;
    // Quantized keys: the token's record into L2 now, an iteration before its loads are issued. The
    // gathers took >1,500 clocks under load and every conversion waits for them on one scoreboard
    // (the v24 profile); a prefetch writes no register, so nothing waits for it here. One
    // alternating A/B: V3.2 decode b 64-128 3.7-4.4% faster (b 128 392 -> 374 us), tensor-parallel
    // ~5%, peaks 4.1-7.4%, V4 b 64 h_q 64 2.4-3.8%, dense fp8 pages 1.7-3.4%; b 2 level
    // (bench/NOTES.md v25). The prologue's blocks 0-2 (resolve_first) are not prefetched; a CTA
    // pair's two CTAs both prefetch a block's records (pairs are opt-in).
    if constexpr (!kDirect) {
      if (res_data != nullptr) prefetch_record<kRawStorage>(res_data, res_scale);
    }
  };
  // (The prologue puts block 1's pointers at `to`, the start of key stage 1, which nothing else
  // uses before the first iteration dequantizes block 1 into it.)
  auto resolve_store = [&](int64_t blk, const uint8_t** to = nullptr) {
    if (warp != 4 && warp != 5) return;
    const int t = tid - 128;
    if constexpr (kDirect) {
      sData[(blk & 1) * kBlockTokens + t] = res_data;
    } else {
      const uint8_t** d = to ? to : sData;
      d[t] = res_data;
      d[kBlockTokens + t] = res_scale;
    }
    const uint32_t bits = __ballot_sync(0xffffffffu, res_data != nullptr);
    if (lane == 0) sValid[(blk & 3) * 2 + (warp - 4)] = bits;
  };
  auto resolve = [&](int64_t blk) {
    resolve_compute(blk);
    resolve_store(blk);
  };
  // The index loads of the blocks the prologue resolves (0-2 for quantized keys, 0-1 for 16-bit
  // keys) are issued together before the first is used, so the prologue waits out one index latency
  // instead of two (resolve(n) would store right after its load, so the next one's load would wait).
  // Measured 0.5-1.5% faster on V4 b 64 and V3.2 b 128 (bench/NOTES.md v18).
  constexpr int kEarly = kDirect ? 2 : 3;
  int32_t early[kEarly];
  if (warp == 4 || warp == 5) {
#pragma unroll
    for (int b = 0; b < kEarly; ++b) {
      const int64_t k = k_begin + b * kBlockTokens + (tid - 128);
      early[b] = k < k_end ? src.raw_index(p.src, k) : -1;
    }
  }
  auto resolve_first = [&](int b, const uint8_t** to = nullptr) {  // the prologue's blocks, b < kEarly
    if (warp == 4 || warp == 5) {
      const int64_t k = k_begin + b * kBlockTokens + (tid - 128);
      res_scale = nullptr;
      res_data = k < k_end ? src.locate_index(p.src, k, early[b], &res_scale) : nullptr;
    }
    resolve_store(b, to);
  };
  if constexpr (!kDirect) load_q<kDqk, kThreads>(sQ, g, w, tid);
  Raw<kRawStorage> raw;
  // The token this lane dequantizes. A pair: warpgroup 1 alone loads and dequantizes the CTA's 32
  // tokens (32 rank ..) and mirrors them into the peer's stage; warpgroup 0 converts nothing, so its
  // path per block is the score product, the softmax and its value product.
  const int tok_d = kPair ? tok_l - 32 + 32 * static_cast<int>(rank) : tok_l;
  const bool converts = !kPair || wg == 1;  // whether this thread loads and dequantizes records
  auto load_into = [&](Raw<kRawStorage>& r, const uint8_t* const* ptrs) {
    if constexpr (!kDirect) {
      if (kPair && wg == 0) return;
      load_raw<kRawStorage>(r, ptrs[tok_d], ptrs[kBlockTokens + tok_d], part);
    }
  };
  // kWide: this lane's two tokens, 8 lanes each (tokens 0-31 and 32-63 over the CTA's 8 warps; a
  // pair: 32 rank .. 32 rank + 15 and 32 rank + 16 .. 32 rank + 31 over warpgroup 1's 4 warps), and
  // their records of block n + 1 (the prologue: block 1).
  using Raw8 = Raw<kRawStorage, 8>;
  const int wide_warp = kPair ? warp - 4 : warp;
  const int wide_first = kPair ? 32 * static_cast<int>(rank) : 0;
  const TokenLane wide_a = lanes8(wide_first, wide_warp, lane);
  const TokenLane wide_b = lanes8(wide_first + (kPair ? 16 : 32), wide_warp, lane);
  Raw8 raw_a, raw_b;
  // The two tokens' record and scale pointers from a block's pointer array (null if !here).
  auto wide_pointers = [&](const uint8_t* const* from, bool here, const uint8_t* (&ptr)[4]) {
    ptr[0] = here ? from[wide_a.tok] : nullptr;
    ptr[1] = here ? from[kBlockTokens + wide_a.tok] : nullptr;
    ptr[2] = here ? from[wide_b.tok] : nullptr;
    ptr[3] = here ? from[kBlockTokens + wide_b.tok] : nullptr;
  };
  auto wide_load = [&](Raw8& a, Raw8& b, const uint8_t* const (&ptr)[4]) {
    load_raw(a, ptr[0], ptr[1], wide_a.part);
    load_raw(b, ptr[2], ptr[3], wide_b.part);
  };
  // One token's dequantized record into `stage` (no fence: the caller's).
  auto wide_store_token = [&](const Raw8& r, const TokenLane& t, uint8_t* stage) {
    store_dequantized<kRawStorage, kPair, true, false, 8>(r, stage, t.tok, t.part, peer_delta);
  };
  auto wide_store = [&](const Raw8& a, const Raw8& b, uint8_t* stage) {
    wide_store_token(a, wide_a, stage);
    wide_store_token(b, wide_b, stage);
    if constexpr (kPair) fence_proxy_async_cluster();
    else fence_proxy_async();
  };
  // Dequantized block to `stage` (and to the peer's), then visible to wgmma.
  auto store_from = [&](const Raw<kRawStorage>& r, uint8_t* stage) {
    if (!(kPair && wg == 0)) store_dequantized<kRawStorage, kPair>(r, stage, tok_d, part, peer_delta);
    if constexpr (kPair) fence_proxy_async_cluster();
    else fence_proxy_async();
  };
  // The CTA's barrier where a stage changes hands; a pair's stages are written by both CTAs, so
  // there it is the cluster barrier (which the first remote write must also wait for: the peer
  // has to be running).
  auto stage_barrier = [&]() {
    if constexpr (kPair) cluster_sync();
    else __syncthreads();
  };
  // 16-bit keys of block `blk` into `stage`; tokens not attended get zero keys (plain stores), so
  // that P = 0 never meets garbage (0 x NaN is NaN) in P V.
  auto copy_block = [&](int64_t blk, uint8_t* stage) {
    if constexpr (kDirect) {
      const uint8_t* data = sData[(blk & 1) * kBlockTokens + tok_l];
      constexpr int kChunks = kDqk * 2 / 16;  // 16-byte chunks of a key row
#pragma unroll
      for (int i = 0; i < kChunks / 4; ++i) {
        const int c = part + 4 * i;  // dims 8 c..8 c + 7
        uint8_t* dst = stage + (c / 8) * kChunkBytes + sw128_offset(tok_l, (c % 8) * 8);
        if (data) cuda::cp_async_16(dst, data + 16 * c);
        else *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
      }
      cuda::cp_async_commit();
    }
  };
  // Block n + 1 into its stage at the start of iteration n.
  auto fill_next = [&](int64_t n) {
    uint8_t* stage = sK + ((n + 1) & 1) * L::k_stage;
    if constexpr (kDirect) {
      copy_block(n + 1, stage);
    } else if constexpr (kWide) {
      wide_store(raw_a, raw_b, stage);
    } else {
      store_from(raw, stage);
    }
  };
  // kPointersFirst: this lane's record and scale pointers of block blk (null past the last block),
  // read from sData while they are block blk's (before barrier 1 of iteration blk - 2).
  auto record_pointers = [&](int64_t blk, const uint8_t*& data, const uint8_t*& scale) {
    const bool here = blk < nb;
    data = here ? sData[tok_d] : nullptr;
    scale = here ? sData[kBlockTokens + tok_d] : nullptr;
  };
  // 16-bit keys: this thread's copies of block n + 1 have landed and are visible to wgmma.
  auto finish_copies = [&]() {
    if constexpr (kDirect) {
      cuda::cp_async_wait<0>();
      fence_proxy_async();
    }
  };

  // ---- Prologue: block 0 in stage 0, block 1's records in flight or its pointers resolved
  // (barriers between pointer writes and reads).
  if constexpr (kDirect) {
    resolve_first(0);
    resolve_first(1);
    __syncthreads();
    stamp(1);
    copy_block(0, sK);
    finish_copies();
    __syncthreads();
    stamp(2);
  } else {
    // Blocks 0 and 1 resolved (block 1's pointers into stage 1), both blocks' records loaded at
    // once, block 2 resolved while they are in flight, block 0 dequantized into stage 0; `raw`
    // keeps block 1's records for the first iteration. With Q's copies behind the index loads,
    // against resolving and loading block 1 only after block 0 was dequantized (and Q's copies
    // first): V4 b 2 0.4-3.5%, V4 b 64 1.1-2.1% and V3.2 b 128 ~1% faster (bench/NOTES.md v19).
    const uint8_t** ptrs1 = reinterpret_cast<const uint8_t**>(sK + L::k_stage);
    resolve_first(0);
    resolve_first(1, ptrs1);
    stage_barrier();
    stamp(1);
    if constexpr (kWide) {
      Raw8 a0, b0;
      if (converts) {
        const uint8_t *ptr0[4], *ptr1[4];
        wide_pointers(sData, true, ptr0);
        wide_pointers(ptrs1, true, ptr1);
        wide_load(a0, b0, ptr0);
        if (nb > 1) wide_load(raw_a, raw_b, ptr1);
      }
      __syncthreads();  // every thread has read both blocks' pointers
      resolve_first(2);
      if (converts) wide_store(a0, b0, sK);
    } else {
      Raw<kRawStorage> raw0;
      load_into(raw0, sData);
      if (nb > 1) load_into(raw, ptrs1);
      __syncthreads();  // every thread has read both blocks' pointers
      resolve_first(2);
      store_from(raw0, sK);
    }
    stamp(2);
    stamp(3);
    cuda::cp_async_wait<0>();  // Q's copies
    fence_proxy_async();
    stage_barrier();
  }
  stamp(4);

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};
  float row_top[2] = {-INFINITY, -INFINITY};
  const int r0 = 16 * wq + gr;  // this thread's rows r0 and r0 + 8
  int64_t row_lim[2];            // the candidates those rows see (packed causal rows)
  row_limits(g, w, r0, src.candidates(), k_begin, row_lim);

  // Each warpgroup's loop is one branch (wgmma in code the compiler sees as divergent would be
  // serialized); the two meet at named barriers 1 (P ready) and 2 (block done).
  // (Issuing block n + 1's score product right behind block n's value product, for quantized keys
  // whose next stage is whole at barrier 1, measured 11% slower on V3.2 b 128: bench/NOTES.md.)
  if (wg == 0) {
    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.0f;
    for (int64_t n = 0; n < nb; ++n) {
      uint8_t* kcur = sK + (n & 1) * L::k_stage;
      // ---- S = Q K^T, asynchronous; meanwhile both warpgroups dequantize block n + 1.
      issue_scores<kQkSteps>(s, sQ, kcur);
      wgmma_commit();
      // kPointersFirst: block n + 2's pointers before the dequantization, the attended mask before
      // the loads.
      uint64_t valid_first = 0;
      if constexpr (kPair) {  // warpgroup 1 converts
        valid_first = block_attended(sValid, n);
      } else if constexpr (kSplitWide) {
        // Token a of block n + 1 now (its block n + 2 pointers read first, as below); token b after
        // the value product is issued.
        const bool here2 = n + 2 < nb;
        const uint8_t* next_a = here2 ? sData[wide_a.tok] : nullptr;
        const uint8_t* next_a_scale = here2 ? sData[kBlockTokens + wide_a.tok] : nullptr;
        if (n + 1 < nb) wide_store_token(raw_a, wide_a, sK + ((n + 1) & 1) * L::k_stage);
        valid_first = block_attended(sValid, n);
        asm volatile("" : "+l"(valid_first));
        if (here2) load_raw(raw_a, next_a, next_a_scale, wide_a.part);
      } else if constexpr (kWide) {
        const uint8_t* ptr2[4];
        wide_pointers(sData, n + 2 < nb, ptr2);
        if (n + 1 < nb) fill_next(n);
        valid_first = block_attended(sValid, n);
        asm volatile("" : "+l"(valid_first));
        if (n + 2 < nb) wide_load(raw_a, raw_b, ptr2);
      } else if constexpr (kPointersFirst) {
        const uint8_t *data2, *scale2;
        record_pointers(n + 2, data2, scale2);
        if (n + 1 < nb) fill_next(n);
        valid_first = block_attended(sValid, n);
        asm volatile("" : "+l"(valid_first));  // keeps the read here, ahead of the loads
        if (n + 2 < nb) load_raw<kRawStorage>(raw, data2, scale2, part);
      } else if constexpr (kDirect) {
        if (n + 1 < nb) fill_next(n);
      }
      wgmma_wait<0>();
      fence_operands(s);
      // ---- Online softmax; P to registers and shared memory.
      const uint64_t valid = kPointersFirst ? valid_first : block_attended(sValid, n);
      // Packed causal rows mask their own later candidates (row_lim: all of them otherwise).
      const int64_t base = n * kBlockTokens;
      const uint64_t valid_rows[2] = {Source::kPacksRows ? row_mask(valid, row_lim[0], base) : valid,
                                      Source::kPacksRows ? row_mask(valid, row_lim[1], base) : valid};
      float alpha[2];
      online_softmax(s, valid_rows, scale_log2, t4, row_max, row_sum, row_top, alpha);
      uint32_t pa[4][4];  // P as the value product's A fragments (k-steps of 16 tokens)
      store_p<kStmatrixP>(s, pa, alpha, sP, sAlpha, r0, t4);
      // kSplitWide: token b's block n + 2 pointers, read before barrier 1 (after it warpgroup 1
      // replaces them with block n + 3's).
      [[maybe_unused]] const uint8_t* next_b = nullptr;
      [[maybe_unused]] const uint8_t* next_b_scale = nullptr;
      if constexpr (kSplitWide) {
        if (n + 2 < nb) {
          next_b = sData[wide_b.tok];
          next_b_scale = sData[kBlockTokens + wide_b.tok];
        }
      }
      fence_proxy_async();
      named_barrier_sync<1>();  // P and alpha are visible: warpgroup 1 starts its product
      // ---- O[:, 0:256] += P V_s with P from registers, after the rescale.
      issue_values_from_registers(o, alpha, pa, kcur);
      wgmma_commit();
      if constexpr (kSplitWide) {
        // Token b of block n + 1 while the value products run (stage (n + 1) & 1: no product reads
        // it in this iteration; barrier 2 hands it to the next score product), then its loads.
        if (n + 1 < nb) {
          wide_store_token(raw_b, wide_b, sK + ((n + 1) & 1) * L::k_stage);
          fence_proxy_async();
        }
        if (n + 2 < nb) load_raw(raw_b, next_b, next_b_scale, wide_b.part);
      }
      wgmma_wait<0>();
      fence_operands(o);
      finish_copies();
      fence_p(pa);
      // Stage n & 1 and P are free; block n + 1's stage is complete (a pair: the peer's half too).
      if constexpr (kPair) cluster_sync();
      else named_barrier_sync<2>();
      if (n < 2) stamp(5 + static_cast<int>(n));
    }
    stamp(7);
    // Row statistics for both warpgroups' epilogues.
    publish_row_stats(row_max, row_sum, row_top, sRowMax, sRowSum, r0, t4);
  } else {
    for (int64_t n = 0; n < nb; ++n) {
      uint8_t* kcur = sK + (n & 1) * L::k_stage;
      if constexpr (kWide) {
        const uint8_t* ptr2[4];
        wide_pointers(sData, n + 2 < nb, ptr2);
        if (n + 1 < nb) fill_next(n);
        if (n + 2 < nb) wide_load(raw_a, raw_b, ptr2);
        resolve_compute(n + 3);
      } else if constexpr (kPointersFirst) {
        const uint8_t *data2, *scale2;
        record_pointers(n + 2, data2, scale2);
        if (n + 1 < nb) fill_next(n);
        if (n + 2 < nb) load_raw<kRawStorage>(raw, data2, scale2, part);
        resolve_compute(n + 3);
      } else {  // 16-bit keys
        if (n + 1 < nb) fill_next(n);
        resolve(n + 2);
      }
      named_barrier_sync<1>();  // P and alpha are visible (16-bit keys: block n + 2's pointers too)
      // Every thread has read block n + 2's pointers: block n + 3's replace them.
      if constexpr (!kDirect) resolve_store(n + 3);
      // ---- O[:, 256:512] += P V_s with P from shared memory.
      issue_values_from_smem(o, sAlpha[r0], sAlpha[r0 + 8], sP, kcur);
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands(o);
      finish_copies();
      if constexpr (kPair) cluster_sync();
      else named_barrier_sync<2>();
    }
  }

  // ---- The end: each warpgroup writes its 256 dims; unsplit, each warp through its own 8 KB of the
  // key stages, which every product has finished reading at the barrier.
  __syncthreads();
  static_assert(2 * L::k_stage >= kThreads / 32 * 8192, "the epilogue's windows must fit the key stages");
  if (p.g.num_splits == 1) write_rows_staged(p, o, sRowMax, sRowSum, r0, t4, wg, w, sK + warp * 8192);
  else write_partials_wide(p, o, sRowMax, sRowSum, r0, t4, wg, w);
  stamp(8);
#else
  (void)p;
  __trap();
#endif
}

}  // namespace latentkv::decode::sm90
