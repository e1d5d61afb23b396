// Probe: the narrow Hopper kernel's score product with the key operand in registers (wgmma with A
// from registers, "RS"), to measure what it saves before the library's kernel is changed
// (docs/design/hopper-narrow-rows.md section 6; bench/NOTES.md v61).
//
// Why: per 64-token block the narrow kernel moves ~287 KB through the SM's L1/shared-memory path
// (record gathers 42 KB, dequantized stores 74 KB, the score product's A operand 74 KB, the value
// product's 64 KB, Q and P 34 KB), and ncu puts that path at 79-83% of its throughput (v60). With
// A from registers the score product reads no key bytes from shared memory and the stage needs no
// RoPE dims. The m64n16k16 A fragment gives a thread tokens g and g + 8 of its warp's 16 and dims
// {2c, 2c + 1, 2c + 8, 2c + 9} of each k16 step (g = lane / 4, c = lane % 4). A dot product does not
// care about the order of its dims, so the probe permutes them: step s of lane c is the record's
// dims 64 (s / 4) + 16 c + 4 (s % 4) + {0, 1, 2, 3} (NoPE, s < 32; 16-byte loads whose 4 lanes read
// one 64-byte run of the token) and RoPE unit c + 4 ((s - 32) / 2) for s >= 32; Q's shared copy is
// permuted the same way once per CTA.
// Forms (two CTAs of 256 threads per SM, one key stage each, as the library's two-CTA form):
//   ss:         the library's order: all 256 threads gather block n + 1 and dequantize it into the
//               stage after the value product; warpgroup 0 computes S^T = K Q^T from the stage (36 x
//               wgmma m64n16k16, A and B in shared memory).
//   rs-roles:   warpgroup 0 gathers its own fragments' bytes (22 x 16-byte loads a block, L2 hits:
//               the same records were gathered for the stage a block before), converts them and
//               runs S^T with A from registers, in 18 groups of 2 k-steps, two groups in flight;
//               warpgroup 1 alone holds block n + 1's NoPE bytes (half of them across the value
//               product; the scales by cp.async into shared memory) and dequantizes them into the
//               stage while warpgroup 0 computes block n + 1's scores, which no longer read it.
//   checked variants of ss's wgmma order: S^T in 2 or 4 independent accumulator chains (36
//               dependent m64n16k16 into one accumulator might run at the wgmma's latency, not its
//               rate); the value product k-step by k-step across its four M tiles; both.
// Ceilings (not checked: their output is not the attention):
//   rs-ceiling: as ss, but S^T takes fixed registers as A (no gathers, no conversion) and the stage
//               holds NoPE dims only: the most that dropping the stage reads can give; and the
//               same with no-gather's records (rs-ceiling no-gather).
//   one phase out of ss: no-scores (S^T = 0, no wgmma), no-values (the value product's wgmma
//               skipped), no-convert (the stage gets the raw bytes), no-gather (every block reads
//               block 0's records again: L1/L2 hits instead of DRAM gathers), no-store (one 4-byte
//               store a thread of every converted word folded, instead of the stage's stores),
//               no-softmax (P = S^T x 2^-10: no maxima, shuffles, barrier or exponents).
//   pairs:      no-products (scores and values out: the refill alone), no-gather-convert (the
//               products and the stage's stores alone), no-scores-gather and no-values-gather (one
//               phase off each side).
// Workload (v32_probe_host.h, as v40's tokens_as_m.cu): 256 CTAs x 16 rows x 2048 candidates of
// v32_fp8-style records from a 1M-token cache (688 MB), random then consecutive; L2 flushed before
// each call; no L2 prefetch (the library's narrow kernel dropped it in v59). Each checked form
// against a host computation.
//
// Build and run on the device (from the repository root):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude -Xptxas=-v \
//     -o /tmp/nrs bench/probes/narrow_rs.cu && /tmp/nrs
// (bench/probes/narrow_rs_run.sh does this in one device call)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "cuda_common/async_copy.cuh"
#include "decode/cuda/kernel.cuh"  // dequant16_fast, fast_multiplier
#include "decode/sm90/ptx.cuh"
#include "decode/sm90/records.cuh"  // load_record16: the kernels' 16-byte record loads
#include "v32_probe_host.h"  // the workload, the check, the timing

using latentkv::decode::cuda::dequant16_fast;
using latentkv::decode::cuda::e4m3x2_scaled_bits;
using latentkv::decode::cuda::fast_multiplier;
using latentkv::decode::cuda::mul_bf16x2;
using latentkv::decode::sm90::fence_proxy_async;
using latentkv::decode::sm90::load_record16;
using latentkv::decode::sm90::smem_desc;
using latentkv::decode::sm90::sw128_offset;
using latentkv::decode::sm90::wgmma_commit;
using latentkv::decode::sm90::wgmma_fence;
using latentkv::decode::sm90::wgmma_wait;

enum Form {
  kSs = 0,
  kCeiling = 1,
  kRoles = 2,
  kNoScores = 3,
  kNoValues = 4,
  kNoConvert = 5,
  kNoGather = 6,
  kTwoAcc = 7,
  kFourAcc = 8,
  kValSteps = 9,
  kTwoAccValSteps = 10,
  kNoProducts = 11,
  kNoRefill = 12,
  kNoScoresGather = 13,
  kNoValuesGather = 14,
  kNoStore = 15,
  kNoSoftmax = 16,
  kCeilingNoGather = 17
};
// Which phases a ceiling form takes out: the products (S^T and the value product: what is left is
// the refill), the refill's gathers and conversion (what is left is the products), or one of each.
__host__ __device__ constexpr bool drops_scores(int f) {
  return f == kNoScores || f == kNoProducts || f == kNoScoresGather;
}
__host__ __device__ constexpr bool drops_values(int f) {
  return f == kNoValues || f == kNoProducts || f == kNoValuesGather;
}
__host__ __device__ constexpr bool drops_convert(int f) { return f == kNoConvert || f == kNoRefill; }
__host__ __device__ constexpr bool drops_gather(int f) {
  return f == kNoGather || f == kNoRefill || f == kNoScoresGather || f == kNoValuesGather || f == kCeilingNoGather;
}
// The ss form's S^T in 1, 2 or 4 independent accumulator chains (k-step st into chain st % chains,
// summed at the end), and whether the value product issues its 16 wgmma k-step by k-step across
// the four M tiles (independent accumulators back to back) instead of tile by tile.
__host__ __device__ constexpr int score_chains(int f) {
  return f == kTwoAcc || f == kTwoAccValSteps ? 2 : f == kFourAcc ? 4 : 1;
}
__host__ __device__ constexpr bool value_steps(int f) { return f == kValSteps || f == kTwoAccValSteps; }
// Whether a form's score product takes A from registers (its stage then holds NoPE dims only).
__host__ __device__ constexpr bool rs_form(int f) { return f == kCeiling || f == kRoles || f == kCeilingNoGather; }
constexpr int kQBytes = 9 * kRows * 128;  // [9 chunks][16 rows][64 bf16]
template <int F>
constexpr int kStageBytes = (rs_form(F) ? 8 : 9) * kTok * 128;  // [chunks][64 tokens][64 bf16]
constexpr int kPBytes = kRows * 128;                            // [16 rows][64 tokens] bf16
constexpr int kScaleBytes = 2 * kTok * 16;                      // rs-roles: [2 blocks][64 tokens][4 fp32]
template <int F>
constexpr int kSmem = kQBytes + kStageBytes<F> + kPBytes + 6 * kRows * 4 + (F == kRoles ? kScaleBytes : 0) + 1024;

// D[64 x 16] (+)= A[64 x 16] B[16 x 16]: A and B in shared memory (kTa: A MN-major).
template <int kTa>
__device__ __forceinline__ void mma_ss(float (&d)[8], uint64_t da, uint64_t db, bool acc) {
  latentkv::decode::sm90::wgmma_m64n16k16_ss<kTa>(d, da, db, acc);
}
// The same with A from registers: each warp's 16 rows as an mma.sync m16n8k16 A fragment.
__device__ __forceinline__ void mma_rs(float (&d)[8], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t db,
                                       bool acc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, "
      "p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(static_cast<int>(acc)));
}
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void bar_wg0() { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }
__device__ __forceinline__ void bar_wg1() { asm volatile("bar.sync 2, 128;\n" ::: "memory"); }
__device__ __forceinline__ float word(const uint4 v, int i) {
  return __uint_as_float(i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w);
}
// Logical dim L of Q's permuted copy (rs forms) -> the record's dim; L even, and L + 1 -> + 1.
__host__ __device__ constexpr int physical_dim(int L) {
  const int s = L / 16, k = L % 16, c = (k % 8) / 2, j = (k % 2) + 2 * (k / 8);
  if (s < 32) return 64 * (s / 4) + 16 * c + 4 * (s % 4) + j;
  const int t = s - 32, u = c + 4 * (t / 2);
  return 512 + 8 * u + 4 * (t % 2) + j;
}

// Accumulator element e of an m64n16 fragment: row 16 warp + lane / 4 + 8 ((e / 2) % 2), column
// 8 (e / 4) + 2 (lane % 4) + e % 2.
template <int F>
__global__ void __launch_bounds__(kThreads, 2)
    probe(const uint8_t* __restrict__ cache, const int32_t* __restrict__ idx, const uint16_t* __restrict__ q,
          float* __restrict__ out, float scale_log2) {
  constexpr bool kRs = rs_form(F);
  constexpr int kStageChunks = kRs ? 8 : 9;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint8_t* sm = smem_raw + ((1024u - (base & 1023u)) & 1023u);
  uint8_t* sQ = sm;
  uint8_t* sK = sQ + kQBytes;
  uint8_t* sP = sK + kStageBytes<F>;
  float* sRed = reinterpret_cast<float*>(sP + kPBytes);  // [4 warps][16]
  float* sAlpha = sRed + 4 * kRows;                      // [16]
  float* sSum = sAlpha + kRows;                          // [16]
  float* sScale = sSum + kRows;                          // rs-roles: [2][64 tokens][4]
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), wq = warp % 4;
  const int cta = blockIdx.x;
  const int32_t* my_idx = idx + static_cast<int64_t>(cta) * kTopk;
  auto record = [&](int blk, int t) { return cache + static_cast<int64_t>(my_idx[blk * kTok + t]) * kRec; };

  // Q's 16 rows, swizzled K-major chunks; the rs forms in the permuted dim order (4-byte pairs).
  if constexpr (kRs) {
    for (int u = tid; u < kRows * kDqk / 2; u += kThreads) {
      const int r = u / (kDqk / 2), L = 2 * (u % (kDqk / 2));
      *reinterpret_cast<uint32_t*>(sQ + (L / 64) * kRows * 128 + sw128_offset(r, L % 64)) =
          *reinterpret_cast<const uint32_t*>(q + (static_cast<int64_t>(cta) * kRows + r) * kDqk + physical_dim(L));
    }
  } else {
    for (int u = tid; u < kRows * kDqk / 8; u += kThreads) {
      const int r = u / (kDqk / 8), d = (u % (kDqk / 8)) * 8;
      *reinterpret_cast<uint4*>(sQ + (d / 64) * kRows * 128 + sw128_offset(r, d % 64)) =
          *reinterpret_cast<const uint4*>(q + (static_cast<int64_t>(cta) * kRows + r) * kDqk + d);
    }
  }

  // ---- The stage's gather (ss, rs-ceiling: all 256 threads, 8 lanes per token, 128-byte runs;
  // lane l8 of token tok0 (+ 32) holds NoPE bytes 128 j + 16 l8, the 4 scales, RoPE unit l8).
  const int l8 = lane % 8, tok0 = 4 * warp + lane / 8;
  uint4 nope[2][4], rope[2], scales[2];
  auto load = [&](int blk) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const uint8_t* rec = record(drops_gather(F) ? 0 : blk, tok0 + 32 * k);  // no-gather: block 0's again
#pragma unroll
      for (int j = 0; j < 4; ++j) nope[k][j] = load_record16(rec + 128 * j + 16 * l8);
      scales[k] = load_record16(rec + 512);
      if constexpr (!kRs) rope[k] = load_record16(rec + 528 + 16 * l8);
    }
  };
  auto store = [&]() {
    uint32_t folded = 0;  // no-store: every converted word folded into one, stored once
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int t = tok0 + 32 * k;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint4 lo = nope[k][j], hi = make_uint4(lo.w, lo.z, lo.y, lo.x);  // no-convert: the bytes as they are
        if constexpr (!drops_convert(F)) dequant16_fast(nope[k][j], fast_multiplier(word(scales[k], j)), lo, hi);
        uint8_t* chunk = sK + (2 * j + l8 / 4) * kTok * 128;
        if constexpr (F == kNoStore) {
          folded ^= lo.x ^ lo.y ^ lo.z ^ lo.w ^ hi.x ^ hi.y ^ hi.z ^ hi.w;
        } else {
          *reinterpret_cast<uint4*>(chunk + sw128_offset(t, 16 * (l8 % 4))) = lo;
          *reinterpret_cast<uint4*>(chunk + sw128_offset(t, 16 * (l8 % 4) + 8)) = hi;
        }
      }
      if constexpr (F == kNoStore)
        folded ^= rope[k].x ^ rope[k].w;
      else if constexpr (!kRs)
        *reinterpret_cast<uint4*>(sK + 8 * kTok * 128 + sw128_offset(t, 8 * l8)) = rope[k];
    }
    if constexpr (F == kNoStore) reinterpret_cast<uint32_t*>(sK)[threadIdx.x] = folded;
  };
  // ---- rs-roles: warpgroup 1 alone gathers the stage's NoPE bytes: warp w1 = warp - 4, lane l8
  // of token 16 w1 + 4 k + lane / 8 (k = 0..3) holds bytes 128 j + 16 l8 (j = 0..3); the scales go
  // to sScale[blk & 1] by cp.async (threads 128-191, one token each).
  uint4 raw1[4][4];
  const int w1 = warp - 4;
  // Tokens k = kFrom .. kTo - 1 of the thread's four (registers: half of them are held across the
  // value product, the other half loaded after it, so that warpgroup 1 fits 128 registers).
  auto load1 = [&](int blk, int kFrom, int kTo) {
#pragma unroll
    for (int k = kFrom; k < kTo; ++k) {
      const uint8_t* rec = record(blk, 16 * w1 + 4 * k + lane / 8);
#pragma unroll
      for (int j = 0; j < 4; ++j) raw1[k][j] = load_record16(rec + 128 * j + 16 * l8);
    }
  };
  auto scales1 = [&](int blk) {
    if (tid < 192) {
      const int t = tid - 128;
      latentkv::decode::cuda::cp_async_16(sScale + ((blk & 1) * kTok + t) * 4, record(blk, t) + 512);
    }
  };
  // (Addresses from an opaque copy of the lane: hoisted out of the loop, they were live through
  // warpgroup 0's score product too, which then spilled.)
  auto opaque = [](int v) {
    asm volatile("" : "+r"(v));
    return v;
  };
  auto store1 = [&](int blk, int kFrom, int kTo) {  // after cp_async_wait and bar_wg1
    const int ln = opaque(lane), e8 = ln % 8;
#pragma unroll
    for (int k = kFrom; k < kTo; ++k) {
      const int t = 16 * w1 + 4 * k + ln / 8;
      const float* sc = sScale + ((blk & 1) * kTok + t) * 4;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint4 lo, hi;
        dequant16_fast(raw1[k][j], fast_multiplier(sc[j]), lo, hi);
        uint8_t* chunk = sK + (2 * j + e8 / 4) * kTok * 128;
        *reinterpret_cast<uint4*>(chunk + sw128_offset(t, 16 * (e8 % 4))) = lo;
        *reinterpret_cast<uint4*>(chunk + sw128_offset(t, 16 * (e8 % 4) + 8)) = hi;
      }
    }
  };

  float o[4][8];  // O^T: this warpgroup's 4 m-tiles of 64 dims (256 wg + 64 i ..)
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int e = 0; e < 8; ++e) o[i][e] = 0.0f;
  const int q2 = 2 * (lane % 4);  // this thread's query rows q2, q2 + 1, q2 + 8, q2 + 9
  float row_max[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, row_sum[4] = {0.f, 0.f, 0.f, 0.f};
  constexpr int kBlocks = kTopk / kTok;
  const uint64_t dq = smem_desc(sQ, 16, 1024);
  auto qoff = [](int st) { return static_cast<uint32_t>(((st / 4) * kRows * 128 + (st % 4) * 32) >> 4); };

  // ---- S^T for block n into s (warpgroup 0).
  auto scores = [&](int n, float(&s)[8]) {
    if constexpr (drops_scores(F)) {
#pragma unroll
      for (int e = 0; e < 8; ++e) s[e] = 0.0f;
    } else if constexpr (!rs_form(F)) {
      const uint64_t dk = smem_desc(sK, 16, 1024);
      constexpr int kChains = score_chains(F);
      float acc[kChains][8];
      wgmma_fence();
#pragma unroll
      for (int st = 0; st < kDqk / 16; ++st) {
        const uint32_t ok = (st / 4) * kTok * 128 + (st % 4) * 32;
        if constexpr (kChains == 1)
          mma_ss<0>(s, dk + (ok >> 4), dq + qoff(st), st > 0);
        else
          mma_ss<0>(acc[st % kChains], dk + (ok >> 4), dq + qoff(st), st >= kChains);
      }
      wgmma_commit();
      wgmma_wait<0>();
      if constexpr (kChains > 1) {
#pragma unroll
        for (int c = 0; c < kChains; ++c) fence_regs(acc[c]);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          float v = acc[0][e];
#pragma unroll
          for (int c = 1; c < kChains; ++c) v += acc[c][e];
          s[e] = v;
        }
      }
    } else if constexpr (F == kCeiling || F == kCeilingNoGather) {
      const uint32_t v = 0x3c003c00u + static_cast<uint32_t>(n & 7);
      wgmma_fence();
#pragma unroll
      for (int st = 0; st < kDqk / 16; ++st) mma_rs(s, v, v ^ 0x00010001u, v, v, dq + qoff(st), st > 0);
      wgmma_commit();
      wgmma_wait<0>();
    } else {
      // Piece q (q < 8) of a token: its 16 bytes at 64 q + 16 c, k-steps 4 q .. 4 q + 3, step 4 q + i
      // from word i (bytes 0-1: fragment register 0 or 1, bytes 2-3: register 2 or 3), scale q / 2;
      // piece 8: RoPE units c (steps 32, 33) and c + 4 (34, 35), bf16 as stored. Issued in groups
      // of two k-steps, two groups in flight (each group's 8 fragment registers are read by its
      // wgmma until the wait that retires it).
      const int g = lane / 4, c = lane % 4;
      const uint8_t* ra = record(n, 16 * wq + g);
      const uint8_t* rb = record(n, 16 * wq + g + 8);
      uint4 pa = load_record16(ra + 16 * c), pb = load_record16(rb + 16 * c), ea = make_uint4(0, 0, 0, 0), eb = ea;
      float sa = __ldg(reinterpret_cast<const float*>(ra + 512)), sb = __ldg(reinterpret_cast<const float*>(rb + 512));
#pragma unroll
      for (int q = 0; q < 9; ++q) {
        const uint4 ca = pa, cb = pb;
        const uint32_t fa = fast_multiplier(sa), fb = fast_multiplier(sb);
        if (q + 1 < 8) {  // the next piece, one ahead
          pa = load_record16(ra + 64 * (q + 1) + 16 * c);
          pb = load_record16(rb + 64 * (q + 1) + 16 * c);
          if ((q + 1) % 2 == 0) {
            sa = __ldg(reinterpret_cast<const float*>(ra + 512 + 2 * (q + 1)));
            sb = __ldg(reinterpret_cast<const float*>(rb + 512 + 2 * (q + 1)));
          }
        } else if (q + 1 == 8) {
          pa = load_record16(ra + 528 + 16 * c);
          pb = load_record16(rb + 528 + 16 * c);
        } else {  // (q = 8) RoPE unit c + 4, used by the second group of this piece
          ea = load_record16(ra + 528 + 64 + 16 * c);
          eb = load_record16(rb + 528 + 64 + 16 * c);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          uint32_t a[4], b[4];  // steps 4 q + 2 h (registers 0-1 of each token) and + 1 (2-3)
          if (q < 8) {
            const uint32_t wa0 = h == 0 ? ca.x : ca.z, wa1 = h == 0 ? ca.y : ca.w;
            const uint32_t wb0 = h == 0 ? cb.x : cb.z, wb1 = h == 0 ? cb.y : cb.w;
            a[0] = mul_bf16x2(e4m3x2_scaled_bits<0>(wa0), fa), a[1] = mul_bf16x2(e4m3x2_scaled_bits<1>(wa0), fa);
            a[2] = mul_bf16x2(e4m3x2_scaled_bits<0>(wa1), fa), a[3] = mul_bf16x2(e4m3x2_scaled_bits<1>(wa1), fa);
            b[0] = mul_bf16x2(e4m3x2_scaled_bits<0>(wb0), fb), b[1] = mul_bf16x2(e4m3x2_scaled_bits<1>(wb0), fb);
            b[2] = mul_bf16x2(e4m3x2_scaled_bits<0>(wb1), fb), b[3] = mul_bf16x2(e4m3x2_scaled_bits<1>(wb1), fb);
          } else {
            const uint4 ua = h == 0 ? ca : ea, ub = h == 0 ? cb : eb;
            a[0] = ua.x, a[1] = ua.y, a[2] = ua.z, a[3] = ua.w;
            b[0] = ub.x, b[1] = ub.y, b[2] = ub.z, b[3] = ub.w;
          }
          if (2 * q + h >= 2) wgmma_wait<1>();  // the group before the last has read its registers
          wgmma_fence();
          mma_rs(s, a[0], b[0], a[1], b[1], dq + qoff(4 * q + 2 * h), q + h > 0);
          mma_rs(s, a[2], b[2], a[3], b[3], dq + qoff(4 * q + 2 * h + 1), true);
          wgmma_commit();
        }
      }
      wgmma_wait<0>();
    }
    fence_regs(s);
  };
  // ---- Block maxima, the online softmax, P and alpha to shared memory (warpgroup 0).
  auto softmax = [&](float(&s)[8]) {
    if constexpr (F == kNoSoftmax) {  // P = S^T x 2^-10 as stored, no maxima, exponents or rescale
      const int tok = 16 * wq + lane / 4;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = q2 + (j % 2) + 8 * (j / 2), e = (j % 2) + 4 * (j / 2);
        row_sum[j] += s[e] + s[e + 2];
        if (warp == 0 && lane < 4) sAlpha[r] = 1.0f;
        *reinterpret_cast<__nv_bfloat16*>(sP + sw128_offset(r, tok)) = __float2bfloat16_rn(s[e] * 0x1p-10f);
        *reinterpret_cast<__nv_bfloat16*>(sP + sw128_offset(r, tok + 8)) = __float2bfloat16_rn(s[e + 2] * 0x1p-10f);
      }
      fence_proxy_async();
    } else {
      float bm[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int e = (j % 2) + 4 * (j / 2);
        bm[j] = fmaxf(s[e], s[e + 2]);
      }
#pragma unroll
      for (int d = 4; d <= 16; d *= 2)
#pragma unroll
        for (int j = 0; j < 4; ++j) bm[j] = fmaxf(bm[j], __shfl_xor_sync(0xffffffffu, bm[j], d));
      if (lane < 4) {
#pragma unroll
        for (int j = 0; j < 4; ++j) sRed[wq * kRows + q2 + (j % 2) + 8 * (j / 2)] = bm[j];
      }
      bar_wg0();
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = q2 + (j % 2) + 8 * (j / 2);
        const float m = fmaxf(fmaxf(sRed[r], sRed[kRows + r]), fmaxf(sRed[2 * kRows + r], sRed[3 * kRows + r]));
        const float nm = fmaxf(row_max[j], m * scale_log2);
        const float alpha = row_max[j] == -INFINITY ? 0.0f : exp2f(row_max[j] - nm);
        row_max[j] = nm;
        row_sum[j] *= alpha;
        if (warp == 0 && lane < 4) sAlpha[r] = alpha;
        const int e = (j % 2) + 4 * (j / 2);
        const float p0 = exp2f(s[e] * scale_log2 - nm), p1 = exp2f(s[e + 2] * scale_log2 - nm);
        row_sum[j] += p0 + p1;
        const int tok = 16 * wq + lane / 4;
        *reinterpret_cast<__nv_bfloat16*>(sP + sw128_offset(r, tok)) = __float2bfloat16_rn(p0);
        *reinterpret_cast<__nv_bfloat16*>(sP + sw128_offset(r, tok + 8)) = __float2bfloat16_rn(p1);
      }
      fence_proxy_async();
    }
  };
  // ---- O^T = O^T alpha + V^T P^T (both warpgroups, 256 dims each).
  auto values = [&]() {
    float a[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) a[j] = sAlpha[q2 + (j % 2) + 8 * (j / 2)];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int e = 0; e < 8; ++e) o[i][e] *= a[(e % 2) + 2 * (e / 4)];
    if constexpr (drops_values(F)) return;
    const uint64_t dv = smem_desc(sK, kStageChunks * kTok * 128 /* unused */, 1024);
    const uint64_t dp = smem_desc(sP, 16, 1024);
    wgmma_fence();
    if constexpr (value_steps(F)) {
#pragma unroll
      for (int st = 0; st < kTok / 16; ++st)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const uint32_t ov = (4 * wg + i) * kTok * 128 + st * 2048, op = st * 32;
          mma_ss<1>(o[i], dv + (ov >> 4), dp + (op >> 4), true);
        }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int chunk = 4 * wg + i;
#pragma unroll
        for (int st = 0; st < kTok / 16; ++st) {
          const uint32_t ov = chunk * kTok * 128 + st * 2048, op = st * 32;
          mma_ss<1>(o[i], dv + (ov >> 4), dp + (op >> 4), true);
        }
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < 4; ++i) fence_regs(o[i]);
  };

  if constexpr (F != kRoles) {
    load(0);
    store();
    fence_proxy_async();
    if (kBlocks > 1) load(1);
    __syncthreads();
    for (int n = 0; n < kBlocks; ++n) {
      if (wg == 0) {
        float s[8];
        scores(n, s);
        softmax(s);
      }
      __syncthreads();  // P and alpha
      values();
      __syncthreads();  // the stage and P are free
      if (n + 1 < kBlocks) {
        store();
        fence_proxy_async();
        if (n + 2 < kBlocks) load(n + 2);
      }
      __syncthreads();  // block n + 1 in the stage
    }
  } else {
    // Warpgroup 1 fills the stage with block 0 and holds block 1's bytes; then per block n:
    //   WG0: S^T(n) from registers, softmax -> P(n)    WG1: (block n + 1's loads in flight)
    //   -- __syncthreads --  P(n) and the stage (block n) ready
    //   both: O^T += V^T P^T
    //   -- __syncthreads --  the stage and P free
    //   WG0: goes on to S^T(n + 1)                     WG1: block n + 1 into the stage, block n + 2's loads
    if (wg == 1) {
      load1(0, 0, 4);
      scales1(0);
      latentkv::cuda_common::cp_async_wait_all();
      bar_wg1();
      store1(0, 0, 4);
      if (kBlocks > 1) {
        load1(1, 0, 2);
        scales1(1);
      }
    }
    fence_proxy_async();  // Q's stores, before wgmma reads them
    __syncthreads();      // Q and block 0
    for (int n = 0; n < kBlocks; ++n) {
      if (wg == 0) {
        float s[8];
        scores(n, s);
        softmax(s);
      }
      __syncthreads();  // P(n) and block n in the stage
      values();
      __syncthreads();  // the stage and P are free
      if (wg == 1 && n + 1 < kBlocks) {
        load1(n + 1, 2, 4);  // the half not held across the value product
        latentkv::cuda_common::cp_async_wait_all();
        bar_wg1();  // block n + 1's scales from every thread's copies
        store1(n + 1, 0, 2);
        store1(n + 1, 2, 4);
        fence_proxy_async();
        if (n + 2 < kBlocks) {
          load1(n + 2, 0, 2);
          scales1(n + 2);
        }
      }
    }
  }
  // Row sums: over the 8 lanes of a row, then the 4 warps (warpgroup 0 holds them).
  if (wg == 0) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float v = row_sum[j];
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      if (lane < 4) sRed[wq * kRows + q2 + (j % 2) + 8 * (j / 2)] = v;
    }
  }
  __syncthreads();
  if (tid < kRows) sSum[tid] = (sRed[tid] + sRed[kRows + tid]) + (sRed[2 * kRows + tid] + sRed[3 * kRows + tid]);
  __syncthreads();
  // out[cta][row][dim] = O^T[dim][row] / sum[row]; element e of m-tile i: dim 256 wg + 64 i + 16 wq
  // + lane / 4 + 8 ((e / 2) % 2), row 8 (e / 4) + q2 + e % 2.
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int dim = 256 * wg + 64 * i + 16 * wq + lane / 4 + 8 * ((e / 2) % 2);
      const int r = 8 * (e / 4) + q2 + e % 2;
      out[(static_cast<int64_t>(cta) * kRows + r) * kDv + dim] = o[i][e] / sSum[r];
    }
}

int main() {
  ProbeWorkload w;
  constexpr int kForms = 18;
  const ProbeKernel kernels[kForms] = {probe<kSs>,       probe<kCeiling>,        probe<kRoles>,
                                       probe<kNoScores>, probe<kNoValues>,       probe<kNoConvert>,
                                       probe<kNoGather>, probe<kTwoAcc>,         probe<kFourAcc>,
                                       probe<kValSteps>, probe<kTwoAccValSteps>, probe<kNoProducts>,
                                       probe<kNoRefill>, probe<kNoScoresGather>, probe<kNoValuesGather>,
                                       probe<kNoStore>,  probe<kNoSoftmax>, probe<kCeilingNoGather>};
  const int smems[kForms] = {kSmem<kSs>,       kSmem<kCeiling>,        kSmem<kRoles>,          kSmem<kNoScores>,
                             kSmem<kNoValues>, kSmem<kNoConvert>,      kSmem<kNoGather>,       kSmem<kTwoAcc>,
                             kSmem<kFourAcc>,  kSmem<kValSteps>,       kSmem<kTwoAccValSteps>, kSmem<kNoProducts>,
                             kSmem<kNoRefill>, kSmem<kNoScoresGather>, kSmem<kNoValuesGather>, kSmem<kNoStore>,
                             kSmem<kNoSoftmax>, kSmem<kCeilingNoGather>};
  const char* names[kForms] = {"ss",
                               "rs-ceiling",
                               "rs-roles",
                               "ss no-scores",
                               "ss no-values",
                               "ss no-convert",
                               "ss no-gather",
                               "ss 2 score chains",
                               "ss 4 score chains",
                               "ss values by k-step",
                               "ss 2 chains + values by step",
                               "ss no-products",
                               "ss no-gather-convert",
                               "ss no-scores-gather",
                               "ss no-values-gather",
                               "ss no-store",
                               "ss no-softmax", "rs-ceiling no-gather"};
  for (int v = 0; v < kForms; ++v) {
    CK(cudaFuncSetAttribute(kernels[v], cudaFuncAttributeMaxDynamicSharedMemorySize, smems[v]));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, kernels[v]));
    std::printf("narrow_rs probe (%s): %d CTAs x %d rows x %d candidates, smem %d B, %d registers, %d local bytes\n",
                names[v], kCtas, kRows, kTopk, smems[v], fa.numRegs, static_cast<int>(fa.localSizeBytes));
  }
  // Random candidates (sparse decode), then consecutive records (dense pages).
  for (int mode = 0; mode < 2; ++mode) {
    if (mode == 1) w.consecutive();
    const char* m = mode == 0 ? "random" : "consecutive";
    for (int round = 0; round < 2; ++round)
      for (int v = 0; v < kForms; ++v) {
        char label[64];
        std::snprintf(label, sizeof label, "%s, %s", m, names[v]);
        if (round == 0 && (v == kSs || v == kRoles || (v >= kTwoAcc && v <= kTwoAccValSteps)))
          w.check(kernels[v], smems[v], label);
        w.time_it(kernels[v], smems[v], label);
      }
  }
  return 0;
}
