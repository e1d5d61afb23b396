// The CPU pooling kernel's exponential (compress/cpu/pool.h), in every build this CPU runs, against
// exp in double: within 1.5 ulp over the arguments the kernel can give it (over every float of
// [-87.33, 0] the worst is 0.98 ulp without FMA and 1.01 with it), and exact at its edges. (The
// kernel as a whole is judged in test_compress.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "compress/cpu/pool.h"

namespace latentkv::compress {
namespace {

struct Build {
  CpuIsa isa;
  VexpFn vexp;
};
const Build kBuilds[] = {
    {CpuIsa::kSse4, vexp_sse4}, {CpuIsa::kAvx2, vexp_avx2}, {CpuIsa::kAvx512, vexp_avx512}};

float f32_of(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

TEST(CompressPool, VectorExpWithinOneAndAHalfUlp) {
  // Every 61st float of [-87.33, 0] (exp is normal there; the kernel's arguments are <= 0).
  const uint32_t last = 0xc2aeac4fu;  // -87.33654: exp is 2^-126 here
  std::vector<float> x;
  for (uint32_t u = 0x80000000u; u <= last; u += 61) x.push_back(f32_of(u));
  while (x.size() % 16) x.push_back(0.0f);
  std::vector<float> y(x.size());
  for (const Build& b : kBuilds) {
    if (!cpu_supports(b.isa)) continue;
    b.vexp(x.data(), y.data(), static_cast<int64_t>(x.size()));
    double worst = 0;
    float worst_x = 0;
    for (size_t k = 0; k < x.size(); ++k) {
      const double ref = std::exp(static_cast<double>(x[k]));
      const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(ref)) - 23);
      const double err = std::fabs(static_cast<double>(y[k]) - ref) / ulp;
      if (err > worst) {
        worst = err;
        worst_x = x[k];
      }
    }
    EXPECT_LT(worst, 1.5) << cpu_isa_name(b.isa) << " at x = " << worst_x;
    std::printf("[info] vexp %s: worst error %.3f ulp (at %.9g)\n", cpu_isa_name(b.isa), worst,
                worst_x);
  }
}

TEST(CompressPool, VectorExpEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  // 0 -> 1; the first chunk rescales empty sums by exp(-inf - max): exactly 0, never NaN; far
  // below -88 -> 0; just above the flush point tiny, finite, not negative; NaN stays NaN.
  const float in[16] = {0.0f, -0.0f, -inf, -1000.0f, -88.5f, -87.9f, std::nanf(""), -1.0f,
                        0.0f, 0.0f,  0.0f, 0.0f,     0.0f,   0.0f,   0.0f,          0.0f};
  for (const Build& b : kBuilds) {
    if (!cpu_supports(b.isa)) continue;
    SCOPED_TRACE(cpu_isa_name(b.isa));
    float out[16];
    b.vexp(in, out, 16);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], 1.0f);
    EXPECT_EQ(out[2], 0.0f);
    EXPECT_EQ(out[3], 0.0f);
    EXPECT_EQ(out[4], 0.0f);
    EXPECT_GE(out[5], 0.0f);
    EXPECT_LT(out[5], 1.2e-38f);
    EXPECT_TRUE(std::isnan(out[6]));
    EXPECT_NEAR(out[7], 0.36787944117144233, 0.36787944117144233 * 1.2e-7);
  }
}

}  // namespace
}  // namespace latentkv::compress
