// decode/cuda/kernel.cuh: the portable (sm_80+) MLA attention kernel over gathered tokens, shared by
// sparse decode, sparse prefill and dense decode. What differs between the ops (where a candidate's
// key lives and how it is stored) is a Source policy (decode/cuda/source.cuh,
// prefill/cuda/source.cuh, dense/cuda/source.cuh); the tiles, the online softmax, the MMAs, the
// split-KV partials and the output writes are one code path.
//
// Grid: (row groups, kv_heads * head blocks per kv head, num_splits); 256 threads. A row is one
// query token (sparse and dense decode: request i, query j; prefill: query token t), and a row
// group one row, or for dense decode up to 64 / heads_per_kv query tokens of one request, which
// share every key (Geometry::pack, PackedRows). A CTA takes one row group, 64 query rows (heads of
// one kv head, times the group's query tokens), and one split of the candidates:
//   1. Q (64 rows x d_qk, zero rows past the CTA's) goes to shared memory once.
//   2. Per tile of 32 candidates: resolve the keys (invalid or beyond the group's count: null, never
//      read) and bring them to shared memory as bf16 / f16. Quantized records (v32_fp8, v4_fp8) land
//      in a staging buffer by cp.async and are dequantized from there (exact: payload x power-of-two
//      scale); 16-bit keys go straight to a double-buffered key tile by cp.async. On sm_90 both
//      come by one bulk copy per token (row or record), issued by the last 1, 2 or 4 warps
//      (Geometry::copy_warps) and completing on the key tile's or staging buffer's mbarrier. Either way the
//      memory latency stays off the critical path: the key addresses of tile t + 2 and the bytes of
//      tile t + 1 are in flight while tile t is computed.
//   3. S = Q K^T with tensor-core MMAs (m16n8k16, fp32 accumulation); warp w computes rows
//      16 (w / 2).. and ends with the scores of tokens 16 (w % 2)..; masked tokens get -inf. Two
//      shapes, the Source's choice (Source::kSplitDqk): warp w multiplies those 16 tokens over all
//      of d_qk (score_tokens_half), or all 32 tokens over half (w % 2) of d_qk, the two warps of
//      a head tile then swapping partial sums (score_dqk_half; sparse decode, v32_fp8 pages; in the
//      overlapped layout all four n8 tiles, so both warps hold all 32 tokens' scores: kFold). With token groups
//      (kGroups below; CTAs of at most 16 rows) warps 0-3 take rows 0-15, warp w the 16 tokens
//      16 (w / 2).. over half (w % 2) of d_qk, and the two warps of a group swap partial sums
//      (score_group_half); each keeps tokens 16 (w / 2) + 8 (w % 2).. for steps 4 and 5.
//   4. Online softmax in the log2 domain: the two warps sharing a head block exchange their row
//      maxima through shared memory (token groups: each warp already holds its group's 16 scores,
//      so no exchange), rescale, and write P (16-bit) to shared memory (kFold: no exchange of
//      maxima, and P goes from registers straight into step 5's fragments). Within a tile
//      only those two warps wait for each other (pair_sync); the CTA-wide barriers of step 2 order
//      the shared key tiles, staging buffers and key pointers.
//   5. O += P V with V = the first 512 dims of the same tile; warp w accumulates half the dims.
//   (Score and value warps, kRoles below, CTAs of at most 32 rows with 16-bit keys on sm_90: warps
//   4-7 do step 3 for tile t and store the scores; warps 0-3 do steps 4 and 5 for tile t - 1, each
//   computing P for all 32 tokens of its rows, with no exchange.)
//   6. The end: with one split, normalise, apply the sink and write out, lse (natural log) and, for
//      prefill, max_logits; with several, write the split's normalised output, lse and max for the
//      combine kernel (combine.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#include <cuda_fp8.h>
#endif

#include <cstdint>
#include <type_traits>

#include "decode/cuda/config.h"
#include "decode/cuda/attend_params.h"
#if defined(LKV_SM90_TRACE)
#include "decode/sm90/launch.h"  // kTracePhases
#endif
#include "cuda_common/pdl.cuh"
#include "latentkv/numerics.h"

namespace latentkv::decode::cuda {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// ---- PTX building blocks ------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// D = A B + D, m16n8k16, bf16 or f16 inputs, fp32 accumulators.
template <bool kF16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (kF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_addr(dst)), "l"(src));
}
// The two warps of head tile mt (threads 64 mt .. 64 mt + 63) wait for each other: named barrier
// mt + 1 (0 is __syncthreads'). Their row maxima, P and rows of O are shared with no other warp,
// so within a tile a head tile's pair need not wait for the other pairs.
__device__ __forceinline__ void pair_sync(int mt) {
  asm volatile("bar.sync %0, 64;\n" ::"r"(mt + 1) : "memory");
}
// Named barrier kId, complete once `n` threads (whole warps) have reached it. The plain
// `barrier.sync`, not `bar.sync` (= `barrier.sync.aligned`, which promises that every participant
// executes the same instruction): under value sharing warps 4-7 and warps 0-3 reach barrier 5 from
// different places, which compute-sanitizer's synccheck reports for the aligned form ("Divergent
// thread(s) in block") and stops the kernel. pair_sync's two warps always meet at one instruction.
template <int kId>
__device__ __forceinline__ void named_sync(int n) {
  asm volatile("barrier.sync %0, %1;\n" ::"n"(kId), "r"(n) : "memory");
}
// LKV_RACECHECK_BARRIERS=1 (a build for compute-sanitizer's racecheck only): in the 16-row kernels
// with value sharing (kShareV), warps 4-7 meet two barriers per iteration and warps 0-3 three or
// four, and racecheck pairs the k-th barrier of one warp with the k-th of another whatever their
// ids, so it reports hazards across barriers that order the accesses
// (bench/probes/racecheck_partial_barrier.cu: 384 hazards with unequal counts, 0 with equal counts
// of partial barriers; bench/NOTES.md v53). This switch adds pair barriers, each right after a
// barrier that both warps of the pair have just met, so they order nothing more, until every warp
// meets the same sequence: the CTA barrier, named barrier 5 (or in its place a pair barrier), two
// pair barriers. So a clean racecheck of this build holds for the default one, whose orderings are
// the same. (Default off: the extra barriers cost ~1.5% on an H100, v53.)
#ifndef LKV_RACECHECK_BARRIERS
#define LKV_RACECHECK_BARRIERS 0
#endif
inline constexpr bool kRacecheckBarriers = LKV_RACECHECK_BARRIERS != 0;
// An accumulator tile's four values as one float4, and d = a + o element by element: the warp
// pairs' exchanges of partial scores (the d_qk split and token groups) in 16-byte shared stores.
__device__ __forceinline__ float4 as_float4(const float (&v)[4]) { return make_float4(v[0], v[1], v[2], v[3]); }
__device__ __forceinline__ void add_float4(float (&d)[4], const float (&a)[4], float4 o) {
  d[0] = a[0] + o.x;
  d[1] = a[1] + o.y;
  d[2] = a[2] + o.z;
  d[3] = a[3] + o.w;
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Two fp32 values to two 16-bit values (low first), round to nearest even.
// bf16: one cvt.rn.bf16x2.f32 per pair (sm_80+) instead of num::f32_to_bf16's ~5 integer ops per
// value; this runs for every dequantized key element and every P element. It rounds every finite
// value and infinity exactly as num::f32_to_bf16 does; a NaN becomes the canonical NaN instead of
// keeping its sign and payload (the tests compare NaN by class).
// f16: the bit routine the CPU backends use, so both produce the same bytes.
template <bool kF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (kF16) {
    return static_cast<uint32_t>(num::f32_to_f16(lo)) | (static_cast<uint32_t>(num::f32_to_f16(hi)) << 16);
  } else {
    const __nv_bfloat162 two = __float22bfloat162_rn(make_float2(lo, hi));  // .x = lo: low half
    return *reinterpret_cast<const uint32_t*>(&two);
  }
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) { return pack2<false>(lo, hi); }

// Two e4m3 codes (low byte first) to fp32, exactly. Hopper and Ada convert in hardware.
__device__ __forceinline__ float2 e4m3x2_to_f32(uint16_t two) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
#else
  return make_float2(num::e4m3_to_f32(static_cast<uint8_t>(two & 0xff)),
                     num::e4m3_to_f32(static_cast<uint8_t>(two >> 8)));
#endif
}

// 16 e4m3 bytes to 16 bf16 (dims in order: lo then hi), the first 8 times fp32 scale s_lo and the
// last 8 times s_hi: each value to fp32, times its scale, rounded once to bf16. (Two scales for
// dequantize_tile's v32_fp8 chunks, whose halves lie 256 dims apart.)
__device__ __forceinline__ void dequant8x2_f32(const uint4 raw, float s_lo, float s_hi, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t out[8];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float s = q < 2 ? s_lo : s_hi;
    const float2 a = e4m3x2_to_f32(static_cast<uint16_t>(w[q] & 0xffffu));
    const float2 b = e4m3x2_to_f32(static_cast<uint16_t>(w[q] >> 16));
    out[2 * q] = pack_bf16(a.x * s, a.y * s);
    out[2 * q + 1] = pack_bf16(b.x * s, b.y * s);
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

// 16 e4m3 bytes times one fp32 scale s. The portable kernel's dequantization, and the Hopper
// kernel's wherever its fast form is not exact (decode/sm90/dequant.cuh), so both give the same
// bytes.
__device__ __forceinline__ void dequant16_f32(const uint4 raw, float s, uint4& lo, uint4& hi) {
  dequant8x2_f32(raw, s, s, lo, hi);
}

// ---- Fast dequantization, exact where it applies ------------------------------------------------
// Per pair of bytes: one byte permute places each byte in the low half of a 16-bit lane with its
// sign copied into the high half; shifted left by 4 and masked, the lane holds the sign at bit 15,
// the e4m3 exponent in the low 4 bits of the bf16 exponent field and the 3 mantissa bits on top of
// the bf16 mantissa. Read as bf16 that is exactly the e4m3 value times 2^-120 (zero and e4m3
// subnormals included: they become bf16 subnormals with the same digits), so one bf16x2 multiply by
// 2^120 x scale finishes the job: 4 instructions per pair, none on the conversion pipe (the
// dequant16_f32 form takes 6, three of them conversions; on sm_80, which has no e4m3 conversion,
// many more). Exact when the scale is a power of two in [2^-117, 2^7] (every format's scales are
// powers of two; the bounds keep the multiplier a normal bf16 and every nonzero product normal)
// and no byte is NaN; dequant16 takes dequant16_f32 otherwise, so results never depend on which
// form ran (tests Sm90Primitives.DequantizationMatchesReference, and every portable suite).

// Whether x = 2^e with e in [-117, 7] (fp32 exponent field in [10, 134]).
__device__ __forceinline__ bool fast_scale(float x) {
  const uint32_t b = __float_as_uint(x);
  const uint32_t e = b >> 23;
  return (b & 0x807fffffu) == 0 && e >= 10 && e <= 134;
}

// Whether none of 16 e4m3 bytes is NaN (0x7f or 0xff: its low 7 bits plus one carry into bit 7).
__device__ __forceinline__ bool no_nan16(const uint4 raw) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t nan = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) nan |= ((w[q] & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
  return nan == 0;
}

// Whether dequant16_fast is exact for these 16 e4m3 bytes and scale: no NaN byte and a fast_scale.
__device__ __forceinline__ bool dequant16_fast_ok(const uint4 raw, float s) { return no_nan16(raw) && fast_scale(s); }

// dequant16_fast's multiplier, 2^120 x s in both bf16 halves, for a fast_scale s.
__device__ __forceinline__ uint32_t fast_multiplier(float s) {
  const float f = s * 0x1p120f;  // exact: a power of two in range
  return pack_bf16(f, f);
}

// Bytes 2 k and 2 k + 1 of w (k = 0 or 1) as two bf16 lanes of value e4m3 x 2^-120.
template <int k>
__device__ __forceinline__ uint32_t e4m3x2_scaled_bits(uint32_t w) {
  // prmt selector nibbles, low byte first: byte 2k, sign of byte 2k, byte 2k + 1, its sign. (Its
  // own asm with an immediate selector: through num::prmt the dense v32_fp8 Hopper kernel compiles
  // to a different instruction order, checked with scripts/sass.sh.)
  constexpr uint32_t sel = k == 0 ? 0x9180u : 0xb3a2u;
  uint32_t p;
  asm("prmt.b32 %0, %1, 0, %2;\n" : "=r"(p) : "r"(w), "n"(sel));
  return (p << 4) & 0x87f087f0u;
}

// a x b in both bf16 lanes, rounded once. sm_80 has no bf16x2 multiply: a fused multiply-add of
// -0 gives the same bits (x + -0 = x for every x, -0 included).
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("mul.rn.bf16x2 %0, %0, %1;\n" : "+r"(a) : "r"(b));
#else
  asm("fma.rn.bf16x2 %0, %0, %1, %2;\n" : "+r"(a) : "r"(b), "r"(0x80008000u));
#endif
  return a;
}

// 16 e4m3 bytes times scale s to 16 bf16 (two 16-byte units, dims in order), where
// dequant16_fast_ok holds; f2 = fast_multiplier(s) (or a ue8m0 scale's equivalent).
__device__ __forceinline__ void dequant16_fast(const uint4 raw, uint32_t f2, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t out[8];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    out[2 * q] = mul_bf16x2(e4m3x2_scaled_bits<0>(w[q]), f2);
    out[2 * q + 1] = mul_bf16x2(e4m3x2_scaled_bits<1>(w[q]), f2);
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

// The same for any bytes and scale: the fast form where it is exact, else dequant16_f32.
__device__ __forceinline__ void dequant16(const uint4 raw, float s, uint4& lo, uint4& hi) {
  if (dequant16_fast_ok(raw, s)) dequant16_fast(raw, fast_multiplier(s), lo, hi);
  else dequant16_f32(raw, s, lo, hi);
}

// ---- score products -----------------------------------------------------------------------------
// S = Q K^T for the 16 rows of head tile mt against a tile of 32 keys, in one of two shapes for the
// two warps (nh) of the head tile. The loops are unrolled whole and the fragments of k-step
// s + kAhead are loaded before step s multiplies: a rolled loop made every step wait out the
// ldmatrix latency before its first MMA (the kernel's largest stall by sampling, ~9% of its time
// on one instruction). ptxas, short of registers, brings the loads to about one step ahead.
//
// Tokens 16 nh.. over all of d_qk (two n8 tiles; sc[nt][e]: row gr + 8 (e / 2), token
// 16 nh + 8 nt + 2 t4 + (e % 2)). Two accumulator pairs (even and odd k-steps) halve the dependent
// MMA chain.
template <bool kF16, int kDqk, int kQStride, int kKStride>
__device__ __forceinline__ void score_tokens_half(float (&sc)[2][4], const uint16_t* sQ, const uint16_t* keys,
                                                  int mt, int nh, int lane) {
  const uint16_t* qa = sQ + (mt * 16 + (lane % 16)) * kQStride + (lane / 16) * 8;
  const uint16_t* kb = keys + (nh * 16 + (lane % 8) + (lane / 16) * 8) * kKStride + ((lane / 8) % 2) * 8;
  constexpr int kSteps = kDqk / 16, kAhead = 2, kBufs = kAhead + 1;
  float sc2[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  uint32_t fa[kBufs][4], fb[kBufs][4];
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    ldmatrix_x4(fa[s], qa + s * 16);
    ldmatrix_x4(fb[s], kb + s * 16);
  }
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if (s + kAhead < kSteps) {
      ldmatrix_x4(fa[(s + kAhead) % kBufs], qa + (s + kAhead) * 16);
      ldmatrix_x4(fb[(s + kAhead) % kBufs], kb + (s + kAhead) * 16);
    }
    float(&d)[2][4] = s % 2 ? sc2 : sc;
    mma_16816<kF16>(d[0], fa[s % kBufs], fb[s % kBufs][0], fb[s % kBufs][1]);
    mma_16816<kF16>(d[1], fa[s % kBufs], fb[s % kBufs][2], fb[s % kBufs][3]);
  }
#pragma unroll
  for (int nt = 0; nt < 2; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) sc[nt][e] += sc2[nt][e];
}

// 8 tokens tok0.. over all of d_qk, rows 16 rt.. (one n8 tile; sc[e]: row gr + 8 (e / 2), token
// tok0 + 2 t4 + (e % 2)): the compact kernel's score product (decode/compact, a warp per 8
// tokens). One ldmatrix x4 of keys covers two k-steps (matrices 2 and 3 are the next step's), and
// the even and odd steps accumulate apart.
template <bool kF16, int kDqk, int kQStride, int kKStride>
__device__ __forceinline__ void score_tokens_n8(float (&sc)[4], const uint16_t* sQ, const uint16_t* keys,
                                                int rt, int tok0, int lane) {
  static_assert(kDqk % 32 == 0, "two k-steps per key load");
  const uint16_t* qa = sQ + (rt * 16 + (lane % 16)) * kQStride + (lane / 16) * 8;
  const uint16_t* kb = keys + (tok0 + (lane % 8)) * kKStride + (lane / 8) * 8;
  constexpr int kPairs = kDqk / 32, kAhead = 2, kBufs = kAhead + 1;
  float sc2[4] = {0.f, 0.f, 0.f, 0.f};
  uint32_t fa[kBufs][2][4], fb[kBufs][4];
  auto load = [&](int buf, int j) {
    ldmatrix_x4(fb[buf], kb + j * 32);
    ldmatrix_x4(fa[buf][0], qa + j * 32);
    ldmatrix_x4(fa[buf][1], qa + j * 32 + 16);
  };
#pragma unroll
  for (int j = 0; j < kAhead; ++j) load(j, j);
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    if (j + kAhead < kPairs) load((j + kAhead) % kBufs, j + kAhead);
    const int b = j % kBufs;
    mma_16816<kF16>(sc, fa[b][0], fb[b][0], fb[b][1]);
    mma_16816<kF16>(sc2, fa[b][1], fb[b][2], fb[b][3]);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) sc[e] += sc2[e];
}

// Tokens tok0 .. tok0 + 16 kBlocks - 1 (2 kBlocks n8 tiles, one accumulator chain each; part[nt]:
// tokens tok0 + 8 nt.., element e row row0 + gr + 8 (e / 2), token tok0 + 8 nt + 2 t4 + (e % 2))
// of rows row0.. over half nh of d_qk, to be added to the other warp's half: per k-step one
// ldmatrix x4 of Q and kBlocks of keys feed 2 kBlocks MMAs. Each warp reads only its half of Q's
// columns, so a pair loads Q's fragments once instead of twice.
// kBlocks 2 (score_dqk_half's name below: all 32 tokens, rows 16 mt..): a quarter fewer ldmatrix
// than the token split, for an exchange of 1 KB per warp and one more pair barrier. Measured on
// the H200 (bench NOTES v11): 1.5-2.7% faster on sparse decode and v32_fp8 dense pages with 64
// rows per CTA, but 3-5.4% slower on v32_fp8 pages with 16 or 32 rows (5-12% with 16-bit keys, 1%
// slower on prefill even with 64), where the extra barrier's latency is not hidden by other pairs'
// work; choosing per CTA at run time cost the 64-row case its gain (both loops in one kernel). So
// it is a Source's compile-time choice (Source::kSplitDqk): sparse decode, whose production shapes
// have h_q 64 or 128, takes it.
// kBlocks 1 (token groups, kGroups 2, CTAs of at most 16 rows: a group's 16 tokens, rows 0-15):
// against each warp taking its 8 tokens over all of d_qk (score_tokens_n8), the four multiplying
// warps read 72 KB of fragments per 32-token tile where that form read 108 KB, for an exchange of
// 4 KB written and read; the partial sums go through shared memory in place of the pair's
// exchange of row maxima (with both sums each warp has the scores of all 16 tokens), so no
// barrier is added.
template <bool kF16, int kDqk, int kQStride, int kKStride, int kBlocks>
__device__ __forceinline__ void score_half_dqk(float (&part)[2 * kBlocks][4], const uint16_t* sQ, const uint16_t* keys,
                                               int row0, int tok0, int nh, int lane) {
  constexpr int kSteps = kDqk / 32;  // k-steps per half
  static_assert(kDqk % 32 == 0, "d_qk splits into two halves of whole k-steps");
  const int k0 = nh * kSteps * 16;
  const uint16_t* qa = sQ + (row0 + (lane % 16)) * kQStride + (lane / 16) * 8 + k0;
  const uint16_t* kb = keys + (tok0 + (lane % 8) + (lane / 16) * 8) * kKStride + ((lane / 8) % 2) * 8 + k0;
  constexpr int kAhead = 2, kBufs = kAhead + 1;
  uint32_t fa[kBufs][4], fb[kBufs][kBlocks][4];
  auto load = [&](int buf, int s) {
    ldmatrix_x4(fa[buf], qa + s * 16);
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) ldmatrix_x4(fb[buf][b], kb + 16 * b * kKStride + s * 16);
  };
#pragma unroll
  for (int s = 0; s < kAhead; ++s) load(s, s);
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if (s + kAhead < kSteps) load((s + kAhead) % kBufs, s + kAhead);
    const int b = s % kBufs;
#pragma unroll
    for (int t = 0; t < kBlocks; ++t) {
      mma_16816<kF16>(part[2 * t], fa[b], fb[b][t][0], fb[b][t][1]);
      mma_16816<kF16>(part[2 * t + 1], fa[b], fb[b][t][2], fb[b][t][3]);
    }
  }
}
template <bool kF16, int kDqk, int kQStride, int kKStride>
__device__ __forceinline__ void score_dqk_half(float (&part)[4][4], const uint16_t* sQ, const uint16_t* keys,
                                               int mt, int nh, int lane) {
  score_half_dqk<kF16, kDqk, kQStride, kKStride, 2>(part, sQ, keys, mt * 16, 0, nh, lane);
}
template <bool kF16, int kDqk, int kQStride, int kKStride>
__device__ __forceinline__ void score_group_half(float (&part)[2][4], const uint16_t* sQ, const uint16_t* keys,
                                                 int tok0, int nh, int lane) {
  score_half_dqk<kF16, kDqk, kQStride, kKStride, 1>(part, sQ, keys, 0, tok0, nh, lane);
}

// ---- key storage ----------------------------------------------------------------------------------
// How a Source stores its keys: quantized records (dequantized through a staging buffer) or 16-bit
// rows copied as they are.
// kV41Mixed: DeepSeek V4.1's pairing, v41_fp8 records for the main cache's candidates and v41_fp4
// ones for the extra cache's (docs/design/fp4-extra-cache-cuda.md); a token's kind is told by its
// pointers (is_fp4_record). This kernel, the compact one and the Hopper one (sm90/records.cuh).
enum class KeyStorage { kV32Fp8, kV4Fp8, kDirect16, kV41Fp8, kV41Mixed };

template <KeyStorage S>
struct StorageTraits;
template <>
struct StorageTraits<KeyStorage::kV32Fp8> {
  static constexpr int kNope = 512;        // e4m3 dims
  static constexpr int kGroup = 128;       // dims per scale
  static constexpr int kRopeDims = 64;     // bf16 dims after the e4m3 ones
  static constexpr int kRopeOffset = 528;  // bytes: after 512 e4m3 and 4 fp32 scales
  static constexpr int kScaleOffset = 512; // bytes: the scales, inside the record
  static constexpr int kDataChunks = 41;   // 16-byte chunks of a 656-byte record
  static constexpr bool kScaleRow = false; // scales inside the record
};
template <>
struct StorageTraits<KeyStorage::kV4Fp8> {
  static constexpr int kNope = 448;
  static constexpr int kGroup = 64;
  static constexpr int kRopeDims = 64;
  static constexpr int kRopeOffset = 448;  // bytes: right after the e4m3 payload
  static constexpr int kScaleOffset = 576; // bytes: where the staged record keeps its scale row
  static constexpr int kDataChunks = 36;   // 576 data bytes
  static constexpr bool kScaleRow = true;  // 8 scale bytes elsewhere in the page
};
// v41_fp8 (DeepSeek V4.1): all 512 dims e4m3 (the RoPE dims quantized too), 16 ue8m0 scales (one per
// 32 dims) right after them in the 528-byte record.
template <>
struct StorageTraits<KeyStorage::kV41Fp8> {
  static constexpr int kNope = 512;
  static constexpr int kGroup = 32;
  static constexpr int kRopeDims = 0;
  static constexpr int kRopeOffset = 528;  // (no RoPE bytes)
  static constexpr int kScaleOffset = 512;
  static constexpr int kDataChunks = 33;   // 528 bytes
  static constexpr bool kScaleRow = false;
};

// kV41Mixed: the v41_fp8 geometry above for the main cache's records, and for the extra cache's
// v41_fp4 records (288 bytes: 256 of e2m1 pairs, the even dim in the low nibble, then 32 e4m3
// scales, one per 16 dims) their 18 chunks, staged at the start of the same record slot.
template <>
struct StorageTraits<KeyStorage::kV41Mixed> : StorageTraits<KeyStorage::kV41Fp8> {
  static constexpr int kFp4Chunks = 18;         // 288 bytes
  static constexpr int kFp4ScaleOffset = 256;   // bytes: the e4m3 scales, inside the record
};
// A v41_fp4 record's scales sit 256 bytes after its data, a v41_fp8 record's 512
// (SparseSource::locate_index): the kind of a kV41Mixed token without a flag of its own.
__device__ __forceinline__ bool is_fp4_record(const uint8_t* data, const uint8_t* scale) {
  return scale - data == StorageTraits<KeyStorage::kV41Mixed>::kFp4ScaleOffset;
}

// Issues the cp.async copies of a tile's quantized records into `raw` (unattended tokens copy
// nothing; their keys are zeroed at dequantization).
template <KeyStorage S, int kRawRecord>
__device__ __forceinline__ void issue_record_copies(const uint8_t* const* data,
                                                    const uint8_t* const* scale, uint8_t* raw,
                                                    int tid) {
  using T = StorageTraits<S>;
  constexpr int kPerToken = T::kDataChunks + (T::kScaleRow ? 1 : 0);
  constexpr int kTotal = kTileTokens * kPerToken;
  constexpr int kIters = (kTotal + kThreads - 1) / kThreads;
  // A fixed trip count, unrolled, with every pointer read before the first copy is issued: one
  // shared-memory round trip for the tile instead of one per copy (the rolled loop waited on each
  // read before its copy).
  const uint8_t* src[kIters];
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int c = tid + i * kThreads, tok = c / kPerToken, part = c % kPerToken;
    src[i] = nullptr;
    if ((kTotal % kThreads == 0 || c < kTotal) && data[tok])
      src[i] = part < T::kDataChunks ? data[tok] + part * 16 : scale[tok];
    if constexpr (S == KeyStorage::kV41Mixed)  // an fp4 record ends after 18 chunks
      if (src[i] && part >= T::kFp4Chunks && is_fp4_record(data[tok], scale[tok])) src[i] = nullptr;
  }
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int c = tid + i * kThreads, tok = c / kPerToken, part = c % kPerToken;
    if (!src[i]) continue;
    uint8_t* dst = raw + tok * kRawRecord;
    if (part < T::kDataChunks) cp_async_16(dst + part * 16, src[i]);
    else cp_async_8(dst + T::kScaleOffset, src[i]);  // v4: the staged record keeps its scale row there
  }
}

// Issues the cp.async copies of a tile's 16-bit keys straight into a key tile; unattended tokens
// get zero keys (plain stores), so that P = 0 never meets garbage (0 x NaN is NaN) in P V.
template <int kDqk, int kStride>
__device__ __forceinline__ void issue_direct_copies(const uint8_t* const* data, uint16_t* keys,
                                                    int tid) {
  constexpr int kChunks = kDqk * 2 / 16;
  constexpr int kTotal = kTileTokens * kChunks;
  constexpr int kIters = (kTotal + kThreads - 1) / kThreads;
  // As issue_record_copies: every pointer read first, then the copies.
  const uint8_t* src[kIters];
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int c = tid + i * kThreads;
    src[i] = kTotal % kThreads == 0 || c < kTotal ? data[c / kChunks] : nullptr;
  }
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int c = tid + i * kThreads;
    if (kTotal % kThreads != 0 && c >= kTotal) break;
    const int tok = c / kChunks, part = c % kChunks;
    uint16_t* dst = keys + tok * kStride + part * 8;
    if (src[i]) cp_async_16(dst, src[i] + part * 16);
    else *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
  }
}

// ---- bulk copies of 16-bit key rows (sm_90) -------------------------------------------------------
// On sm_90 a tile's 16-bit key rows come by one bulk copy per row (cp.async.bulk, executed by the
// copy engine, completing on an mbarrier), issued by one warp: one bulk-copy instruction (32
// lanes) per tile instead of 2304 16-byte cp.async at d_qk 576 (2048 at 512) spread over every
// thread (prefill's stall profile, bench NOTES v12: 18%
// of the samples in issuing a tile's copies and looking its keys up). The last warps issue them
// (with at most 48 rows per CTA the last head tile has no rows, so the copies stay off the
// working warps' chains; issued by the first warp, a working one, the 16-32-row dense cases ran
// 14-20% slower than with cp.async). A bulk copy takes its addresses in uniform registers, so a
// warp issues its lanes' copies one lane at a time (a loop of ~8 instructions per copy), and
// how many warps share a tile (Geometry::copy_warps, launch.h copy_warps_for) sets how long
// that loop is on each: two or four issuers made the kernels 5-26% faster than one (bench
// NOTES v14).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
inline constexpr bool kArchBulkCopy = true;
#else
inline constexpr bool kArchBulkCopy = false;
#endif

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One plain arrival (the Hopper kernels' stage hand-overs, decode/sm90).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_addr(bar)) : "memory");
}
// One arrival announcing `bytes` of bulk copies in this phase.
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// Waits until the phase of parity `parity` has completed (its arrivals and bytes). (A poll counter
// that traps after 2^26 polls, to turn a protocol error into a launch error, cost the sm90
// warp-specialised kernel's warpgroup 1 its register headroom: its accumulators spilled.
// scripts/gpu.sh runs a one-minute guard test first instead.)
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// Orders this thread's earlier generic-proxy shared-memory accesses before later async-proxy
// (bulk copy) ones: a key row zeroed by plain stores may be a bulk copy's target in a later tile.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// An issuing warp's part: lane i < rows copies token i's row of the warp's `rows` tokens (kDqk
// 16-bit values, its bytes announced on `bar` by lane 0: one arrival per issuing warp), and the
// warp zeroes the rows of its unattended tokens with plain stores (so that P = 0 never meets
// garbage in P V): per row, warp-wide 16-byte stores (2 at d_qk 512, 3 at 576, the last partial).
template <int kDqk, int kStride>
__device__ __forceinline__ void issue_bulk_copies(const uint8_t* const* data, uint16_t* keys, uint64_t* bar,
                                                  int lane, int rows) {
  constexpr unsigned kRowBytes = kDqk * 2;
  static_assert(kRowBytes % 16 == 0 && (kStride * 2) % 16 == 0, "bulk copies move 16-byte multiples to 16-byte aligned rows");
  const unsigned mine = rows >= 32 ? 0xffffffffu : (1u << rows) - 1u;
  const uint8_t* src = lane < rows ? data[lane] : nullptr;
  const unsigned valid = __ballot_sync(0xffffffffu, src != nullptr);
  if (~valid & mine) {  // warp-uniform; the fence only where plain stores were made
    for (unsigned m = ~valid & mine; m; m &= m - 1) {
      uint16_t* row = keys + (__ffs(m) - 1) * kStride;
      for (int c = lane; c < static_cast<int>(kRowBytes / 16); c += 32)
        reinterpret_cast<uint4*>(row)[c] = make_uint4(0, 0, 0, 0);
    }
    fence_proxy_async_smem();
  }
  __syncwarp();
  if (lane == 0) mbar_arrive_expect(bar, __popc(valid) * kRowBytes);
  if (src) bulk_copy_g2s(keys + lane * kStride, src, kRowBytes, bar);
}

// The records' counterpart (quantized storage on sm_90): lane i < rows copies token i's record data (656
// bytes v32, 576 v4, 528 v41) into the staging buffer by one bulk copy on `bar`; a v4 record's 8 scale
// bytes, elsewhere in the page and too short for a bulk copy, by cp.async as before (awaited with
// the thread's cp.async groups). Unattended tokens copy nothing (their keys are zeroed at
// dequantization), so no plain store meets a bulk copy's target.
template <KeyStorage S, int kRawRecord>
__device__ __forceinline__ void issue_bulk_records(const uint8_t* const* data, const uint8_t* const* scale,
                                                   uint8_t* raw, uint64_t* bar, int lane, int rows) {
  using T = StorageTraits<S>;
  constexpr unsigned kDataBytes = T::kDataChunks * 16;
  static_assert(kRawRecord % 16 == 0, "bulk copies land on 16-byte aligned records");
  static_assert(kDataBytes + (T::kScaleRow ? 8 : 0) <= kRawRecord, "a record's data and scale bytes fit its slot");
  const uint8_t* src = lane < rows ? data[lane] : nullptr;
  if constexpr (S == KeyStorage::kV41Mixed) {
    // Each record its own size: 528 bytes (v41_fp8) or 288 (v41_fp4), announced as their sum.
    const unsigned bytes = !src ? 0u : is_fp4_record(src, scale[lane]) ? T::kFp4Chunks * 16u : kDataBytes;
    const unsigned total = __reduce_add_sync(0xffffffffu, bytes);
    if (lane == 0) mbar_arrive_expect(bar, total);
    if (src) bulk_copy_g2s(raw + lane * kRawRecord, src, bytes, bar);
    return;
  }
  const unsigned valid = __ballot_sync(0xffffffffu, src != nullptr);
  if (lane == 0) mbar_arrive_expect(bar, __popc(valid) * kDataBytes);
  if (src) {
    uint8_t* dst = raw + lane * kRawRecord;
    bulk_copy_g2s(dst, src, kDataBytes, bar);
    if constexpr (T::kScaleRow) cp_async_8(dst + kDataBytes, scale[lane]);
  }
}

// 16 e2m1 codes (8 bytes, each byte's low nibble the even dim) times an e4m3 scale whose value is in
// both bf16 halves of s2, to 16 bf16, dims in order: the codes as bf16 pairs of value x 2^-126
// (num::e2m1x8_as_bf16x2_scaled: e2m1's 0.5 is a bf16 subnormal there), times 2^126 (exact: every
// value becomes a normal bf16), times the scale (exact: a 2-bit by a 4-bit significand, inside
// bf16's range; a NaN scale gives NaN). So the result is the bf16 of the fp32 product code x scale
// that formats::decode_unit<v41_fp4> rounds, in two bf16x2 multiplies per pair. Both attention
// kernels take it (the Hopper one through sm90::dequant16_e2m1).
__device__ __forceinline__ void dequant16_e2m1_bf16(const uint32_t x, const uint32_t y, uint32_t s2, uint4& lo, uint4& hi) {
  constexpr uint32_t kTwo126 = 0x7e807e80u;  // bf16 2^126 in both halves
  uint32_t out[8];
  num::e2m1x8_as_bf16x2_scaled(x, out);
  num::e2m1x8_as_bf16x2_scaled(y, out + 4);
#pragma unroll
  for (int b = 0; b < 8; ++b) out[b] = mul_bf16x2(mul_bf16x2(out[b], kTwo126), s2);
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}
// The same with the scale as fp32 (an e4m3 value, so pack_bf16 keeps it exactly).
__device__ __forceinline__ void dequant16_e2m1(const uint2 raw, float s, uint4& lo, uint4& hi) {
  dequant16_e2m1_bf16(raw.x, raw.y, pack_bf16(s, s), lo, hi);
}

// One 16-dim chunk of a staged kV41Mixed record, read and converted by its record's kind: a
// v41_fp4 chunk is 8 bytes at 8 part (kept in raw.x, raw.y) with its e4m3 scale byte (code) at
// 256 + part, a v41_fp8 chunk 16 bytes at 16 part with its record's ue8m0 byte for those dims. Loads and
// conversion are apart so that callers can issue several chunks' loads first. The portable and the
// compact kernels take these, so both stage the same key bytes (and the Hopper kernel's records.cuh
// converts fp4 chunks by the same dequant16_e2m1_bf16).
__device__ __forceinline__ void load_mixed_chunk(const uint8_t* rec, int part, bool fp4, uint4& raw, uint32_t& code) {
  using T = StorageTraits<KeyStorage::kV41Mixed>;
  if (fp4) {
    const uint2 half = *reinterpret_cast<const uint2*>(rec + part * 8);
    raw = make_uint4(half.x, half.y, 0, 0);
    code = rec[T::kFp4ScaleOffset + part];
  } else {
    raw = *reinterpret_cast<const uint4*>(rec + part * 16);
    code = rec[T::kScaleOffset + part * 16 / T::kGroup];
  }
}
__device__ __forceinline__ void dequant_mixed_chunk(const uint4 raw, uint32_t code, bool fp4, uint4& lo, uint4& hi) {
  if (fp4) dequant16_e2m1(make_uint2(raw.x, raw.y), num::e4m3_to_f32(static_cast<uint8_t>(code)), lo, hi);
  else dequant16_f32(raw, num::ue8m0_to_f32(static_cast<uint8_t>(code)), lo, hi);
}

// kV41Mixed (dequantize_tile's): every token's 32 chunks of 16 dims, each by its record's kind.
// A warp's 32 chunks are one token's, so the kind's branch is uniform within every warp. As in the
// single-kind path below, the loads of a batch of chunks (two; kIdleBatch in the idle warps' form)
// are issued before any is converted, so that their shared-memory latencies overlap (an fp4 chunk
// loads 8 bytes and its scale byte, an fp8 one 16 bytes and its ue8m0 byte).
template <int kRawRecord, int kStride, int kDqThreads>
__device__ __forceinline__ void dequantize_tile_mixed(const uint8_t* const* tile_data, const uint8_t* const* tile_scale,
                                                      const uint8_t* raw_tile, uint16_t* keys, int tid) {
  using T = StorageTraits<KeyStorage::kV41Mixed>;
  constexpr int kChunks = T::kNope / 16, kTotal = kTileTokens * kChunks;
  constexpr int kIters = kTotal / kDqThreads, kBatch = kDqThreads < kThreads ? kIdleBatch : 2;
  static_assert(kTotal % kDqThreads == 0 && kIters % kBatch == 0, "whole iterations and batches");
#pragma unroll
  for (int i0 = 0; i0 < kIters; i0 += kBatch) {
    uint4 raw[kBatch];
    uint32_t code[kBatch];  // the chunk's scale byte: e4m3 (fp4 records) or ue8m0 (fp8 ones)
    bool live[kBatch], fp4[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int c = tid + (i0 + j) * kDqThreads, tok = c / kChunks, part = c % kChunks;
      const uint8_t* data = raw_tile + tok * kRawRecord;
      live[j] = tile_data[tok] != nullptr;
      fp4[j] = live[j] && is_fp4_record(tile_data[tok], tile_scale[tok]);
      load_mixed_chunk(data, part, fp4[j], raw[j], code[j]);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int c = tid + (i0 + j) * kDqThreads, tok = c / kChunks, part = c % kChunks;
      uint4 lo, hi;
      dequant_mixed_chunk(raw[j], code[j], fp4[j], lo, hi);
      if (!live[j]) lo = hi = make_uint4(0, 0, 0, 0);
      uint16_t* dst = keys + tok * kStride + part * 16;
      *reinterpret_cast<uint4*>(dst) = lo;
      *reinterpret_cast<uint4*>(dst + 8) = hi;
    }
  }
}

// Dequantizes a tile of staged records into bf16 keys; unattended tokens become zeros. Two passes
// with fixed trip counts (NoPE chunks, then RoPE chunks; v41 records have no RoPE pass), unrolled and without branches: an
// unattended token's staging bytes (stale, never written for this tile, but inside the buffer) are
// converted like the others and the result replaced by zeros, so that the loads of several chunks
// are in flight at once (a rolled loop with a branch per chunk waited out each load in turn).
// By kDqThreads threads (tid 0 ..): the whole CTA, or the idle half of its warps (the kernel's
// idle_dequant).
// kAllLive: the caller has checked that every token of the tile is attended, so no pointer is read
// and nothing is zeroed (dequantize_tile_voted).
template <KeyStorage S, int kDqk, int kRawRecord, int kStride, int kDqThreads = kThreads, bool kAllLive = false>
__device__ __forceinline__ void dequantize_tile(const uint8_t* const* tile_data, const uint8_t* const* tile_scale,
                                                const uint8_t* raw_tile, uint16_t* keys, int tid) {
  if constexpr (S == KeyStorage::kV41Mixed) {
    dequantize_tile_mixed<kRawRecord, kStride, kDqThreads>(tile_data, tile_scale, raw_tile, keys, tid);
    return;
  }
  (void)tile_scale;
  using T = StorageTraits<S>;
  constexpr int kChunksNope = T::kNope / 16;  // 16 e4m3 bytes per chunk
  constexpr int kChunksRope = 64 * 2 / 16;    // 8 bf16 per chunk
  constexpr bool kHasRope = T::kRopeDims > 0;
  static_assert(T::kNope + T::kRopeDims == kDqk, "NoPE + RoPE dims");
  static_assert(T::kRopeDims == 0 || T::kRopeDims == 64, "64 bf16 RoPE dims or none");
  constexpr int kNopeTotal = kTileTokens * kChunksNope, kNopeIters = (kNopeTotal + kDqThreads - 1) / kDqThreads;
  constexpr int kRopeIters = kTileTokens * kChunksRope / kDqThreads;
  static_assert(kTileTokens * kChunksRope % kDqThreads == 0, "whole RoPE chunks per thread");
  // The loads of kBatch chunks first, then their conversions and stores (the compiler cannot move
  // loads across the stores, which may alias them); two at a time keeps the overlapped kernel,
  // where O's 128 accumulators are live, within its registers, except in the idle warps' form
  // (config.h, kIdleBatch).
  constexpr int kBatch = kDqThreads < kThreads ? kIdleBatch : 2;
  // v32_fp8 (512 NoPE dims, 32 chunks per token: a warp's 32 lanes take one token's): the chunk of
  // part l converts dims 8 l.. and kHalf + 8 l.. (kHalf = 256), so that each of a lane's two
  // 16-byte stores lands next to its neighbours' (a warp's store covers 512 contiguous bytes: 4
  // shared-memory wavefronts). With 16 contiguous dims per lane each store spanned 1 KB at a
  // 32-byte stride, a 2-way bank conflict: 8 wavefronts. Measured on an H100 (bench/NOTES.md v54):
  // 0.963-0.981 the time of the v32_fp8 cases; the same for v4_fp8 records (28 chunks per token, so
  // a warp's chunks span two tokens, and two ue8m0 scales per chunk) 1.014-1.017, so not there.
  // The same bytes land in the same places either way. Only where the conversion goes through fp32
  // (kF32Form, below): the fast form of sm_80 code keeps 16 dims per scale.
  // Where the hardware converts e4m3 (sm_89 and newer), through fp32: on the H200 the fast form's
  // checks cost this kernel 1-5% more than the conversions they save (bench/NOTES.md v38). Code
  // without that conversion (sm_80, sm_86, and the compute_80 PTX that newer GPUs compile) takes
  // the fast form where it is exact instead of converting in software.
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890) || (defined(LKV_PORTABLE_F32_DEQUANT) && LKV_PORTABLE_F32_DEQUANT)
  constexpr bool kF32Form = true;
#else
  constexpr bool kF32Form = false;
#endif
  constexpr bool kHalves = kF32Form && S == KeyStorage::kV32Fp8;
  constexpr int kHalf = T::kNope / 2;
  static_assert(!kHalves || (kHalf == 256 && T::kGroup == 128), "v32_fp8: 8-dim halves, each inside one scale group");
  // RoPE chunks (16-bit, copied as they are): the first is loaded before the NoPE pass and stored
  // after it; the second of the idle warps' form (kDqThreads 128) follows the NoPE pass, so that no
  // more than one chunk is held across it (the packed dense kernel has no registers to spare).
  uint4 rope[kRopeIters];
  bool rope_live[kRopeIters];
  auto load_rope = [&](int i) {
    rope[i] = make_uint4(0, 0, 0, 0);
    rope_live[i] = false;
    if constexpr (kHasRope) {
      const int c = tid + i * kDqThreads, rope_tok = c / kChunksRope, rope_r = c % kChunksRope;
      rope[i] = *reinterpret_cast<const uint4*>(raw_tile + rope_tok * kRawRecord + T::kRopeOffset + rope_r * 16);
      rope_live[i] = kAllLive || tile_data[rope_tok] != nullptr;
    }
  };
  if constexpr (kHasRope) load_rope(0);
#pragma unroll
  for (int i0 = 0; i0 < kNopeIters; i0 += kBatch) {
    uint4 nope[kBatch];
    float scale[kBatch], scale_hi[kBatch];
    bool live[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      // Past the end (only where the threads do not divide the chunks): a repeat, not stored. Where
      // they divide them, no clamp (a min per chunk that cannot change c).
      const int c0 = tid + (i0 + j) * kDqThreads;
      const int c = kNopeTotal % kDqThreads == 0 ? c0 : min(c0, kNopeTotal - 1);
      const int tok = c / kChunksNope, part = c % kChunksNope;
      const uint8_t* data = raw_tile + tok * kRawRecord;
      if constexpr (kHalves) {
        const int g_lo = part * 8 / T::kGroup, g_hi = (kHalf + part * 8) / T::kGroup;
        const float* scales = reinterpret_cast<const float*>(data + T::kScaleOffset);
        scale[j] = scales[g_lo];
        scale_hi[j] = scales[g_hi];
        const uint2 a = *reinterpret_cast<const uint2*>(data + part * 8);
        const uint2 b = *reinterpret_cast<const uint2*>(data + kHalf + part * 8);
        nope[j] = make_uint4(a.x, a.y, b.x, b.y);
      } else {
        const int group = part * 16 / T::kGroup;
        if constexpr (S == KeyStorage::kV32Fp8) scale[j] = reinterpret_cast<const float*>(data + T::kScaleOffset)[group];
        else scale[j] = num::ue8m0_to_f32(data[T::kScaleOffset + group]);
        nope[j] = *reinterpret_cast<const uint4*>(data + part * 16);
      }
      live[j] = kAllLive || tile_data[tok] != nullptr;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int c = tid + (i0 + j) * kDqThreads;
      if (i0 + j >= kNopeIters || (kNopeTotal % kDqThreads != 0 && c >= kNopeTotal)) break;
      const int tok = c / kChunksNope, part = c % kChunksNope;
      uint4 lo, hi;
      if constexpr (kHalves) dequant8x2_f32(nope[j], scale[j], scale_hi[j], lo, hi);
      else if constexpr (kF32Form) dequant16_f32(nope[j], scale[j], lo, hi);
      else dequant16(nope[j], scale[j], lo, hi);
      if (!kAllLive && !live[j]) lo = hi = make_uint4(0, 0, 0, 0);
      // (kHalves: dims 8 part.. and kHalf + 8 part..; else 16 part.., 8 dims each.)
      uint16_t* dst = keys + tok * kStride + part * (kHalves ? 8 : 16);
      *reinterpret_cast<uint4*>(dst) = lo;
      *reinterpret_cast<uint4*>(dst + (kHalves ? kHalf : 8)) = hi;
    }
  }
  if constexpr (kHasRope) {
#pragma unroll
    for (int i = 1; i < kRopeIters; ++i) load_rope(i);
#pragma unroll
    for (int i = 0; i < kRopeIters; ++i) {
      const int c = tid + i * kDqThreads, rope_tok = c / kChunksRope, rope_r = c % kChunksRope;
      *reinterpret_cast<uint4*>(keys + rope_tok * kStride + T::kNope + rope_r * 8) =
          rope_live[i] ? rope[i] : make_uint4(0, 0, 0, 0);
    }
  }
}

// dequantize_tile for whole warps: a tile whose 32 tokens are all attended (every tile but a
// sequence's last, as a rule) takes the kAllLive body, with no pointer read and no zeroing per chunk
// (one vote per warp and tile instead of a pointer load, a 64-bit test and eight selects per chunk;
// bench/NOTES.md v51). Not for v41 records: kV41Mixed's body has no such form, and with kV41Fp8 the
// second body spills in a sparse token-group kernel.
template <KeyStorage S, int kDqk, int kRawRecord, int kStride, int kDqThreads = kThreads>
__device__ __forceinline__ void dequantize_tile_voted(const uint8_t* const* tile_data, const uint8_t* const* tile_scale,
                                                      const uint8_t* raw_tile, uint16_t* keys, int tid, int lane) {
  static_assert(kTileTokens == 32, "one token per lane");
  constexpr bool kVote = S != KeyStorage::kV41Mixed && S != KeyStorage::kV41Fp8;
  if (kVote && __all_sync(0xffffffffu, tile_data[lane] != nullptr))
    dequantize_tile<S, kDqk, kRawRecord, kStride, kDqThreads, kVote>(tile_data, tile_scale, raw_tile, keys, tid);
  else
    dequantize_tile<S, kDqk, kRawRecord, kStride, kDqThreads>(tile_data, tile_scale, raw_tile, keys, tid);
}

// A CTA's query rows under Geometry::pack. Row group `group` (the grid's row index) is r1 with the
// queries r2_0 .. r2_0 + count - 1; CTA row lr (lr < count x heads, heads being the CTA's heads per
// query: all of its kv head's when packing) is query r2_0 + lr / heads and head lr % heads of the
// CTA's first. The Source is built for the last query, which sees the most keys; with pack_causal
// query r2 sees `visible - (r2_last - r2)` of them (one per position it is earlier).
// kPacks false (Source::kPacksRows false: pack is 1): one query per CTA, known at compile time, so
// that sparse decode, prefill and unpacked dense launches carry no packing arithmetic.
template <bool kPacks>
struct PackedRows {
  int64_t group, r1, r2_0, count;
  __device__ PackedRows(const Geometry& g, int64_t grp) : group(grp) {
    if constexpr (kPacks) {
      const int64_t groups = (g.n2 + g.pack - 1) / g.pack;
      group += g.r1_begin * groups;
      r1 = group / groups;
      r2_0 = (group % groups) * g.pack;
      count = min(g.pack, g.n2 - r2_0);
    } else {
      group += g.r1_begin * g.n2;
      r1 = group / g.n2;
      r2_0 = group % g.n2;
      count = 1;
    }
  }
  __device__ int64_t r2_last() const { return r2_0 + count - 1; }
  // (32-bit: lr < 64 and 1 <= heads <= 64.)
  __device__ int64_t r2(int lr, int64_t heads) const { return r2_0 + query(lr, heads); }
  // CTA row lr's query within the group (0 .. count - 1).
  __device__ int64_t query(int lr, int64_t heads) const { return kPacks ? lr / static_cast<int>(heads) : 0; }
  __device__ int64_t head(int lr, int64_t heads) const { return kPacks ? lr % static_cast<int>(heads) : lr; }
  // The query row (r1 n2 + r2) of CTA row lr: the split partials' row.
  __device__ int64_t row(const Geometry& g, int lr, int64_t heads) const {
    return kPacks ? r1 * g.n2 + r2(lr, heads) : group;
  }
  // The candidates, relative to k_begin, that CTA row lr sees under packed causal rows
  // (`visible` is the Source's count, the last query's; rows past rows_here see none); INT64_MAX
  // (all) otherwise.
  __device__ int64_t row_limit(const Geometry& g, int lr, int64_t heads, int64_t rows_here, int64_t visible,
                               int64_t k_begin) const {
    if (!kPacks || !g.pack_causal) return INT64_MAX;
    if (lr >= rows_here) return 0;
    const int64_t v = visible - (r2_last() - r2(lr, heads));
    return (v < 0 ? 0 : v) - k_begin;
  }
};

// ---- the end of a query row (this kernel and the compact one, decode/compact/kernel.cuh) -----------
// CTA row lr's normalisation and stores, by the thread holding its element rows 2 r, 2 r + 1 of
// kTiles n8 tiles of O (dims dim0 + 8 n + 2 t4), once its sum over every key and its final maximum
// (row_max, log2 domain) are known. Lonely means no valid key (sum exactly 0: the best key alone
// contributes exp2(0) = 1); a NaN sum is not lonely, so NaN reaches out and lse, as on the CPU.
// Unsplit: out (16-bit) and, by the thread with `stats`, the natural-log lse (+inf when lonely) and
// max_logits, the sink's factor applied. Split: the fp32 partial row and its lse (-inf when lonely,
// so that the combine gives the split no weight) and maximum; the sink is the combine's.
// stage (unsplit only; may be null): the row's out values go there (shared memory, the row's
// element dim0) instead of to out, for the caller to store whole rows (store_staged_rows).
template <bool kF16, int kTiles, bool kPacks>
__device__ __forceinline__ void finish_row(const Geometry& g, const OutRef& o, const PackedRows<kPacks>& pr, int lr,
                                           int64_t heads_here, int64_t h0, int64_t split, float sum, float row_max,
                                           const float (&acc)[kTiles][4], int r, int dim0, bool stats, int t4,
                                           uint16_t* stage = nullptr) {
  const int64_t h = h0 + pr.head(lr, heads_here), r2 = pr.r2(lr, heads_here), r1 = pr.r1;
  const bool lonely = sum == 0.0f;
  const float lse_split = lonely ? -INFINITY : (row_max + __log2f(sum)) * kLn2;
  const float max_logit = lonely ? -INFINITY : row_max * kLn2;
  float factor = lonely ? 0.0f : 1.0f / sum;
  if (g.num_splits == 1 && !lonely && o.sink) {
    const float sink = o.sink[h];
    factor *= (sink == INFINITY) ? 0.0f : 1.0f / (1.0f + expf(sink - lse_split));
  }
  if (g.num_splits == 1) {
    uint16_t* out = stage ? stage : o.out + r1 * o.stride_out_r1 + r2 * o.stride_out_r2 + h * o.stride_out_h + dim0;
#pragma unroll
    for (int n = 0; n < kTiles; ++n)
      *reinterpret_cast<uint32_t*>(out + n * 8 + 2 * t4) = pack2<kF16>(acc[n][2 * r] * factor, acc[n][2 * r + 1] * factor);
    if (stats) {
      o.lse[r1 * o.stride_lse_r1 + r2 * o.stride_lse_r2 + h * o.stride_lse_h] = lonely ? INFINITY : lse_split;
      if (o.max_logits) o.max_logits[r1 * o.stride_max_r1 + r2 * o.stride_max_r2 + h * o.stride_max_h] = max_logit;
    }
  } else {
    const int64_t prow = (pr.row(g, lr, heads_here) * g.h_q + h) * g.num_splits + split;
    float* out = g.partial_out + prow * kDimV + dim0;
#pragma unroll
    for (int n = 0; n < kTiles; ++n)
      *reinterpret_cast<float2*>(out + n * 8 + 2 * t4) = make_float2(acc[n][2 * r] * factor, acc[n][2 * r + 1] * factor);
    if (stats) {
      g.partial_lse[prow] = lse_split;
      if (g.partial_max) g.partial_max[prow] = max_logit;
    }
  }
}

// Rows 0..rows - 1 of out, staged in shared memory (row lr at stage + lr * kStride, finish_row's
// values) by the CTA's kThreads threads, 16 bytes each: each warp stores 512 contiguous bytes at a
// time. (finish_row's own stores put 16 bytes per row and fragment row group, so a warp's store
// touched 8 rows; with every CTA of a wave ending together, the end took ~8 us on an H100 against
// ~2 us for the Hopper kernel's staged stores: bench/NOTES.md v56.)
template <int kStride, int kThreads, bool kPacks>
__device__ __forceinline__ void store_staged_rows(const OutRef& o, const PackedRows<kPacks>& pr, int64_t rows,
                                                  int64_t heads_here, int64_t h0, const uint16_t* stage, int tid) {
  constexpr int kChunks = kDimV / 8;  // 16-byte chunks per row
  for (int c = tid; c < rows * kChunks; c += kThreads) {
    const int lr = c / kChunks, col = (c % kChunks) * 8;
    const int64_t h = h0 + pr.head(lr, heads_here), r2 = pr.r2(lr, heads_here);
    uint16_t* out = o.out + pr.r1 * o.stride_out_r1 + r2 * o.stride_out_r2 + h * o.stride_out_h + col;
    *reinterpret_cast<uint4*>(out) = *reinterpret_cast<const uint4*>(stage + lr * kStride + col);
  }
}

// ---- the kernel -----------------------------------------------------------------------------------
// Source requirements (see the three source.cuh files):
//   typename Args;                            the op's key-side arguments
//   static constexpr int kDqk;                512 or 576
//   static constexpr bool kF16;               q, keys and out are f16 (else bf16)
//   static constexpr KeyStorage kStorage;
//   static constexpr bool kSplitDqk;          the score product's shape (score_dqk_half, else
//                                             score_tokens_half); quantized storage only
//   static constexpr bool kPacksRows;         Geometry::pack may exceed 1 (CTA rows of several query
//                                             tokens, PackedRows, with per-row causal limits under
//                                             pack_causal); compiled out otherwise, as the per-row
//                                             masks cost the softmax a few percent
//   __device__ Source(const Args&, int64_t r1, int64_t r2, int64_t kv_head);
//   __device__ int64_t candidates() const;    candidate positions of this row (an upper bound
//                                             the host planned for: keys_per_split * num_splits)
//   __device__ const uint8_t* locate(const Args&, int64_t k, const uint8_t** scale) const;
//                                             the key bytes of candidate k, null if not attended
//                                             (the sm90 kernels' lookup; this kernel uses the two
//                                             steps below)
//   __device__ int32_t raw_index(const Args&, int64_t k) const;
//                                             locate()'s one global load (an index or block-table
//                                             entry), issued a tile before it is used
//   __device__ const uint8_t* locate_index(const Args&, int64_t k, int32_t raw, const uint8_t** scale) const;
//                                             the rest of locate(), no memory access
//
// kWide (for devices with more than 163 KB of shared memory per CTA; for 16-bit keys sm_90 only:
// three key tiles, kDeep below): quantized storage gets two key tiles, so the records of tile
// t + 1 are dequantized while tile t is multiplied. Dequantization
// runs on the CUDA cores and the products on the tensor cores; in separate phases (the narrow
// layout) their times add up, here warps that finish their score products early dequantize while
// the others still multiply.
//
// kGroups (1 or 2; the host takes 2 for CTAs of at most 16 rows, decode::cuda::token_groups_pay;
// unsplit score shape only): with 1, head tile mt (warps 2 mt, 2 mt + 1) takes all 32 tokens of
// every tile. A CTA of at most 16 rows leaves three of its four head tiles without rows, so their
// warps only copy, and the tile's products run on the two warps that remain, one dependent chain
// each on two of the four sub-partitions. With 2, the warp pairs form two token groups over the
// same rows: pair mt takes rows 16 (mt / 2).. and tokens 16 (mt % 2).. of every tile, with its own
// running maximum, sum and O, and the end merges the groups by their maxima. Each warp's chain per
// tile halves and four warps multiply; each group reads Q (an n8 tile per warp instead of two: more
// ldmatrix per MMA), which is why 32-row CTAs, whose two working pairs already fill the four
// sub-partitions, measured slower with groups.
//
// kRoles (16-bit keys in the deep layout on sm_90, one group, CTAs of at most 32 rows; the host
// takes it where decode::cuda::roles_pay): the warps that would idle become score warps. Warps 4-7
// (row tile (w - 4) / 2, token half w % 2) compute tile t's scores, masked and scaled, into shared
// memory with their rows' maxima, while warps 0-3 (row tile w / 2, dims 256 (w % 2)..) run the
// softmax and the value product of tile t - 1 from the scores stored a barrier earlier: one
// CTA-wide barrier per tile orders both hand-offs, and each tile's time is the longer of the two
// chains instead of their sum. With 16 rows the four working warps share sub-partitions 0 and 1
// (warp w issues on w % 4), a score and a value warp on each, which measured 7% faster than one
// working warp on each of the four (bench/NOTES.md, v13c); the last two warps issue the bulk
// copies, 16 rows each (with more than 16 rows they are working score warps, and one issuer
// would carry all 32 copies on its chain). The value warps read every score of their rows; the products and
// the order of the sums are the one-role kernel's, but where ptxas fuses a multiply into an add
// differs, so the two agree to rounding, not bitwise.
template <class Source, bool kWide, int kGroups = 1, bool kRoles = false>
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
    attend_kernel(const KernelParams<typename Source::Args> p) {
  // Programmatic dependent launch (cuda_common/pdl.cuh): a plan's second launch may be scheduled
  // once every CTA of the first has started (Geometry::early_dependents), the combine once every CTA
  // has exited. A second launch (r1_begin > 0) reads nothing the first one writes, but completes
  // only after it, so stream order holds after both. A call's first launch with PDL
  // (Geometry::pdl_first) waits for the kernel ahead of the call before anything else, and lets its
  // dependents in only after that wait, so that a second launch, which does not wait at entry,
  // starts only once that kernel has completed.
  if (waits_at_entry(p.g)) cuda_common::pdl_wait();
  if (p.g.early_dependents) cuda_common::pdl_launch_dependents();
  const cuda_common::PdlWaitAtExit pdl_wait_at_exit;
  constexpr int kDqk = Source::kDqk;
  constexpr bool kF16 = Source::kF16;
  constexpr KeyStorage kStorage = Source::kStorage;
  constexpr bool kDirect = kStorage == KeyStorage::kDirect16;
  constexpr bool kOverlap = kWide && !kDirect;
  // 16-bit keys, wide layout (sm_90 only, the host's choice): three key tiles, tiles t + 1 and t + 2
  // in flight while tile t is computed.
  constexpr bool kDeep = kWide && kDirect && kArchBulkCopy;
  // sm_90: key rows (16-bit) or record data (quantized) arrive by bulk copies, completing on one
  // mbarrier per key tile or staging buffer.
  constexpr bool kBulk = kArchBulkCopy;
  // Score and value warps (kRoles); compiled to the one-role kernel where there is no deep layout
  // (the host launches it only on sm_90).
  constexpr bool kRoleMode = kRoles && kDeep;
  // Score product shape: the Source's choice (score_dqk_half, score_tokens_half); the split's
  // exchange area exists for quantized storage only.
  constexpr bool kSplitDqk = Source::kSplitDqk;
  // kFold (the d_qk split in the overlapped layout): each warp of a pair hands the other all four
  // n8 tiles of its half-sums, so both hold all 32 tokens' scores; the rows' maxima then need no
  // exchange and P no trip through shared memory (step 4), one pair barrier per tile instead of
  // three. Its exchange area, 4 KB per pair, fits the overlapped layouts only (SmemLayout's
  // xchg_bytes; the one-key-tile layout keeps A100s' 163 KB).
  constexpr bool kFold = kSplitDqk && kOverlap;
  static_assert(!kSplitDqk || !kDirect, "the d_qk split's exchange area is laid out for quantized storage");
  static_assert(!kRoles || (kDirect && kGroups == 1 && !Source::kSplitDqk),
                "score and value warps: 16-bit keys, one group, the unsplit score shape");
  using L = SmemLayout<kDqk, kDirect, kOverlap || kDeep, kRoleMode>;
  static_assert(!kSplitDqk || L::xchg_bytes == 2 * (kFold ? 4 : 2) * 32 * 16,
                "exchange area: [2 writers][2 or 4 n8 tiles][32 lanes] float4");
  static_assert(kGroups == 1 || (kGroups == 2 && !kSplitDqk), "token groups take the unsplit score shape");
  // The groups' merge passes group 1's O through Q's area: [2 row tiles][2 warps][32 n8 tiles][32 lanes] float4.
  static_assert(kGroups == 1 || L::q_bytes >= 2 * 2 * 32 * 32 * 16, "Q's area holds group 1's O at the end");
  static_assert(kGroups == 1 || L::q_bytes >= 16 * L::q_stride * 2 + 2 * 2 * 2 * 32 * 16,
                "Q's rows 16.. hold the token groups' partial scores");
  constexpr int kGroupTokens = kTileTokens / kGroups;  // tokens of a tile per group: 32 or 16
  constexpr int kNT = kGroupTokens / 16;                // n8 score tiles per warp: 2 or 1
  // Value sharing (kShareV: the overlapped layout with token groups, CTAs of at most 16 rows, where
  // warps 4-7 hold no rows): warps 4-7 take half of each multiplying warp's value product one tile
  // late. Multiplying warp w (pair mt = w / 2, nh = w % 2) accumulates dims 256 nh.. +127 of its
  // rows and tokens, and warp w + 4 dims 256 nh + 128.. +127 of the same rows and tokens, from the P
  // and the row maxima that pair mt leaves in shared memory for tile t, in iteration t + 1 (before
  // it dequantizes tile t + 2 into the key tile that held tile t). So each multiplying warp's chain
  // per tile loses 16 of its 68 MMAs, and every warp holds 64 accumulators instead of 128. (The same
  // for one-group CTAs of 17-32 rows measured 1.18-1.22x the time on the H200: bench/NOTES.md v53.)
  constexpr bool kShareV = kOverlap && kGroups == 2;
  // n8 tiles of O per warp (kShareV: the multiplying warps' half and warps 4-7's, 16 each).
  constexpr int kMulN = kShareV ? 16 : 32;
  // Key pointer buffers (SmemLayout::ptr_bufs says why tile t - 1's is kept).
  constexpr int kPtrBufs = L::ptr_bufs;

  extern __shared__ __align__(16) uint8_t smem[];
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem + L::q_off);
  uint16_t* sK = reinterpret_cast<uint16_t*>(smem + L::k_off);  // [1 or 2][32][k_stride]
  float* sMax = reinterpret_cast<float*>(smem + L::red_off);  // [2][64]
  float* sSum = sMax + 2 * kHeadsPerCta;                      // [2][64]
  // [kPtrBufs][32] data pointers, then [kPtrBufs][32] scale pointers
  const uint8_t** sData = reinterpret_cast<const uint8_t**>(smem + L::slot_off);
  const uint8_t** sScale = sData + kPtrBufs * kTileTokens;
  uint8_t* sRaw = smem + L::raw_off;  // [2][32][raw_record] (quantized storage only)
  uint64_t* sBar = reinterpret_cast<uint64_t*>(smem + L::bar_off);  // [key tiles] (kBulk only)

  const Geometry& g = p.g;
  // (With token groups the indices come from unsigned arithmetic, which the compiler can cheaply
  // recompute after the loop instead of keeping, or spilling, them through it; the one-group
  // kernels keep the form their measurements were made with.)
  const unsigned utid = threadIdx.x;
  const int tid = threadIdx.x, warp = kGroups == 1 ? tid / 32 : static_cast<int>(utid / 32u),
            lane = kGroups == 1 ? tid % 32 : static_cast<int>(utid % 32u);
  // Phase stamps (the Hopper kernel's, decode/sm90/launch.h set_trace; built only with
  // LKV_SM90_TRACE, for `bench decode --trace`): thread 0's view. 0 entry, 1 the prologue's keys
  // resolved, 2 the first tiles' copies issued, 3 Q landed, 4 tile 0 ready (the loop starts),
  // 5 and 6 tiles 0 and 1 done, 7 the loop done, 8 exit (its rows written).
#if defined(LKV_SM90_TRACE)
  auto stamp = [&](int phase) {
    if (p.trace != nullptr && tid == 0) {
      unsigned long long t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      const uint64_t cta = (static_cast<uint64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
      p.trace[cta * sm90::kTracePhases + phase] = t;
    }
  };
#else
  auto stamp = [](int) {};
#endif
  stamp(0);
  // Head tile and token half / dim half. The two warps of a head tile are neighbours (warps 2 mt
  // and 2 mt + 1), so when h_q < 64 leaves head tiles idle, the working warps still sit on
  // different SM sub-partitions (warp w issues on sub-partition w % 4) and their MMAs run on
  // different tensor cores: with h_q 16, warps 0 and 1 rather than 0 and 4 (one sub-partition).
  const int mt = kGroups == 1 ? warp / 2 : static_cast<int>(utid / 64u),
            nh = kGroups == 1 ? warp % 2 : static_cast<int>((utid / 32u) % 2u);
  // Row tile and token group (kGroups): rows 16 rt.. and tokens tb.. of every tile; warp nh's score
  // columns start at wt0 (kNT n8 tiles). With one group: rt = mt, tb = 0, wt0 = 16 nh.
  const int rt = kGroups == 1 ? mt : mt / 2, grp = kGroups == 1 ? 0 : mt % 2;
  const int tb = grp * kGroupTokens, wt0 = tb + nh * 8 * kNT;
  // This pair's P rows (16 x p_stride). With the d_qk split (kSplitDqk) each pair's rows start
  // L::pair_bytes apart and first hold its exchange of partial scores. Otherwise they are addressed
  // as rows mt * 16.. of one contiguous block, the form the committed benchmarks measured: sPair
  // would serve as well, but compiles those kernels to different SASS, not yet measured.
  uint16_t* sP = reinterpret_cast<uint16_t*>(smem + L::p_off);
  uint16_t* sPair = reinterpret_cast<uint16_t*>(smem + L::p_off + mt * L::pair_bytes);
  // (kShareV: tile t's P goes to pair mt + 2 (t % 2)'s rows, the rows of the warps without rows, so
  // that warps 4-7 read it in iteration t + 1 while tile t + 1's is written.)
  auto p_row = [&](int r, int tile) {
    return kSplitDqk ? sPair + r * L::p_stride : sP + ((kShareV ? mt + 2 * (tile & 1) : mt) * 16 + r) * L::p_stride;
  };
  // Token groups: warp `writer` of this pair's partial scores of n8 tile j (score_group_half), in
  // Q's rows 16.. ([2 groups][2 writers][2 tiles][32 lanes] float4).
  auto group_xchg = [&](int writer, int j) -> float4& {
    return reinterpret_cast<float4*>(sQ + 16 * L::q_stride)[((grp * 2 + writer) * 2 + j) * 32 + lane];
  };
  const int gr = lane / 4, t4 = lane % 4;  // MMA fragment row group and column pair
  const int64_t split = blockIdx.z;
  const PackedRows<Source::kPacksRows> pr(g, blockIdx.x);  // the CTA's request r1 and queries (one unless packing)
  const int64_t r1 = pr.r1;
  const int64_t kv_head = blockIdx.y / g.head_blocks_per_kv;
  const int64_t hb0 = static_cast<int64_t>(blockIdx.y % g.head_blocks_per_kv) * kHeadsPerCta;
  const int64_t heads_here = min(static_cast<int64_t>(kHeadsPerCta), g.heads_per_kv - hb0);
  const int64_t h0 = kv_head * g.heads_per_kv + hb0;  // first query head of the CTA
  const int64_t rows_here = pr.count * heads_here;    // CTA rows holding a (query, head)
  // A warp whose 16 rows are all padding (fewer than 64 in this CTA) skips its products: their
  // results are never written, and the other warps then share the SM among fewer.
  const bool active = rt * 16 < rows_here;

  // ---- 1. Q to shared memory by cp.async (16 bytes each), zero rows past the CTA's. Every copy is
  // in flight at once, and the prologue's index loads below go out behind them; the pipeline
  // prologue waits for them (cp_async_wait<0>) before its first CTA barrier. (Plain loads, each
  // stored before the next batch went out, ran in rounds of the memory latency: bench/NOTES.md v56.)
  const uint16_t* q_row = g.q + r1 * g.stride_q_r1 + pr.r2_0 * g.stride_q_r2;  // the group's first query
  for (int c = tid; c < L::q_rows * (kDqk / 8); c += kThreads) {
    const int hr = c / (kDqk / 8), col = (c % (kDqk / 8)) * 8;
    uint16_t* dst = sQ + hr * L::q_stride + col;
    if (hr < rows_here)
      cp_async_16(dst, q_row + pr.query(hr, heads_here) * g.stride_q_r2 + (h0 + pr.head(hr, heads_here)) * g.stride_q_h + col);
    else
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
  }
  cp_async_commit();

  const Source src(p.src, r1, pr.r2_last(), kv_head);
  const int64_t k_begin = split * g.keys_per_split;
  const int64_t k_end = min(src.candidates(), k_begin + g.keys_per_split);
  const int64_t num_tiles = k_end > k_begin ? (k_end - k_begin + kTileTokens - 1) / kTileTokens : 0;
  const float scale_log2 = g.scale * kLog2e;
  // Packed causal rows: this thread's two rows see the candidates below row_lim[r] (relative to
  // k_begin); otherwise every row sees all of them.
  // Held as 32-bit (a split holds fewer than 2^31 candidates, so the clamp changes no comparison):
  // two registers fewer for the whole loop.
  int row_lim[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int lim_rt = kRoleMode && warp >= 4 ? rt - 2 : rt;  // kRoles: score warps mask rows 16 (rt - 2)..
    const int64_t lim = pr.row_limit(g, lim_rt * 16 + gr + 8 * r, heads_here, rows_here, src.candidates(), k_begin);
    row_lim[r] = static_cast<int>(lim < 0 ? 0 : lim > INT32_MAX ? INT32_MAX : lim);
  }

  // Running state per fragment row: rows gr and gr + 8 of this warp's head tile.
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};  // this warp's tokens only (the pair's warps are added at the end)
  float acc[kMulN][4];              // O: 16 heads x 256 dims = 32 n8-tiles (kShareV: 128 dims, 16)
#pragma unroll
  for (int n = 0; n < kMulN; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  // O += P V over one k16 step of tokens (a: P's A fragment; vb: this lane's first V address),
  // two n8 tiles per transposed ldmatrix.
  auto pv_step = [&](const uint32_t (&a)[4], const uint16_t* vb) {
#pragma unroll
    for (int n = 0; n < kMulN; n += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, vb + n * 8);
      mma_16816<kF16>(acc[n], a, b[0], b[1]);
      mma_16816<kF16>(acc[n + 1], a, b[2], b[3]);
    }
  };
  // O's rows times alpha (rows gr and gr + 8). Skipped by warps whose rows all kept their maximum,
  // as they mostly do once a row has seen its largest scores: x * 1 is x for every number x and a
  // NaN stays a NaN, so the output is unchanged (bf16 and f16 outputs carry NaN as the canonical NaN
  // either way). The rescale is 128 multiplies per thread (64 with kShareV), as many warp
  // instructions as a tile's MMAs.
  auto rescale_o = [&](const float (&alpha)[2]) {
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int n = 0; n < kMulN; ++n) {
        acc[n][0] *= alpha[0];
        acc[n][1] *= alpha[0];
        acc[n][2] *= alpha[1];
        acc[n][3] *= alpha[1];
      }
    }
  };

  // ---- Pipeline prologue: keys of tile 0 (now) and tile 1 (in flight), copies of tile 0.
  // A tile's key pointers are found in two steps by the first warp: fetch() issues the one global
  // load (the index or block-table entry, Source::raw_index) and resolve() turns it into pointers
  // a whole iteration later, so that this warp, whose lateness every barrier waits for, does not
  // wait out the load (sampling showed it there, ~5% of the kernel's stalls).
  int64_t pending_k = -1;     // candidate of this thread in the fetched tile; -1: none
  int32_t pending_index = -1;
  auto fetch_into = [&](int64_t tile, int64_t& k, int32_t& index) {
    const int64_t kt = k_begin + tile * kTileTokens + tid;
    k = tile < num_tiles && kt < k_end ? kt : -1;
    if (k >= 0) index = src.raw_index(p.src, k);
  };
  auto resolve_from = [&](int64_t k, int32_t index, int pbuf) {
    const uint8_t** data = &sData[pbuf * kTileTokens + tid];
    const uint8_t** scale = &sScale[pbuf * kTileTokens + tid];
    *data = nullptr;
    *scale = nullptr;
    if (k >= 0) *data = src.locate_index(p.src, k, index, scale);
  };
  auto fetch = [&](int64_t tile) { fetch_into(tile, pending_k, pending_index); };
  auto resolve = [&](int pbuf) { resolve_from(pending_k, pending_index, pbuf); };
  // The pipeline prologue's keys (first warp): the index loads of tiles 0..kN - 1, and of tile kN
  // when kPend (left pending for the loop's first resolve), all issued before any is used; then
  // tiles 0..kN - 1 resolved into pointer buffers 0..kN - 1. (One tile after another, each
  // resolve waiting for its load, they cost kN round trips of the memory latency before the first
  // copy could start.)
  auto prologue_keys = [&](auto n_tiles, auto pend) {
    constexpr int kN = decltype(n_tiles)::value;
    constexpr bool kPend = decltype(pend)::value;
    int64_t k[kN + 1];
    int32_t index[kN + 1];
#pragma unroll
    for (int t = 0; t < kN + (kPend ? 1 : 0); ++t) {
      index[t] = -1;
      fetch_into(t, k[t], index[t]);
    }
#pragma unroll
    for (int t = 0; t < kN; ++t) resolve_from(k[t], index[t], t);
    if constexpr (kPend) {
      pending_k = k[kN];
      pending_index = index[kN];
    }
  };
  // Starts the copies of the keys listed in pointer buffer `pbuf` into key / staging buffer `buf`
  // (with kBulk: bulk copies completing on sBar[buf], issued by the last g.copy_warps warps,
  // kTileTokens / copy_warps tokens each, one arrival each on the tile's mbarrier.)
  const int copy_first = kWarps - g.copy_warps, copy_rows = kTileTokens / g.copy_warps;
  auto issue = [&](int pbuf, int buf) {
    if constexpr (kBulk && kDirect) {
      if (warp >= copy_first) {
        const int t0 = (warp - copy_first) * copy_rows;
        issue_bulk_copies<kDqk, L::k_stride>(sData + pbuf * kTileTokens + t0,
                                             sK + (buf * kTileTokens + t0) * L::k_stride, sBar + buf, lane, copy_rows);
      }
    } else if constexpr (kBulk) {
      if (warp >= copy_first) {
        const int t0 = (warp - copy_first) * copy_rows;
        issue_bulk_records<kStorage, L::raw_record>(sData + pbuf * kTileTokens + t0, sScale + pbuf * kTileTokens + t0,
                                                    sRaw + (buf * kTileTokens + t0) * L::raw_record, sBar + buf, lane,
                                                    copy_rows);
      }
    } else if constexpr (kDirect)
      issue_direct_copies<kDqk, L::k_stride>(sData + pbuf * kTileTokens,
                                             sK + buf * kTileTokens * L::k_stride, tid);
    else
      issue_record_copies<kStorage, L::raw_record>(sData + pbuf * kTileTokens, sScale + pbuf * kTileTokens,
                                                   sRaw + buf * kTileTokens * L::raw_record, tid);
  };
  auto dequantize = [&](int pbuf, int buf, uint16_t* keys_out) {
    if constexpr (!kDirect)
      dequantize_tile_voted<kStorage, kDqk, L::raw_record, L::k_stride>(
          sData + pbuf * kTileTokens, sScale + pbuf * kTileTokens, sRaw + buf * kTileTokens * L::raw_record, keys_out,
          tid, lane);
  };
  // Overlapped layout, token groups, CTAs of at most 16 rows (Geometry::idle_dequant): warps 4-7
  // have no score products, so they dequantize each next tile alone (after their lagged half of
  // the previous tile's value product, kShareV) while warps 0-3 multiply. With equal shares the
  // multiplying warps also dequantize a quarter of the tile each, once warps 4-7 are done with the
  // key tile (named barrier 5). (Measured, before kShareV, against shares of 24 and 20 of the 32
  // tokens for warps 4-7, and against the same for 32-row CTAs, all slower: bench/NOTES.md v50.)
  constexpr bool kIdleDequant = kOverlap && kGroups == 2;
  const bool idle_dequant = kIdleDequant && g.idle_dequant && rows_here <= 16;
  auto dequantize_next = [&](int pbuf, int buf, uint16_t* keys_out) {
    if (!idle_dequant)
      dequantize(pbuf, buf, keys_out);
    else if constexpr (kIdleDequant)
      if (warp >= kWarps / 2)
        dequantize_tile_voted<kStorage, kDqk, L::raw_record, L::k_stride, kThreads / 2>(
            sData + pbuf * kTileTokens, sScale + pbuf * kTileTokens, sRaw + buf * kTileTokens * L::raw_record,
            keys_out, tid - kThreads / 2, lane);
  };
  // kShareV, warps 4-7: their half of tile j's value product for the rows and tokens of pair
  // sp = mt - 2 (keys_j: tile j's key tile), from that pair's P (pair sp + 2 (j % 2)'s rows) and
  // running maxima after tile j (sMax[32 + 64 (j % 2) + 16 sp ..], slots that no warp of this
  // layout uses otherwise), rescaled with the same alpha as the multiplying warps' half: the same
  // operations on the same values. (Pair sp works for token group sp, the sharing pair's own group,
  // on row tile 0.)
  const int sp = mt - 2;
  auto share_value = [&](int j, const uint16_t* keys_j) {
    if constexpr (kShareV) {
      const float* published = sMax + 32 + (j & 1) * 64 + sp * 16;
      float alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float new_max = published[gr + 8 * r];
        alpha[r] = new_max == -INFINITY ? 1.0f : exp2f(row_max[r] - new_max);
        row_max[r] = new_max;
      }
      rescale_o(alpha);
#pragma unroll
      for (int kk = 0; kk < kGroupTokens; kk += 16) {
        uint32_t a[4];
        ldmatrix_x4(a, sP + ((sp + 2 * (j & 1)) * 16 + lane % 16) * L::p_stride + kk + (lane / 16) * 8);
        const uint16_t* vb = keys_j + (tb + kk + (lane % 8) + ((lane / 8) % 2) * 8) * L::k_stride + nh * 256 +
                             8 * kMulN + (lane / 16) * 8;
        pv_step(a, vb);
      }
    }
  };
  // kShareV: whether this warp is one of warps 4-7, which take no part in the score products and
  // the softmax, and the row tile its O belongs to (vrt), whose rows it writes if it holds any.
  const bool sharer = kShareV && warp >= kWarps / 2;
  const int vrt = sharer ? 0 : rt;
  const bool v_active = vrt * 16 < rows_here;
  // Deep and role layouts (16-bit keys on sm_90): tiles 0 and 1 resolved and their copies started
  // on one mbarrier per key tile, tile 2's index loads issued.
  auto start_two_tiles = [&] {
    if (tid < kTileTokens) prologue_keys(std::integral_constant<int, 2>{}, std::true_type{});
    if (tid == 0) {
      for (int b = 0; b < L::key_tiles; ++b) mbar_init(&sBar[b], g.copy_warps);
      mbar_init_fence();
    }
    cp_async_wait<0>();  // Q (step 1)
    __syncthreads();
    issue(0, 0);
    issue(1, 1);
  };
  if constexpr (kRoleMode) {
    static_assert(kPtrBufs == 4 && L::key_tiles == 4, "the role loop indexes pointer buffers and key tiles % 4");
    float* sS = reinterpret_cast<float*>(smem + L::s_off);    // [2][32][s_stride] scaled scores
    float* sPM = reinterpret_cast<float*>(smem + L::pm_off);  // [2][token half][32] their row maxima
    const bool scorer = warp >= 4;
    const int srt = rt - 2;  // a score warp's row tile
    const bool s_active = scorer && srt * 16 < rows_here;
    // Per token half, the value warp's running sums (kept apart, as the one-role kernel's pair of
    // warps keeps them, and added the same way at the end).
    float half_sum[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    start_two_tiles();
    // Iteration t: score warps on tile t (key tile t % 4), value warps on tile t - 1 (key tile
    // (t - 1) % 4, scores buffer (t - 1) % 2); tiles t + 1 and t + 2 in flight.
    for (int it = 0; it <= static_cast<int>(num_tiles); ++it) {
      // ---- The first warp publishes tile t + 2's pointers (buffer (t + 2) % 4, tile t - 2's,
      // last read by the score warps in iteration t - 2); every thread waits for tile t's keys;
      // the barrier also tells that the value warps are done with key tile (t + 2) % 4 (tile
      // t - 2's) and scores buffer t % 2 (tile t - 2's); then tile t + 2's copies start and tile
      // t + 3's index loads are issued.
      const int p2 = (it + 2) % kPtrBufs;
      if (tid < kTileTokens) resolve(p2);
      if (it < static_cast<int>(num_tiles)) mbar_wait(&sBar[it % 4], (it / 4) & 1);
      __syncthreads();
      issue(p2, (it + 2) % 4);
      if (tid < kTileTokens) fetch(it + 3);
      if (scorer) {
        if (!s_active || it >= static_cast<int>(num_tiles)) continue;
        // ---- Scores of rows 16 srt.. and tokens 16 nh.. of tile t, masked and scaled as the
        // one-role kernel's softmax does, with the rows' maxima over these 16 tokens.
        const uint16_t* keys = sK + (it % 4) * kTileTokens * L::k_stride;
        const uint8_t* const* tile_data = sData + (it % kPtrBufs) * kTileTokens;
        float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
        score_tokens_half<kF16, kDqk, L::q_stride, L::k_stride>(sc, sQ, keys, srt, nh, lane);
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int tok = nh * 16 + nt * 8 + 2 * t4 + (e % 2);
            const bool seen = tile_data[tok] && (!Source::kPacksRows || it * kTileTokens + tok < row_lim[e / 2]);
            const float v = seen ? sc[nt][e] * scale_log2 : -INFINITY;
            sc[nt][e] = v;
            tile_max[e / 2] = fmaxf(tile_max[e / 2], v);
          }
        float* srow = sS + (it % 2) * 32 * L::s_stride + (srt * 16 + gr) * L::s_stride;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const int col = nh * 16 + nt * 8 + 2 * t4;
          *reinterpret_cast<float2*>(srow + col) = make_float2(sc[nt][0], sc[nt][1]);
          *reinterpret_cast<float2*>(srow + 8 * L::s_stride + col) = make_float2(sc[nt][2], sc[nt][3]);
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
          tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
        }
        if (t4 == 0) {
          sPM[((it % 2) * 2 + nh) * 32 + srt * 16 + gr] = tile_max[0];
          sPM[((it % 2) * 2 + nh) * 32 + srt * 16 + gr + 8] = tile_max[1];
        }
        continue;
      }
      if (!active || it == 0) continue;
      // ---- Value warps: tile t - 1's softmax from its stored scores, then O += P V for rows
      // 16 rt.. and dims 256 nh.. (32 n8 tiles).
      const int j = it - 1, sb = j % 2;
      const float* srows = sS + sb * 32 * L::s_stride + (rt * 16 + gr) * L::s_stride;
      float alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int hr = rt * 16 + gr + 8 * r;
        const float new_max = fmaxf(row_max[r], fmaxf(sPM[(sb * 2) * 32 + hr], sPM[(sb * 2 + 1) * 32 + hr]));
        alpha[r] = new_max == -INFINITY ? 1.0f : exp2f(row_max[r] - new_max);
        row_max[r] = new_max;
        half_sum[0][r] *= alpha[r];
        half_sum[1][r] *= alpha[r];
      }
      rescale_o(alpha);
      const uint16_t* keys = sK + (j % 4) * kTileTokens * L::k_stride;
#pragma unroll
      for (int kk = 0; kk < kTileTokens; kk += 16) {
        // P's A fragment straight from the scores: rows gr and gr + 8, tokens kk + 2 t4 (+1) and
        // kk + 8 + 2 t4 (+1); half kk / 16's sum in the one-role kernel's order.
        float2 sv[4];
        sv[0] = *reinterpret_cast<const float2*>(srows + kk + 2 * t4);
        sv[1] = *reinterpret_cast<const float2*>(srows + 8 * L::s_stride + kk + 2 * t4);
        sv[2] = *reinterpret_cast<const float2*>(srows + kk + 8 + 2 * t4);
        sv[3] = *reinterpret_cast<const float2*>(srows + 8 * L::s_stride + kk + 8 + 2 * t4);
        float prob[4][2];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float m = row_max[q % 2];
          prob[q][0] = (sv[q].x == -INFINITY) ? 0.0f : exp2f(sv[q].x - m);
          prob[q][1] = (sv[q].y == -INFINITY) ? 0.0f : exp2f(sv[q].y - m);
        }
        float(&hs)[2] = half_sum[kk / 16];
        hs[0] += prob[0][0];
        hs[0] += prob[0][1];
        hs[1] += prob[1][0];
        hs[1] += prob[1][1];
        hs[0] += prob[2][0];
        hs[0] += prob[2][1];
        hs[1] += prob[3][0];
        hs[1] += prob[3][1];
        uint32_t a[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) a[q] = pack2<kF16>(prob[q][0], prob[q][1]);
        const uint16_t* vb = keys + (kk + (lane % 8) + ((lane / 8) % 2) * 8) * L::k_stride + nh * 256 + (lane / 16) * 8;
        pv_step(a, vb);
      }
    }
    // The end adds the two warps' sums of a row: each value warp hands in its own token half.
    // (Selected, not indexed by nh: a run-time index would put half_sum on the stack.)
    row_sum[0] = nh ? half_sum[1][0] : half_sum[0][0];
    row_sum[1] = nh ? half_sum[1][1] : half_sum[0][1];
  } else {
  if constexpr (kOverlap) {
    // Tiles 0..2 resolved, the records of tiles 0 and 1 in flight, tile 0 dequantized.
    if (tid < kTileTokens) prologue_keys(std::integral_constant<int, 3>{}, std::false_type{});
    stamp(1);
    if constexpr (kBulk) {
      if (tid == 0) {
        mbar_init(&sBar[0], g.copy_warps);
        mbar_init(&sBar[1], g.copy_warps);
        mbar_init_fence();
      }
    }
    cp_async_wait<0>();  // Q (step 1)
    stamp(3);
    __syncthreads();
    issue(0, 0);
    cp_async_commit();
    issue(1, 1);
    cp_async_commit();
    stamp(2);
    cp_async_wait<1>();
    if constexpr (kBulk) mbar_wait(&sBar[0], 0);
    __syncthreads();
    dequantize(0, 0, sK);
  } else if constexpr (kDeep) {
    start_two_tiles();
  } else {
    if (tid < kTileTokens) prologue_keys(std::integral_constant<int, 1>{}, std::true_type{});
    if constexpr (kBulk) {
      if (tid == 0) {
        mbar_init(&sBar[0], g.copy_warps);
        mbar_init(&sBar[1], g.copy_warps);
        mbar_init_fence();
      }
    }
    cp_async_wait<0>();  // Q (step 1)
    __syncthreads();
    issue(0, 0);
    cp_async_commit();
  }

  stamp(4);
  // (32-bit: a split holds fewer than 2^31 candidates.)
  for (int tile = 0; tile < static_cast<int>(num_tiles); ++tile) {
    const int cur = tile % 2, nxt = cur ^ 1;
    const int pcur = tile % kPtrBufs;
    const uint8_t* const* tile_data = sData + pcur * kTileTokens;
    const uint16_t* keys = sK;
    if constexpr (kOverlap) {
      // ---- 2. Tile t + 1's records have landed (and tile t was dequantized during the previous
      // iteration); start tile t + 2's copies into the staging buffer tile t used, and issue tile
      // t + 3's index loads (resolved at the end of the iteration). (kBulk: tile t + 1 is the
      // ((t + 1) / 2)-th use of staging buffer (t + 1) % 2.)
      cp_async_wait<0>();
      if constexpr (kBulk) mbar_wait(&sBar[nxt], ((tile + 1) >> 1) & 1);
      // (The barrier also says that every warp is done with the staging buffer of tile t and, but
      // for warps 4-7 under kShareV, which read them in this iteration, with the previous tile's
      // keys and P.)
      __syncthreads();
      issue((tile + 2) % kPtrBufs, cur);
      cp_async_commit();
      if (tid < kTileTokens) fetch(tile + 3);
      keys = sK + cur * kTileTokens * L::k_stride;
      // (LKV_RACECHECK_BARRIERS, racecheck builds: the same barrier count in every warp.)
      if (kShareV && kRacecheckBarriers && idle_dequant && !sharer) pair_sync(mt);
      // kShareV, warps 4-7: tile t - 1's value half from the key tile that tile t + 1 goes to, then
      // (once all four, or with equal shares all eight warps, are done with that key tile: named
      // barrier 5) tile t + 1's dequantization.
      if (sharer) {
        const int dq_threads = idle_dequant ? kThreads / 2 : kThreads;
        if (tile > 0 && v_active) share_value(tile - 1, sK + nxt * kTileTokens * L::k_stride);
        named_sync<5>(dq_threads);
        if (kRacecheckBarriers) {
          pair_sync(mt);
          pair_sync(mt);
        }
        dequantize_next((tile + 1) % kPtrBufs, nxt, sK + nxt * kTileTokens * L::k_stride);
        continue;
      }
    } else if constexpr (kDeep) {
      // ---- 2. 16-bit keys, three key tiles (sm_90): the first warp publishes tile t + 2's
      // pointers (buffer (t + 2) % 4: tile t - 2's, whose last readers finished before the
      // previous iteration's barrier); every thread waits for tile t's phase (tile t is the
      // (t / 3)-th use of key tile t % 3); the barrier also tells that every warp is done with key
      // tile (t + 2) % 3 (tile t - 1's); then tile t + 2's copies start, and tile t + 3's index
      // loads are issued. Tiles t + 1 and t + 2 are in flight while tile t is computed.
      const int p2 = (tile + 2) % kPtrBufs, kcur = tile % 3;
      if (tid < kTileTokens) resolve(p2);
      mbar_wait(&sBar[kcur], (tile / 3) & 1);
      __syncthreads();
      issue(p2, (tile + 2) % 3);
      if (tid < kTileTokens) fetch(tile + 3);
      keys = sK + kcur * kTileTokens * L::k_stride;
    } else if constexpr (kDirect) {
      // ---- 2. 16-bit keys: one barrier per tile. The first warp publishes tile t + 1's pointers;
      // each thread waits for its own copies of tile t (issued in the previous iteration or the
      // prologue; kBulk: every thread waits for the tile's mbarrier phase, all of its copies); the
      // barrier makes everyone's copies visible, publishes the pointers and tells
      // that every warp is done with the key tile that tile t + 1 goes to; then tile t + 1's
      // copies start and tile t + 2's index loads are issued. (Only tile t's copies are in flight
      // at the wait, where the two-barrier form had tile t + 1's too.)
      // (kBulk: tile t is the (t / 2)-th use of key tile t % 2, so its phase has parity (t / 2) % 2.)
      const int pnxt = (tile + 1) % kPtrBufs;
      if (tid < kTileTokens) resolve(pnxt);
      if constexpr (kBulk) mbar_wait(&sBar[cur], (tile >> 1) & 1);
      else cp_async_wait<0>();
      __syncthreads();
      issue(pnxt, nxt);
      cp_async_commit();
      if (tid < kTileTokens) fetch(tile + 2);
      keys = sK + cur * kTileTokens * L::k_stride;
    } else {
      // ---- 2a. Publish tile + 1's keys (their index loads were issued a tile ago), start its
      // copies, and issue tile + 2's index loads.
      const int pnxt = (tile + 1) % kPtrBufs;
      if (tid < kTileTokens) resolve(pnxt);
      __syncthreads();  // also: every warp is done with the previous tile's keys, P and staging
      issue(pnxt, nxt);
      cp_async_commit();
      if (tid < kTileTokens) fetch(tile + 2);
      cp_async_wait<1>();  // this thread's copies of the current tile have landed
      if constexpr (kBulk) mbar_wait(&sBar[cur], (tile >> 1) & 1);
      __syncthreads();     // and everyone else's

      // ---- 2b. Dequantize the current tile's records into the key tile.
      dequantize(pcur, cur, sK);
      __syncthreads();
    }

    // ---- 3. S = Q K^T for heads 16 mt.. (score_tokens_half / score_dqk_half say which half of
    // the work warp nh does; Source::kSplitDqk chooses).
    // (kFold: all 32 tokens' scores, the four n8 tiles; otherwise this warp's two.)
    float sc[kFold ? 4 : 2][4] = {};
    float part[4][4];
    // The other warp's two n8 tiles go to the pair's exchange area (the P rows, free since the
    // iteration's first barrier: the pair's previous P was last read before it), lane-major so
    // that each float4 store and load of a warp covers 512 contiguous bytes. (kFold: all four of
    // this warp's tiles, to the pair's own area: [2 writers][4 tiles][32 lanes].)
    float4* xchg = reinterpret_cast<float4*>(sPair);  // [2 writers][2 tiles][32 lanes]
    if constexpr (kFold) {
      if (active) score_dqk_half<kF16, kDqk, L::q_stride, L::k_stride>(sc, sQ, keys, mt, nh, lane);
#pragma unroll
      for (int j = 0; j < 4; ++j) xchg[(nh * 4 + j) * 32 + lane] = as_float4(sc[j]);
    } else if constexpr (kSplitDqk) {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) part[nt][0] = part[nt][1] = part[nt][2] = part[nt][3] = 0.0f;
      if (active) score_dqk_half<kF16, kDqk, L::q_stride, L::k_stride>(part, sQ, keys, mt, nh, lane);
      // (The other warp's tiles, 2 (1 - nh).., and below this warp's, selected, not indexed by
      // nh: a run-time index put part on the stack, 4 local stores and loads per tile.)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float o[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) o[e] = nh ? part[j][e] : part[2 + j][e];
        xchg[(nh * 2 + j) * 32 + lane] = as_float4(o);
      }
    } else if constexpr (kGroups == 1) {
      if (active) score_tokens_half<kF16, kDqk, L::q_stride, L::k_stride>(sc, sQ, keys, mt, nh, lane);
    } else {
      // Token groups: both of the group's n8 tiles over half nh of d_qk, the partial sums to Q's
      // rows 16.. (no warp of a 16-row CTA reads them; [2 groups][2 writers][2 tiles][32 lanes]
      // float4, lane-major: each warp's store covers 512 contiguous bytes).
      if (active) {
        score_group_half<kF16, kDqk, L::q_stride, L::k_stride>(sc, sQ, keys, tb, nh, lane);
#pragma unroll
        for (int j = 0; j < 2; ++j) group_xchg(nh, j) = as_float4(sc[j]);
      }
    }

    // ---- 3b. Overlapped: dequantize tile t + 1 into the other key tile while other warps still
    // multiply.
    // (kShareV with equal shares: not before warps 4-7 are done with that key tile, named barrier 5.)
    if constexpr (kOverlap) {
      if (kShareV && !idle_dequant) named_sync<5>(kThreads);
      dequantize_next((tile + 1) % kPtrBufs, nxt, sK + nxt * kTileTokens * L::k_stride);
    }

    // ---- 3c. d_qk split: the full scores of this warp's tokens, its own half-sum plus the other
    // warp's (fp32 addition commutes, so the order of the halves does not matter: the result is
    // deterministic).
    if constexpr (kFold) {
      pair_sync(mt);
#pragma unroll
      for (int j = 0; j < 4; ++j) add_float4(sc[j], sc[j], xchg[((1 - nh) * 4 + j) * 32 + lane]);
    } else if constexpr (kSplitDqk) {
      pair_sync(mt);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float4 o = xchg[((1 - nh) * 2 + j) * 32 + lane];
        float mine[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) mine[e] = nh ? part[2 + j][e] : part[j][e];
        add_float4(sc[j], mine, o);
      }
    }

    // Token groups: the full scores of the group's 16 tokens, this warp's half-sums plus the other
    // warp's (fp32 addition commutes, so both warps hold the same bits, and so the same maxima).
    if constexpr (kGroups == 2) {
      pair_sync(mt);
      if (active) {
#pragma unroll
        for (int j = 0; j < 2; ++j) add_float4(sc[j], sc[j], group_xchg(1 - nh, j));
      }
    }

    // ---- 4. Online softmax (log2 domain). Element e of tile nt: row gr + 8 (e / 2), token
    // st0 + 8 nt + 2 t4 + (e % 2), where st0 is wt0, or where each warp holds the scores of all
    // its pair's tokens (token groups: the group's 16; kFold: all 32) the pair's first token, and
    // the rows' maxima need no exchange.
    constexpr bool kPairScores = kGroups == 2 || kFold;
    constexpr int kScoreTiles = kGroups == 2 ? 2 : kFold ? 4 : kNT;
    const int st0 = kPairScores ? tb : wt0;
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kScoreTiles; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tok = st0 + nt * 8 + 2 * t4 + (e % 2);
        const bool seen = tile_data[tok] && (!Source::kPacksRows || tile * kTileTokens + tok < row_lim[e / 2]);
        const float v = seen ? sc[nt][e] * scale_log2 : -INFINITY;
        sc[nt][e] = v;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], v);
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    }
    if constexpr (!kPairScores) {
      if (t4 == 0) {
        sMax[nh * kHeadsPerCta + mt * 16 + gr] = tile_max[0];
        sMax[nh * kHeadsPerCta + mt * 16 + gr + 8] = tile_max[1];
      }
      pair_sync(mt);
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int hr = mt * 16 + gr + 8 * r;
      const float new_max =
          kPairScores ? fmaxf(row_max[r], tile_max[r]) : fmaxf(row_max[r], fmaxf(sMax[hr], sMax[kHeadsPerCta + hr]));
      alpha[r] = new_max == -INFINITY ? 1.0f : exp2f(row_max[r] - new_max);
      row_max[r] = new_max;
      row_sum[r] *= alpha[r];
    }
    // kShareV: the pair's running maxima for warps 4-7 (share_value), from one of its two warps
    // (both hold the same).
    if (kShareV && nh == 0 && t4 == 0) {
      sMax[32 + (tile & 1) * 64 + mt * 16 + gr] = row_max[0];
      sMax[32 + (tile & 1) * 64 + mt * 16 + gr + 8] = row_max[1];
    }
    if constexpr (kFold) {
      // P of all 32 tokens from this warp's own scores, straight into the value product's A
      // fragments (a score tile's accumulator layout is the A layout of its 8 columns: the same
      // packed values the ldmatrix of P's rows would load), so that the pair needs no barrier
      // between writing P and reading it. Each warp still sums only its own two tiles (2 nh,
      // 2 nh + 1), selected, in the order and with the operations of the unfolded split, so that
      // the compiler may contract the rescale of the sum with its first addend into one FMA in
      // both alike. (Adding the other tiles' probabilities as zeros first gave bytes that differed
      // from the narrow layout's; a different contraction is the likeliest cause, bench/NOTES.md
      // v55.)
      float prob[4][4];
      uint32_t pa[2][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) prob[j][e] = (sc[j][e] == -INFINITY) ? 0.0f : exp2f(sc[j][e] - row_max[e / 2]);
        pa[j / 2][2 * (j % 2)] = pack2<kF16>(prob[j][0], prob[j][1]);
        pa[j / 2][2 * (j % 2) + 1] = pack2<kF16>(prob[j][2], prob[j][3]);
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) row_sum[e / 2] += nh ? prob[2 + nt][e] : prob[nt][e];
      rescale_o(alpha);
      // ---- 5. O += P V for rows 16 mt.., all 32 tokens and dims 256 nh.. (32 n8 tiles).
      if (active) {
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          const uint16_t* vb = keys + (16 * kk + (lane % 8) + ((lane / 8) % 2) * 8) * L::k_stride + nh * 256 + (lane / 16) * 8;
          pv_step(pa[kk], vb);
        }
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        float prob[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float m = row_max[e / 2];
          // (Token groups: this warp's n8 tile, nh; selected, not indexed, so that sc stays in
          // registers.)
          const float v = kGroups == 2 ? (nh ? sc[1][e] : sc[0][e]) : sc[nt][e];
          prob[e] = (v == -INFINITY) ? 0.0f : exp2f(v - m);
          row_sum[e / 2] += prob[e];
        }
        const int col = wt0 - tb + nt * 8 + 2 * t4;  // the group's P columns
        *reinterpret_cast<uint32_t*>(p_row(gr, tile) + col) = pack2<kF16>(prob[0], prob[1]);
        *reinterpret_cast<uint32_t*>(p_row(gr + 8, tile) + col) = pack2<kF16>(prob[2], prob[3]);
      }
      rescale_o(alpha);
      pair_sync(mt);

      // ---- 5. O += P V for rows 16 rt.., the group's tokens and dims 256 nh.. (32 n8 tiles; kShareV:
      // the first 128 of them, 16 tiles).
#pragma unroll
      for (int kk = 0; kk < kGroupTokens; kk += 16) {
        if (!active) break;
        uint32_t a[4];
        ldmatrix_x4(a, p_row(lane % 16, tile) + kk + (lane / 16) * 8);
        const uint16_t* vb = keys + (tb + kk + (lane % 8) + ((lane / 8) % 2) * 8) * L::k_stride + nh * 256 + (lane / 16) * 8;
        pv_step(a, vb);
      }
    }
    // Overlapped: tile t + 3's pointers go to the buffer tile t - 1 used (its last readers, the
    // softmax of tile t - 1, are behind this iteration's first barrier; tile t's may still be read
    // by other pairs), visible after the next iteration's first barrier.
    if constexpr (kOverlap) {
      const int p3 = (tile + 3) % kPtrBufs;
      if (tid < kTileTokens) resolve(p3);
    }
    if (tile < 2) stamp(5 + tile);
  }
  }  // kRoleMode
  stamp(7);

  // No copy may outlive the CTA's shared memory. (kBulk: the last iterations issued the tiles after
  // the last, whose keys are all unattended: no bulk copy is in flight.)
  cp_async_wait<0>();

  // ---- 6. The end: add the token halves' sums, normalise, write.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
  }
  __syncthreads();
  // kShareV: warps 4-7 add their half of the last tile's value product (its P and maxima were
  // written before the barrier above).
  if (sharer && v_active && num_tiles > 0)
    share_value(static_cast<int>(num_tiles) - 1, sK + ((num_tiles - 1) % 2) * kTileTokens * L::k_stride);
  if (t4 == 0) {
    sSum[nh * kHeadsPerCta + mt * 16 + gr] = row_sum[0];
    sSum[nh * kHeadsPerCta + mt * 16 + gr + 8] = row_sum[1];
  }
  // Token groups: group 1 (odd pairs) hands its running maxima (sMax, free once every loop is done)
  // and O (Q's area, likewise) to group 0, the pair below it with the same rows. (kShareV: warps 4-7
  // hand over and take their halves of O likewise; the maxima and sums are warps 0-3's, which
  // hold the same maxima.)
  // [2 row tiles][2 warps][32 n8 tiles][32 lanes] float4, lane-major (conflict-free float4 stores);
  // kShareV: row tile 1's slots hold warps 4-7's halves, 16 n8 tiles each.
  auto o_xchg = [&] { return reinterpret_cast<float4*>(sQ) + (rt * 2 + nh) * 32 * 32 + lane; };
  if constexpr (kGroups > 1) {
    if (grp == 1 && (active || sharer)) {
      if (nh == 0 && t4 == 0 && !sharer) {
        sMax[mt * 16 + gr] = row_max[0];
        sMax[mt * 16 + gr + 8] = row_max[1];
      }
#pragma unroll
      for (int n = 0; n < kMulN; ++n) o_xchg()[n * 32] = as_float4(acc[n]);
    }
  }
  __syncthreads();
  // The rows' sums over their tokens (with groups: merged below).
  float merged_sum[2] = {0.0f, 0.0f};
  if constexpr (kGroups > 1) {
    // Group 0 writes the rows. (No barrier may follow: group 1 has left.)
    if (grp == 1) return;
    if (active || sharer) {
      // Both groups' (max, sum, O) rescaled to the larger maximum; a group that saw no key (max
      // -inf) gets weight 0 (its sum and O are 0 for finite keys).
      float w0[2], w1[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int mine = (kShareV ? 0 : mt * 16) + gr + 8 * r, theirs = mine + 16;
        const float m1 = sMax[theirs];
        const float mx = fmaxf(row_max[r], m1);
        w0[r] = row_max[r] == -INFINITY ? 0.0f : exp2f(row_max[r] - mx);
        w1[r] = m1 == -INFINITY ? 0.0f : exp2f(m1 - mx);
        merged_sum[r] = (sSum[mine] + sSum[kHeadsPerCta + mine]) * w0[r] +
                        (sSum[theirs] + sSum[kHeadsPerCta + theirs]) * w1[r];
        row_max[r] = mx;
      }
#pragma unroll
      for (int n = 0; n < kMulN; ++n) {
        const float4 v = o_xchg()[n * 32];
        acc[n][0] = acc[n][0] * w0[0] + v.x * w1[0];
        acc[n][1] = acc[n][1] * w0[0] + v.y * w1[0];
        acc[n][2] = acc[n][2] * w0[1] + v.z * w1[1];
        acc[n][3] = acc[n][3] * w0[1] + v.w * w1[1];
      }
    }
  }
  // One group, unsplit: the rows go through Q's area (no warp reads Q after the loop; the two
  // barriers above order every read before these writes), then out in whole rows.
  constexpr int kStageStride = kDimV + 8;  // 16-bit elements per staged row: rows 4 banks apart
  static_assert(kGroups != 1 || L::q_bytes >= L::q_rows * kStageStride * 2, "Q's area holds the staged rows");
  const bool stage_out = kGroups == 1 && g.num_splits == 1;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int hr = vrt * 16 + gr + 8 * r;  // CTA row
    if (hr >= rows_here) continue;
    const float sum = kGroups == 1 ? sSum[hr] + sSum[kHeadsPerCta + hr] : merged_sum[r];
    const int dim0 = nh * 256 + (sharer ? 8 * kMulN : 0);
    finish_row<kF16>(g, p.o, pr, hr, heads_here, h0, split, sum, row_max[r], acc, r, dim0,
                     nh == 0 && t4 == 0 && !sharer, t4, stage_out ? sQ + hr * kStageStride + dim0 : nullptr);
  }
  if constexpr (kGroups == 1) {
    if (stage_out) {
      __syncthreads();
      store_staged_rows<kStageStride, kThreads>(p.o, pr, rows_here, heads_here, h0, sQ, tid);
    }
  }
  stamp(8);
}

}  // namespace latentkv::decode::cuda
