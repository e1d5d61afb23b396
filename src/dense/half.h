// dense/half.h: IEEE binary16 (f16) conversions for dense_decode's f16 inputs and outputs, on the
// bits so the CPU and a later GPU backend produce the same bytes (numerics.h has bf16 only).
//
// f16: s.eeeee.mmmmmmmmmm, bias 15, max finite 65504, smallest subnormal 2^-24, exponent 31 for
// infinities and NaN.
#pragma once

#include <cstdint>

#include "latentkv/numerics.h"

namespace latentkv::num {

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

}  // namespace latentkv::num
