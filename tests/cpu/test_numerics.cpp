// Numeric building blocks (SPEC.md section 1, include/latentkv/numerics.h) checked against slow,
// independent references, exhaustively wherever the domain is small.
//
// Why the references are independent: none of them uses the header's bit tricks (adding 0x7fff,
// shifting mantissas, rebiasing exponents). Every format's values are rebuilt here from its
// definition (sign, exponent field, mantissa field, bias) with std::ldexp in double / long double,
// sorted into a table, and a value is rounded by locating its two neighbours in that table and
// choosing the nearer one, ties going to the code whose lowest mantissa bit is 0 (ties to even).
// Exponents are found by a search over exact powers of two in long double, not from fp32 bits.
// The only use of float bits is to construct inputs (all bf16 codes, chosen fp32 patterns).
//
// What is covered:
//   bf16   every fp32 high half (65536) x a set of critical and random low halves, against the
//          table; bf16 -> f32 -> bf16 identity for all 65536 codes (NaNs stay NaN).
//   e4m3   all 256 codes decoded; every bf16 value encoded; every midpoint between adjacent codes
//          and the floats just above/below it; saturation at +-448; encode(decode(c)) == c.
//   e2m1   all 16 codes decoded; midpoints, their neighbours, ties, saturation, sign, a sweep.
//   ue8m0  from_exp clamping for a wide exponent range; to_f32 for all 256 codes.
//   int8   clamp-then-truncate edge cases and a sweep.
//   exp2i  every e in [-160, 140] against std::ldexp.
//   ceil_log2 every fp32 exponent (subnormals included) with several mantissas against the exact
//          answer; sentinels; the values the scale rules feed it for every bf16 amax, where we also
//          count (but do not fail on) disagreements of ceil(log2f(x)) with the exact answer.
//   scale rules compressor_scale_exp / cache_scale_exp against the SPEC formula evaluated
//          exactly, and the payload bound amax * 2^-e against QMAX.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "latentkv/numerics.h"

namespace num = latentkv::num;

namespace {

float f_of(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t u_of(float f) { return std::bit_cast<uint32_t>(f); }

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Rounds |a| (non-negative, finite) to the nearest entry of a strictly increasing table of
// magnitudes whose index is the code; ties go to the even code. `a` must not exceed the last
// entry.
uint32_t nearest_even(const std::vector<long double>& table, long double a) {
  const auto it = std::lower_bound(table.begin(), table.end(), a);
  const uint32_t hi = static_cast<uint32_t>(it - table.begin());
  if (table[hi] == a || hi == 0) return hi;
  const uint32_t lo = hi - 1;
  const long double dlo = a - table[lo];
  const long double dhi = table[hi] - a;
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo % 2 == 0) ? lo : hi;
}

// ---- bf16 reference ----------------------------------------------------------------------------
// Magnitude of the non-negative bf16 code c (sign 0, exponent 8 bits with bias 127, mantissa 7 bits).
long double bf16_def(uint32_t c) {
  const int e = static_cast<int>((c >> 7) & 0xff);
  const int m = static_cast<int>(c & 0x7f);
  if (e == 0) return std::ldexp(static_cast<long double>(m), -126 - 7);
  return std::ldexp(static_cast<long double>(128 + m), e - 127 - 7);
}

// Magnitudes of codes 0x0000..0x7f80. The entry for 0x7f80 (infinity) is 2^128: IEEE rounding
// behaves as if the exponent range were unbounded and then overflows to infinity, which is the same
// as treating infinity as the value after the largest finite one.
const std::vector<long double>& bf16_table() {
  static const std::vector<long double> t = [] {
    std::vector<long double> v;
    for (uint32_t c = 0; c < 0x7f80; ++c) v.push_back(bf16_def(c));
    v.push_back(std::ldexp(1.0L, 128));
    return v;
  }();
  return t;
}

// Reference bf16 code of a non-NaN float.
uint16_t ref_bf16(float x) {
  const uint32_t sign = std::signbit(x) ? 0x8000u : 0u;
  if (std::isinf(x)) return static_cast<uint16_t>(sign | 0x7f80u);
  const long double a = std::fabs(static_cast<long double>(x));
  return static_cast<uint16_t>(sign | nearest_even(bf16_table(), a));
}

bool bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

// ---- e4m3 reference ----------------------------------------------------------------------------
// float8_e4m3fn: sign, exponent 4 bits bias 7, mantissa 3 bits; exponent 0 is subnormal
// (m * 2^-9); S.1111.111 is NaN; no infinities. Returns nullopt for NaN codes.
std::optional<long double> e4m3_def(uint32_t c) {
  const int e = static_cast<int>((c >> 3) & 0xf);
  const int m = static_cast<int>(c & 7);
  if (e == 15 && m == 7) return std::nullopt;
  const long double mag = (e == 0) ? std::ldexp(static_cast<long double>(m), -9)
                                   : std::ldexp(static_cast<long double>(8 + m), e - 7 - 3);
  return (c & 0x80) ? -mag : mag;
}

const std::vector<long double>& e4m3_table() {  // magnitudes of codes 0x00..0x7e
  static const std::vector<long double> t = [] {
    std::vector<long double> v;
    for (uint32_t c = 0; c <= 0x7e; ++c) v.push_back(*e4m3_def(c));
    return v;
  }();
  return t;
}

uint8_t ref_e4m3(float x) {
  const uint32_t sign = std::signbit(x) ? 0x80u : 0u;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7f);
  const long double a = std::fabs(static_cast<long double>(x));
  if (a > e4m3_table().back()) return static_cast<uint8_t>(sign | 0x7e);  // saturate to 448
  return static_cast<uint8_t>(sign | nearest_even(e4m3_table(), a));
}

// ---- e2m1 reference ----------------------------------------------------------------------------
// fp4 e2m1: sign, exponent 2 bits bias 1, mantissa 1 bit; exponent 0 is subnormal (m * 0.5).
long double e2m1_def(uint32_t c) {
  const int e = static_cast<int>((c >> 1) & 3);
  const int m = static_cast<int>(c & 1);
  const long double mag = (e == 0) ? std::ldexp(static_cast<long double>(m), -1)
                                   : std::ldexp(static_cast<long double>(2 + m), e - 1 - 1);
  return (c & 8) ? -mag : mag;
}

const std::vector<long double>& e2m1_table() {  // magnitudes of codes 0..7
  static const std::vector<long double> t = [] {
    std::vector<long double> v;
    for (uint32_t c = 0; c < 8; ++c) v.push_back(e2m1_def(c));
    return v;
  }();
  return t;
}

// NaN -> +0 is the header's documented choice (e2m1 has no NaN).
uint8_t ref_e2m1(float x) {
  if (std::isnan(x)) return 0;
  const uint32_t sign = std::signbit(x) ? 0x8u : 0u;
  const long double a = std::fabs(static_cast<long double>(x));
  if (a > e2m1_table().back()) return static_cast<uint8_t>(sign | 7);  // saturate to 6
  return static_cast<uint8_t>(sign | nearest_even(e2m1_table(), a));
}

// ---- int8 reference ----------------------------------------------------------------------------
int ref_i8(float x) {
  if (std::isnan(x)) return 0;
  const long double c = std::clamp(static_cast<long double>(x), -127.0L, 127.0L);
  return static_cast<int>(std::trunc(c));
}

// ---- exact ceil(log2) --------------------------------------------------------------------------
// Smallest integer k with 2^k >= x for finite x > 0, by binary search over exact powers of two.
int ref_ceil_log2(float x) {
  const long double v = x;
  int lo = -150;  // 2^-150 < every positive float
  int hi = 128;   // 2^128 > every finite float
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    if (std::ldexp(1.0L, mid) >= v) hi = mid;
    else lo = mid;
  }
  return hi;
}

constexpr int kSentinelMax = -1000000;

// Every bf16 code as a float (NaN codes included), in code order.
std::vector<float> all_bf16_floats() {
  std::vector<float> v;
  v.reserve(65536);
  for (uint32_t h = 0; h < 65536; ++h) v.push_back(f_of(h << 16));
  return v;
}

}  // namespace

// ================================================================================================
// bf16
// ================================================================================================

TEST(NumericsBf16, EncodeMatchesReferenceForEveryHighHalfAndCriticalLowHalves) {
  std::mt19937 rng(12345);
  const uint32_t fixed_lows[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu};
  int64_t checked = 0;
  int failures = 0;
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    uint32_t lows[8];
    std::copy(std::begin(fixed_lows), std::end(fixed_lows), lows);
    lows[6] = rng() & 0xffffu;
    lows[7] = rng() & 0xffffu;
    for (uint32_t lo : lows) {
      const uint32_t bits = (hi << 16) | lo;
      const float x = f_of(bits);
      const uint16_t got = num::f32_to_bf16(x);
      ++checked;
      if (std::isnan(x)) {
        // NaN stays NaN, quieted, sign kept.
        const bool ok = bf16_is_nan(got) && (got & 0x40u) && ((got >> 15) == (bits >> 31));
        if (!ok && failures++ < 10) ADD_FAILURE() << std::hex << "NaN 0x" << bits << " -> 0x" << got;
        continue;
      }
      const uint16_t want = ref_bf16(x);
      if (got != want && failures++ < 10)
        ADD_FAILURE() << std::hex << "f32 0x" << bits << " -> 0x" << got << ", want 0x" << want;
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(checked, 65536 * 8);
}

TEST(NumericsBf16, NamedEdgeCases) {
  EXPECT_EQ(num::f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(num::f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(num::f32_to_bf16(kInf), 0x7f80);
  EXPECT_EQ(num::f32_to_bf16(-kInf), 0xff80);
  // The largest finite float rounds up to infinity (it is past bf16 max + half an ulp).
  EXPECT_EQ(num::f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(num::f32_to_bf16(-std::numeric_limits<float>::max()), 0xff80);
  // Exactly bf16 max + half an ulp ties to the even neighbour, which is infinity.
  EXPECT_EQ(num::f32_to_bf16(f_of(0x7f7f8000u)), 0x7f80);
  EXPECT_EQ(num::f32_to_bf16(f_of(0x7f7f7fffu)), 0x7f7f);
  // 1 + 2^-8 is the midpoint of 1 and 1 + 2^-7: ties to even (1.0); just above goes up.
  EXPECT_EQ(num::f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(num::f32_to_bf16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 0x3f81);
  // 1 + 3*2^-8 is the midpoint of 1+2^-7 (odd) and 1+2^-6 (even): goes up.
  EXPECT_EQ(num::f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  // The smallest fp32 subnormal is below half of the smallest bf16 subnormal.
  EXPECT_EQ(num::f32_to_bf16(f_of(0x00000001u)), 0x0000);
  EXPECT_EQ(num::f32_to_bf16(f_of(0x80008000u)), 0x8000);  // tie to even (0)
  EXPECT_EQ(num::f32_to_bf16(f_of(0x80018000u)), 0x8002);  // tie to even (2)
  const uint16_t qn = num::f32_to_bf16(kNaN);
  EXPECT_TRUE(bf16_is_nan(qn));
  EXPECT_TRUE(bf16_is_nan(num::f32_to_bf16(f_of(0x7f800001u))));    // signalling NaN low bit only
  EXPECT_TRUE(bf16_is_nan(num::f32_to_bf16(f_of(0xff800001u))));
  EXPECT_EQ(num::f32_to_bf16(f_of(0xff800001u)) >> 15, 1);
}

TEST(NumericsBf16, DecodeMatchesDefinitionAndRoundTripsAllCodes) {
  int failures = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t code = static_cast<uint16_t>(h);
    const float f = num::bf16_to_f32(code);
    const bool neg = (h & 0x8000u) != 0;
    if (bf16_is_nan(code)) {
      const bool ok = std::isnan(f) && std::signbit(f) == neg && bf16_is_nan(num::f32_to_bf16(f)) &&
                      (num::f32_to_bf16(f) >> 15) == (h >> 15);
      if (!ok && failures++ < 10) ADD_FAILURE() << std::hex << "NaN code 0x" << h;
      continue;
    }
    const uint32_t mag = h & 0x7fffu;
    const long double want = (mag == 0x7f80u) ? std::numeric_limits<long double>::infinity()
                                              : bf16_def(mag);
    const bool ok = static_cast<long double>(f) == (neg ? -want : want) && std::signbit(f) == neg &&
                    num::f32_to_bf16(f) == code && num::round_bf16(f) == f;
    if (!ok && failures++ < 10) ADD_FAILURE() << std::hex << "code 0x" << h;
  }
  EXPECT_EQ(failures, 0);
}

// ================================================================================================
// e4m3
// ================================================================================================

TEST(NumericsE4m3, DecodeAll256Codes) {
  for (uint32_t c = 0; c < 256; ++c) {
    const float got = num::e4m3_to_f32(static_cast<uint8_t>(c));
    const auto want = e4m3_def(c);
    if (!want) {
      EXPECT_TRUE(c == 0x7f || c == 0xff);
      EXPECT_TRUE(std::isnan(got)) << c;
      continue;
    }
    EXPECT_EQ(static_cast<long double>(got), *want) << "code " << c;
    EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << "code " << c;  // 0x80 is -0
  }
  EXPECT_EQ(num::e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(num::e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(num::e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(num::e4m3_to_f32(0x07), 7 * 0x1p-9f);
  EXPECT_EQ(num::e4m3_to_f32(0x08), 0x1p-6f);
}

TEST(NumericsE4m3, EncodeEveryBf16Value) {
  int failures = 0;
  for (float x : all_bf16_floats()) {
    const uint8_t got = num::f32_to_e4m3(x);
    const uint8_t want = ref_e4m3(x);
    if (got != want && failures++ < 10)
      ADD_FAILURE() << std::hex << "x=" << x << " (0x" << u_of(x) << ") -> 0x" << int(got)
                    << ", want 0x" << int(want);
  }
  EXPECT_EQ(failures, 0);
}

TEST(NumericsE4m3, EncodeRandomFloatsInRange) {
  std::mt19937 rng(777);
  int failures = 0;
  for (int i = 0; i < 200000; ++i) {
    // Exponents from 2^-13 to 2^9 (the whole e4m3 range and a little beyond), random mantissa.
    const uint32_t exp = 127 - 13 + rng() % 23;
    const uint32_t bits = (rng() & 0x80000000u) | (exp << 23) | (rng() & 0x7fffffu);
    const float x = f_of(bits);
    if (num::f32_to_e4m3(x) != ref_e4m3(x) && failures++ < 10)
      ADD_FAILURE() << std::hex << "0x" << bits;
  }
  EXPECT_EQ(failures, 0);
}

TEST(NumericsE4m3, MidpointsTiesToEvenAndTheirNeighbours) {
  const auto& t = e4m3_table();
  for (uint32_t c = 0; c + 1 < t.size(); ++c) {
    const long double mid = (t[c] + t[c + 1]) / 2;
    const float m = static_cast<float>(mid);
    ASSERT_EQ(static_cast<long double>(m), mid);  // midpoints have 5 significant bits: exact
    const uint8_t even = (c % 2 == 0) ? c : c + 1;
    const float above = std::nextafter(m, kInf);
    const float below = std::nextafter(m, 0.0f);
    for (uint8_t sign : {uint8_t{0}, uint8_t{0x80}}) {
      const float s = sign ? -1.0f : 1.0f;
      EXPECT_EQ(num::f32_to_e4m3(s * m), sign | even) << "mid of " << c;
      EXPECT_EQ(num::f32_to_e4m3(s * above), sign | (c + 1)) << "above mid of " << c;
      EXPECT_EQ(num::f32_to_e4m3(s * below), sign | c) << "below mid of " << c;
      EXPECT_EQ(ref_e4m3(s * m), sign | even);
      EXPECT_EQ(ref_e4m3(s * above), sign | (c + 1));
      EXPECT_EQ(ref_e4m3(s * below), sign | c);
    }
  }
  // Between 0 and the smallest subnormal 2^-9: the midpoint 2^-10 goes to 0 (even).
  EXPECT_EQ(num::f32_to_e4m3(0x1p-10f), 0x00);
  EXPECT_EQ(num::f32_to_e4m3(-0x1p-10f), 0x80);
  EXPECT_EQ(num::f32_to_e4m3(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  // The subnormal/normal boundary: 7.5 * 2^-9 is the midpoint of 0x07 and 0x08 -> 0x08.
  EXPECT_EQ(num::f32_to_e4m3(7.5f * 0x1p-9f), 0x08);
  EXPECT_EQ(num::f32_to_e4m3(std::nextafter(7.5f * 0x1p-9f, 0.0f)), 0x07);
}

TEST(NumericsE4m3, SaturatesToMaxFinite) {
  for (float x : {448.0f, std::nextafter(448.0f, kInf), 464.0f, 480.0f, 1.0e6f,
                  std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(num::f32_to_e4m3(x), 0x7e) << x;
    EXPECT_EQ(num::f32_to_e4m3(-x), 0xfe) << x;
  }
  // Just below 448: the midpoint of 416 and 448 is 432 and ties to even (448 = 0x7e).
  EXPECT_EQ(num::f32_to_e4m3(432.0f), 0x7e);
  EXPECT_EQ(num::f32_to_e4m3(std::nextafter(432.0f, 0.0f)), 0x7d);
  EXPECT_EQ(num::f32_to_e4m3(std::nextafter(448.0f, 0.0f)), 0x7e);
}

TEST(NumericsE4m3, NaNZerosAndTinyValues) {
  EXPECT_EQ(num::f32_to_e4m3(kNaN), 0x7f);
  EXPECT_EQ(num::f32_to_e4m3(-kNaN), 0xff);
  EXPECT_EQ(num::f32_to_e4m3(f_of(0x7f800001u)), 0x7f);
  EXPECT_EQ(num::f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(num::f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(num::f32_to_e4m3(f_of(0x00000001u)), 0x00);  // fp32 subnormal
  EXPECT_EQ(num::f32_to_e4m3(f_of(0x80000001u)), 0x80);
  EXPECT_EQ(num::f32_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(num::f32_to_e4m3(-2.0f), 0xc0);
}

TEST(NumericsE4m3, EncodeDecodeIdentityForAllNonNaNCodes) {
  for (uint32_t c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(num::f32_to_e4m3(num::e4m3_to_f32(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

// ================================================================================================
// e2m1
// ================================================================================================

TEST(NumericsE2m1, DecodeAll16Codes) {
  const float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint32_t c = 0; c < 16; ++c) {
    const float got = num::e2m1_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(static_cast<long double>(got), e2m1_def(c)) << c;
    EXPECT_EQ(std::fabs(got), mags[c & 7]) << c;  // the SPEC's value list
    EXPECT_EQ(std::signbit(got), (c & 8) != 0) << c;
    EXPECT_EQ(num::f32_to_e2m1(got), c) << c;
  }
}

// The Hopper decode kernel's fp4 codes as bf16 pairs of value x 2^-126: every byte, with other bits
// above it (which must not leak in), against the definition (value, sign of zero, lane order).
TEST(NumericsE2m1, AsBf16PairsTimesTwoToTheMinus126ForEveryByte) {
  for (uint32_t byte = 0; byte < 256; ++byte) {
    for (const uint32_t above : {0x0u, 0xffffff00u, 0x5a3c9600u}) {
      const uint32_t pair = num::e2m1x2_as_bf16x2_scaled(byte | above);
      for (int half = 0; half < 2; ++half) {
        const uint32_t code = (byte >> (4 * half)) & 0xfu;  // the even dim's code in the low half
        const float got = num::bf16_to_f32(static_cast<uint16_t>(pair >> (16 * half)));
        EXPECT_EQ(std::ldexp(static_cast<long double>(got), 126), e2m1_def(code)) << "byte " << byte << " half " << half;
        EXPECT_EQ(std::signbit(got), (code & 8) != 0) << "code " << code;
      }
    }
  }
}

// The decode kernels' four-pairs-at-once form gives e2m1x2_as_bf16x2_scaled's bits for every byte
// at every position of the word, whatever the other three bytes hold (all 16 codes, both signs, in
// every neighbour), with prmt's host form checked on the selectors it is called with.
TEST(NumericsE2m1, FourPairsAtOnceMatchOnePairAtATime) {
  EXPECT_EQ(num::prmt(0x44332211u, 0x88776655u, 0x7350u), 0x88446611u);
  EXPECT_EQ(num::prmt(0x0000807fu, 0u, 0xc9c8u), 0x00ff0000u);  // sign mode: 0x7f -> 0x00, 0x80 -> 0xff
  uint64_t mismatches = 0;
  for (uint32_t byte = 0; byte < 256; ++byte) {
    for (uint32_t pos = 0; pos < 4; ++pos) {
      for (const uint32_t others : {0x00000000u, 0xffffffffu, 0x5a3c9687u, 0x0f0f0f0fu, 0xf0f0f0f0u, byte * 0x01010101u}) {
        const uint32_t w = (others & ~(0xffu << (8 * pos))) | (byte << (8 * pos));
        uint32_t four[4];
        num::e2m1x8_as_bf16x2_scaled(w, four);
        for (uint32_t k = 0; k < 4; ++k) {
          const uint32_t want = num::e2m1x2_as_bf16x2_scaled(w >> (8 * k));
          if (four[k] != want && mismatches++ < 8)
            ADD_FAILURE() << std::hex << "word 0x" << w << " pair " << k << ": 0x" << four[k] << ", want 0x" << want;
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

TEST(NumericsE2m1, MidpointsNeighboursTiesAndSign) {
  const auto& t = e2m1_table();
  for (uint32_t c = 0; c + 1 < t.size(); ++c) {
    const float m = static_cast<float>((t[c] + t[c + 1]) / 2);
    const uint8_t even = (c % 2 == 0) ? c : c + 1;
    for (uint8_t sign : {uint8_t{0}, uint8_t{8}}) {
      const float s = sign ? -1.0f : 1.0f;
      EXPECT_EQ(num::f32_to_e2m1(s * m), sign | even) << m;
      EXPECT_EQ(num::f32_to_e2m1(s * std::nextafter(m, kInf)), sign | (c + 1)) << m;
      EXPECT_EQ(num::f32_to_e2m1(s * std::nextafter(m, 0.0f)), sign | c) << m;
    }
  }
  // The ties spelled out: 0.25->0, 0.75->1.0, 1.25->1.0, 1.75->2, 2.5->2, 3.5->4, 5->4.
  EXPECT_EQ(num::f32_to_e2m1(0.25f), 0);
  EXPECT_EQ(num::f32_to_e2m1(0.75f), 2);
  EXPECT_EQ(num::f32_to_e2m1(1.25f), 2);
  EXPECT_EQ(num::f32_to_e2m1(1.75f), 4);
  EXPECT_EQ(num::f32_to_e2m1(2.5f), 4);
  EXPECT_EQ(num::f32_to_e2m1(3.5f), 6);
  EXPECT_EQ(num::f32_to_e2m1(5.0f), 6);
  EXPECT_EQ(num::f32_to_e2m1(-0.0f), 8);
  EXPECT_EQ(num::f32_to_e2m1(-0.1f), 8);
  EXPECT_EQ(num::f32_to_e2m1(kNaN), 0);
}

TEST(NumericsE2m1, SaturatesAtSix) {
  for (float x : {6.0f, std::nextafter(6.0f, kInf), 7.0f, 8.0f, 1.0e30f,
                  std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(num::f32_to_e2m1(x), 7) << x;
    EXPECT_EQ(num::f32_to_e2m1(-x), 15) << x;
  }
}

TEST(NumericsE2m1, SweepAgainstReference) {
  int failures = 0;
  auto check = [&](float x) {
    const uint8_t got = num::f32_to_e2m1(x);
    const uint8_t want = ref_e2m1(x);
    if (got != want && failures++ < 10)
      ADD_FAILURE() << std::hex << "0x" << u_of(x) << " -> " << int(got) << ", want " << int(want);
  };
  for (float x : all_bf16_floats()) check(x);
  std::mt19937 rng(4242);
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  for (int i = 0; i < 200000; ++i) check(dist(rng));
  for (uint32_t i = 0; i < 100000; ++i) check(f_of(rng()));
  EXPECT_EQ(failures, 0);
}

// ================================================================================================
// ue8m0
// ================================================================================================

TEST(NumericsUe8m0, FromExpClampsToByteRange) {
  for (int e = -1000; e <= 1000; ++e) {
    const int want = std::clamp(e + 127, 0, 255);
    ASSERT_EQ(num::ue8m0_from_exp(e), want) << e;
  }
}

TEST(NumericsUe8m0, ToF32EveryCode) {
  for (int b = 0; b < 256; ++b) {
    const float got = num::ue8m0_to_f32(static_cast<uint8_t>(b));
    if (b == 255) {
      EXPECT_TRUE(std::isnan(got));
      continue;
    }
    EXPECT_EQ(static_cast<long double>(got), std::ldexp(1.0L, b - 127)) << b;
    EXPECT_EQ(num::ue8m0_from_exp(b - 127), b);
  }
}

// ================================================================================================
// int8 truncation
// ================================================================================================

TEST(NumericsInt8, ClampThenTruncateEdgeCases) {
  EXPECT_EQ(num::f32_to_i8_trunc(127.9f), 127);
  EXPECT_EQ(num::f32_to_i8_trunc(-127.9f), -127);
  EXPECT_EQ(num::f32_to_i8_trunc(128.0f), 127);
  EXPECT_EQ(num::f32_to_i8_trunc(-128.0f), -127);
  EXPECT_EQ(num::f32_to_i8_trunc(127.0f), 127);
  EXPECT_EQ(num::f32_to_i8_trunc(-127.0f), -127);
  EXPECT_EQ(num::f32_to_i8_trunc(126.99999f), 126);
  EXPECT_EQ(num::f32_to_i8_trunc(0.99f), 0);
  EXPECT_EQ(num::f32_to_i8_trunc(-0.99f), 0);
  EXPECT_EQ(num::f32_to_i8_trunc(1.0f), 1);
  EXPECT_EQ(num::f32_to_i8_trunc(-1.0f), -1);
  EXPECT_EQ(num::f32_to_i8_trunc(-1.5f), -1);
  EXPECT_EQ(num::f32_to_i8_trunc(1.0e9f), 127);
  EXPECT_EQ(num::f32_to_i8_trunc(-1.0e9f), -127);
  EXPECT_EQ(num::f32_to_i8_trunc(kInf), 127);
  EXPECT_EQ(num::f32_to_i8_trunc(-kInf), -127);
  EXPECT_EQ(num::f32_to_i8_trunc(-0.0f), 0);
  EXPECT_EQ(num::f32_to_i8_trunc(kNaN), 0);
  EXPECT_EQ(num::f32_to_i8_trunc(-kNaN), 0);
}

TEST(NumericsInt8, SweepAgainstReference) {
  int failures = 0;
  auto check = [&](float x) {
    const int got = num::f32_to_i8_trunc(x);
    const int want = ref_i8(x);
    if (got != want && failures++ < 10) ADD_FAILURE() << x << " -> " << got << ", want " << want;
  };
  for (float x : all_bf16_floats()) check(x);
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> dist(-200.0f, 200.0f);
  for (int i = 0; i < 200000; ++i) check(dist(rng));
  for (int k = -130; k <= 130; ++k) {
    const float x = static_cast<float>(k);
    check(x);
    check(std::nextafter(x, kInf));
    check(std::nextafter(x, -kInf));
  }
  EXPECT_EQ(failures, 0);
}

// ================================================================================================
// exp2i
// ================================================================================================

TEST(NumericsExp2i, MatchesLdexpForEveryExponent) {
  for (int e = -160; e <= 140; ++e) {
    const float got = num::exp2i(e);
    EXPECT_EQ(u_of(got), u_of(std::ldexp(1.0f, e))) << e;
    if (e < -149) EXPECT_EQ(u_of(got), 0u) << e;
    else if (e > 127) EXPECT_EQ(got, kInf) << e;
    else EXPECT_EQ(static_cast<long double>(got), std::ldexp(1.0L, e)) << e;
  }
}

// ================================================================================================
// ceil_log2
// ================================================================================================

// Also counts (without failing) where ceil(log2f(x)) is wrong for general fp32 inputs: libm's
// log2f rounds log2(2^k * (1 + 2^-23)) down to exactly k once |k| is large, so the SPEC's equality
// with log2f holds only for the values the scale rules produce (see the next tests), and the bit
// form is the one to trust.
TEST(NumericsCeilLog2, EveryExponentSeveralMantissas) {
  std::mt19937 rng(2024);
  int failures = 0;
  int log2f_disagreements = 0;
  int64_t checked = 0;
  auto check = [&](uint32_t bits) {
    const float x = f_of(bits);
    const int got = num::ceil_log2(x);
    const int want = ref_ceil_log2(x);
    const int via_log2 = static_cast<int>(std::ceil(std::log2(static_cast<double>(x))));
    if (static_cast<int>(std::ceil(std::log2f(x))) != want) ++log2f_disagreements;
    ++checked;
    if ((got != want || via_log2 != want) && failures++ < 10)
      ADD_FAILURE() << std::hex << "0x" << bits << std::dec << ": got " << got << ", exact " << want
                    << ", ceil(log2(double)) " << via_log2;
  };
  for (uint32_t exp = 0; exp < 255; ++exp) {
    std::vector<uint32_t> mants = {0u, 1u, 2u, 3u, 0x400000u, 0x400001u, 0x7ffffeu, 0x7fffffu};
    for (int i = 0; i < 8; ++i) mants.push_back(rng() & 0x7fffffu);
    if (exp == 0) {
      // Subnormals: every power of two and its neighbours.
      for (uint32_t j = 0; j < 23; ++j) {
        mants.push_back(1u << j);
        mants.push_back((1u << j) + 1u);
        mants.push_back((1u << j) - 1u);
      }
    }
    for (uint32_t m : mants) {
      if (exp == 0 && m == 0) continue;  // zero is a sentinel case
      check((exp << 23) | m);
    }
  }
  std::printf("[info] general fp32: ceil(log2f(x)) wrong on %d of %lld inputs (ceil_log2 exact)\n",
              log2f_disagreements, static_cast<long long>(checked));
  EXPECT_EQ(failures, 0);
  EXPECT_GT(checked, 255 * 16);
}

TEST(NumericsCeilLog2, SentinelsAndInfinity) {
  for (float x : {0.0f, -0.0f, -1.0f, -0x1p-149f, -std::numeric_limits<float>::max(), -kInf, kNaN,
                  -kNaN, f_of(0x7f800001u), f_of(0xffffffffu)}) {
    EXPECT_LE(num::ceil_log2(x), kSentinelMax) << std::hex << u_of(x);
  }
  EXPECT_EQ(num::ceil_log2(kInf), 128);
  EXPECT_EQ(num::ceil_log2(1.0f), 0);
  EXPECT_EQ(num::ceil_log2(std::nextafter(1.0f, 2.0f)), 1);
  EXPECT_EQ(num::ceil_log2(std::nextafter(1.0f, 0.0f)), 0);
  EXPECT_EQ(num::ceil_log2(0x1p-149f), -149);
  EXPECT_EQ(num::ceil_log2(3 * 0x1p-149f), -147);
  EXPECT_EQ(num::ceil_log2(std::numeric_limits<float>::max()), 128);
}

// SPEC.md claims ceil_log2(x) == ceil(log2f(x)) for every value the scale rules can produce. The
// exact (long double) answer is asserted; disagreements of log2f are only counted and printed,
// because log2f is a libm approximation: where it disagrees, the bit form is the correct one.
TEST(NumericsCeilLog2, ScaleRuleInputsForEveryBf16Amax) {
  const float inv127 = 1.0f / 127.0f;
  const float inv448 = 1.0f / 448.0f;
  int failures = 0;
  int log2f_disagreements = 0;
  int64_t checked = 0;
  auto check = [&](float x, float a, const char* rule) {
    const int exact = ref_ceil_log2(x);
    ++checked;
    if (num::ceil_log2(x) != exact && failures++ < 10)
      ADD_FAILURE() << rule << " a=" << a << " x=" << x << ": " << num::ceil_log2(x) << " vs "
                    << exact;
    if (static_cast<int>(std::ceil(std::log2f(x))) != exact && log2f_disagreements++ < 5)
      std::printf("[info] %s: a=%a x=%a exact ceil(log2)=%d, ceil(log2f)=%d\n", rule,
                  static_cast<double>(a), static_cast<double>(x), exact,
                  static_cast<int>(std::ceil(std::log2f(x))));
  };
  for (uint32_t h = 0x0001; h < 0x7f80; ++h) {
    const float a = f_of(h << 16);
    if (a > 3.0e38f) break;
    const float x127 = std::max(a, 1.0e-4f) * inv127;
    const float x448 = std::max(a, 1.0e-4f) * inv448;
    const float xcache = std::max(a / 448.0f, 1.0e-4f);
    check(x127, a, "compressor int8");
    check(x448, a, "compressor e4m3");
    check(xcache, a, "cache");
    if (num::compressor_scale_exp(a, inv127) != ref_ceil_log2(x127) && failures++ < 10)
      ADD_FAILURE() << "compressor_scale_exp(" << a << ", 1/127)";
    if (num::compressor_scale_exp(a, inv448) != ref_ceil_log2(x448) && failures++ < 10)
      ADD_FAILURE() << "compressor_scale_exp(" << a << ", 1/448)";
    if (num::cache_scale_exp(a) != ref_ceil_log2(xcache) && failures++ < 10)
      ADD_FAILURE() << "cache_scale_exp(" << a << ")";
  }
  std::printf("[info] ceil(log2f(x)) disagreed with the exact ceil(log2 x) on %d of %lld inputs\n",
              log2f_disagreements, static_cast<long long>(checked));
  EXPECT_EQ(failures, 0);
}

// ================================================================================================
// Scale exponents
// ================================================================================================

namespace {

// The amax values of the brief: 0, 1e-9, 1e-4 and its neighbours, QMAX * 2^k for k in [-20, 20]
// (QMAX = 127 and 448) and their float neighbours, plus a few large values.
std::vector<float> scale_amax_set() {
  std::vector<float> v = {0.0f, 1.0e-9f, 1.0e-4f, std::nextafter(1.0e-4f, 0.0f),
                          std::nextafter(1.0e-4f, 1.0f), 1.0f, 1.0e30f,
                          std::numeric_limits<float>::max()};
  for (float q : {127.0f, 448.0f}) {
    for (int k = -20; k <= 20; ++k) {
      const float a = std::ldexp(q, k);
      v.push_back(a);
      v.push_back(std::nextafter(a, 0.0f));
      v.push_back(std::nextafter(a, kInf));
    }
  }
  for (float x : all_bf16_floats())
    if (std::isfinite(x) && x > 0.0f && x <= 3.0e38f) v.push_back(x);
  return v;
}

// fp32 product of two floats computed without fp32 arithmetic: the product is exact in double
// (24 + 24 significant bits), and one rounding to float is the fp32 multiply.
float fl32_mul(float a, float b) {
  return static_cast<float>(static_cast<double>(a) * static_cast<double>(b));
}
// fp32 quotient a / 448 without fp32 division: the candidates around a long double estimate are
// compared exactly (cand * 448 has at most 27 significant bits, exact in long double); a tie
// cannot occur because a / 7 is either exact or has a non-terminating binary expansion.
float fl32_div448(float a) {
  const float est = static_cast<float>(static_cast<long double>(a) / 448.0L);
  float best = est;
  for (float cand : {std::nextafter(est, -kInf), std::nextafter(est, kInf)}) {
    if (std::fabs(static_cast<long double>(cand) * 448.0L - a) <
        std::fabs(static_cast<long double>(best) * 448.0L - a))
      best = cand;
  }
  return best;
}

}  // namespace

TEST(NumericsScaleExp, CompressorRuleExactAndPayloadBound) {
  long double worst_excess[2] = {0, 0};
  for (int which = 0; which < 2; ++which) {
    const float qmax = which == 0 ? 127.0f : 448.0f;
    const float inv = 1.0f / qmax;  // fl32(1/QMAX), as the SPEC writes it
    for (float amax : scale_amax_set()) {
      const float clamped = amax > 1.0e-4f ? amax : 1.0e-4f;
      const int want = ref_ceil_log2(fl32_mul(clamped, inv));
      const int e = num::compressor_scale_exp(amax, inv);
      ASSERT_EQ(e, want) << "amax=" << amax << " qmax=" << qmax;
      // The payload amax * 2^-e. The rule guarantees it is at most QMAX up to the two fp32
      // roundings (of 1/QMAX and of the product): fl32(1/127) is 1/127 * (1 - 2^-28), so e.g.
      // amax = nextafter(127 * 2^k) gives 127 + 2^-17. That excess never changes a stored payload:
      // int8 truncates it back to 127, and e4m3 rounds anything below 464 to at most 448.
      const long double payload = static_cast<long double>(amax) * std::ldexp(1.0L, -e);
      const long double excess = payload / qmax - 1.0L;
      worst_excess[which] = std::max(worst_excess[which], excess);
      ASSERT_LE(payload, qmax * (1.0L + std::ldexp(1.0L, -22))) << "amax=" << amax;
      if (which == 0) {
        ASSERT_LE(std::trunc(payload), 127.0L) << "amax=" << amax;
        ASSERT_EQ(num::f32_to_i8_trunc(static_cast<float>(payload)), static_cast<int>(std::trunc(payload)));
      } else {
        ASSERT_LT(payload, 464.0L) << "amax=" << amax;
      }
      // Minimality: one exponent lower would overflow QMAX (unless the 1e-4 floor decided e).
      if (amax >= 1.0e-4f) {
        ASSERT_GT(static_cast<long double>(amax) * std::ldexp(1.0L, 1 - e), qmax * (1.0L - std::ldexp(1.0L, -22)))
            << "amax=" << amax;
      }
    }
  }
  std::printf("[info] largest payload excess over QMAX: int8 %.3Le, e4m3 %.3Le (relative)\n",
              worst_excess[0], worst_excess[1]);
}

TEST(NumericsScaleExp, CacheRuleExactAndPayloadBound) {
  long double worst_excess = 0;
  for (float amax : scale_amax_set()) {
    const float q = fl32_div448(amax);
    const int want = ref_ceil_log2(q > 1.0e-4f ? q : 1.0e-4f);
    const int e = num::cache_scale_exp(amax);
    ASSERT_EQ(e, want) << "amax=" << amax;
    const long double payload = static_cast<long double>(amax) * std::ldexp(1.0L, -e);
    worst_excess = std::max(worst_excess, payload / 448.0L - 1.0L);
    ASSERT_LE(payload, 448.0L * (1.0L + std::ldexp(1.0L, -23))) << "amax=" << amax;
    ASSERT_LT(payload, 464.0L) << "amax=" << amax;
  }
  std::printf("[info] cache rule: largest payload excess over 448: %.3Le (relative)\n",
              worst_excess);
  // The two rules differ for small maxima because the 1e-4 floor sits in different places.
  EXPECT_EQ(num::cache_scale_exp(0.0f), ref_ceil_log2(1.0e-4f));
  EXPECT_EQ(num::compressor_scale_exp(0.0f, 1.0f / 448.0f), ref_ceil_log2(fl32_mul(1.0e-4f, 1.0f / 448.0f)));
  EXPECT_NE(num::cache_scale_exp(0.0f), num::compressor_scale_exp(0.0f, 1.0f / 448.0f));
}
