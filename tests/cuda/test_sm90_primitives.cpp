// The sm_90a building blocks of the planned Hopper decode kernel (src/decode/sm90/ptx.cuh) against
// CPU products: the score product (both operands in swizzled shared memory) and the value product
// (V read transposed, P from shared memory or registers). Layout or descriptor mistakes give errors
// of the order of the values themselves; fp32 accumulation in another order stays below 1e-5 of
// the largest value. Skipped where the device is not compute capability 9.0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda/device_buffer.h"
#include "decode/sm90/selftest.h"
#include "latentkv/numerics.h"
#include "testing/compress_workload.h"

using namespace latentkv;

namespace {

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = num::f32_to_bf16(latentkv::testing::normal_at(seed, k));
  return v;
}

// max |got - ref| / max |ref| for a row-major [rows][cols] product of bf16 inputs in double.
double product_error(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int rows,
                     int inner, int cols, bool b_transposed, const std::vector<float>& got) {
  double err = 0, ref_max = 0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      double ref = 0;
      for (int k = 0; k < inner; ++k) {
        const double x = num::bf16_to_f32(a[r * inner + k]);
        const double y = num::bf16_to_f32(b_transposed ? b[c * inner + k] : b[k * cols + c]);
        ref += x * y;
      }
      err = std::max(err, std::fabs(got[r * cols + c] - ref));
      ref_max = std::max(ref_max, std::fabs(ref));
    }
  return err / ref_max;
}

bool has_sm90() {
  return latentkv::testing::has_cuda_device() && decode::sm90::device_has_wgmma(0);
}

}  // namespace

TEST(Sm90Primitives, ScoreProductFromSwizzledSharedMemory) {
  if (!has_sm90()) GTEST_SKIP() << "needs a compute capability 9.0 device";
  const auto q = random_bf16(64 * 576, 1), k = random_bf16(64 * 576, 2);
  std::vector<float> s(64 * 64, NAN);
  decode::sm90::selftest_qk(q.data(), k.data(), s.data());
  const double e = product_error(q, k, 64, 576, 64, /*b_transposed=*/true, s);
  std::printf("[sm90] S = Q K^T (m64n64k16 x 36, SS): max rel error %.2e\n", e);
  EXPECT_LT(e, 1e-5);
}

// The score product stays exact while another warpgroup stores to shared memory or runs the same
// products (the decode kernel's situation); the clocks per product are printed for the design
// notes (1,152 at the tensor cores' dense bf16 rate), not checked.
TEST(Sm90Primitives, ScoreProductUnderContention) {
  if (!has_sm90()) GTEST_SKIP() << "needs a compute capability 9.0 device";
  const auto q = random_bf16(64 * 576, 5), k = random_bf16(64 * 576, 6);
  const char* what[3] = {"alone", "beside 16-byte shared stores", "beside a second warpgroup's products"};
  for (int mode = 0; mode < 3; ++mode) {
    std::vector<float> s(64 * 64, NAN);
    long long clocks[2] = {0, 0};
    decode::sm90::selftest_qk_contention(q.data(), k.data(), s.data(), mode, clocks);
    const double e = product_error(q, k, 64, 576, 64, /*b_transposed=*/true, s);
    std::printf("[sm90] S = Q K^T %s: max rel error %.2e, clocks per product: warpgroup 0 %lld, "
                "warpgroup 1 %lld\n", what[mode], e, clocks[0], clocks[1]);
    EXPECT_LT(e, 1e-5) << what[mode];
    EXPECT_GT(clocks[0], 0) << what[mode];
  }
}

TEST(Sm90Primitives, ValueProductWithTransposedV) {
  if (!has_sm90()) GTEST_SKIP() << "needs a compute capability 9.0 device";
  const auto p = random_bf16(64 * 64, 3), v = random_bf16(64 * 256, 4);
  for (bool regs : {false, true}) {
    std::vector<float> o(64 * 256, NAN);
    decode::sm90::selftest_pv(p.data(), v.data(), o.data(), regs);
    const double e = product_error(p, v, 64, 64, 256, /*b_transposed=*/false, o);
    std::printf("[sm90] O = P V (m64n256k16 x 4, V transposed, P from %s): max rel error %.2e\n",
                regs ? "registers" : "shared memory", e);
    EXPECT_LT(e, 1e-5) << (regs ? "P in registers" : "P in shared memory");
  }
}

// The decode kernel's dequantization against e4m3 x scale rounded once to bf16 on the CPU, bit for
// bit, and the path each chunk took against the fast form's conditions (a power-of-two scale in
// 2^-117..2^7, or a ue8m0 byte in 10..134, and no NaN byte), so that neither path can hide behind
// the other. Chunks: the 254 non-NaN byte values four times, rotated so that each sits at every
// position of a 32-bit word, and 16 chunks with one NaN byte (0x7f or 0xff) at each position. Scales:
// fp32 powers of two inside the range, at and beyond both ends, not powers of two; every ue8m0 byte.
// The fast form turns e4m3 subnormals into bf16 subnormals before its multiply, so this also checks
// that the hardware's bf16 multiply keeps them.
TEST(Sm90Primitives, DequantizationMatchesReference) {
  if (!has_sm90()) GTEST_SKIP() << "needs a compute capability 9.0 device";
  std::vector<uint8_t> values;  // the non-NaN e4m3 codes
  for (int b = 0; b < 256; ++b)
    if ((b & 0x7f) != 0x7f) values.push_back(static_cast<uint8_t>(b));
  const int n_values = static_cast<int>(values.size());  // 254
  std::vector<uint8_t> pattern;  // chunks of 16 bytes, the same for every scale
  for (int rot = 0; rot < 4; ++rot)
    for (int t = 0; t < 256; ++t) pattern.push_back(values[(t + rot) % n_values]);
  for (int pos = 0; pos < 16; ++pos)
    for (int j = 0; j < 16; ++j)
      pattern.push_back(j == pos ? (pos % 2 ? 0xff : 0x7f) : values[(7 * pos + 13 * j) % n_values]);
  const int per = static_cast<int>(pattern.size()) / 16;  // 80 chunks per scale
  std::vector<float> scales;
  for (int e : {-126, -118, -117, -116, -60, -9, -1, 0, 6, 7, 8, 15, 16}) scales.push_back(std::ldexp(1.0f, e));
  for (float s : {1.5f, 3.0e-3f, 0.7f}) scales.push_back(s);
  for (int mode = 0; mode < 2; ++mode) {
    const int n_scales = mode == 0 ? static_cast<int>(scales.size()) : 256;
    const int n = n_scales * per;
    std::vector<uint8_t> bytes(16 * static_cast<size_t>(n)), e8(n), fast(n, 2);
    std::vector<float> sc(n);
    for (int c = 0; c < n; ++c) {
      sc[c] = mode == 0 ? scales[c / per] : 0.0f;
      e8[c] = static_cast<uint8_t>(c / per);
      for (int j = 0; j < 16; ++j) bytes[16 * c + j] = pattern[16 * (c % per) + j];
    }
    std::vector<uint16_t> out(16 * static_cast<size_t>(n), 0xdead);
    decode::sm90::selftest_dequant(bytes.data(), mode == 0 ? sc.data() : nullptr, mode == 0 ? nullptr : e8.data(),
                                   n, out.data(), fast.data());
    int64_t bad = 0, wrong_path = 0, n_fast = 0;
    for (int c = 0; c < n; ++c) {
      const float s = mode == 0 ? sc[c] : num::ue8m0_to_f32(e8[c]);
      bool has_nan = false;
      for (int j = 0; j < 16; ++j) has_nan = has_nan || (bytes[16 * c + j] & 0x7f) == 0x7f;
      int exp2 = 0;
      const bool pow2 = std::frexp(s, &exp2) == 0.5f;  // s = 2^(exp2 - 1)
      const bool want_fast =
          !has_nan && (mode == 0 ? pow2 && exp2 - 1 >= -117 && exp2 - 1 <= 7 : e8[c] >= 10 && e8[c] <= 134);
      n_fast += fast[c] == 1;
      if (fast[c] != (want_fast ? 1 : 0) && wrong_path++ < 8)
        ADD_FAILURE() << (mode == 0 ? "fp32 scale " : "ue8m0 byte ") << (mode == 0 ? s : e8[c]) << " chunk " << c % per
                      << ": fast path " << int(fast[c]) << ", expected " << want_fast;
      for (int j = 0; j < 16; ++j) {
        const float ref = num::e4m3_to_f32(bytes[16 * c + j]) * s;
        const uint16_t got = out[16 * c + j];
        const bool ok = std::isnan(ref) ? std::isnan(num::bf16_to_f32(got)) : got == num::f32_to_bf16(ref);
        if (!ok && bad++ < 8)
          ADD_FAILURE() << (mode == 0 ? "fp32 scale " : "ue8m0 scale ") << s << " byte 0x" << std::hex
                        << int(bytes[16 * c + j]) << ": got 0x" << got << ", want 0x" << num::f32_to_bf16(ref)
                        << std::dec;
      }
    }
    std::printf("[sm90] dequantization (%s scales): %d chunks, %lld on the fast path, %lld differing values, "
                "%lld on the wrong path\n",
                mode == 0 ? "fp32" : "ue8m0", n, static_cast<long long>(n_fast), static_cast<long long>(bad),
                static_cast<long long>(wrong_path));
    EXPECT_GT(n_fast, 0);
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(wrong_path, 0);
  }
}

// The two ways the decode kernel can split a block's dequantization between lanes (records.cuh:
// 4 lanes per token, and 8 lanes per token with two tokens per lane, the kernel's for V3.2) write
// the same key stage, byte for byte, and every 16-byte unit of it: random records with NaN
// bytes, scales on and off the fast path (v32: fp32 powers of two in and out of range and others;
// v4: ue8m0 bytes in and out of the fast range, and a random padding byte after the seven scales,
// next to the chunk that lanes 4-7 of the 8-lane split do not have), and absent tokens (zero keys).
// Both formats in both layouts, so that either can be switched without an untested layout
// (v41_fp8 records run at 4 lanes per token only, as the kernel runs them; they are not in this test).
TEST(Sm90Primitives, TokenLayoutsWriteTheSameStage) {
  if (!has_sm90()) GTEST_SKIP() << "needs a compute capability 9.0 device";
  for (const bool v4 : {false, true}) {
    const int rec = v4 ? 576 : 656, stage_bytes = (v4 ? 8 : 9) * 8192;
    uint64_t x = v4 ? 0x9e3779b97f4a7c15ull : 0x2545f4914f6cdd1dull;
    auto next = [&]() {  // xorshift64
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      return x;
    };
    std::vector<uint8_t> records(64 * static_cast<size_t>(rec)), scales(64 * 8), present(64);
    for (int t = 0; t < 64; ++t) {
      present[t] = t % 11 != 3;
      uint8_t* r = records.data() + static_cast<size_t>(t) * rec;
      const int nope = v4 ? 448 : 512;
      for (int j = 0; j < nope; ++j) {
        uint8_t b = static_cast<uint8_t>(next());
        if ((b & 0x7f) == 0x7f && t % 5 != 0) b ^= 1;  // NaN bytes only in every fifth token
        r[j] = b;
      }
      for (int j = v4 ? 448 : 528; j < rec; ++j) r[j] = static_cast<uint8_t>(next());  // bf16 RoPE bits
      if (v4) {
        for (int j = 0; j < 8; ++j) {
          const uint32_t k = static_cast<uint32_t>(next() % 8);
          // mostly in the fast range 10..134, some outside it
          scales[8 * t + j] = static_cast<uint8_t>(k == 0 ? next() % 10 : k == 1 ? 135 + next() % 121 : 100 + next() % 35);
        }
      } else {
        for (int g = 0; g < 4; ++g) {
          const uint32_t k = static_cast<uint32_t>(next() % 8);
          const float s = k == 0 ? 0.37f : k == 1 ? std::ldexp(1.0f, -120) : std::ldexp(1.0f, static_cast<int>(next() % 20) - 12);
          std::memcpy(r + 512 + 4 * g, &s, 4);
        }
      }
    }
    std::vector<uint8_t> a(stage_bytes), b(stage_bytes);
    decode::sm90::selftest_token_layout(v4, records.data(), scales.data(), present.data(), 0, a.data());
    decode::sm90::selftest_token_layout(v4, records.data(), scales.data(), present.data(), 1, b.data());
    int64_t differing = 0, unwritten = 0;
    for (int i = 0; i < stage_bytes; ++i) differing += a[i] != b[i];
    for (int u = 0; u < stage_bytes / 16; ++u) {
      bool fill = true;
      for (int j = 0; j < 16; ++j) fill = fill && b[16 * u + j] == 0xa5;
      unwritten += fill;
    }
    std::printf("[sm90] token layouts (%s): %d stage bytes, %lld differing, %lld 16-byte units unwritten\n",
                v4 ? "v4_fp8" : "v32_fp8", stage_bytes, static_cast<long long>(differing),
                static_cast<long long>(unwritten));
    EXPECT_EQ(differing, 0);
    EXPECT_EQ(unwritten, 0);
  }
}
