// The attention ops' CPU head block (cpu_common/head_block.h), in every build this CPU runs, against
// the same attention in double: every block size 1-16 (whole and partial sub-blocks of 4 heads),
// token counts around the tiles' edges, the ops' widths (d_qk 576 / 512 with d_v 512) and odd ones
// (every scalar tail), keys with a row stride wider than d_qk. Each build twice on the same inputs
// must agree to the bit, and a head's result must not depend on the block it is computed in. (The
// ops as a whole are judged against their oracles in test_decode.cpp, test_prefill.cpp and
// test_dense.cpp, with the default build.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu_common/head_block.h"

namespace latentkv::cpu_common {
namespace {

constexpr CpuIsa kIsas[] = {CpuIsa::kSse4, CpuIsa::kAvx2, CpuIsa::kAvx512};

struct Shape {
  int nh;
  int64_t n;
  int d_qk, d_v;
  int64_t key_stride;
};

struct Result {
  std::vector<float> acc, max, sum;  // acc [nh][d_v]
};

Result run(HeadBlockFn fn, const Shape& sh, const std::vector<float>& q, const std::vector<float>& k) {
  std::vector<float> s(static_cast<size_t>(sh.nh * sh.n), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> acc_store(static_cast<size_t>(kHeadBlock * kMaxDimV), std::numeric_limits<float>::quiet_NaN());
  auto* acc = reinterpret_cast<float(*)[kMaxDimV]>(acc_store.data());
  Result r;
  r.max.assign(static_cast<size_t>(sh.nh), 0.0f);
  r.sum.assign(static_cast<size_t>(sh.nh), 0.0f);
  fn(q.data(), sh.nh, k.data(), sh.n, sh.key_stride, sh.d_qk, sh.d_v, s.data(), acc, r.max.data(), r.sum.data());
  for (int hh = 0; hh < sh.nh; ++hh) r.acc.insert(r.acc.end(), acc[hh], acc[hh] + sh.d_v);
  return r;
}

TEST(HeadBlock, EveryBuildAgreesWithDoubleAttention) {
  const Shape shapes[] = {
      {1, 1, 576, 512, 576},  {4, 7, 576, 512, 576},   {16, 129, 576, 512, 576}, {5, 33, 512, 512, 512},
      {13, 300, 512, 512, 520}, {3, 18, 72, 40, 80},   {16, 17, 19, 7, 19},      {7, 64, 576, 512, 600},
      {2, 2, 8, 512, 512},      {9, 1, 576, 512, 576},
  };
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::string runs;
  for (const Shape& sh : shapes) {
    SCOPED_TRACE(testing::Message() << "nh " << sh.nh << " n " << sh.n << " d_qk " << sh.d_qk << " d_v " << sh.d_v
                                    << " stride " << sh.key_stride);
    ASSERT_GE(sh.key_stride, std::max(sh.d_qk, sh.d_v));
    std::vector<float> q(static_cast<size_t>(sh.nh * sh.d_qk)), k(static_cast<size_t>(sh.n * sh.key_stride));
    for (float& x : q) x = 0.08f * normal(rng);
    for (float& x : k) x = normal(rng);
    // Double: scores, max, exp, sum, weighted V, per head.
    std::vector<double> ref_acc(static_cast<size_t>(sh.nh * sh.d_v)), ref_max(static_cast<size_t>(sh.nh)),
        ref_sum(static_cast<size_t>(sh.nh));
    for (int hh = 0; hh < sh.nh; ++hh) {
      std::vector<double> sc(static_cast<size_t>(sh.n));
      double m = -INFINITY;
      for (int64_t t = 0; t < sh.n; ++t) {
        double v = 0;
        for (int d = 0; d < sh.d_qk; ++d) v += double(q[hh * sh.d_qk + d]) * double(k[t * sh.key_stride + d]);
        sc[t] = v;
        m = std::max(m, v);
      }
      double total = 0;
      for (int64_t t = 0; t < sh.n; ++t) total += sc[t] = std::exp(sc[t] - m);
      for (int d = 0; d < sh.d_v; ++d) {
        double a = 0;
        for (int64_t t = 0; t < sh.n; ++t) a += sc[t] * double(k[t * sh.key_stride + d]);
        ref_acc[hh * sh.d_v + d] = a;
      }
      ref_max[hh] = m;
      ref_sum[hh] = total;
    }
    for (CpuIsa isa : kIsas) {
      if (!cpu_supports(isa)) continue;
      if (&sh == &shapes[0]) runs += std::string(" ") + cpu_isa_name(isa);
      SCOPED_TRACE(cpu_isa_name(isa));
      const HeadBlockFn fn = head_block_fn(isa);
      const Result r = run(fn, sh, q, k);
      double worst_acc = 0, worst_sum = 0, worst_max = 0;
      for (int hh = 0; hh < sh.nh; ++hh) {
        // The max is one fp32 score (its rounding relative to the scores' magnitude); the weights
        // and the weighted sum relative to the row's own scale.
        double scale = 0;
        for (int d = 0; d < sh.d_v; ++d) scale = std::max(scale, std::fabs(ref_acc[hh * sh.d_v + d]));
        for (int d = 0; d < sh.d_v; ++d)
          worst_acc = std::max(worst_acc, std::fabs(r.acc[hh * sh.d_v + d] - ref_acc[hh * sh.d_v + d]) / scale);
        worst_sum = std::max(worst_sum, std::fabs(r.sum[hh] - ref_sum[hh]) / ref_sum[hh]);
        worst_max = std::max(worst_max, std::fabs(r.max[hh] - ref_max[hh]));
      }
      EXPECT_LT(worst_acc, 2e-5);
      EXPECT_LT(worst_sum, 2e-5);
      EXPECT_LT(worst_max, 2e-5);
      // The same build again: bitwise.
      const Result again = run(fn, sh, q, k);
      EXPECT_EQ(0, std::memcmp(r.acc.data(), again.acc.data(), r.acc.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(r.sum.data(), again.sum.data(), r.sum.size() * sizeof(float)));
      // Each head alone (a block of one): the same bits as inside the block.
      for (int hh = 0; hh < sh.nh; hh += 3) {
        const Shape one{1, sh.n, sh.d_qk, sh.d_v, sh.key_stride};
        const std::vector<float> q1(q.begin() + hh * sh.d_qk, q.begin() + (hh + 1) * sh.d_qk);
        const Result alone = run(fn, one, q1, k);
        EXPECT_EQ(0, std::memcmp(alone.acc.data(), r.acc.data() + hh * sh.d_v, sh.d_v * sizeof(float))) << "head " << hh;
        EXPECT_EQ(alone.sum[0], r.sum[hh]) << "head " << hh;
        EXPECT_EQ(alone.max[0], r.max[hh]) << "head " << hh;
      }
    }
  }
  std::printf("[info] head block builds run:%s\n", runs.c_str());
}

// A NaN key dim reaches the heads' outputs (NaN scores are skipped by the max, as fmax does, and
// their weights stay NaN); a -inf score gets weight exactly 0 without NaN.
TEST(HeadBlock, NaNKeysPropagateAndMaxSkipsThem) {
  const Shape sh{2, 5, 16, 16, 16};
  std::vector<float> q(static_cast<size_t>(sh.nh * sh.d_qk), 0.1f), k(static_cast<size_t>(sh.n * sh.key_stride), 0.5f);
  k[2 * sh.key_stride + 3] = std::numeric_limits<float>::quiet_NaN();  // token 2: NaN score
  for (CpuIsa isa : kIsas) {
    if (!cpu_supports(isa)) continue;
    SCOPED_TRACE(cpu_isa_name(isa));
    const Result r = run(head_block_fn(isa), sh, q, k);
    for (int hh = 0; hh < sh.nh; ++hh) {
      EXPECT_FALSE(std::isnan(r.max[hh]));  // the max of the other tokens' scores
      EXPECT_TRUE(std::isnan(r.sum[hh]));
      EXPECT_TRUE(std::isnan(r.acc[hh * sh.d_v]));
    }
  }
  // A -inf key dim past d_v (q > 0): that token's score is -inf, its weight exactly 0, its V finite,
  // nothing NaN. (Inside d_v the weighted sum would hold 0 x -inf = NaN, as in double.)
  const Shape kv{2, 5, 16, 8, 16};
  std::fill(k.begin(), k.end(), 0.5f);
  k[2 * kv.key_stride + 12] = -std::numeric_limits<float>::infinity();
  for (CpuIsa isa : kIsas) {
    if (!cpu_supports(isa)) continue;
    SCOPED_TRACE(cpu_isa_name(isa));
    const Result r = run(head_block_fn(isa), kv, q, k);
    for (int hh = 0; hh < kv.nh; ++hh) {
      EXPECT_FLOAT_EQ(r.max[hh], 0.8f);  // 16 x 0.1 x 0.5 of the other tokens
      EXPECT_FLOAT_EQ(r.sum[hh], 4.0f);  // 4 tokens of weight 1, one of weight 0
      for (int d = 0; d < kv.d_v; ++d) EXPECT_FLOAT_EQ(r.acc[hh * kv.d_v + d], 2.0f) << d;  // 4 x 0.5
    }
  }
}

// The CPU benches' compute ceiling (bench_util measure_cpu_roof) counts kMultiplyAddChains(lanes) x
// lanes multiply-adds per pass: every accumulator c starts at c (< 16) and becomes acc x 1 + 2^-20
// each pass, exact in fp32 below 16; with passes a multiple of 1024 the lane sums are exact too, so the
// returned total says how many were done. The build must also be the one
// for its instruction set (the lanes it reports).
TEST(HeadBlock, MultiplyAddCeilingDoesTheCountedWork) {
  for (CpuIsa isa : kIsas) {
    if (!cpu_supports(isa)) continue;
    SCOPED_TRACE(cpu_isa_name(isa));
    const int lanes = cpu_isa_lanes(isa), chains = kMultiplyAddChains(lanes);
    EXPECT_EQ(lanes, isa == CpuIsa::kAvx512 ? 16 : isa == CpuIsa::kAvx2 ? 8 : 4);
    for (int64_t iters : {int64_t{0}, int64_t{1024}, int64_t{4096}, int64_t{65536}}) {
      const double per_lane = chains * (chains - 1) / 2.0 + chains * static_cast<double>(iters) / 1048576.0;
      EXPECT_EQ(static_cast<double>(multiply_add_fn(isa)(iters)), lanes * per_lane) << iters;
    }
  }
  EXPECT_EQ(kMultiplyAddChains(16), 16);
  EXPECT_EQ(kMultiplyAddChains(8), 12);
}

}  // namespace
}  // namespace latentkv::cpu_common
