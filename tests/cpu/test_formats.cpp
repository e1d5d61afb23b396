// Cache formats on the CPU: hand-computed records for each of the five formats, the naive reference
// of tests/formats_reference.h over random latents, round-trip error bounds derived from each rule,
// page geometry (padded pages, odd page sizes, the 2-D form), the bytes outside the target records,
// slot validation, positions_to_slots and parse_format.
#include <gtest/gtest.h>

#include <limits>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "formats_reference.h"
#include "latentkv/error.h"
#include "latentkv/formats.h"
#include "latentkv/numerics.h"
#include "test_util.h"

using namespace latentkv;
using lkv_test::HostCache;
using lkv_test::kAllFormats;
using lkv_test::ref_layout;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Quantizes one f32 latent row into slot 1 of a 2-slot, single-page cache and returns its record.
std::vector<uint8_t> encode_one(CacheFormat f, std::vector<float> x) {
  HostCache c(f, 1, 2, 2 * ref_layout(f).bpt, 0xAB);
  int64_t slot = 1;
  quantize(f, TensorView(x.data(), DType::f32, {1, static_cast<int64_t>(x.size())}),
           TensorView(&slot, DType::i64, {1}), c.view4());
  return c.record(1);
}

// Dequantizes the record of encode_one's cache, as floats.
std::vector<float> roundtrip_one(CacheFormat f, std::vector<float> x) {
  HostCache c(f, 1, 1, ref_layout(f).bpt, 0xAB);
  int64_t slot = 0;
  const int64_t d = static_cast<int64_t>(x.size());
  quantize(f, TensorView(x.data(), DType::f32, {1, d}), TensorView(&slot, DType::i64, {1}),
           c.view4());
  std::vector<uint16_t> out(d);
  dequantize(f, c.view4(), TensorView(&slot, DType::i64, {1}), TensorView(out.data(), DType::bf16, {1, d}));
  std::vector<float> y(d);
  for (int64_t i = 0; i < d; ++i) y[i] = num::bf16_to_f32(out[i]);
  return y;
}

void put_f32(std::vector<uint8_t>& r, int at, float v) { std::memcpy(&r[at], &v, 4); }
void put_bf16(std::vector<uint8_t>& r, int at, uint16_t h) {
  r[at] = static_cast<uint8_t>(h & 0xff);
  r[at + 1] = static_cast<uint8_t>(h >> 8);
}

void expect_bytes_eq(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_EQ(got[i], want[i]) << "byte " << i;
}

// Every byte not marked as written still holds the 0xAB poison.
void expect_poison_outside(const std::vector<uint8_t>& bytes, const std::vector<bool>& written) {
  int64_t changed = 0, first = -1;
  for (size_t k = 0; k < bytes.size(); ++k) {
    if (!written[k] && bytes[k] != 0xAB) {
      if (first < 0) first = static_cast<int64_t>(k);
      ++changed;
    }
  }
  EXPECT_EQ(changed, 0) << "first changed byte " << first;
}

}  // namespace

// ---- metadata ---------------------------------------------------------------------------------------

TEST(FormatInfo, TableMatchesSpec) {
  struct Row { CacheFormat f; const char* name; int d_qk, bpt; bool split; };
  const Row rows[] = {{CacheFormat::v32_fp8, "v32_fp8", 576, 656, false},
                      {CacheFormat::v4_fp8, "v4_fp8", 512, 584, true},
                      {CacheFormat::v4_int8, "v4_int8", 512, 584, true},
                      {CacheFormat::v41_fp8, "v41_fp8", 512, 528, false},
                      {CacheFormat::v41_fp4, "v41_fp4", 512, 288, false}};
  for (const Row& r : rows) {
    const FormatInfo& fi = format_info(r.f);
    EXPECT_STREQ(fi.name, r.name);
    EXPECT_EQ(fi.d_qk, r.d_qk);
    EXPECT_EQ(fi.bytes_per_token, r.bpt);
    EXPECT_EQ(fi.page_split, r.split);
    EXPECT_EQ(fi.data_bytes, r.split ? 576 : r.bpt);
    EXPECT_EQ(fi.scale_bytes, r.split ? 8 : 0);
    EXPECT_EQ(parse_format(r.name), r.f);
  }
}

TEST(FormatParse, BadNameIsNamedAndValidOnesListed) {
  const std::string msg = latentkv::testing::error_of([] { parse_format("v4_fp16"); });
  EXPECT_TRUE(has(msg, "'v4_fp16'")) << msg;
  for (const char* n : {"v32_fp8", "v4_fp8", "v4_int8", "v41_fp8", "v41_fp4"})
    EXPECT_TRUE(has(msg, n)) << msg;
  EXPECT_THROW(parse_format(""), Error);
  EXPECT_THROW(parse_format("V4_FP8"), Error);  // names are case-sensitive
}

// ---- hand-computed records --------------------------------------------------------------------------
// Each test sets a few dims of an otherwise zero latent and spells out every byte of the record.
// All-zero groups take the clamp: cache rule e = ceil(log2(1e-4)) = -13 (ue8m0 0x72, fp32 2^-13 =
// 0x39000000); int8 rule e = ceil(log2(1e-4 / 127)) = -20 (0x6B); fp4 scale = the 2^-9 floor (0x01).

TEST(FormatV32Fp8, HandComputedRecord) {
  std::vector<float> x(576, 0.0f);
  x[0] = 448.0f;   // group 0: amax 448 -> e = 0, 448 -> 0x7E
  x[1] = -1.0f;    // e4m3 -1.0 = 1.000b * 2^0 -> 0x80 | (7 << 3) = 0xB8
  x[2] = 3.0f;     // 1.100b * 2^1 -> (8 << 3) | 4 = 0x44
  x[128] = 1000.0f;  // group 1: 1000/448 = 2.23 -> e = 2; 250 rounds (3 mantissa bits) to 256 -> 0x78
  x[129] = 0.5f;     // 0.125 = 2^-3 -> (4 << 3) = 0x20
  x[384] = 0.01f;    // group 3: 0.01/448 < 1e-4 -> e = -13; 81.92 -> 80 = 1.010b * 2^6 -> 0x6A
  x[512] = 1.0f;     // RoPE bf16 0x3F80
  x[513] = -2.5f;    // bf16 0xC020
  x[574] = 1.01171875f;  // 1 + 3*2^-8: a tie, rounds to even 0x3F82
  x[575] = 1.00390625f;  // 1 + 2^-8: a tie, rounds to even 0x3F80

  std::vector<uint8_t> want(656, 0);
  want[0] = 0x7E; want[1] = 0xB8; want[2] = 0x44;
  want[128] = 0x78; want[129] = 0x20;
  want[384] = 0x6A;
  put_f32(want, 512, 1.0f);              // 00 00 80 3F
  put_f32(want, 516, 4.0f);              // 00 00 80 40
  put_f32(want, 520, 0.0001220703125f);  // 2^-13: 00 00 00 39
  put_f32(want, 524, 0.0001220703125f);
  put_bf16(want, 528 + 0, 0x3F80);
  put_bf16(want, 528 + 2, 0xC020);
  put_bf16(want, 528 + 124, 0x3F82);
  put_bf16(want, 528 + 126, 0x3F80);
  EXPECT_EQ(want[516 + 3], 0x40);
  EXPECT_EQ(want[520 + 3], 0x39);
  expect_bytes_eq(encode_one(CacheFormat::v32_fp8, x), want);

  const std::vector<float> y = roundtrip_one(CacheFormat::v32_fp8, x);
  EXPECT_EQ(y[0], 448.0f);
  EXPECT_EQ(y[1], -1.0f);
  EXPECT_EQ(y[2], 3.0f);
  EXPECT_EQ(y[128], 1024.0f);
  EXPECT_EQ(y[129], 0.5f);
  EXPECT_EQ(y[384], 80.0f / 8192.0f);
  EXPECT_EQ(y[513], -2.5f);
  EXPECT_EQ(y[574], 1.015625f);
  EXPECT_EQ(y[575], 1.0f);
}

TEST(FormatV4Fp8, HandComputedRecord) {
  std::vector<float> x(512, 0.0f);
  x[0] = 448.0f;         // group 0: e = 0 (0x7F); 0x7E
  x[1] = -0.001953125f;  // -2^-9: the smallest e4m3 subnormal, 0x81
  x[64] = 7.0f;          // group 1: 7/448 = 2^-6 exactly -> e = -6 (0x79); 7 * 64 = 448 -> 0x7E
  x[65] = 3.0f;          // 192 = 1.100b * 2^7 -> (14 << 3) | 4 = 0x74
  x[400] = -100.0f;      // group 6: 100/448 = 0.223 -> e = -2 (0x7D); -400 ties to even -384 -> 0xFC
  x[448] = 1.0f;         // RoPE dim 0: bf16 0x3F80 at byte 448
  x[511] = -0.5f;        // RoPE dim 63: bf16 0xBF00 at byte 574

  std::vector<uint8_t> want(584, 0);
  want[0] = 0x7E; want[1] = 0x81; want[64] = 0x7E; want[65] = 0x74; want[400] = 0xFC;
  put_bf16(want, 448, 0x3F80);
  put_bf16(want, 574, 0xBF00);
  const uint8_t scales[8] = {0x7F, 0x79, 0x72, 0x72, 0x72, 0x72, 0x7D, 0x00};  // last: the pad byte
  for (int g = 0; g < 8; ++g) want[576 + g] = scales[g];
  expect_bytes_eq(encode_one(CacheFormat::v4_fp8, x), want);

  const std::vector<float> y = roundtrip_one(CacheFormat::v4_fp8, x);
  EXPECT_EQ(y[0], 448.0f);
  EXPECT_EQ(y[1], -0.001953125f);
  EXPECT_EQ(y[64], 7.0f);
  EXPECT_EQ(y[65], 3.0f);
  EXPECT_EQ(y[400], -96.0f);
  EXPECT_EQ(y[448], 1.0f);
  EXPECT_EQ(y[511], -0.5f);
}

TEST(FormatV4Int8, HandComputedRecord) {
  std::vector<float> x(512, 0.0f);
  x[0] = 100.0f;    // group 0: 100 * fl(1/127) = 0.787 -> e = 0 (0x7F); 100 -> 0x64
  x[1] = -3.7f;     // truncation toward zero: -3 -> 0xFD
  x[2] = 99.99f;    // 99 -> 0x63
  x[64] = 1000.0f;  // group 1: 7.87 -> e = 3 (0x82); 125 -> 0x7D
  x[65] = -15.9f;   // -1.9875 truncates to -1 -> 0xFF
  x[192] = 0.001f;  // group 3: 0.001/127 = 7.9e-6 -> e = -16 (0x6F); 65.536 -> 65 = 0x41.
                    // (The cache rule would clamp to e = -13 here: the clamps sit in different places.)
  x[453] = 3.0f;    // RoPE dim 5: bf16 0x4040 at byte 458

  std::vector<uint8_t> want(584, 0);
  want[0] = 0x64; want[1] = 0xFD; want[2] = 0x63; want[64] = 0x7D; want[65] = 0xFF; want[192] = 0x41;
  put_bf16(want, 458, 0x4040);
  const uint8_t scales[8] = {0x7F, 0x82, 0x6B, 0x6F, 0x6B, 0x6B, 0x6B, 0x00};
  for (int g = 0; g < 8; ++g) want[576 + g] = scales[g];
  expect_bytes_eq(encode_one(CacheFormat::v4_int8, x), want);

  const std::vector<float> y = roundtrip_one(CacheFormat::v4_int8, x);
  EXPECT_EQ(y[0], 100.0f);
  EXPECT_EQ(y[1], -3.0f);
  EXPECT_EQ(y[2], 99.0f);
  EXPECT_EQ(y[64], 1000.0f);
  EXPECT_EQ(y[65], -8.0f);
  EXPECT_EQ(y[192], 65.0f / 65536.0f);
  EXPECT_EQ(y[453], 3.0f);
}

TEST(FormatV41Fp8, HandComputedRecord) {
  std::vector<float> x(512, 0.0f);
  x[0] = 448.0f;  // group 0: e = 0 (0x7F); 0x7E
  x[500] = 2.0f;  // group 15 (RoPE dims are quantized too): 2/448 -> e = -7 (0x78); 256 -> 0x78
  x[501] = -0.01f;  // -1.28 -> -1.25 = 1.010b * 2^0 -> 0x80 | (7 << 3) | 2 = 0xBA

  std::vector<uint8_t> want(528, 0);
  want[0] = 0x7E; want[500] = 0x78; want[501] = 0xBA;
  for (int g = 0; g < 16; ++g) want[512 + g] = 0x72;
  want[512 + 0] = 0x7F;
  want[512 + 15] = 0x78;
  expect_bytes_eq(encode_one(CacheFormat::v41_fp8, x), want);

  const std::vector<float> y = roundtrip_one(CacheFormat::v41_fp8, x);
  EXPECT_EQ(y[0], 448.0f);
  EXPECT_EQ(y[500], 2.0f);
  EXPECT_EQ(y[501], -1.25f / 128.0f);
}

TEST(FormatV41Fp4, HandComputedRecord) {
  std::vector<float> x(512, 0.0f);
  // Group 0: amax 6 -> scale e4m3(1.0) = 0x38, s = 1.
  x[0] = 6.0f;    // code 7
  x[1] = -1.0f;   // code 0x8 | 2 = 0xA -> byte 0 = 0xA7 (even dim in the low nibble)
  x[2] = 0.25f;   // tie 0 / 0.5 -> 0
  x[3] = 2.5f;    // tie 2 / 3 -> 2 (code 4) -> byte 1 = 0x40
  x[4] = 5.0f;    // tie 4 / 6 -> 4 (code 6)
  x[5] = 0.75f;   // tie 0.5 / 1 -> 1 (code 2) -> byte 2 = 0x26
  // Group 1: amax 3 -> scale e4m3(0.5) = 0x30.
  x[16] = 3.0f;   // 6 -> code 7
  x[17] = 0.3f;   // 0.6 -> 0.5, code 1 -> byte 8 = 0x17
  // Group 3: amax 1 -> 1/6 rounds to e4m3 1.011b * 2^-3 = 0.171875 (0x23).
  x[48] = 1.0f;   // 5.82 -> 6 (code 7)
  x[49] = -0.5f;  // -2.91 -> -3 (code 0xD) -> byte 24 = 0xD7
  // Group 4: amax 0.01 -> 0.01/6 is below the floor 2^-9 (0x01); 0.01 * 512 = 5.12 -> 6 (code 7).
  x[64] = 0.01f;  // byte 32 = 0x07

  std::vector<uint8_t> want(288, 0);
  want[0] = 0xA7; want[1] = 0x40; want[2] = 0x26; want[8] = 0x17; want[24] = 0xD7; want[32] = 0x07;
  for (int g = 0; g < 32; ++g) want[256 + g] = 0x01;
  want[256 + 0] = 0x38;
  want[256 + 1] = 0x30;
  want[256 + 3] = 0x23;
  expect_bytes_eq(encode_one(CacheFormat::v41_fp4, x), want);

  const std::vector<float> y = roundtrip_one(CacheFormat::v41_fp4, x);
  const float expect[][2] = {{0, 6.0f},   {1, -1.0f},  {2, 0.0f},        {3, 2.0f},
                             {4, 4.0f},   {5, 1.0f},   {16, 3.0f},       {17, 0.25f},
                             {48, 1.03125f}, {49, -0.515625f}, {64, 0.01171875f}};
  for (const auto& e : expect) EXPECT_EQ(y[static_cast<int>(e[0])], e[1]) << "dim " << e[0];
}

// ---- the reference over random latents -------------------------------------------------------------

// Every record equals the naive reference's, for f32 and bf16 latents, i32 and i64 slots.
TEST(FormatAll, MatchesReference) {
  const int64_t n = 37, P = 5, pages = 9;
  for (CacheFormat f : kAllFormats) {
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(std::string(format_info(f).name) + (bf16 ? " bf16" : " f32"));
      const auto l = ref_layout(f);
      std::vector<float> x = lkv_test::random_latents(n, l.d_qk, l.group, 17, bf16);
      std::vector<uint16_t> xh = lkv_test::to_bf16(x);
      std::vector<int32_t> slots(n);
      for (int64_t i = 0; i < n; ++i) slots[i] = static_cast<int32_t>((i * 7 + 3) % (P * pages));
      HostCache c(f, pages, P, lkv_test::padded_stride(f, P));
      const TensorView lat = bf16 ? TensorView(xh.data(), DType::bf16, {n, l.d_qk})
                                  : TensorView(x.data(), DType::f32, {n, l.d_qk});
      quantize(f, lat, TensorView(slots.data(), DType::i32, {n}), c.view4());
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<float> row(x.begin() + i * l.d_qk, x.begin() + (i + 1) * l.d_qk);
        ASSERT_EQ(c.record(slots[i]), lkv_test::ref_encode(f, row)) << "token " << i;
      }
      std::vector<uint16_t> out(n * l.d_qk);
      dequantize(f, c.view4(), TensorView(slots.data(), DType::i32, {n}),
                 TensorView(out.data(), DType::bf16, {n, l.d_qk}));
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<uint16_t> want = lkv_test::ref_decode(f, c.record(slots[i]));
        ASSERT_TRUE(std::equal(want.begin(), want.end(), out.begin() + i * l.d_qk)) << "token " << i;
      }
    }
  }
}

// bf16 latents are widened exactly, so they give the bytes of the same values given as f32.
TEST(FormatAll, Bf16LatentsMatchTheirF32Values) {
  const int64_t n = 16;
  for (CacheFormat f : kAllFormats) {
    SCOPED_TRACE(format_info(f).name);
    const auto l = ref_layout(f);
    std::vector<float> x = lkv_test::random_latents(n, l.d_qk, l.group, 5, /*round_to_bf16=*/true);
    std::vector<uint16_t> xh = lkv_test::to_bf16(x);
    std::vector<int64_t> slots(n);
    for (int64_t i = 0; i < n; ++i) slots[i] = i;
    HostCache a(f, 4, 4, 4 * l.bpt), b(f, 4, 4, 4 * l.bpt);
    quantize(f, TensorView(x.data(), DType::f32, {n, l.d_qk}), TensorView(slots.data(), DType::i64, {n}),
             a.view4());
    quantize(f, TensorView(xh.data(), DType::bf16, {n, l.d_qk}),
             TensorView(slots.data(), DType::i64, {n}), b.view4());
    EXPECT_EQ(a.bytes, b.bytes);
  }
}

// dequantize honours a padded row stride of out and leaves the padding alone.
// A NaN latent never sets its group's scale (docs/formats.md: it never wins the amax comparison):
// every other dim of the row decodes as it does with a 0 in its place.
TEST(FormatAll, NanNeverSetsAGroupScale) {
  for (CacheFormat f : kAllFormats) {
    SCOPED_TRACE(format_info(f).name);
    const auto l = ref_layout(f);
    std::vector<float> x = lkv_test::random_latents(2, l.d_qk, l.group, 11);
    std::copy(x.begin(), x.begin() + l.d_qk, x.begin() + l.d_qk);  // row 1 = row 0
    x[3] = std::numeric_limits<float>::quiet_NaN();                  // dim 3 of group 0
    x[l.d_qk + 3] = 0.0f;
    HostCache c(f, 1, 2, lkv_test::padded_stride(f, 2));
    std::vector<int64_t> slots = {0, 1};
    quantize(f, TensorView(x.data(), DType::f32, {2, l.d_qk}), TensorView(slots.data(), DType::i64, {2}), c.view4());
    std::vector<uint16_t> out(2 * l.d_qk);
    dequantize(f, c.view4(), TensorView(slots.data(), DType::i64, {2}), TensorView(out.data(), DType::bf16, {2, l.d_qk}));
    for (int d = 0; d < l.d_qk; ++d) {
      if (d != 3) {
        ASSERT_EQ(out[d], out[l.d_qk + d]) << "dim " << d;
      }
    }
  }
}

TEST(FormatAll, DequantizeIntoStridedRows) {
  const CacheFormat f = CacheFormat::v41_fp8;
  const int64_t n = 3, row = 600;
  std::vector<float> x = lkv_test::random_latents(n, 512, 32, 31);
  std::vector<int64_t> slots = {2, 0, 1};
  HostCache c(f, 1, 3, 3 * 528);
  quantize(f, TensorView(x.data(), DType::f32, {n, 512}), TensorView(slots.data(), DType::i64, {n}),
           c.view4());
  std::vector<uint16_t> out(n * row, 0x7777);
  dequantize(f, c.view4(), TensorView(slots.data(), DType::i64, {n}),
             TensorView(out.data(), DType::bf16, {n, 512}, {row, 1}));
  for (int64_t t = 0; t < n; ++t) {
    const std::vector<uint16_t> want = lkv_test::ref_decode(f, c.record(slots[t]));
    EXPECT_TRUE(std::equal(want.begin(), want.end(), out.begin() + t * row)) << "token " << t;
    EXPECT_TRUE(std::all_of(out.begin() + t * row + 512, out.begin() + (t + 1) * row,
                            [](uint16_t v) { return v == 0x7777; }));
  }
}

// Round-trip error of every quantized element against a bound derived from the group's rule
// (x is the fp32 value the quantizer saw, d its dequantized bf16 value, which is exact):
//  - e4m3 formats: y = x * 2^-e is exact and |y| <= amax * 2^-e <= 448, so no saturation; e4m3 RNE
//    errs by at most 2^-4 |y| for normal codes (3 mantissa bits) and by half the subnormal step
//    2^-10 below 2^-6: |x - d| <= max(2^-4 |x|, 2^(e-10)).
//  - v4_int8: 2^e >= fl(amax * fl(1/127)) keeps |y| within 127 up to two fp32 roundings, and
//    truncation loses less than one step: |x - d| < 2^e (plus the clamp's few-ulp sliver).
//  - v41_fp4: with s the decoded scale and r = |x| / s, e2m1 RNE errs by half the grid spacing at r:
//    0.25 s below 2, 0.5 s below 4, s below 6; above 6 it saturates, erring by |x| - 6 s. When s is
//    an e4m3 normal (s >= 2^-6) and amax / 6 does not saturate the scale (amax <= 2688), RNE of
//    amax/6 keeps amax <= 6 s (1 + 2^-4), so that is <= 0.375 s. Beyond 2688 the format saturates.
//  - RoPE dims (v32, v4): exactly bf16(x).
TEST(FormatRoundTrip, ErrorBounds) {
  const int64_t n = 64;
  for (CacheFormat f : kAllFormats) {
    SCOPED_TRACE(format_info(f).name);
    const auto l = ref_layout(f);
    std::vector<float> x = lkv_test::random_latents(n, l.d_qk, l.group, 99);
    std::vector<int64_t> slots(n);
    for (int64_t i = 0; i < n; ++i) slots[i] = n - 1 - i;
    HostCache c(f, 8, 8, lkv_test::padded_stride(f, 8));
    quantize(f, TensorView(x.data(), DType::f32, {n, l.d_qk}), TensorView(slots.data(), DType::i64, {n}),
             c.view4());
    std::vector<uint16_t> out(n * l.d_qk);
    dequantize(f, c.view4(), TensorView(slots.data(), DType::i64, {n}),
               TensorView(out.data(), DType::bf16, {n, l.d_qk}));
    int64_t checked = 0;
    for (int64_t t = 0; t < n; ++t) {
      const std::vector<float> row(x.begin() + t * l.d_qk, x.begin() + (t + 1) * l.d_qk);
      for (int i = 0; i < l.d_qk; ++i) {
        const double xi = row[i];
        const double d = num::bf16_to_f32(out[t * l.d_qk + i]);
        const double err = std::fabs(xi - d);
        if (i >= l.quant_dims) {
          ASSERT_EQ(out[t * l.d_qk + i], num::f32_to_bf16(row[i])) << "token " << t << " dim " << i;
          continue;
        }
        const float amax = lkv_test::group_amax(row, i / l.group * l.group, l.group);
        double bound = 0.0;
        if (f == CacheFormat::v4_int8) {
          bound = std::ldexp(1.0, lkv_test::ref_int8_exp(amax)) * (1.0 + 1e-6);
        } else if (f == CacheFormat::v41_fp4) {
          const double s = num::e4m3_to_f32(lkv_test::ref_fp4_scale_code(amax));
          const double r = std::fabs(xi) / s;
          bound = r <= 2.0 ? 0.25 * s : r <= 4.0 ? 0.5 * s : r <= 6.0 ? s : std::fabs(xi) - 6.0 * s;
          bound = bound * (1.0 + 1e-6) + 1e-30;
          if (s >= 0.015625 && amax / 6.0f <= 448.0f) {
            ASSERT_LE(amax, 6.0 * s * (1.0 + 0.0625)) << "token " << t << " dim " << i;
          }
        } else {
          const int e = lkv_test::ref_cache_exp(amax);
          bound = std::max(0.0625 * std::fabs(xi), std::ldexp(1.0, e - 10));
        }
        ASSERT_LE(err, bound) << "token " << t << " dim " << i << " x=" << xi << " d=" << d;
        ++checked;
      }
    }
    EXPECT_EQ(checked, n * l.quant_dims);
  }
}

// ---- geometry -----------------------------------------------------------------------------------------

// Page-split formats with FlashMLA's padded pages: P = 64 in 37440-byte pages (65 * 576). Each
// record lands at SPEC's addresses, the pad byte is 0, the page padding and every other slot keep
// the poison.
TEST(FormatLayout, PageSplitPaddedPages) {
  for (CacheFormat f : {CacheFormat::v4_fp8, CacheFormat::v4_int8}) {
    SCOPED_TRACE(format_info(f).name);
    const int64_t P = 64, pages = 3, stride = 37440, n = 5;
    HostCache c(f, pages, P, stride);
    std::vector<float> x = lkv_test::random_latents(n, 512, 64, 3);
    std::vector<int64_t> slots = {0, 63, 64, 130, 191};
    quantize(f, TensorView(x.data(), DType::f32, {n, 512}), TensorView(slots.data(), DType::i64, {n}),
             c.view4());
    std::vector<bool> written(c.bytes.size(), false);
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<float> row(x.begin() + i * 512, x.begin() + (i + 1) * 512);
      EXPECT_EQ(c.record(slots[i]), lkv_test::ref_encode(f, row));
      const int64_t page = slots[i] / P, t = slots[i] % P;
      EXPECT_EQ(c.bytes[page * stride + P * 576 + t * 8 + 7], 0) << "pad byte of slot " << slots[i];
      for (int64_t p : c.record_positions(slots[i])) written[p] = true;
    }
    expect_poison_outside(c.bytes, written);
  }
}

// Odd page sizes with the page stride rounded up to 16 bytes, every format; the same records
// through the 2-D [num_pages, page_bytes] form give the same bytes.
TEST(FormatLayout, OddPageSizeAndTwoDimForm) {
  for (CacheFormat f : kAllFormats) {
    for (int64_t P : {1, 53}) {
      SCOPED_TRACE(std::string(format_info(f).name) + " P=" + std::to_string(P));
      const auto l = ref_layout(f);
      const int64_t pages = 4, stride = lkv_test::padded_stride(f, P), n = 2 * P;
      HostCache a(f, pages, P, stride), b(f, pages, P, stride);
      std::vector<float> x = lkv_test::random_latents(n, l.d_qk, l.group, 11);
      std::vector<int64_t> slots(n);
      for (int64_t i = 0; i < n; ++i) slots[i] = (i * 5 + 1) % (pages * P);
      if (P == 1) slots = {3, 0};
      quantize(f, TensorView(x.data(), DType::f32, {n, l.d_qk}),
               TensorView(slots.data(), DType::i64, {n}), a.view4());
      quantize(f, TensorView(x.data(), DType::f32, {n, l.d_qk}),
               TensorView(slots.data(), DType::i64, {n}), b.view2(), P);
      EXPECT_EQ(a.bytes, b.bytes);
      std::vector<bool> written(a.bytes.size(), false);
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<float> row(x.begin() + i * l.d_qk, x.begin() + (i + 1) * l.d_qk);
        EXPECT_EQ(a.record(slots[i]), lkv_test::ref_encode(f, row)) << "token " << i;
        for (int64_t p : a.record_positions(slots[i])) written[p] = true;
      }
      expect_poison_outside(a.bytes, written);
    }
  }
}

TEST(FormatLayout, RecordOffsetsFollowSpec) {
  HostCache split(CacheFormat::v4_fp8, 3, 64, 37440);
  const CacheGeometry g = cache_geometry(split.view4(), CacheFormat::v4_fp8);
  EXPECT_EQ(g.num_pages, 3);
  EXPECT_EQ(g.page_size, 64);
  EXPECT_EQ(g.page_stride, 37440);
  EXPECT_EQ(g.num_slots(), 192);
  EXPECT_EQ(g.base, split.bytes.data());
  const RecordOffsets o = record_offsets(g, format_info(CacheFormat::v4_fp8), 64 + 5);
  EXPECT_EQ(o.data, 37440 + 5 * 576);
  EXPECT_EQ(o.scale, 37440 + 64 * 576 + 5 * 8);

  HostCache tm(CacheFormat::v41_fp4, 2, 53, lkv_test::padded_stride(CacheFormat::v41_fp4, 53));
  const CacheGeometry g2 = cache_geometry(tm.view2(), CacheFormat::v41_fp4, 53);
  EXPECT_EQ(g2.page_stride, 15264);  // 53 * 288 = 15264 is already a multiple of 16
  const RecordOffsets o2 = record_offsets(g2, format_info(CacheFormat::v41_fp4), 53 + 2);
  EXPECT_EQ(o2.data, 15264 + 2 * 288);
  EXPECT_EQ(o2.scale, o2.data + 256);
  const RecordOffsets o3 = record_offsets(g2, format_info(CacheFormat::v41_fp4), 0);
  EXPECT_EQ(o3.data, 0);
  EXPECT_THROW(record_offsets(g2, format_info(CacheFormat::v41_fp4), 106), Error);
  EXPECT_THROW(record_offsets(g2, format_info(CacheFormat::v41_fp4), -1), Error);
}

TEST(FormatGeometry, BadCacheViewsAreRejected) {
  const CacheFormat f = CacheFormat::v4_fp8;
  std::vector<uint8_t> buf(4 * 64 * 584 + 4096);
  auto geom = [&](TensorView v, int64_t P = -1) { return latentkv::testing::error_of([&] { cache_geometry(v, f, P); }); };
  // Wrong dtype is a type error naming the expected shape.
  try {
    cache_geometry(TensorView(buf.data(), DType::i8, {4, 64, 1, 584}), f);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kType);
    EXPECT_TRUE(has(e.what(), "[num_pages, page_size, 1, 584] u8")) << e.what();
  }
  EXPECT_TRUE(has(geom(TensorView(buf.data(), DType::u8, {4, 64, 1, 656})), "584")) << "wrong bpt";
  EXPECT_TRUE(has(geom(TensorView(buf.data(), DType::u8, {4, 64, 584})), "got [4, 64, 584] u8"));
  EXPECT_TRUE(has(geom(TensorView(buf.data(), DType::u8, {4, 64, 1, 584}), 32), "page_size=32"));
  EXPECT_TRUE(has(geom(TensorView(buf.data(), DType::u8, {4, 64, 1, 584},
                                  {64 * 584, 600, 584, 1})), "stride(1)=600"));
  EXPECT_TRUE(has(geom(TensorView(buf.data(), DType::u8, {4, 32, 1, 584},
                                  {32 * 584, 584, 584, 2})), "stride(3)=2"));
  EXPECT_TRUE(has(geom(TensorView(buf.data(), DType::u8, {4, 64, 1, 584},
                                  {64 * 584 - 16, 584, 584, 1})), "page stride 37360"));
  EXPECT_TRUE(has(geom(TensorView(buf.data(), DType::u8, {4, 0, 1, 584})), "must be > 0"));
  // 2-D form: page_size must be given and the page must hold P records.
  EXPECT_TRUE(has(geom(TensorView(buf.data(), DType::u8, {4, 64 * 584})), "page_size must be given"));
  EXPECT_TRUE(has(geom(TensorView(buf.data(), DType::u8, {4, 64 * 584}), 0), "page_size must be given"));
  EXPECT_TRUE(has(geom(TensorView(buf.data(), DType::u8, {4, 64 * 584 - 1}), 64), "page_bytes=37375"));
  // Unpadded contiguous pages are fine on the CPU, and a single page may have any stride.
  EXPECT_NO_THROW(cache_geometry(TensorView(buf.data(), DType::u8, {4, 64 * 584}), f, 64));
  EXPECT_NO_THROW(cache_geometry(TensorView(buf.data(), DType::u8, {1, 64, 1, 584}, {5, 584, 584, 1}), f));
  // An empty cache has no slots.
  EXPECT_EQ(cache_geometry(TensorView(buf.data(), DType::u8, {0, 64, 1, 584}), f).num_slots(), 0);
}

// A page size whose page bytes or slot count wrap past INT64_MAX must be refused, not wrap into a
// small product that passes (2^60 * 656 and 2^61 * 584 are 0 mod 2^64): with the 2-D form such a
// page_size made every slot look in range, and quantize, dequantize, compress_kv and sparse_decode
// then read and wrote outside the cache.
TEST(FormatGeometry, OverflowingPageSizesAreRefused) {
  std::vector<uint8_t> buf(4096);
  const int64_t p60 = int64_t{1} << 60, p61 = int64_t{1} << 61;
  auto geom = [&](TensorView v, CacheFormat f, int64_t P) {
    return latentkv::testing::error_of([&] { cache_geometry(v, f, P); });
  };
  EXPECT_TRUE(has(geom(TensorView(buf.data(), DType::u8, {1, 16}), CacheFormat::v32_fp8, p60), "page_bytes=16"));
  EXPECT_TRUE(has(geom(TensorView(buf.data(), DType::u8, {1, 16}), CacheFormat::v4_int8, p61), "page_bytes=16"));
  EXPECT_TRUE(has(geom(TensorView(buf.data(), DType::u8, {1, 16}), CacheFormat::v4_fp8, INT64_MAX), "page_bytes=16"));
  // A 4-D view claiming 2^61 slots per page over 4 pages: the slot count would wrap.
  EXPECT_TRUE(has(geom(TensorView(buf.data(), DType::u8, {4, p61, 1, 584}, {0, 584, 584, 1}), CacheFormat::v4_fp8, -1),
                  "overflows int64"));
  // The ops refuse before writing: quantize into the 16-byte view leaves it untouched.
  std::vector<float> lat(576, 1.0f);
  std::vector<int64_t> slot = {0};
  std::fill(buf.begin(), buf.end(), uint8_t{0xab});
  EXPECT_TRUE(has(latentkv::testing::error_of([&] {
    quantize(CacheFormat::v32_fp8, TensorView(lat.data(), DType::f32, {1, 576}), TensorView(slot.data(), DType::i64, {1}),
             TensorView(buf.data(), DType::u8, {1, 16}), p60);
  }), "page_bytes=16"));
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0xab; }));
}

// A negative dimension in a shape is named (before, std::vector threw length_error).
TEST(FormatValidation, NegativeDimensionIsNamed) {
  std::vector<uint8_t> buf(4096);
  std::vector<float> lat(576, 1.0f);
  std::vector<int64_t> slot = {0};
  const std::string e = latentkv::testing::error_of([&] {
    quantize(CacheFormat::v32_fp8, TensorView(lat.data(), DType::f32, {-1, 576}), TensorView(slot.data(), DType::i64, {-1}),
             TensorView(buf.data(), DType::u8, {1, 4, 1, 656}));
  });
  EXPECT_TRUE(has(e, "dimension 0 is negative")) << e;
}

// ---- slots --------------------------------------------------------------------------------------------

TEST(FormatSlots, NegativeSlotsAreSkipped) {
  for (CacheFormat f : kAllFormats) {
    SCOPED_TRACE(format_info(f).name);
    const auto l = ref_layout(f);
    const int64_t n = 4;
    HostCache c(f, 2, 4, lkv_test::padded_stride(f, 4));
    std::vector<float> x = lkv_test::random_latents(n, l.d_qk, l.group, 23);
    std::vector<int32_t> slots = {-1, 6, -7, 0};
    quantize(f, TensorView(x.data(), DType::f32, {n, l.d_qk}), TensorView(slots.data(), DType::i32, {n}),
             c.view4());
    std::vector<bool> written(c.bytes.size(), false);
    for (int64_t i : {1, 3}) {
      const std::vector<float> row(x.begin() + i * l.d_qk, x.begin() + (i + 1) * l.d_qk);
      EXPECT_EQ(c.record(slots[i]), lkv_test::ref_encode(f, row));
      for (int64_t p : c.record_positions(slots[i])) written[p] = true;
    }
    expect_poison_outside(c.bytes, written);

    // Dequantize gives zeros for negative slots and the record for the others.
    std::vector<uint16_t> out(n * l.d_qk, 0x7777);
    dequantize(f, c.view4(), TensorView(slots.data(), DType::i32, {n}),
               TensorView(out.data(), DType::bf16, {n, l.d_qk}));
    for (int i = 0; i < l.d_qk; ++i) {
      ASSERT_EQ(out[0 * l.d_qk + i], 0);
      ASSERT_EQ(out[2 * l.d_qk + i], 0);
    }
    const std::vector<uint16_t> want = lkv_test::ref_decode(f, c.record(6));
    EXPECT_TRUE(std::equal(want.begin(), want.end(), out.begin() + l.d_qk));
  }
}

TEST(FormatSlots, OutOfRangeSlotIsNamedAndNothingIsWritten) {
  for (CacheFormat f : kAllFormats) {
    SCOPED_TRACE(format_info(f).name);
    const auto l = ref_layout(f);
    const int64_t n = 3;
    HostCache c(f, 2, 4, lkv_test::padded_stride(f, 4));
    std::vector<float> x = lkv_test::random_latents(n, l.d_qk, l.group, 2);
    std::vector<int64_t> slots = {0, 1, 8};  // the cache has 8 slots
    const std::string msg = latentkv::testing::error_of([&] {
      quantize(f, TensorView(x.data(), DType::f32, {n, l.d_qk}),
               TensorView(slots.data(), DType::i64, {n}), c.view4());
    });
    EXPECT_TRUE(has(msg, "slot 8 (slots[2])")) << msg;
    EXPECT_TRUE(has(msg, "8 slots")) << msg;
    for (uint8_t b : c.bytes) ASSERT_EQ(b, 0xAB);

    std::vector<uint16_t> out(n * l.d_qk, 0x7777);
    const std::string dmsg = latentkv::testing::error_of([&] {
      dequantize(f, c.view4(), TensorView(slots.data(), DType::i64, {n}),
                 TensorView(out.data(), DType::bf16, {n, l.d_qk}));
    });
    EXPECT_TRUE(has(dmsg, "slot 8 (slots[2])")) << dmsg;
    for (uint16_t v : out) ASSERT_EQ(v, 0x7777);
  }
}

TEST(FormatSlots, UncheckedOutOfRangeSlotIsSkippedNeverFollowed) {
  // check_slots = false (no host read of the slots): a slot past the cache writes nothing and
  // dequantizes to zeros; the in-range slots are handled as with the checks.
  for (CacheFormat f : kAllFormats) {
    SCOPED_TRACE(format_info(f).name);
    const auto l = ref_layout(f);
    const int64_t n = 3;
    HostCache checked(f, 2, 4, lkv_test::padded_stride(f, 4));
    HostCache unchecked(f, 2, 4, lkv_test::padded_stride(f, 4));
    std::vector<float> x = lkv_test::random_latents(n, l.d_qk, l.group, 3);
    std::vector<int64_t> good = {0, 5, -1}, bad = {0, 5, 8};  // the cache has 8 slots
    quantize(f, TensorView(x.data(), DType::f32, {n, l.d_qk}),
             TensorView(good.data(), DType::i64, {n}), checked.view4());
    quantize(f, TensorView(x.data(), DType::f32, {n, l.d_qk}),
             TensorView(bad.data(), DType::i64, {n}), unchecked.view4(), -1, nullptr,
             /*check_slots=*/false);
    ASSERT_EQ(unchecked.bytes, checked.bytes);
    std::vector<uint16_t> out(n * l.d_qk, 0x7777);
    dequantize(f, unchecked.view4(), TensorView(bad.data(), DType::i64, {n}),
               TensorView(out.data(), DType::bf16, {n, l.d_qk}), -1, nullptr, false);
    for (int64_t d = 0; d < l.d_qk; ++d) ASSERT_EQ(out[2 * l.d_qk + d], 0) << d;
  }
}

TEST(FormatSlots, DuplicateSlotIsNamedAndNothingIsWritten) {
  for (CacheFormat f : kAllFormats) {
    SCOPED_TRACE(format_info(f).name);
    const auto l = ref_layout(f);
    const int64_t n = 5;
    HostCache c(f, 2, 4, lkv_test::padded_stride(f, 4));
    std::vector<float> x = lkv_test::random_latents(n, l.d_qk, l.group, 4);
    std::vector<int32_t> slots = {5, -1, 2, -1, 5};  // -1 twice is fine, 5 twice is not
    const std::string msg = latentkv::testing::error_of([&] {
      quantize(f, TensorView(x.data(), DType::f32, {n, l.d_qk}),
               TensorView(slots.data(), DType::i32, {n}), c.view4());
    });
    EXPECT_TRUE(has(msg, "slot 5 is written twice (slots[0] and slots[4])")) << msg;
    for (uint8_t b : c.bytes) ASSERT_EQ(b, 0xAB);
    // The smallest slot twice, side by side (the first pair of the sorted slots).
    std::vector<int64_t> pair = {3, 3};
    const std::string msg2 = latentkv::testing::error_of([&] {
      quantize(f, TensorView(x.data(), DType::f32, {2, l.d_qk}), TensorView(pair.data(), DType::i64, {2}), c.view4());
    });
    EXPECT_TRUE(has(msg2, "slot 3 is written twice (slots[0] and slots[1])")) << msg2;
    for (uint8_t b : c.bytes) ASSERT_EQ(b, 0xAB);
  }
  // Dequantize reads a slot as often as asked.
  const CacheFormat f = CacheFormat::v41_fp8;
  HostCache c(f, 1, 2, 2 * 528, 0x38);  // every e4m3 payload 1.0, every scale 2^-71
  std::vector<int64_t> slots = {1, 1};
  std::vector<uint16_t> out(2 * 512);
  dequantize(f, c.view4(), TensorView(slots.data(), DType::i64, {2}), TensorView(out.data(), DType::bf16, {2, 512}));
  EXPECT_TRUE(std::equal(out.begin(), out.begin() + 512, out.begin() + 512));
  EXPECT_EQ(num::bf16_to_f32(out[0]), std::ldexp(1.0f, 0x38 - 127));
}

TEST(FormatValidation, BadLatentsSlotsAndOutAreRejected) {
  const CacheFormat f = CacheFormat::v32_fp8;
  HostCache c(f, 2, 4, 4 * 656);
  std::vector<float> x(3 * 576 * 2, 0.5f);
  std::vector<uint16_t> h(3 * 576, 0x3F00);
  std::vector<int64_t> slots = {0, 1, 2};
  const TensorView s3(slots.data(), DType::i64, {3});
  auto q = [&](TensorView lat, TensorView sl) { return latentkv::testing::error_of([&] { quantize(f, lat, sl, c.view4()); }); };
  EXPECT_TRUE(has(q(TensorView(x.data(), DType::f32, {3, 512}), s3), "[n, 576]"));
  EXPECT_TRUE(has(q(TensorView(h.data(), DType::f16, {3, 576}), s3), "bf16 or f32"));
  EXPECT_TRUE(has(q(TensorView(x.data(), DType::f32, {2, 576}), s3), "n is 2 elsewhere"));
  EXPECT_TRUE(has(q(TensorView(x.data(), DType::f32, {3, 576}, {1152, 2}), s3), "last dimension"));
  EXPECT_TRUE(has(q(TensorView(x.data(), DType::f32, {3, 576}),
                    TensorView(slots.data(), DType::f32, {3})), "i64 or i32"));
  EXPECT_TRUE(has(q(TensorView(x.data(), DType::f32, {2, 576}),
                    TensorView(slots.data(), DType::i64, {2}, {2})), "last dimension"));
  for (uint8_t b : c.bytes) ASSERT_EQ(b, 0xAB);
  // A padded latent row stride is fine.
  EXPECT_NO_THROW(quantize(f, TensorView(x.data(), DType::f32, {3, 576}, {1152, 1}), s3, c.view4()));
  EXPECT_EQ(c.record(2), lkv_test::ref_encode(f, std::vector<float>(576, 0.5f)));
  // dequantize's out is bf16 [n, d_qk].
  std::vector<float> of(3 * 576);
  EXPECT_TRUE(has(latentkv::testing::error_of([&] { dequantize(f, c.view4(), s3, TensorView(of.data(), DType::f32, {3, 576})); }),
                  "expected out of shape [n, 576] bf16"));
  EXPECT_TRUE(has(latentkv::testing::error_of([&] { dequantize(f, c.view4(), s3, TensorView(h.data(), DType::bf16, {3, 512})); }),
                  "expected out of shape [n, 576] bf16"));
  std::vector<uint16_t> wide(3 * 576 * 2);
  EXPECT_TRUE(has(latentkv::testing::error_of([&] {
    dequantize(f, c.view4(), s3, TensorView(wide.data(), DType::bf16, {3, 576}, {1152, 2}));
  }), "out must be contiguous in its last dimension"));
  // Empty inputs are fine and write nothing.
  EXPECT_NO_THROW(quantize(f, TensorView(nullptr, DType::f32, {0, 576}), TensorView(nullptr, DType::i64, {0}),
                           c.view4()));
}

TEST(FormatValidation, DevicesMustAgree) {
  const CacheFormat f = CacheFormat::v41_fp4;
  HostCache c(f, 1, 4, 4 * 288);
  std::vector<float> x(512);
  int64_t slot = 0;
  const TensorView lat(x.data(), DType::f32, {1, 512}, Device::cuda(0));
  const std::string msg = latentkv::testing::error_of([&] {
    quantize(f, lat, TensorView(&slot, DType::i64, {1}), c.view4());
  });
  EXPECT_TRUE(has(msg, "latents is on cuda:0, expected cpu")) << msg;
}

#ifndef LKV_WITH_CUDA
TEST(FormatValidation, CudaTensorsNeedACudaBuild) {
  const CacheFormat f = CacheFormat::v4_fp8;
  HostCache c(f, 1, 4, 4 * 584);
  std::vector<float> x(512);
  int64_t slot = 0;
  try {
    quantize(f, TensorView(x.data(), DType::f32, {1, 512}, Device::cuda(0)),
             TensorView(&slot, DType::i64, {1}, Device::cuda(0)), c.view4(nullptr, Device::cuda(0)));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotBuilt);
    EXPECT_TRUE(has(e.what(), "latentkv was built without CUDA")) << e.what();
  }
}
#endif

// ---- positions_to_slots -------------------------------------------------------------------------------

TEST(FormatPositions, BlockTableLookupAndInvalidPositions) {
  const int64_t P = 16, b = 2, max_blocks = 3, n = 9;
  std::vector<int32_t> table = {7, 2, -1,   // request 0: its third block is unmapped
                                0, 5, 9};
  std::vector<int32_t> pos = {0, 15, 16, 33, 31, -1, 48, 47, -5,
                              5, 16, 40, 47, 48, 1000, -1, 32, 2147483647};
  std::vector<int32_t> slots(b * n, 12345);
  positions_to_slots(TensorView(table.data(), DType::i32, {b, max_blocks}),
                     TensorView(pos.data(), DType::i32, {b, n}), P,
                     TensorView(slots.data(), DType::i32, {b, n}));
  const std::vector<int32_t> want = {7 * 16 + 0, 7 * 16 + 15, 2 * 16 + 0, -1, 2 * 16 + 15, -1, -1, -1, -1,
                                     0 * 16 + 5, 5 * 16 + 0, 9 * 16 + 8, 9 * 16 + 15, -1, -1, -1,
                                     9 * 16 + 0, -1};
  EXPECT_EQ(slots, want);
}

TEST(FormatPositions, StridedViewsAndOverflow) {
  // A table whose rows are padded (stride 3), a transposed positions view; a slot beyond i32 is -1.
  const int64_t P = 1 << 20;
  std::vector<int32_t> table = {3000, 0, 99,   // request 0: blocks 3000, 0
                                1, 0, 99};     // request 1: blocks 1, 0
  std::vector<int32_t> pos_t = {5, 7, P + 1, 9};  // stored [n][b], viewed as [b, n]
  std::vector<int32_t> slots(4, 0);
  positions_to_slots(TensorView(table.data(), DType::i32, {2, 2}, {3, 1}),
                     TensorView(pos_t.data(), DType::i32, {2, 2}, {1, 2}), P,
                     TensorView(slots.data(), DType::i32, {2, 2}));
  // Request 0: position 5 -> 3000 * 2^20 + 5 does not fit i32 -> -1; position P + 1 -> 0 * P + 1.
  // Request 1: positions 7 and 9 -> block 1: P + 7, P + 9.
  EXPECT_EQ(slots, (std::vector<int32_t>{-1, 1, static_cast<int32_t>(P + 7), static_cast<int32_t>(P + 9)}));
  EXPECT_TRUE(has(latentkv::testing::error_of([&] {
    positions_to_slots(TensorView(table.data(), DType::i32, {2, 2}), TensorView(pos_t.data(), DType::i32, {2, 2}),
                       0, TensorView(slots.data(), DType::i32, {2, 2}));
  }), "page_size must be > 0, got 0"));
  EXPECT_TRUE(has(latentkv::testing::error_of([&] {
    positions_to_slots(TensorView(table.data(), DType::i32, {2, 2}), TensorView(pos_t.data(), DType::i32, {1, 4}),
                       16, TensorView(slots.data(), DType::i32, {1, 4}));
  }), "b is 2 elsewhere"));
}

// Block x page size past INT32_MAX is -1 even where the int64 product would wrap (P = 2^33 and a
// block near 2^31 gave a small positive slot before), and max_blocks x P past INT64_MAX does not
// let a position through.
TEST(FormatPositions, HugePageSizesGiveMinusOne) {
  std::vector<int32_t> table = {INT32_MAX, 0};
  std::vector<int32_t> pos = {5, 0};
  std::vector<int32_t> slots(2, 7);
  positions_to_slots(TensorView(table.data(), DType::i32, {1, 2}), TensorView(pos.data(), DType::i32, {1, 2}),
                     int64_t{1} << 33, TensorView(slots.data(), DType::i32, {1, 2}));
  EXPECT_EQ(slots, (std::vector<int32_t>{-1, -1}));  // block INT32_MAX: beyond i32; position 0: block INT32_MAX
  table = {0, 1};
  positions_to_slots(TensorView(table.data(), DType::i32, {1, 2}), TensorView(pos.data(), DType::i32, {1, 2}),
                     INT64_MAX / 2, TensorView(slots.data(), DType::i32, {1, 2}));
  EXPECT_EQ(slots, (std::vector<int32_t>{5, 0}));  // block 0: slots 5 and 0
  // With P = 10, block 214748364 starts at slot 2147483640: its position 7 is INT32_MAX exactly,
  // positions 8 and 9 lie past it and give -1.
  table = {214748364, 0};
  pos = {9, 7};
  positions_to_slots(TensorView(table.data(), DType::i32, {1, 2}), TensorView(pos.data(), DType::i32, {1, 2}), 10,
                     TensorView(slots.data(), DType::i32, {1, 2}));
  EXPECT_EQ(slots, (std::vector<int32_t>{-1, 2147483647}));
}
