// The sm_90a building blocks of the planned Hopper decode kernel (src/decode/sm90/ptx.cuh) against
// CPU products: the score product (both operands in swizzled shared memory) and the value product
// (V read transposed, P from shared memory or registers). Layout or descriptor mistakes give errors
// of the order of the values themselves; fp32 accumulation in another order stays below 1e-5 of
// the largest value. Skipped where the device is not compute capability 9.0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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
