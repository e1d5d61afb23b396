// decode/sm90/dequant.cuh: e4m3 payload times a power-of-two scale to bf16, the Hopper kernel's
// dequantization (kernel.cuh), and the checks that say when its fast form is exact.
//
// Fast form, per pair of bytes: one byte permute places each byte in the low half of a 16-bit lane
// with its sign copied into the high half; shifted left by 4 and masked, the lane holds the sign at
// bit 15, the e4m3 exponent in the low 4 bits of the bf16 exponent field and the 3 mantissa bits on
// top of the bf16 mantissa. Read as bf16 that is exactly the e4m3 value times 2^-120 (zero and
// e4m3 subnormals included: they become bf16 subnormals with the same digits), so one bf16x2
// multiply by 2^120 x scale finishes the job: 4 instructions per pair (permute, shift, mask,
// multiply). Exact when the scale is a power of two in [2^-117, 2^7] (every format's scales are
// powers of two; the bounds keep the multiplier a normal bf16 and every nonzero product normal) and
// no byte is NaN; otherwise a chunk takes the portable kernel's path (to fp32, multiply, round), so
// results never depend on which path ran (test Sm90Primitives.DequantizationMatchesReference).
#pragma once

#include <cstdint>

#include "decode/cuda/kernel.cuh"
#include "decode/sm90/nan_bits.h"

namespace latentkv::decode::sm90 {

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

// nan_bits16 (nan_bits.h): the per-token NaN check in two instructions per word.
__device__ __forceinline__ uint32_t nan_bits16(const uint4 raw) { return nan_bits_words(raw.x, raw.y, raw.z, raw.w); }

// Whether dequant16_fast is exact for these 16 e4m3 bytes and scale: no NaN byte and a fast_scale.
__device__ __forceinline__ bool dequant16_fast_ok(const uint4 raw, float s) { return no_nan16(raw) && fast_scale(s); }

// dequant16_fast's multiplier, 2^120 x s in both bf16 halves, for a fast_scale s.
__device__ __forceinline__ uint32_t fast_multiplier(float s) {
  const float f = s * 0x1p120f;  // exact: a power of two in range
  return cuda::pack_bf16(f, f);
}

// The same for a ue8m0 scale byte e (s = 2^(e - 127)), without going through fp32: s is a
// fast_scale iff e is in [10, 134], and 2^120 x s = 2^(e - 7) is the bf16 with exponent field
// e + 120 and a zero mantissa.
__device__ __forceinline__ bool ue8m0_fast(uint32_t e) { return e - 10u <= 124u; }
__device__ __forceinline__ uint32_t ue8m0_multiplier(uint32_t e) {
  const uint32_t h = (e + 120u) << 7;
  return h | (h << 16);
}

// Bytes 2 k and 2 k + 1 of w (k = 0 or 1) as two bf16 lanes of value e4m3 x 2^-120.
template <int k>
__device__ __forceinline__ uint32_t e4m3x2_scaled_bits(uint32_t w) {
  // prmt selector nibbles, low byte first: byte 2k, sign of byte 2k, byte 2k + 1, its sign.
  constexpr uint32_t sel = k == 0 ? 0x9180u : 0xb3a2u;
  uint32_t p;
  asm("prmt.b32 %0, %1, 0, %2;\n" : "=r"(p) : "r"(w), "n"(sel));
  return (p << 4) & 0x87f087f0u;
}

// 16 e4m3 bytes times scale s to 16 bf16 (two 16-byte units, dims in order), where
// dequant16_fast_ok holds; f2 = fast_multiplier(s) (or ue8m0_multiplier).
__device__ __forceinline__ void dequant16_fast(const uint4 raw, uint32_t f2, uint4& lo, uint4& hi) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t out[8];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t b0 = e4m3x2_scaled_bits<0>(w[q]);
    uint32_t b1 = e4m3x2_scaled_bits<1>(w[q]);
    asm("mul.rn.bf16x2 %0, %0, %1;\n" : "+r"(b0) : "r"(f2));
    asm("mul.rn.bf16x2 %0, %0, %1;\n" : "+r"(b1) : "r"(f2));
    out[2 * q] = b0;
    out[2 * q + 1] = b1;
  }
  lo = make_uint4(out[0], out[1], out[2], out[3]);
  hi = make_uint4(out[4], out[5], out[6], out[7]);
}

// The same for any bytes and scale: the fast path where it is exact, else the portable kernel's
// (cuda::dequant16_f32: to fp32, multiply, round), so results never depend on which path ran.
__device__ __forceinline__ void dequant16(const uint4 raw, float s, uint4& lo, uint4& hi) {
  if (dequant16_fast_ok(raw, s)) dequant16_fast(raw, fast_multiplier(s), lo, hi);
  else cuda::dequant16_f32(raw, s, lo, hi);
}

}  // namespace latentkv::decode::sm90
