// latentkv/numerics.h: the numeric building blocks (SPEC.md section 1), identical on every backend.
//
// Every function here is usable from host code and from CUDA device code, and is written on the
// bits of IEEE floats so that the CPU and the GPU produce the same bytes: bf16 round-to-nearest-even,
// e4m3 (float8_e4m3fn, finite-only, saturating) encode and decode, ue8m0 scale bytes, e2m1 (fp4),
// the contest's int8 truncation, and an exact ceil(log2(x)).
//
// Conventions: encoders take fp32 and return the raw code; decoders return fp32 (exact for all of
// these formats). NaN handling is stated per function.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LKV_HD __host__ __device__ __forceinline__
#else
#define LKV_HD inline
#endif

namespace latentkv::num {

LKV_HD uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

LKV_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

// ---- bf16 ------------------------------------------------------------------------------------
// Round to nearest, ties to even. NaN stays NaN (quieted, sign kept); infinities stay infinite.
LKV_HD uint16_t f32_to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff plus the lowest kept bit rounds half to even; it cannot overflow past infinity
  // because the largest finite value rounds to infinity exactly as RNE requires.
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

LKV_HD float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

// fp32 -> bf16 -> fp32, the "bf16 round trip" of the compressor.
LKV_HD float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// ---- f16 -------------------------------------------------------------------------------------
// IEEE binary16 (dense_decode's f16 inputs and outputs): s.eeeee.mmmmmmmmmm, bias 15, max finite
// 65504, smallest subnormal 2^-24, exponent 31 for infinities and NaN.
// Exact (every f16 value is an fp32 value). NaN stays NaN with its sign and payload.
LKV_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return bits_f32(sign | 0x7f800000u | (m << 13));
  if (e != 0) return bits_f32(sign | ((e - 15 + 127) << 23) | (m << 13));
  // Subnormal or zero: m * 2^-24, exact in fp32 (m < 2^10).
  return bits_f32(sign | f32_bits(static_cast<float>(m) * 5.9604644775390625e-8f));
}

// Round to nearest, ties to even. Magnitudes from 65520 (the midpoint between 65504 and 2^16) up
// round to infinity; NaN stays NaN (quieted, sign kept).
LKV_HD uint16_t f32_to_f16(float x) {
  const uint32_t u = f32_bits(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520, or inf
  if (a >= 0x38800000u) {
    // Normal (>= 2^-14): drop 13 mantissa bits with RNE, then rebias 127 -> 15. A carry out of the
    // mantissa bumps the exponent, which is the correct rounded value.
    const uint32_t r = (a + 0xfffu + ((a >> 13) & 1u)) >> 13;
    return static_cast<uint16_t>(sign | (r - ((127u - 15u) << 10)));
  }
  if (a < 0x33000000u) return sign;  // below 2^-25, half the smallest subnormal: rounds to 0
  // Subnormal: the result is round(x * 2^24) = round(m * 2^(e - 126)) with m the 24-bit
  // significand, a right shift by 126 - e in [14, 24] with RNE on the dropped bits. Rounding up
  // to 0x400 gives the smallest normal, whose encoding is exactly that.
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

// ---- exact powers of two and ceil(log2) -------------------------------------------------------
// 2^e as fp32 for e in [-149, 127]; 0 below, +inf above. Built from bits so it is exact everywhere.
LKV_HD float exp2i(int e) {
  if (e > 127) return bits_f32(0x7f800000u);
  if (e >= -126) return bits_f32(static_cast<uint32_t>(e + 127) << 23);
  if (e >= -149) return bits_f32(1u << (e + 149));
  return 0.0f;
}

// ceil(log2(x)) for finite x > 0, exactly: for x = 2^k it is k, otherwise floor(log2 x) + 1.
// For x <= 0 or NaN it returns INT32_MIN / 2 (callers clamp); +inf gives 128.
LKV_HD int ceil_log2(float x) {
  uint32_t u = f32_bits(x);
  if (u == 0 || (u >> 31) || (u & 0x7fffffffu) > 0x7f800000u) return -(1 << 30);
  int exp = static_cast<int>((u >> 23) & 0xffu);
  uint32_t mant = u & 0x7fffffu;
  if (exp == 0xff) return 128;
  if (exp == 0) {
    // Subnormal: x = mant * 2^-149; its floor(log2) is the position of the top bit - 149.
    int top = 31;
    while (!((mant >> top) & 1u)) --top;
    bool pow2 = (mant & (mant - 1u)) == 0;
    return top - 149 + (pow2 ? 0 : 1);
  }
  return exp - 127 + (mant != 0 ? 1 : 0);
}

// ---- ue8m0 (float8_e8m0fnu) -------------------------------------------------------------------
// One byte e + 127 meaning 2^e; the writers clamp to [0, 255] as SPEC.md requires.
LKV_HD uint8_t ue8m0_from_exp(int e) {
  int b = e + 127;
  return static_cast<uint8_t>(b < 0 ? 0 : (b > 255 ? 255 : b));
}
// 0xff is NaN in float8_e8m0fnu; 0x00 is 2^-127 (a subnormal fp32).
LKV_HD float ue8m0_to_f32(uint8_t b) {
  if (b == 0xff) return bits_f32(0x7fc00000u);
  if (b == 0) return bits_f32(0x00400000u);
  return bits_f32(static_cast<uint32_t>(b) << 23);
}

// ---- e4m3 (float8_e4m3fn) ---------------------------------------------------------------------
// Layout s.eeee.mmm, bias 7, no infinities, 0x7f/0xff = NaN, max finite 448, min subnormal 2^-9.
LKV_HD float e4m3_to_f32(uint8_t c) {
  uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  int e = (c >> 3) & 0xf;
  int m = c & 0x7;
  if (e == 0xf && m == 0x7) return bits_f32(sign | 0x7fc00000u);
  if (e == 0) return bits_f32(sign | f32_bits(static_cast<float>(m) * 0.001953125f));  // m * 2^-9
  return bits_f32(sign | (static_cast<uint32_t>(e - 7 + 127) << 23) | (static_cast<uint32_t>(m) << 20));
}

// Round to nearest even; magnitudes beyond 448 (including +-inf) saturate to +-448; NaN -> 0x7f
// with the sign kept.
LKV_HD uint8_t f32_to_e4m3(float x) {
  uint32_t u = f32_bits(x);
  uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7f);
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7e);  // >= 448
  if (a < 0x3c800000u) {
    // Below 2^-6: the subnormal range, multiples of 2^-9. x * 2^9 is exact in fp32, and rounding it
    // to an integer with ties to even gives the mantissa (8 = 2^-6 becomes the smallest normal).
    float s = bits_f32(a) * 512.0f;
    uint32_t q = static_cast<uint32_t>(s);
    float frac = s - static_cast<float>(q);
    if (frac > 0.5f || (frac == 0.5f && (q & 1u))) ++q;
    return static_cast<uint8_t>(sign | q);
  }
  // Normal range: keep 3 mantissa bits with RNE on the 20 dropped bits, then rebias 127 -> 7.
  uint32_t rounded = a + 0x7ffffu + ((a >> 20) & 1u);
  rounded >>= 20;  // exponent(8) mantissa(3)
  uint32_t code = rounded - ((127u - 7u) << 3);
  if (code > 0x7eu) code = 0x7eu;  // rounding up past 448 saturates
  return static_cast<uint8_t>(sign | code);
}

// ---- e2m1 (fp4) -------------------------------------------------------------------------------
// Layout s.ee.m, values {0, 0.5, 1, 1.5, 2, 3, 4, 6}; round to nearest even, saturate at 6.
// Built from the code's bits (exponent e, mantissa m: 2^(e - 1) (1 + m / 2), or m x 0.5 for e 0,
// the sign on top) rather than a table, which a GPU kernel would keep in local memory.
LKV_HD float e2m1_to_f32(uint8_t c) {
  const uint32_t e = (c >> 1) & 3u, m = c & 1u;
  const uint32_t mag = e == 0u ? m * 0x3f000000u : ((e + 126u) << 23) | (m << 22);
  return bits_f32(mag | ((static_cast<uint32_t>(c) & 8u) << 28));
}

// The two e2m1 codes of the low byte of w (the even dim's in its low nibble, the rest of w ignored)
// as a bf16 pair, low half first, whose values are the codes' values x 2^-126: each code's sign to
// bit 15 of its half and its exponent and mantissa bits to bits 8..6, so that e2m1's exponent field
// becomes the low two bits of bf16's and its mantissa bit bf16's top one (e2m1's 0.5, exponent 0,
// lands on a bf16 subnormal with the same digit). The Hopper decode kernel finishes fp4 records
// with two exact bf16x2 multiplies, by 2^126 and by the record's scale; exact for all 16 codes.
LKV_HD uint32_t e2m1x2_as_bf16x2_scaled(uint32_t w) {
  return ((w << 6) & 0x000001c0u) | ((w << 12) & 0x00008000u) | ((w << 18) & 0x01c00000u) | ((w << 24) & 0x80000000u);
}

// PTX's prmt.b32 in its default mode (the device runs the instruction): byte i of the result is
// byte (sel_i & 7) of the pair {a, b} (a's bytes 0-3, b's 4-7), where sel_i is nibble i of sel, or
// with sel_i & 8 that byte's top bit copied into all eight. (CUDA's __byte_perm ignores that bit.)
LKV_HD uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
#else
  const uint64_t src = static_cast<uint64_t>(a) | (static_cast<uint64_t>(b) << 32);
  uint32_t d = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t s = (sel >> (4 * i)) & 0xfu;
    uint32_t byte = static_cast<uint32_t>(src >> (8 * (s & 7u))) & 0xffu;
    if (s & 8u) byte = (byte & 0x80u) ? 0xffu : 0u;
    d |= byte << (8 * i);
  }
  return d;
#endif
}

// e2m1x2_as_bf16x2_scaled of each of w's four bytes (out[k] for byte k), the same bits in about a
// third of the instructions, for the decode kernels' fp4 records: the nibbles are split once per
// word (even codes, odd codes: one per byte, top four bits clear); then per pair one byte permute
// puts the even code in byte 0 and the odd one in byte 2, with zero bytes 1 and 3 (the sign of a
// byte whose top bit is clear), one multiply by 2^6 + 2^12 writes each code twice, at bits 6..9 and
// 12..15 of its half (the copies do not overlap, so nothing carries), and one mask keeps the
// exponent and mantissa bits of the first copy (6..8) and the sign of the second (15). Three
// instructions per pair and three per word, where the per-pair shifts and masks took eight or nine.
LKV_HD void e2m1x8_as_bf16x2_scaled(uint32_t w, uint32_t out[4]) {
  const uint32_t even = w & 0x0f0f0f0fu, odd = (w >> 4) & 0x0f0f0f0fu;
  for (uint32_t k = 0; k < 4; ++k) {
    // Result bytes: even byte k, its sign (0), odd byte k, its sign (0).
    const uint32_t sel = 0xc480u + 0x1111u * k;
    out[k] = (prmt(even, odd, sel) * 0x1040u) & 0x81c081c0u;
  }
}

// NaN encodes as +0 (e2m1 has no NaN); callers never produce NaN inputs from finite data.
LKV_HD uint8_t f32_to_e2m1(float x) {
  uint32_t u = f32_bits(x);
  uint8_t sign = static_cast<uint8_t>((u >> 28) & 0x8u);
  float a = bits_f32(u & 0x7fffffffu);
  if (!(a == a)) return 0;
  // Midpoints between neighbours; at a tie choose the code with an even mantissa bit.
  uint8_t c;
  if (a < 0.25f) c = 0;
  else if (a == 0.25f) c = 0;        // tie 0 / 0.5 -> 0 (even)
  else if (a < 0.75f) c = 1;
  else if (a == 0.75f) c = 2;        // tie 0.5 / 1 -> 1.0 (even)
  else if (a < 1.25f) c = 2;
  else if (a == 1.25f) c = 2;        // tie 1 / 1.5 -> 1.0
  else if (a < 1.75f) c = 3;
  else if (a == 1.75f) c = 4;        // tie 1.5 / 2 -> 2.0
  else if (a < 2.5f) c = 4;
  else if (a == 2.5f) c = 4;         // tie 2 / 3 -> 2.0
  else if (a < 3.5f) c = 5;
  else if (a == 3.5f) c = 6;         // tie 3 / 4 -> 4.0
  else if (a < 5.0f) c = 6;
  else if (a == 5.0f) c = 6;         // tie 4 / 6 -> 4.0
  else c = 7;                         // saturate at 6
  return static_cast<uint8_t>(sign | c);
}

// ---- int8 payload of the contest format --------------------------------------------------------
// Clamp to [-127, 127], then truncate toward zero. NaN -> 0.
LKV_HD int8_t f32_to_i8_trunc(float x) {
  if (!(x == x)) return 0;
  float c = x < -127.0f ? -127.0f : (x > 127.0f ? 127.0f : x);
  return static_cast<int8_t>(static_cast<int>(c));
}

// ---- power-of-two scales ------------------------------------------------------------------------
// Compressor rule (contest int8 and DeepSeek V4 e4m3): e = ceil(log2(max(amax, 1e-4) * fl32(1/qmax))).
LKV_HD int compressor_scale_exp(float amax, float inv_qmax) {
  float a = amax > 1.0e-4f ? amax : 1.0e-4f;
  return ceil_log2(a * inv_qmax);
}

// Generic cache-quantizer rule (FlashMLA-compatible): e = ceil(log2(max(amax / 448, 1e-4))).
LKV_HD int cache_scale_exp(float amax) {
  float a = amax / 448.0f;
  return ceil_log2(a > 1.0e-4f ? a : 1.0e-4f);
}

}  // namespace latentkv::num
