// decode/sm90/narrow.cuh: the Hopper (sm_90a) attention kernel for CTAs of at most 16 query rows
// (and, in its warp-specialised form with N = 32, of 17-32 by default: kRows below) over quantized
// keys (v32_fp8 / v4_fp8 / v41_fp8 records, v32_fp8 dense pages), with the tokens as
// wgmma's M dimension. Same Source policies, parameters, split plan and combine as kernel.cuh, which
// runs every other case. Design: docs/design/hopper-narrow-rows.md.
//
// Why: kernel.cuh puts a CTA's rows in M, which is 64 in every wgmma shape, so a CTA of 16 rows
// (h_q 16: a tensor-parallel shard of V3.2's 128 heads, or dense decode at s_q 1) pays for 64, and
// its 227 KB layout holds one CTA per SM. Here the key stage is M:
//   S^T [64 tokens][16 rows] = K Q^T    36 or 32 x wgmma m64n16k16, warpgroup 0
//   softmax down the tokens              a row's 64 scores: 8 lanes of each of warpgroup 0's 4 warps
//   O^T [512 dims][16 rows] += V^T P^T   each warpgroup 4 M tiles of 64 dims x 4 k16 steps, A the
//                                        key stage read MN-major, B = P [16][64] in shared memory
// so Q is 18 KB, O^T is 32 fp32 per thread and the layout (config.h NarrowLayout, ~95 KB) lets two
// CTAs share an SM. A CTA has one key stage: its own dequantization does not overlap its products,
// the other CTA's do. (The opt-in warp-specialised form, kWs below, gives the refill two warpgroups
// of its own and a second stage in one CTA per SM: 0.95-0.98x on dense pages on an H100, level on
// the tensor-parallel case, bench/NOTES.md v60. ncu puts the L1/TEX path busiest in both, yet
// taking the score product's operand reads off it saved at most 5-9% in a probe, v61.)
// The 32-row instance (kRows = 32, warp-specialised only, config.h kNarrowWideRows) is the same
// with N = 32: m64n32k16 products, Q 36 KB, O^T 64 fp32 a consumer thread.
//
// Grid and work as kernel.cuh (CtaWork: one row group, one split; head_blocks_per_kv is 1 here).
// 256 threads; iteration n (the stage holds block n, dequantized; registers hold block n + 1's raw
// records; pointer slot n & 1 holds block n + 2's pointers):
//   warps 4-5: issue block n + 4's index copies
//   WG0:       S^T and its masked block maxima per row (to shared memory)
//   -- barrier 1 --      WG0: the online softmax, P and the rows' rescale to shared memory
//   -- __syncthreads --  both: O^T rescaled, += V^T P^T; meanwhile warps 4-5 resolve block n + 3
//                        into pointer slot (n + 1) & 1
//   -- __syncthreads --  all: block n + 1 dequantized into the stage, block n + 2's records loaded
//   -- __syncthreads --
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda_common/async_copy.cuh"
#include "cuda_common/pdl.cuh"
#include "decode/cuda/source.cuh"
#include "decode/sm90/config.h"
#include "decode/sm90/kernel.cuh"  // CtaWork, block_attended, exp2_ftz, row_end_of
#include "decode/sm90/ptx.cuh"
#include "decode/sm90/records.cuh"

namespace latentkv::decode::sm90 {

// Q's rows of the CTA ([chunks][kRows][64 dims], 128-byte swizzle, K-major: wgmma's B operand)
// by cp.async in one commit group; rows past the CTA's zeroed (their scores are 0, never written).
template <int kDqk, int kRows, int kCtaThreads, bool kPacks>
__device__ __forceinline__ void load_q_narrow(uint8_t* sQ, const cuda::Geometry& g, const CtaWork<kPacks>& w,
                                              int tid) {
  const uint16_t* first = g.q + w.r1 * g.stride_q_r1 + w.pr.r2_0 * g.stride_q_r2;
  constexpr int kUnits = kDqk / 8;  // 16-byte units of a row
  for (int c = tid; c < kRows * kUnits; c += kCtaThreads) {
    const int row = c / kUnits, dim = (c % kUnits) * 8;
    uint8_t* to = sQ + (dim / 64) * (kRows * 128) + sw128_offset(row, dim % 64);
    if (row >= w.rows_here) {
      *reinterpret_cast<uint4*>(to) = make_uint4(0, 0, 0, 0);
      continue;
    }
    cuda::cp_async_16(to, first + w.pr.query(row, w.heads_here) * g.stride_q_r2 + w.head(row) * g.stride_q_h + dim);
  }
  cuda::cp_async_commit();
}

// This thread's query row j (0 .. kRows / 4 - 1) of an m64n16 or m64n32 fragment: column
// q2 + j % 2 + 8 (j / 2), held by elements j % 2 + 4 (j / 2) (token 16 wq + lane / 4) and that + 2
// (the token 8 further on).
__device__ __forceinline__ int narrow_row(int q2, int j) { return q2 + (j % 2) + 8 * (j / 2); }
__device__ __forceinline__ int narrow_elem(int j) { return (j % 2) + 4 * (j / 2); }

// kWs: the warp-specialised form (config.h kNarrowWsThreads): warpgroups 0-1 run the loop's products
// and softmax as below, warpgroups 2-3 (the loaders; warps 8-9 resolve) gather and dequantize into
// the other of two key stages; full[s] (256 arrivals: every loader thread, after its stores) and
// empty[s] (256: every consumer thread, after its own reads of the stage, P and the block's mask
// word) hand the stages over.
// kRows: the CTA's query rows, N of both products: kNarrowRows (16), or kNarrowWideRows (32) in the
// warp-specialised form only (config.h), whose consumers then take registers from the loaders.
template <class Source, bool kWs, int kRows = kNarrowRows>
__global__ void __launch_bounds__(kWs ? kNarrowWsThreads : kThreads, kWs ? 1 : kNarrowCtasPerSm)
    narrow_kernel(const KernelParams<typename Source::Args> p) {
#if defined(LKV_SM90_WGMMA)
  // Programmatic dependent launch, as in kernel.cuh.
  if (cuda::waits_at_entry(p.g)) cuda_common::pdl_wait();
  if (p.g.early_dependents) cuda_common::pdl_launch_dependents();
  const cuda_common::PdlWaitAtExit pdl_wait_at_exit;
  static_assert(!Source::kF16, "the sm90 kernels multiply bf16; f16 queries run the portable kernel");
  constexpr int kDqk = Source::kDqk;
  constexpr KeyStorage kStorage = Source::kStorage;
  static_assert(kStorage != KeyStorage::kDirect16, "the narrow kernel dequantizes records; 16-bit keys run kernel.cuh");
  constexpr bool kPacks = Source::kPacksRows;
  static_assert(kRows == kNarrowRows || (kRows == kNarrowWideRows && kWs), "16 rows, or 32 in the warp-specialised form");
  constexpr int kJ = kRows / 4;  // query rows per thread of a fragment (narrow_row)
  // V3.2 records gathered by 8 lanes per token (128-byte runs per load instruction, records.cuh
  // lanes8): in the probe of this loop 1.40x faster than 4 lanes each reading its own 64 bytes
  // (bench/NOTES.md v40 item 5), as in kernel.cuh (v21). V4 records keep 4 lanes per token, as
  // kernel.cuh does.
  constexpr bool kWide = kStorage == KeyStorage::kV32Fp8;
  using L = NarrowLayout<kDqk, kWs ? 2 : 1, kRows>;
  constexpr int kQkSteps = kDqk / 16;
  constexpr int kCtaThreads = kWs ? kNarrowWsThreads : kThreads;
  // The first thread of the loaders (gathers and dequantization) and of the resolver warps.
  constexpr int kLoader0 = kWs ? 256 : 0, kResolver0 = kWs ? 256 : 128;

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t base_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint8_t* smem = smem_raw + ((1024u - (base_addr & 1023u)) & 1023u);
  uint8_t* sQ = smem + L::q_off;
  uint8_t* sK = smem + L::k_off;
  uint8_t* sP = smem + L::p_off;
  // [2 slots by block parity][64 records, 64 scales]
  const uint8_t** sData = reinterpret_cast<const uint8_t**>(smem + L::ptr_off);
  uint32_t* sValid = reinterpret_cast<uint32_t*>(smem + L::valid_off);          // [4 blocks][2 words]
  float* sRed = reinterpret_cast<float*>(smem + L::red_off);                     // [4 warps][kRows]
  float* sAlpha = reinterpret_cast<float*>(smem + L::alpha_off);                 // [kRows]
  float* sBase = reinterpret_cast<float*>(smem + L::stat_off);                   // [kRows] final exponent bases
  float* sTop = sBase + kRows;                                                   // [kRows] true maxima

  const cuda::Geometry& g = p.g;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), wq = warp % 4;
  const bool loader = tid >= kLoader0;
  const int lwarp = warp - kLoader0 / 32;  // this warp among the loaders
  const int q2 = 2 * (lane % 4);  // this thread's rows: narrow_row(q2, 0 .. kJ - 1)
  // The launch (launch.cuh) takes this kernel only where cuda::cta_rows(g) <= kRows, so heads_per_kv
  // <= kRows: one head block per kv head and rows_here <= kRows, which every [kRows]-sized array
  // below and the epilogue's rows rely on.
  const CtaWork<kPacks> w(g);
  const Source src(p.src, w.r1, w.pr.r2_last(), w.kv_head);
  const int64_t k_begin = w.split * g.keys_per_split;
  const int64_t k_end = min(src.candidates(), k_begin + g.keys_per_split);
  // Blocks of this split (32-bit: candidates come from int32 lengths and top-k counts).
  const int nb = k_end > k_begin ? static_cast<int>((k_end - k_begin + kBlockTokens - 1) / kBlockTokens) : 0;
  const float scale_log2 = g.scale * cuda::kLog2e;

  // ---- Candidates: warps 4-5 resolve a block's 64 (token tid - 128 each) into its pointer slot
  // (blk & 1) and attended mask (sValid[blk & 3]). No L2 prefetch of the records, unlike kernel.cuh
  // (whose gathers wait >1,500 clocks under load without one): here a block's records are loaded
  // into registers an iteration before they are dequantized, which hides their latency, and
  // prefetch.global.L2 fills whole 128-byte lines, so the 6-7 lines of a 656-byte record drew 18%
  // more DRAM bytes than the loads' own sectors (without it the tensor-parallel h_q 16 case took
  // 0.94x the time on an H100, bench/NOTES.md v59). Block n + 3 is resolved
  // in iteration n (its index copied in iteration n - 1, the rest under the value product), into
  // the slot block n + 1's loads read before the last barrier of iteration n - 1. (Two slots rather
  // than kernel.cuh's one slot and a block's pointers kept in registers for an iteration: at 128
  // registers per thread those would spill.)
  const bool resolver = warp == kResolver0 / 32 || warp == kResolver0 / 32 + 1;
  const int rt = tid - kResolver0;
  auto resolve_store = [&](int64_t blk, const uint8_t* data, const uint8_t* scale) {
    const uint8_t** slot = sData + (blk & 1) * 2 * kBlockTokens;
    slot[rt] = data;
    slot[kBlockTokens + rt] = scale;
    const uint32_t bits = __ballot_sync(0xffffffffu, data != nullptr);
    if (lane == 0) sValid[(blk & 3) * 2 + (warp - kResolver0 / 32)] = bits;
  };
  // The prologue's blocks 0-2: their index loads issued together (kernel.cuh, kEarly).
  int32_t early[3];
  if (resolver) {
#pragma unroll
    for (int b = 0; b < 3; ++b) {
      const int64_t k = k_begin + b * kBlockTokens + rt;
      early[b] = k < k_end ? src.raw_index(p.src, k) : -1;
    }
  }
  // Thread rt's candidate of block blk from its raw index: located, into the block's slot and mask.
  auto resolve_index = [&](int64_t blk, int32_t index) {
    const int64_t k = k_begin + blk * kBlockTokens + rt;
    const uint8_t* scale = nullptr;
    const uint8_t* data = k < k_end ? src.locate_index(p.src, k, index, &scale) : nullptr;
    resolve_store(blk, data, scale);
  };
  auto resolve_early = [&](int b) {
    if (resolver) resolve_index(b, early[b]);
  };
  // In the loop a block is resolved in two steps: its index copied into sIdx an iteration ahead
  // (resolve_issue: block n + 4's at the start of iteration n, nothing waits for it there), the rest
  // under warpgroup 1's value product of iteration n + 1 (resolve_finish). Resolved whole at the
  // start, warps 4-5 waited out the index load before barrier 1, and warpgroup 0's softmax with them
  // (bench/NOTES.md v41); with the copy issued in the same iteration, warps 4-5 still waited for it
  // under the value product and reached the stage barrier last (v58).
  // The copy is a cp.async, not a load into a register: ptxas tracks every register load of the
  // loop on one scoreboard, the record gathers' included, and the loop's next write of the index
  // register (at the top of the next iteration) waited on that scoreboard, so every warp waited
  // there for the block n + 2 records issued just before (20% of the stall samples on an H100,
  // bench/NOTES.md v58). A cp.async completes on its own group count: one group per block.
  int32_t* sIdx = reinterpret_cast<int32_t*>(smem + L::idx_off);  // [block parity][64]: thread rt's index
  // A candidate without an index read (past the split, or beyond its cache's valid count) gets -1
  // in its slot, a plain store: the slot's last copy, two blocks before, is complete by then.
  auto resolve_issue = [&](int64_t blk) {
    if (!resolver) return;
    const int64_t k = k_begin + blk * kBlockTokens + rt;
    const int32_t* at = k < k_end ? src.raw_index_at(p.src, k) : nullptr;
    int32_t* slot = sIdx + (blk & 1) * kBlockTokens + rt;
    if (at != nullptr) cuda_common::cp_async_4(slot, at);
    else *slot = -1;
    cuda_common::cp_async_commit();
  };
  auto resolve_finish = [&](int64_t blk) {
    if (!resolver) return;
    // This thread's copy of block blk (no other thread reads its slot); block blk + 1's may still
    // be in flight.
    cuda_common::cp_async_wait_group<1>();
    resolve_index(blk, sIdx[(blk & 1) * kBlockTokens + rt]);
  };

  // ---- Records: a block's raw bytes in registers, then dequantized into the stage (records.cuh).
  // Tokens not attended have null pointers and load as zero payloads, so their keys are zero and
  // P = 0 never meets garbage (0 x NaN) in P V.
  using Raw8 = Raw<kStorage, 8>;
  using Raw4 = Raw<kStorage, 4>;
  const TokenLane wide_a = lanes8(0, lwarp, lane), wide_b = lanes8(32, lwarp, lane);
  const TokenLane narrow_t = lanes4(0, lwarp, lane);
  struct Empty {};
  std::conditional_t<kWide, Raw8, Empty> raw_a, raw_b;
  std::conditional_t<kWide, Empty, Raw4> raw;
  auto load_block = [&](int64_t blk) {  // from its pointer slot
    const uint8_t* const* slot = sData + (blk & 1) * 2 * kBlockTokens;
    if constexpr (kWide) {
      load_raw(raw_a, slot[wide_a.tok], slot[kBlockTokens + wide_a.tok], wide_a.part);
      load_raw(raw_b, slot[wide_b.tok], slot[kBlockTokens + wide_b.tok], wide_b.part);
    } else {
      load_raw(raw, slot[narrow_t.tok], slot[kBlockTokens + narrow_t.tok], narrow_t.part);
    }
  };
  auto store_block = [&](uint8_t* stage) {  // into a key stage, then visible to wgmma
    if constexpr (kWide) {
      store_dequantized<kStorage, false, true, false, 8>(raw_a, stage, wide_a.tok, wide_a.part);
      store_dequantized<kStorage, false, true, false, 8>(raw_b, stage, wide_b.tok, wide_b.part);
    } else {
      store_dequantized<kStorage>(raw, stage, narrow_t.tok, narrow_t.part);
    }
    fence_proxy_async();
  };
  // The warp-specialised form's stage hand-over (unused in the two-CTA form).
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::bar_off);
  uint64_t* empty = full + 2;

  // ---- Prologue: Q's copies; block 0 in the stage; block 1's records in registers; block 2
  // resolved (slot 0, once block 0's loads have read it).
  load_q_narrow<kDqk, kRows, kCtaThreads>(sQ, g, w, tid);
  if constexpr (kWs) {
    if (tid == 0) {
      for (int s = 0; s < 2; ++s) {
        cuda::mbar_init(&full[s], kNarrowWsThreads - kLoader0);
        cuda::mbar_init(&empty[s], kLoader0);
      }
      cuda::mbar_init_fence();
    }
  }
  resolve_early(0);
  resolve_early(1);
  __syncthreads();
  if (loader) load_block(0);
  __syncthreads();  // every thread has read block 0's pointers
  resolve_early(2);
  if (loader) {
    store_block(sK);
    if constexpr (kWs) cuda::mbar_arrive(&full[0]);
    if (nb > 1) load_block(1);
  }
  cuda::cp_async_wait<0>();  // Q's copies
  fence_proxy_async();
  __syncthreads();

  float o[4][kRows / 2];  // O^T: M tile i holds dims 256 wg + 64 i ..
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int e = 0; e < kRows / 2; ++e) o[i][e] = 0.0f;
  // Warpgroup 0's row statistics (log2 domain) of rows narrow_row(q2, j): the exponent base (at most
  // kRescaleSlack below the maximum, config.h), this thread's partial sum, the true maximum.
  float row_max[kJ], row_sum[kJ], row_top[kJ];
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    row_max[j] = -INFINITY;
    row_sum[j] = 0.0f;
    row_top[j] = -INFINITY;
  }
  // Packed causal rows (dense decode): the candidates each row sees, relative to k_begin, in shared
  // memory (registers would spill at 128 per thread); read in the softmax of blocks that reach it.
  int64_t* sLim = reinterpret_cast<int64_t*>(smem + L::lim_off);
  if constexpr (kPacks) {
    if (tid < kRows) sLim[tid] = w.pr.row_limit(g, tid, w.heads_here, w.rows_here, src.candidates(), k_begin);
    __syncthreads();
  }
  const int t0 = 16 * wq + lane / 4;  // this thread's tokens in S^T: t0 and t0 + 8

  // Block n's products on a key stage: S^T, the softmax, O^T += V^T P^T (warpgroups 0-1).
  auto products = [&](int n, uint8_t* stage) {
    if (wg == 0) {
      // ---- S^T = K Q^T.
      float s[kRows / 2];
      const uint64_t dk = smem_desc(stage, 16, 1024), dq = smem_desc(sQ, 16, 1024);
      wgmma_fence();
#pragma unroll
      for (int st = 0; st < kQkSteps; ++st) {
        const uint32_t ok = (st / 4) * kChunkBytes + (st % 4) * 32, oq = (st / 4) * L::q_chunk + (st % 4) * 32;
        wgmma_m64nr_ss<0, kRows>(s, dk + (ok >> 4), dq + (oq >> 4), st > 0);
      }
      // (The block's attended word is read while the product runs: read after its wait, the masks
      // waited for it, 0.7% of the stall samples in bench/NOTES.md v58. Tokens t0 and t0 + 8 share
      // one word of the block's attended mask: t0 % 32 < 24.)
      const uint32_t word = sValid[(n & 3) * 2 + wq / 2];
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands(s);
      // ---- Masked block maxima per row: this thread's two tokens, the 8 lanes of its rows, then the
      // 4 warps through shared memory. Scores stay unscaled until the exponent (the scale is
      // positive), as in kernel.cuh online_softmax. The kJ rows' shuffle levels go side by side:
      // each shuffle waits on the maximum before it, and one row after another gave the compiler
      // chains of three round trips (~5% of the stall samples on the maxima, v58).
      const bool att0 = (word >> (t0 % 32)) & 1u, att1 = (word >> (t0 % 32 + 8)) & 1u;
      const int64_t base = static_cast<int64_t>(n) * kBlockTokens;
      float m[kJ];
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        const int e = narrow_elem(j);
        bool ok0 = att0, ok1 = att1;
        if constexpr (kPacks) {
          const int64_t seen = sLim[narrow_row(q2, j)] - base;  // of this block's tokens, the row sees
          const int lim = seen < 0 ? 0 : seen > kBlockTokens ? kBlockTokens : static_cast<int>(seen);  // those below
          ok0 = ok0 && t0 < lim;
          ok1 = ok1 && t0 + 8 < lim;
        }
        s[e] = ok0 ? s[e] : -INFINITY;
        s[e + 2] = ok1 ? s[e + 2] : -INFINITY;
        m[j] = fmaxf(s[e], s[e + 2]);
      }
#pragma unroll
      for (int d = 4; d <= 16; d *= 2) {
        float o[kJ];
#pragma unroll
        for (int j = 0; j < kJ; ++j) o[j] = __shfl_xor_sync(0xffffffffu, m[j], d);
#pragma unroll
        for (int j = 0; j < kJ; ++j) m[j] = fmaxf(m[j], o[j]);
      }
#pragma unroll
      for (int j = 0; j < kJ; ++j)
        if (lane < 4) sRed[wq * kRows + narrow_row(q2, j)] = m[j];
      // The block maxima, at a barrier of all 256 threads (warpgroup 1 arrives at it in its branch
      // below) although only warpgroup 0 reads them: warpgroup 1 has nothing to do until P is
      // ready, and compute-sanitizer's racecheck did not credit the CTA-wide barriers that followed
      // a 128-thread barrier of warpgroup 0 alone (it reported hazards on sAlpha and the row sums
      // across them).
      if constexpr (cuda::kRacecheckBarriers) named_barrier_sync<1>();
      else named_barrier_sync_aligned<1>();
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        const int r = narrow_row(q2, j), e = narrow_elem(j);
        const float m = fmaxf(fmaxf(sRed[r], sRed[kRows + r]), fmaxf(sRed[2 * kRows + r], sRed[3 * kRows + r]));
        const float tile_max = m * scale_log2;  // -inf stays -inf
        // The lazy rescale of kernel.cuh: the base moves only by more than the slack.
        row_top[j] = fmaxf(row_top[j], tile_max);
        const float new_max = tile_max > row_max[j] + kRescaleSlack ? tile_max : row_max[j];
        const float alpha = new_max == -INFINITY ? 1.0f : exp2_ftz(row_max[j] - new_max);
        row_max[j] = new_max;
        row_sum[j] *= alpha;
        // Nothing attended yet: subtract 0, so that exp2(-inf - 0) = 0 (kernel.cuh online_softmax).
        const float sub = new_max == -INFINITY ? 0.0f : new_max;
        const float p0 = exp2_ftz(fmaf(s[e], scale_log2, -sub)), p1 = exp2_ftz(fmaf(s[e + 2], scale_log2, -sub));
        row_sum[j] += p0 + p1;
        // P [row r][tokens], K-major for the value product's B operand.
        *reinterpret_cast<__nv_bfloat16*>(sP + sw128_offset(r, t0)) = __float2bfloat16_rn(p0);
        *reinterpret_cast<__nv_bfloat16*>(sP + sw128_offset(r, t0 + 8)) = __float2bfloat16_rn(p1);
        if (warp == 0 && lane < 4) sAlpha[r] = alpha;
      }
      fence_proxy_async();
    } else {
      // Warpgroup 1 only arrives: it waits for P at the next barrier. An arrival here and a sync in
      // warpgroup 0's branch is PTX's producer / consumer pattern for `bar.arrive` / `bar.sync`; a
      // second `bar.sync` here would break the aligned form's promise that all participants execute
      // one instruction (ptx.cuh), and the plain form cost 1.02x the time (bench/NOTES.md v69).
      // A racecheck build (LKV_RACECHECK_BARRIERS) waits here too, in the plain form: racecheck
      // pairs barriers by their count per warp, and with one wait per block here to warpgroup 0's
      // two it reported warpgroup 0's P stores against this warpgroup's value product, which
      // barrier 2 orders.
      if constexpr (cuda::kRacecheckBarriers) named_barrier_sync<1>();
      else named_barrier_arrive_aligned<1>();
    }
    if constexpr (kWs) named_barrier_sync_aligned<2>();  // the consumers only
    else __syncthreads();  // P and the rows' rescale
    {
      // ---- O^T = O^T alpha + V^T P^T; warps whose rows all kept their base skip the rescale.
      float a[kJ];
      bool moved = false;
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        a[j] = sAlpha[narrow_row(q2, j)];
        moved = moved || a[j] != 1.0f;
      }
      if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int e = 0; e < kRows / 2; ++e) o[i][e] *= a[(e % 2) + 2 * (e / 4)];
      }
      // A: the stage's chunk of dims 64 c .. read MN-major (one 128-byte row per token; a k16 step
      // is 16 tokens, 2048 bytes; the leading byte offset is unused with M = 64 dims per chunk).
      const uint64_t dv = smem_desc(stage, kChunkBytes, 1024), dp = smem_desc(sP, 16, 1024);
      wgmma_fence();
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int st = 0; st < kBlockTokens / 16; ++st) {
          const uint32_t ov = (4 * wg + i) * kChunkBytes + st * 2048, op = st * 32;
          wgmma_m64nr_ss<1, kRows>(o[i], dv + (ov >> 4), dp + (op >> 4), true);
        }
      wgmma_commit();
      if constexpr (!kWs) resolve_finish(n + 3);  // warps 4-5, while the product runs
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < 4; ++i) fence_operands(o[i]);
    }
  };
  resolve_issue(3);  // (after Q's wait, which would wait for it too)
  if constexpr (kWs) {
    // The 32-row instance's register budgets (config.h), each set inside its role's branch so that
    // ptxas allocates each role's code under its own.
    if (loader) {
      if constexpr (kRows == kNarrowWideRows) regs_decrease<kNarrowWideRegsLoader>();
      // Block j into stage j & 1 once the consumers have released block j - 2 from it; each thread's
      // full arrival after its own stores (and their proxy fence). A barrier of the 256 loader
      // threads per block orders the pointer slots as the two-CTA form's __syncthreads do.
      for (int j = 1; j < nb; ++j) {
        resolve_issue(j + 3);
        if (j >= 2) cuda::mbar_wait(&empty[j & 1], ((j - 2) >> 1) & 1);
        store_block(sK + (j & 1) * L::k_stage);
        cuda::mbar_arrive(&full[j & 1]);
        if (j + 1 < nb) load_block(j + 1);
        resolve_finish(j + 2);
        named_barrier_sync_aligned<3>();
      }
      // The loaders leave here: every stage store of theirs came before a full arrival the
      // consumers have waited on, and the consumers meet at a barrier of their own at the end
      // (compute-sanitizer's racecheck matches barriers by their count per warp, and the loaders
      // met one per block to the consumers' two).
      return;
    } else {
      if constexpr (kRows == kNarrowWideRows) regs_increase<kNarrowWideRegsConsumer>();
      for (int n = 0; n < nb; ++n) {
        cuda::mbar_wait(&full[n & 1], (n >> 1) & 1);
        products(n, sK + (n & 1) * L::k_stage);
        // Each thread releases the stage itself, after its own reads. Lane 0 arriving for its warp
        // after a __syncwarp orders the same accesses, but compute-sanitizer's racecheck does not
        // follow that chain and reported the resolving warps' next store of a block's mask word as a
        // hazard; 256 arrivals measured level with 8 (bench/NOTES.md v64).
        cuda::mbar_arrive(&empty[n & 1]);
      }
    }
  } else {
    for (int n = 0; n < nb; ++n) {
      resolve_issue(n + 4);
      products(n, sK);
      __syncthreads();  // the stage, P and alpha are free
      if (n + 1 < nb) {
        store_block(sK);
        if (n + 2 < nb) load_block(n + 2);
      }
      __syncthreads();  // block n + 1 in the stage
    }
  }

  // ---- The end, by warpgroups 0-1 (kThreads; the warp-specialised form's loaders have left).
  auto sync_consumers = [] {
    if constexpr (kWs) named_barrier_sync_aligned<1>();
    else __syncthreads();
  };
  // Warpgroup 0's rows: sums over the 8 lanes of a row, then the 4 warps; warp 0 (all
  // warps hold the same bases) publishes the bases and true maxima.
  if (wg == 0) {
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      float v = row_sum[j];
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      const int r = narrow_row(q2, j);
      if (lane < 4) sRed[wq * kRows + r] = v;
      if (warp == 0 && lane < 4) {
        sBase[r] = row_max[j];
        sTop[r] = row_top[j];
      }
    }
  }
  sync_consumers();
  // Each thread's rows' ends (kernel.cuh row_end_of: lonely rows, lse, the sink's share unsplit),
  // its O^T elements scaled into [kRows][kNarrowOutStride] fp32 in the (free) key stages, then whole rows
  // out by 16-byte stores (the fragment's own stores would write 2 or 4 bytes per row and dim).
  const bool unsplit = g.num_splits == 1;
  float factor[kJ];
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    const int r = narrow_row(q2, j);
    const float sum = (sRed[r] + sRed[kRows + r]) + (sRed[2 * kRows + r] + sRed[3 * kRows + r]);
    factor[j] = r < w.rows_here ? row_end_of(sBase[r], sum, sTop[r], w.head(r), unsplit, p.o.sink).factor : 0.0f;
  }
  float* sOut = reinterpret_cast<float*>(sK);
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int e = 0; e < kRows / 2; ++e) {
      const int dim = 256 * wg + 64 * i + 16 * wq + lane / 4 + 8 * ((e / 2) % 2);
      const int j = (e % 2) + 2 * (e / 4);
      sOut[narrow_row(q2, j) * kNarrowOutStride + dim] = o[i][e] * factor[j];
    }
  // Each row's lse and max logit (or its split's), by one thread per row.
  if (tid < w.rows_here) {
    const int r = tid;
    const float sum = (sRed[r] + sRed[kRows + r]) + (sRed[2 * kRows + r] + sRed[3 * kRows + r]);
    const int64_t h = w.head(r);
    const RowEnd e = row_end_of(sBase[r], sum, sTop[r], h, unsplit, p.o.sink);
    if (unsplit) {
      write_row_lse(p.o, w.r1, w.r2(r), h, e);
    } else {
      const int64_t prow = (w.pr.row(g, r, w.heads_here) * g.h_q + h) * g.num_splits + w.split;
      g.partial_lse[prow] = e.lse;
      if (g.partial_max) g.partial_max[prow] = e.max_logit;
    }
  }
  sync_consumers();
  if (unsplit) {
    // 64 units of 8 dims per row, bf16.
    for (int c = tid; c < w.rows_here * 64; c += kThreads) {
      const int r = c / 64, u = c % 64;
      const float4 x = *reinterpret_cast<const float4*>(sOut + r * kNarrowOutStride + 8 * u);
      const float4 y = *reinterpret_cast<const float4*>(sOut + r * kNarrowOutStride + 8 * u + 4);
      uint16_t* out = p.o.out + w.r1 * p.o.stride_out_r1 + w.r2(r) * p.o.stride_out_r2 + w.head(r) * p.o.stride_out_h;
      *reinterpret_cast<uint4*>(out + 8 * u) = make_uint4(cuda::pack_bf16(x.x, x.y), cuda::pack_bf16(x.z, x.w),
                                                          cuda::pack_bf16(y.x, y.y), cuda::pack_bf16(y.z, y.w));
    }
  } else {
    // 128 units of 4 dims per row, the split's fp32 partial.
    for (int c = tid; c < w.rows_here * 128; c += kThreads) {
      const int r = c / 128, u = c % 128;
      const int64_t prow = (w.pr.row(g, r, w.heads_here) * g.h_q + w.head(r)) * g.num_splits + w.split;
      *reinterpret_cast<float4*>(g.partial_out + prow * kDimV + 4 * u) =
          *reinterpret_cast<const float4*>(sOut + r * kNarrowOutStride + 4 * u);
    }
  }
#else
  (void)p;
  __trap();
#endif
}

}  // namespace latentkv::decode::sm90
