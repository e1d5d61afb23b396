// cpu_common/head_block_kernel.h: the body of the attention ops' CPU head block (head_block.h),
// included only by head_block_sse4.cpp, head_block_avx2.cpp and head_block_avx512.cpp, each compiled
// with its instruction set's flags and instantiating it for its fp32 lane count W (4, 8, 16).
//
// Why the loops are shaped as they are. The head block is nearly all of the fast paths' time (two
// multiply-adds per key dim per head: the scores, then the weighted sum of V). Written as plain
// loops and built for x86-64-v2, it ran 4-lane SSE without FMA, and each multiply-add loaded two
// operands from L1 (a dot product per (head, token); the accumulators read and written back for
// every token). Here both products are register tiles:
// - scores: kTokens tokens x the block's heads per tile (16 accumulators at W 16; 8 at W 4 and 8,
//   which have 16 vector registers), so a key vector is loaded once for all heads and a query
//   vector once for all of the tile's tokens; each accumulator is summed across its lanes at the
//   end in a fixed pairwise order;
// - weighted sum: kDimVecs vectors of dims x the block's heads held in registers over a group of
//   kValueTokens tokens (their V rows, 16 x 2 KB, stay in L1), so the accumulators are loaded and
//   stored once per group instead of once per token.
// The exponentials are the compressor's vector polynomial (simd.h vexp) rather than a libm call per
// score, and the row sums stay scalar in token order. Every output element accumulates its tokens in index order, and the order of
// operations is fixed by the code and W alone: results are the same from run to run and thread to
// thread. The AVX2 and AVX-512 builds fuse their multiply-adds, the SSE4 build does not, and the
// builds sum a score's lanes in different groupings, so their results may differ in the last bits
// (the tests check each build against the float64 oracle).
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu_common/head_block.h"
#include "cpu_common/simd.h"

namespace latentkv::cpu_common {
namespace {

using simd::fmadd;
using simd::load;
using simd::splat;
using simd::store;
using simd::Vec;
using simd::vexp;

template <int W>
struct Tiles {
  static constexpr int kTokens = W == 16 ? 4 : 2;   // scores: tokens per register tile
  static constexpr int kDimVecs = W == 16 ? 4 : 2;  // weighted sum: vectors of dims per tile
};
constexpr int kValueTokens = 16;   // weighted sum: tokens per pass over the accumulators
constexpr int kScoreTokens = 128;  // scores: tokens per pass over the block's heads (~300 KB of keys)

// The sum of v's lanes, halves added pairwise (a fixed order: lane i takes lane i + W / 2, then
// i + W / 4, ..., in registers).
template <int W>
float lane_sum(typename Vec<W>::F v) {
  if constexpr (W == 16) {
    v += __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    v += __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  } else if constexpr (W == 8) {
    v += __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3);
    v += __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5);
    v += __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6);
  } else {
    static_assert(W == 4, "4, 8 or 16 lanes");
    v += __builtin_shufflevector(v, v, 2, 3, 0, 1);
    v += __builtin_shufflevector(v, v, 1, 0, 3, 2);
  }
  return v[0];
}

// Scores of tokens t0 .. t0 + T - 1 for NH heads: s[hh * n + t].
template <int W, int NH, int T>
void score_tile(const float* q, int d_qk, const float* k, int64_t key_stride, int64_t t0, int64_t n,
                float* s) {
  using F = typename Vec<W>::F;
  F acc[NH][T];
  for (int hh = 0; hh < NH; ++hh)
    for (int i = 0; i < T; ++i) acc[hh][i] = splat<W>(0.0f);
  const int d_vec = d_qk - d_qk % W;
  for (int d = 0; d < d_vec; d += W) {
    F kv[T];
    for (int i = 0; i < T; ++i) kv[i] = load<W>(k + (t0 + i) * key_stride + d);
    for (int hh = 0; hh < NH; ++hh) {
      const F qv = load<W>(q + hh * d_qk + d);
      for (int i = 0; i < T; ++i) acc[hh][i] = fmadd<W>(qv, kv[i], acc[hh][i]);
    }
  }
  for (int hh = 0; hh < NH; ++hh)
    for (int i = 0; i < T; ++i) {
      float v = lane_sum<W>(acc[hh][i]);
      for (int d = d_vec; d < d_qk; ++d) v += q[hh * d_qk + d] * k[(t0 + i) * key_stride + d];
      s[hh * n + t0 + i] = v;
    }
}

// acc[hh][d] += sum over tokens [t_begin, t_end) of s[hh * n + t] v_t[d], for dims
// [d_begin, d_begin + DV W), in token order.
template <int W, int NH, int DV>
void value_tile(const float* k, int64_t key_stride, int64_t n, const float* s, int64_t t_begin,
                int64_t t_end, int d_begin, float (*acc)[kMaxDimV]) {
  using F = typename Vec<W>::F;
  F a[NH][DV];
  for (int hh = 0; hh < NH; ++hh)
    for (int c = 0; c < DV; ++c) a[hh][c] = load<W>(acc[hh] + d_begin + c * W);
  for (int64_t t = t_begin; t < t_end; ++t) {
    const float* vt = k + t * key_stride + d_begin;
    F vv[DV];
    for (int c = 0; c < DV; ++c) vv[c] = load<W>(vt + c * W);
    for (int hh = 0; hh < NH; ++hh) {
      const F w = splat<W>(s[hh * n + t]);
      for (int c = 0; c < DV; ++c) a[hh][c] = fmadd<W>(w, vv[c], a[hh][c]);
    }
  }
  for (int hh = 0; hh < NH; ++hh)
    for (int c = 0; c < DV; ++c) store<W>(acc[hh] + d_begin + c * W, a[hh][c]);
}

// Scores of tokens [t_begin, t_end) for NH heads, kTokens at a time, then one at a time.
// (Plain ternaries and loops below rather than std::min / std::fill / numeric_limits: an unoptimised
// build emits those templates as weak symbols, and the linker could keep this file's AVX copy for
// every caller. simd.h says the same of its helpers.)
inline constexpr float kMinusInf = -__builtin_inff();

template <int W, int NH>
void score_range(const float* q, int d_qk, const float* k, int64_t key_stride, int64_t t_begin,
                 int64_t t_end, int64_t n, float* s) {
  constexpr int T = Tiles<W>::kTokens;
  int64_t t = t_begin;
  for (; t + T <= t_end; t += T) score_tile<W, NH, T>(q, d_qk, k, key_stride, t, n, s);
  for (; t < t_end; ++t) score_tile<W, NH, 1>(q, d_qk, k, key_stride, t, n, s);
}

// The weighted sum of V over tokens [t_begin, t_end) for NH heads, all d_v dims.
template <int W, int NH>
void value_range(const float* k, int64_t key_stride, int64_t n, const float* s, int64_t t_begin,
                 int64_t t_end, int d_v, float (*acc)[kMaxDimV]) {
  constexpr int DV = Tiles<W>::kDimVecs;
  const int d_tiles = d_v - d_v % (DV * W);
  for (int d = 0; d < d_tiles; d += DV * W) value_tile<W, NH, DV>(k, key_stride, n, s, t_begin, t_end, d, acc);
  for (int64_t t = t_begin; t < t_end; ++t) {  // dims past the last whole tile, if any
    const float* vt = k + t * key_stride;
    for (int hh = 0; hh < NH; ++hh)
      for (int d = d_tiles; d < d_v; ++d) acc[hh][d] += s[hh * n + t] * vt[d];
  }
}

// Heads go kSubHeads at a time through the register tiles (the tiles' accumulators hold that many).
constexpr int kSubHeads = 4;
static_assert(kHeadBlock % kSubHeads == 0, "a head block is whole sub-blocks of heads");

template <int W>
void head_block_w(const float* q, int nh, const float* k, int64_t n, int64_t key_stride, int d_qk,
                  int d_v, float* s, float (*acc)[kMaxDimV], float* max, float* sum) {
  // Calls fn.template operator()<NH>(h0) for each sub-block of heads.
  auto for_sub_blocks = [nh](auto&& fn) {
    for (int h0 = 0; h0 < nh; h0 += kSubHeads) {
      switch (nh - h0 < kSubHeads ? nh - h0 : kSubHeads) {
        case 1: fn.template operator()<1>(h0); break;
        case 2: fn.template operator()<2>(h0); break;
        case 3: fn.template operator()<3>(h0); break;
        default: fn.template operator()<4>(h0); break;
      }
    }
  };
  // Pass 1: scores, kScoreTokens tokens (their keys stay in L2) for every sub-block of heads.
  for (int64_t c = 0; c < n; c += kScoreTokens) {
    const int64_t c_end = n < c + kScoreTokens ? n : c + kScoreTokens;
    for_sub_blocks([&]<int NH>(int h0) { score_range<W, NH>(q + h0 * d_qk, d_qk, k, key_stride, c, c_end, n, s + h0 * n); });
  }
  // Pass 2: maxima (NaN scores skipped, as fmax does), unnormalised weights by the vector
  // exponential (simd.h vexp, ~1 ulp; arguments are <= 0, and NaN stays NaN) and their sums in
  // token order.
  for (int hh = 0; hh < nh; ++hh) {
    float* sh = s + hh * n;
    float m = kMinusInf;
    for (int64_t i = 0; i < n; ++i) m = sh[i] > m ? sh[i] : m;
    max[hh] = m;
    const int64_t n_vec = n - n % W;
    for (int64_t i = 0; i < n_vec; i += W) store<W>(sh + i, vexp<W>(load<W>(sh + i) - splat<W>(m)));
    if (n_vec < n) {  // the last n % W scores, through a padded vector
      alignas(64) float tail[W];
      for (int i = 0; i < W; ++i) tail[i] = n_vec + i < n ? sh[n_vec + i] - m : 0.0f;
      store<W>(tail, vexp<W>(load<W>(tail)));
      for (int64_t i = n_vec; i < n; ++i) sh[i] = tail[i - n_vec];
    }
    float total = 0.0f;
    for (int64_t i = 0; i < n; ++i) total += sh[i];
    sum[hh] = total;
    for (int d = 0; d < d_v; ++d) acc[hh][d] = 0.0f;
  }
  // Pass 3: the weighted sum of V, kValueTokens tokens (their rows stay in L1) for every sub-block.
  for (int64_t g = 0; g < n; g += kValueTokens) {
    const int64_t g_end = n < g + kValueTokens ? n : g + kValueTokens;
    for_sub_blocks([&]<int NH>(int h0) { value_range<W, NH>(k, key_stride, n, s + h0 * n, g, g_end, d_v, acc + h0); });
  }
}

// A group's payload as fp32 (cpu_common/dequant.h dequantize_record_f32): n codes (a multiple of
// W), each decoded (e4m3 by its bits: sign, exponent rebiased, mantissa moved; subnormals as
// m x 2^-9, exact; 0x7f / 0xff NaN; int8; or e2m1 by its bits: 0.5 for the one subnormal, no NaN),
// times the group's scale, rounded to bf16 and widened, lane by lane. The same operations as
// num::e4m3_to_f32 (num::e2m1_to_f32), the fp32 product and num::round_bf16, so the same bits, NaN
// payloads included (tests/cpu/test_cpu_dequant.cpp holds every build to the codec).
template <int W>
void dequantize_payload(const uint8_t* payload, int n, float scale, PayloadCode code, float* out) {
  using F = typename Vec<W>::F;
  using U = typename Vec<W>::U;
  typedef int32_t I __attribute__((vector_size(4 * W)));
  // The scale in every lane as it is: splat adds it to +0, which would turn a -0 scale (v32_fp8's
  // scales are raw fp32) into +0 and flip the sign of the zero products.
  F sc;
  for (int i = 0; i < W; ++i) sc[i] = scale;
  U nibble_shift;  // e2m1: the even dims' codes in the low nibbles, the odd dims' in the high ones
  for (int i = 0; i < W; ++i) nibble_shift[i] = (i & 1) * 4u;
  for (int k = 0; k < n; k += W) {
    F v;
    if (code == PayloadCode::kE2m1) {
      // Lane i takes byte i / 2 of the W / 2 bytes, then its nibble.
      const U c = (simd::widen_pairs<W>(payload + k / 2) >> nibble_shift) & 0xfu;
      const U sign = (c & 0x8u) << 28, e = (c >> 1) & 0x3u, m = c & 0x1u;
      const U normal = ((e + 126u) << 23) | (m << 22);  // 2^(e - 1) x (1 + m / 2)
      const U is_sub = reinterpret_cast<U>(e == 0u);
      const U bits = sign | (is_sub & (m * 0x3f000000u)) | (~is_sub & normal);  // subnormal: m x 0.5
      std::memcpy(&v, &bits, sizeof v);
    } else if (code == PayloadCode::kInt8) {
      const U c = simd::widen_bytes<W>(payload + k);
      // The byte's sign extended by an arithmetic shift, then converted (exact).
      v = __builtin_convertvector(reinterpret_cast<I>(c << 24) >> 24, F);
    } else {
      const U c = simd::widen_bytes<W>(payload + k);
      const U sign = (c & 0x80u) << 24, e = (c >> 3) & 0xfu, m = c & 0x7u;
      const U normal = sign | ((e + 120u) << 23) | (m << 20);  // exponent e - 7 + 127
      const F sub_f = __builtin_convertvector(m, F) * splat<W>(0.001953125f);
      U sub;
      std::memcpy(&sub, &sub_f, sizeof sub);
      sub |= sign;
      const U is_sub = reinterpret_cast<U>(e == 0u), is_nan = reinterpret_cast<U>((c & 0x7fu) == 0x7fu);
      U bits = (is_sub & sub) | (~is_sub & normal);
      bits = (is_nan & (sign | 0x7fc00000u)) | (~is_nan & bits);
      std::memcpy(&v, &bits, sizeof v);
    }
    // Where the code is NaN its own NaN is the product, as the codec's scalar multiply gives it (x86
    // returns the first operand's NaN when both are NaN; a vector multiply by a broadcast scale may
    // be emitted with the operands the other way round).
    const F prod = v * sc;
    U vb, u;
    std::memcpy(&vb, &v, sizeof vb);
    std::memcpy(&u, &prod, sizeof u);
    const U v_nan = reinterpret_cast<U>((vb & 0x7fffffffu) > 0x7f800000u);
    u = (v_nan & vb) | (~v_nan & u);
    // num::f32_to_bf16 then back: NaN quieted with its sign and top bits kept, otherwise half to even.
    const U nan = reinterpret_cast<U>((u & 0x7fffffffu) > 0x7f800000u);
    const U quiet = (u | 0x00400000u) & 0xffff0000u;
    const U even = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    u = (nan & quiet) | (~nan & even);
    std::memcpy(out + k, &u, sizeof u);
  }
}

// The multiply-add ceiling of this build (head_block.h MultiplyAddFn): kMultiplyAddChains(W)
// independent accumulators, so that the loop is bound by the multiply-add throughput rather than its
// latency (4 cycles on current x86 cores, 2 per cycle: 8 in flight; the 4-lane build's multiply
// then add, ~6-7 cycles, 2 of each per cycle: 12-14); 12 for the 16-register builds
// (12 accumulators and the two operands), 16 for AVX-512's 32 registers. The operands stay in
// registers: the loop reads and writes no memory. Returns the lanes' total, so that the work is kept.
template <int W>
float multiply_add_chains(int64_t iters) {
  using F = typename Vec<W>::F;
  constexpr int kChains = kMultiplyAddChains(W);
  F acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = splat<W>(static_cast<float>(c));
  F a = splat<W>(1.0f), b = splat<W>(1.0f / 1048576.0f);
  // (An empty asm that may change a and b: the compiler cannot fold the loop into a multiplication.)
  asm volatile("" : "+x"(a), "+x"(b));
  // acc * a + b: the product depends on the accumulator, so the 4-lane build (a multiply, then an
  // add) cannot compute it once outside the loop, as it could a * b.
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = fmadd<W>(acc[c], a, b);
  F total = acc[0];
  for (int c = 1; c < kChains; ++c) total += acc[c];
  return lane_sum<W>(total);
}

}  // namespace
}  // namespace latentkv::cpu_common
