// sparse_prefill on the CPU: the fast fp32 path against the float64 oracle over a grid of shapes
// (odd head counts, topk 1 and 100, d_qk 512 and 576, sized for a 2-core CI), a 70000-row sequence,
// the batched form (against separate calls, with empty sequences), the corner cases of SPEC.md
// section 5 (invalid and adversarial indices, zero lengths, infinite sinks, NaN in unattended kv
// rows), bitwise determinism, strided views, every error path, the not-built CUDA backend, and a
// hand-computed case.
#include <gtest/gtest.h>
#include <omp.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "latentkv/error.h"
#include "latentkv/numerics.h"
#include "latentkv/prefill.h"
#include "test_util.h"
#include "testing/attention_workload.h"

using namespace latentkv;
using latentkv::testing::AttentionDiff;
using latentkv::testing::attention_close;
using latentkv::testing::compare_prefill;
using latentkv::testing::make_prefill_workload;
using latentkv::testing::PrefillWorkload;
using latentkv::testing::PrefillWorkloadOptions;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Result {
  std::vector<uint16_t> out;
  std::vector<float> max_logits, lse;
};

Result run(PrefillWorkload& w, PrefillImpl impl) {
  w.run(impl);
  return {w.out, w.max_logits, w.lse};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_bitwise_equal(const Result& a, const Result& b, const std::string& what) {
  ASSERT_EQ(a.out, b.out) << what;
  ASSERT_TRUE(same_bits(a.max_logits, b.max_logits)) << what;
  ASSERT_TRUE(same_bits(a.lse, b.lse)) << what;
}

std::string describe(const PrefillWorkloadOptions& o) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "s_q=%ld s_kv=%ld h_q=%ld d_qk=%ld topk=%ld seqs=%zu len=%d sink=%d",
                static_cast<long>(o.s_q), static_cast<long>(o.s_kv), static_cast<long>(o.h_q),
                static_cast<long>(o.d_qk), static_cast<long>(o.topk), o.seq_q.size(), o.topk_length,
                o.sink);
  return buf;
}

// The worst fast-vs-oracle agreement seen by a test, printed at its end.
struct Worst {
  double max_rel = 0, cos_sim = 1, lse_err = 0;
  void add(const AttentionDiff& d) {
    max_rel = std::max(max_rel, d.max_rel);
    cos_sim = std::min(cos_sim, d.cos_sim);
    lse_err = std::max(lse_err, d.max_lse_err);
  }
  void print(const char* what) const {
    std::printf("[ prefill  ] %s: worst max_rel %.3e, worst cos_sim %.9f, worst |lse err| %.2e\n",
                what, max_rel, cos_sim, lse_err);
  }
};

// Runs the fast path and the oracle on one workload and expects them close.
AttentionDiff expect_fast_matches_oracle(const PrefillWorkloadOptions& o) {
  PrefillWorkload w = make_prefill_workload(o);
  const Result ref = run(w, PrefillImpl::kCpuOracle);
  const Result fast = run(w, PrefillImpl::kCpuFast);
  const AttentionDiff d =
      compare_prefill(w, fast.out, fast.max_logits, fast.lse, ref.out, ref.max_logits, ref.lse);
  EXPECT_TRUE(attention_close(d)) << describe(o) << ": max_rel " << d.max_rel << " cos " << d.cos_sim
                                  << " lse_mismatch " << d.lse_mismatch << " max_logits_mismatch "
                                  << d.max_logits_mismatch << " mask_mismatch " << d.mask_mismatch
                                  << " nan_out " << d.nan_out;
  // The oracle itself writes every element and produces no NaN from finite inputs.
  const AttentionDiff self =
      compare_prefill(w, ref.out, ref.max_logits, ref.lse, ref.out, ref.max_logits, ref.lse);
  EXPECT_EQ(self.nan_out, 0) << describe(o);
  for (size_t k = 0; k < ref.lse.size(); ++k) {
    EXPECT_FALSE(std::isnan(ref.lse[k]) || std::isnan(ref.max_logits[k])) << describe(o);
    // max s <= ln(sum exp s) <= max s + ln(n) for every row that attends anything.
    if (std::isfinite(ref.lse[k])) {
      EXPECT_LE(ref.max_logits[k], ref.lse[k] + 1e-6f) << describe(o);
    }
  }
  return d;
}

}  // namespace

// ---- fast path against the oracle ------------------------------------------------------------

TEST(PrefillCpu, Grid) {
  const int64_t heads[4] = {1, 3, 63, 126};
  const int64_t topks[3] = {1, 64, 100};
  Worst worst;
  int c = 0;
  for (int64_t d_qk : {512, 576})
    for (int64_t s_q : {1, 7})
      for (int64_t h_q : heads) {
        PrefillWorkloadOptions o;
        o.d_qk = d_qk;
        o.s_q = s_q;
        o.h_q = h_q;
        // Large head counts with small topk keep the float64 oracle fast on 2 cores.
        o.topk = h_q >= 63 ? topks[c % 2] : topks[c % 3];
        o.s_kv = c % 2 == 0 ? 300 : 61;  // 61 < topk 64/100: repeated indices
        o.topk_length = c % 2 == 1;
        o.sink = (c / 2) % 2 == 1;
        o.sm_scale = c % 5 == 4 ? 0.07f : 0.0f;
        o.seed = 200 + c;
        worst.add(expect_fast_matches_oracle(o));
        ++c;
      }
  worst.print("grid");
}

TEST(PrefillCpu, Topk2048) {
  PrefillWorkloadOptions o;
  o.s_q = 3;
  o.s_kv = 5000;
  o.h_q = 8;
  o.topk = 2048;
  o.topk_length = true;
  o.sink = true;
  Worst worst;
  worst.add(expect_fast_matches_oracle(o));
  worst.print("topk 2048");
}

TEST(PrefillCpu, SeventyThousandQueryRows) {
  PrefillWorkloadOptions o;
  o.s_q = 70000;
  o.s_kv = 3000;
  o.h_q = 1;
  o.d_qk = 512;
  o.topk = 3;
  o.topk_length = true;
  o.adversarial = true;
  Worst worst;
  worst.add(expect_fast_matches_oracle(o));
  worst.print("s_q 70000");
}

TEST(PrefillCpu, BatchedMatchesSeparateCalls) {
  // Four sequences, one without query rows and one without kv rows (its queries are lonely).
  PrefillWorkloadOptions o;
  o.seq_q = {5, 0, 3, 4};
  o.seq_kv = {100, 40, 0, 77};
  o.h_q = 6;
  o.topk = 50;
  o.topk_length = true;
  o.sink = true;
  o.adversarial = true;
  Worst worst;
  worst.add(expect_fast_matches_oracle(o));
  worst.print("batched");

  PrefillWorkload w = make_prefill_workload(o);
  const Result all = run(w, PrefillImpl::kCpuFast);
  const int64_t h_q = o.h_q, d_qk = o.d_qk, topk = o.topk;
  for (size_t n = 0; n < o.seq_q.size(); ++n) {
    const int64_t q0 = w.seq_offsets_q[n], nq = o.seq_q[n];
    const int64_t kv0 = w.seq_offsets_kv[n], nkv = o.seq_kv[n];
    if (nq == 0) continue;
    for (int64_t r = q0; r < q0 + nq; ++r) {
      if (nkv == 0) {
        for (int64_t h = 0; h < h_q; ++h) {
          EXPECT_EQ(all.lse[r * h_q + h], kInf) << "sequence " << n;
          EXPECT_EQ(all.max_logits[r * h_q + h], -kInf) << "sequence " << n;
        }
      }
    }
    // The same sequence alone: its own rows, its own kv segment, the same relative indices.
    std::vector<uint16_t> kv(w.kv.begin() + kv0 * d_qk, w.kv.begin() + (kv0 + nkv) * d_qk);
    std::vector<uint16_t> out(static_cast<size_t>(nq * h_q * 512));
    std::vector<float> ml(static_cast<size_t>(nq * h_q)), lse(ml.size());
    SparsePrefillArgs a = w.args();
    a.q = TensorView(w.q.data() + q0 * h_q * d_qk, DType::bf16, {nq, h_q, d_qk});
    a.kv = TensorView(kv.data(), DType::bf16, {nkv, 1, d_qk});
    a.indices = TensorView(w.indices.data() + q0 * topk, DType::i32, {nq, 1, topk});
    a.topk_length = TensorView(w.topk_length.data() + q0, DType::i32, {nq});
    a.out = TensorView(out.data(), DType::bf16, {nq, h_q, 512});
    a.max_logits = TensorView(ml.data(), DType::f32, {nq, h_q});
    a.lse = TensorView(lse.data(), DType::f32, {nq, h_q});
    sparse_prefill(a, nullptr, PrefillImpl::kCpuFast);
    ASSERT_EQ(0, std::memcmp(out.data(), all.out.data() + q0 * h_q * 512, out.size() * 2)) << n;
    ASSERT_EQ(0, std::memcmp(lse.data(), all.lse.data() + q0 * h_q, lse.size() * 4)) << n;
    ASSERT_EQ(0, std::memcmp(ml.data(), all.max_logits.data() + q0 * h_q, ml.size() * 4)) << n;
  }
}

TEST(PrefillCpu, FastPathIsBitwiseDeterministic) {
  PrefillWorkloadOptions o;
  o.s_q = 40;
  o.s_kv = 500;
  o.h_q = 13;
  o.topk = 100;
  o.topk_length = true;
  o.sink = true;
  PrefillWorkload w = make_prefill_workload(o);
  const Result first = run(w, PrefillImpl::kCpuFast);
  for (int rep = 0; rep < 5; ++rep) expect_bitwise_equal(run(w, PrefillImpl::kCpuFast), first, "rerun");
  // The thread count changes which thread computes a row, never the row's result.
  const int threads = omp_get_max_threads();
  for (int t : {1, 3}) {
    omp_set_num_threads(t);
    const Result other = run(w, PrefillImpl::kCpuFast);
    omp_set_num_threads(threads);
    expect_bitwise_equal(other, first, "threads " + std::to_string(t));
  }
  // kAuto on host tensors is the fast path.
  expect_bitwise_equal(run(w, PrefillImpl::kAuto), first, "kAuto");
}

// ---- corner cases -----------------------------------------------------------------------------

TEST(PrefillCorner, AllIndicesInvalidGiveZeroMinusInfPlusInf) {
  for (bool sink : {false, true}) {
    PrefillWorkloadOptions o;
    o.s_q = 4;
    o.h_q = 5;
    o.all_invalid = true;
    o.nan_unused = true;  // every kv row is then NaN: nothing may be read
    o.sink = sink;
    PrefillWorkload w = make_prefill_workload(o);
    for (PrefillImpl impl : {PrefillImpl::kCpuOracle, PrefillImpl::kCpuFast}) {
      const Result r = run(w, impl);
      for (uint16_t x : r.out) ASSERT_EQ(x, 0u);
      for (float l : r.lse) ASSERT_EQ(l, kInf);
      for (float m : r.max_logits) ASSERT_EQ(m, -kInf);
    }
  }
}

TEST(PrefillCorner, ZeroTopkLengthIsLonely) {
  PrefillWorkloadOptions o;
  o.s_q = 6;
  o.h_q = 3;
  o.topk_length = true;
  o.zero_lengths = true;  // even rows attend nothing
  o.sink = true;
  expect_fast_matches_oracle(o);
  PrefillWorkload w = make_prefill_workload(o);
  const Result r = run(w, PrefillImpl::kCpuFast);
  for (int64_t row = 0; row < o.s_q; ++row)
    for (int64_t h = 0; h < o.h_q; ++h) {
      if (row % 2 == 0) {
        EXPECT_EQ(r.lse[row * o.h_q + h], kInf);
        EXPECT_EQ(r.max_logits[row * o.h_q + h], -kInf);
        for (int d = 0; d < 512; ++d) ASSERT_EQ(r.out[(row * o.h_q + h) * 512 + d], 0u);
      } else {
        EXPECT_TRUE(std::isfinite(r.lse[row * o.h_q + h])) << "row " << row;
      }
    }
}

TEST(PrefillCorner, SinkPlusInfZeroesOutputAndKeepsLseAndMaxLogits) {
  PrefillWorkloadOptions o;
  o.s_q = 3;
  o.h_q = 6;
  o.topk_length = true;
  PrefillWorkload plain = make_prefill_workload(o);
  o.sink = true;
  o.sink_special = kInf;
  PrefillWorkload sunk = make_prefill_workload(o);
  for (PrefillImpl impl : {PrefillImpl::kCpuOracle, PrefillImpl::kCpuFast}) {
    const Result a = run(plain, impl), r = run(sunk, impl);
    for (uint16_t x : r.out) ASSERT_EQ(x & 0x7fffu, 0u);
    ASSERT_TRUE(same_bits(a.lse, r.lse));
    ASSERT_TRUE(same_bits(a.max_logits, r.max_logits));
  }
}

TEST(PrefillCorner, SinkMinusInfHasNoEffect) {
  PrefillWorkloadOptions o;
  o.s_q = 3;
  o.h_q = 6;
  PrefillWorkload plain = make_prefill_workload(o);
  o.sink = true;
  o.sink_special = -kInf;
  PrefillWorkload sunk = make_prefill_workload(o);
  for (PrefillImpl impl : {PrefillImpl::kCpuOracle, PrefillImpl::kCpuFast})
    expect_bitwise_equal(run(plain, impl), run(sunk, impl), "sink -inf");
}

TEST(PrefillCorner, AdversarialIndicesAreSkippedLikeMinusOne) {
  for (bool batched : {false, true}) {
    PrefillWorkloadOptions o;
    o.s_q = 9;
    o.s_kv = 200;
    if (batched) {
      o.seq_q = {4, 5};
      o.seq_kv = {90, 110};
    }
    o.h_q = 5;
    o.topk = 100;
    o.topk_length = true;
    o.adversarial = true;
    o.sink = true;
    expect_fast_matches_oracle(o);
    PrefillWorkload w = make_prefill_workload(o);
    PrefillWorkload minus_one = w;
    int64_t replaced = 0;
    for (int64_t row = 0; row < w.s_q; ++row)
      for (int64_t k = 0; k < o.topk; ++k) {
        int32_t& idx = minus_one.indices[row * o.topk + k];
        if (idx < 0 || idx >= w.segment(row).second) idx = -1, ++replaced;
      }
    ASSERT_GT(replaced, 0);
    for (PrefillImpl impl : {PrefillImpl::kCpuOracle, PrefillImpl::kCpuFast})
      expect_bitwise_equal(run(w, impl), run(minus_one, impl), batched ? "batched" : "one sequence");
  }
}

TEST(PrefillCorner, NanInUnattendedKvRowsNeverReachesTheOutput) {
  PrefillWorkloadOptions o;
  o.s_q = 8;
  o.s_kv = 2000;
  o.h_q = 7;
  o.topk = 64;
  o.topk_length = true;  // entries past the length point at NaN rows too
  o.adversarial = true;
  o.sink = true;
  o.nan_unused = true;
  const PrefillWorkload w = make_prefill_workload(o);
  int64_t nan_rows = 0;
  for (int64_t r = 0; r < w.s_kv; ++r) nan_rows += w.kv[r * o.d_qk] == 0x7fc0;
  ASSERT_GT(nan_rows, 1000);
  const AttentionDiff d = expect_fast_matches_oracle(o);
  EXPECT_EQ(d.nan_out, 0);
}

TEST(PrefillCorner, StridedViewsMatchContiguous) {
  PrefillWorkloadOptions o;
  o.s_q = 5;
  o.s_kv = 80;
  o.h_q = 3;
  o.topk = 40;
  o.topk_length = true;
  PrefillWorkload w = make_prefill_workload(o);
  const Result ref = run(w, PrefillImpl::kCpuFast);
  const int64_t s_q = o.s_q, h_q = o.h_q, d_qk = o.d_qk, pad = 8, topk = o.topk;
  std::vector<uint16_t> q(static_cast<size_t>(s_q * h_q * (d_qk + pad)), 0x7fc0);
  for (int64_t r = 0; r < s_q * h_q; ++r)
    std::memcpy(&q[r * (d_qk + pad)], &w.q[r * d_qk], d_qk * 2);
  std::vector<uint16_t> kv(static_cast<size_t>(o.s_kv * (d_qk + pad)), 0x7fc0);
  for (int64_t r = 0; r < o.s_kv; ++r) std::memcpy(&kv[r * (d_qk + pad)], &w.kv[r * d_qk], d_qk * 2);
  std::vector<int32_t> idx(static_cast<size_t>(s_q * (topk + 3)), 0);
  for (int64_t r = 0; r < s_q; ++r) std::memcpy(&idx[r * (topk + 3)], &w.indices[r * topk], topk * 4);
  std::vector<uint16_t> out(static_cast<size_t>(s_q * h_q * (512 + pad)), 0x7fc0);
  std::vector<float> ml(static_cast<size_t>(s_q * (h_q + 1))), lse(ml.size());
  SparsePrefillArgs a = w.args();
  a.q = TensorView(q.data(), DType::bf16, {s_q, h_q, d_qk}, {h_q * (d_qk + pad), d_qk + pad, 1});
  a.kv = TensorView(kv.data(), DType::bf16, {o.s_kv, 1, d_qk}, {d_qk + pad, d_qk + pad, 1});
  a.indices = TensorView(idx.data(), DType::i32, {s_q, 1, topk}, {topk + 3, topk + 3, 1});
  a.out = TensorView(out.data(), DType::bf16, {s_q, h_q, 512}, {h_q * (512 + pad), 512 + pad, 1});
  a.max_logits = TensorView(ml.data(), DType::f32, {s_q, h_q}, {h_q + 1, 1});
  a.lse = TensorView(lse.data(), DType::f32, {s_q, h_q}, {h_q + 1, 1});
  sparse_prefill(a, nullptr, PrefillImpl::kCpuFast);
  for (int64_t r = 0; r < s_q * h_q; ++r)
    ASSERT_EQ(0, std::memcmp(&out[r * (512 + pad)], &ref.out[r * 512], 512 * 2));
  for (int64_t r = 0; r < s_q; ++r)
    for (int64_t h = 0; h < h_q; ++h) {
      ASSERT_EQ(lse[r * (h_q + 1) + h], ref.lse[r * h_q + h]);
      ASSERT_EQ(ml[r * (h_q + 1) + h], ref.max_logits[r * h_q + h]);
    }
}

// ---- a case small enough to compute by hand ---------------------------------------------------
// One query, one head, d_qk 576: k0 = e_0 + 0.5 e_1 + 0.25 e_575 (kv row 2), k1 = 3 e_0 (kv row 0),
// q = e_0 + 2 e_575, sm_scale 1. s0 = 1.5 (the dims past d_v count in the score), s1 = 3;
// max_logits = 3; lse = ln(e^1.5 + e^3); out = p0 (1, 0.5, 0, ...) + p1 (3, 0, ...).
TEST(PrefillOracle, HandComputedTwoTokens) {
  const int64_t d_qk = 576, s_kv = 4;
  std::vector<uint16_t> kv(static_cast<size_t>(s_kv * d_qk), 0x7fc0);  // rows 1 and 3 stay NaN
  for (int64_t r : {0, 2}) std::fill(kv.begin() + r * d_qk, kv.begin() + (r + 1) * d_qk, uint16_t{0});
  kv[2 * d_qk + 0] = num::f32_to_bf16(1.0f);
  kv[2 * d_qk + 1] = num::f32_to_bf16(0.5f);
  kv[2 * d_qk + 575] = num::f32_to_bf16(0.25f);
  kv[0] = num::f32_to_bf16(3.0f);
  std::vector<uint16_t> q(d_qk, 0);
  q[0] = num::f32_to_bf16(1.0f);
  q[575] = num::f32_to_bf16(2.0f);
  // Candidates: row 0, an invalid -1, an out-of-range 4, row 2, then garbage (NaN row 1) past the length.
  std::vector<int32_t> idx = {0, -1, 4, 2, 1};
  std::vector<int32_t> len = {4};

  const double s0 = 1.5, s1 = 3.0;
  const double lse = std::log(std::exp(s0) + std::exp(s1));
  const double p0 = std::exp(s0 - lse), p1 = std::exp(s1 - lse);
  const double want0 = p0 * 1.0 + p1 * 3.0, want1 = p0 * 0.5;

  for (bool with_sink : {false, true})
    for (PrefillImpl impl : {PrefillImpl::kCpuOracle, PrefillImpl::kCpuFast}) {
      std::vector<uint16_t> out(512, 0x7fc0);
      float ml = NAN, lse_out = NAN, sink = static_cast<float>(lse);
      SparsePrefillArgs a;
      a.q = TensorView(q.data(), DType::bf16, {1, 1, d_qk});
      a.kv = TensorView(kv.data(), DType::bf16, {s_kv, 1, d_qk});
      a.indices = TensorView(idx.data(), DType::i32, {1, 1, 5});
      a.topk_length = TensorView(len.data(), DType::i32, {1});
      if (with_sink) a.attn_sink = TensorView(&sink, DType::f32, {1});  // sink = lse: factor 1/2
      a.sm_scale = 1.0f;
      a.out = TensorView(out.data(), DType::bf16, {1, 1, 512});
      a.max_logits = TensorView(&ml, DType::f32, {1, 1});
      a.lse = TensorView(&lse_out, DType::f32, {1, 1});
      sparse_prefill(a, nullptr, impl);
      const double factor = with_sink ? 0.5 : 1.0;
      if (impl == PrefillImpl::kCpuOracle) {
        EXPECT_EQ(out[0], num::f32_to_bf16(static_cast<float>(want0 * factor)));
        EXPECT_EQ(out[1], num::f32_to_bf16(static_cast<float>(want1 * factor)));
      } else {
        // fp32 may land on the other side of a bf16 rounding boundary: one bf16 ulp (2^-8 rel).
        EXPECT_NEAR(num::bf16_to_f32(out[0]), want0 * factor, want0 * factor / 256);
        EXPECT_NEAR(num::bf16_to_f32(out[1]), want1 * factor, want1 * factor / 256);
      }
      for (int d = 2; d < 512; ++d) EXPECT_EQ(out[d], 0u) << "dim " << d;
      EXPECT_EQ(ml, 3.0f);
      EXPECT_NEAR(lse_out, lse, 1e-6);
    }
}

// ---- errors -----------------------------------------------------------------------------------

TEST(PrefillErrors, BadShapesAndDtypesAreNamed) {
  PrefillWorkloadOptions o;
  o.s_q = 2;
  o.h_q = 4;
  PrefillWorkload w = make_prefill_workload(o);
  std::vector<uint16_t> big(static_cast<size_t>(o.s_kv * 2 * 1024));
  std::vector<int64_t> idx64(w.indices.begin(), w.indices.end());

  struct Case {
    const char* what;
    std::function<void(SparsePrefillArgs&)> bend;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"q as f32", [&](SparsePrefillArgs& a) { a.q.dtype = DType::f32; },
       "expected q of shape [s_q, h_q, d_qk] bf16"},
      {"kv with d_qk 512 against q's 576",
       [&](SparsePrefillArgs& a) { a.kv = TensorView(big.data(), DType::bf16, {o.s_kv, 1, 512}); },
       "expected kv of shape [s_kv, 1, d_qk] bf16, got [256, 1, 512] bf16 (d_qk is 576 elsewhere)"},
      {"kv with two heads",
       [&](SparsePrefillArgs& a) { a.kv = TensorView(big.data(), DType::bf16, {o.s_kv, 2, 576}); },
       "expected kv of shape [s_kv, 1, d_qk] bf16"},
      {"indices as i64",
       [&](SparsePrefillArgs& a) { a.indices = TensorView(idx64.data(), DType::i64, {2, 1, o.topk}); },
       "expected indices of shape [s_q, 1, topk] i32"},
      {"indices for 3 query rows",
       [&](SparsePrefillArgs& a) { a.indices = TensorView(w.indices.data(), DType::i32, {3, 1, 32}); },
       "expected indices of shape [s_q, 1, topk] i32, got [3, 1, 32] i32 (s_q is 2 elsewhere)"},
      {"d_v 256", [&](SparsePrefillArgs& a) { a.d_v = 256; }, "sparse_prefill supports d_v = 512, got d_v=256"},
      {"out with 576 dims",
       [&](SparsePrefillArgs& a) { a.out = TensorView(big.data(), DType::bf16, {2, 4, 576}); },
       "expected out of shape [s_q, h_q, 512] bf16"},
      {"lse transposed",
       [&](SparsePrefillArgs& a) { a.lse = TensorView(w.lse.data(), DType::f32, {4, 2}); },
       "expected lse of shape [s_q, h_q] f32"},
      {"max_logits as bf16",
       [&](SparsePrefillArgs& a) { a.max_logits = TensorView(big.data(), DType::bf16, {2, 4}); },
       "expected max_logits of shape [s_q, h_q] f32"},
      {"sink of the wrong length",
       [&](SparsePrefillArgs& a) { a.attn_sink = TensorView(w.lse.data(), DType::f32, {5}); },
       "expected attn_sink of shape [h_q] f32"},
      {"topk_length of the wrong length",
       [&](SparsePrefillArgs& a) { a.topk_length = TensorView(w.indices.data(), DType::i32, {3}); },
       "expected topk_length of shape [s_q] i32"},
      {"d_qk below d_v",
       [&](SparsePrefillArgs& a) {
         a.q = TensorView(big.data(), DType::bf16, {2, 4, 256});
         a.kv = TensorView(big.data(), DType::bf16, {o.s_kv, 1, 256});
       },
       "sparse_prefill needs d_v <= d_qk <= 65536"},
      {"sm_scale 0", [&](SparsePrefillArgs& a) { a.sm_scale = 0.0f; }, "sm_scale must be finite and > 0, got 0"},
      {"sm_scale NaN", [&](SparsePrefillArgs& a) { a.sm_scale = NAN; }, "sm_scale must be finite and > 0"},
      {"kv on another device", [&](SparsePrefillArgs& a) { a.kv.device = Device::cuda(0); },
       "kv is on cuda:0, expected cpu"},
      {"sm_scale +inf", [&](SparsePrefillArgs& a) { a.sm_scale = INFINITY; }, "sm_scale must be finite and > 0, got inf"},
      {"topk 0",
       [&](SparsePrefillArgs& a) { a.indices = TensorView(w.indices.data(), DType::i32, {2, 1, 0}); },
       "sparse_prefill: empty problem (s_q=2, h_q=4, topk=0)"},
      {"topk_length strided",
       [&](SparsePrefillArgs& a) { a.topk_length = TensorView(w.indices.data(), DType::i32, {2}, {2}); },
       "topk_length must be contiguous, got stride 2"},
      {"attn_sink strided",
       [&](SparsePrefillArgs& a) { a.attn_sink = TensorView(big.data(), DType::f32, {4}, {3}); },
       "attn_sink must be contiguous, got stride 3"},
  };
  for (const Case& c : cases)
    for (PrefillImpl impl : {PrefillImpl::kCpuOracle, PrefillImpl::kCpuFast}) {
      w.poison_outputs();
      SparsePrefillArgs a = w.args();
      c.bend(a);
      const std::string msg = latentkv::testing::error_of([&] { sparse_prefill(a, nullptr, impl); });
      EXPECT_NE(msg.find(c.message), std::string::npos) << c.what << ": got \"" << msg << "\"";
      for (float l : w.lse) ASSERT_TRUE(std::isnan(l)) << c.what << ": lse written";
      for (uint16_t x : w.out) ASSERT_EQ(x, 0x7fc0) << c.what << ": out written";
    }
}

// Every array but the 1-D ones must be contiguous in its last dimension: the same values under
// every stride doubled are named with the stride, and nothing is written (the doubled view's own
// bytes included, where it is an output).
TEST(PrefillErrors, ViewsStridedInTheLastDimensionAreNamed) {
  PrefillWorkloadOptions o;
  o.s_q = 2;
  o.h_q = 4;
  PrefillWorkload w = make_prefill_workload(o);
  for (const auto& [member, name] :
       {std::pair{&SparsePrefillArgs::q, "q"}, {&SparsePrefillArgs::kv, "kv"},
        {&SparsePrefillArgs::indices, "indices"}, {&SparsePrefillArgs::out, "out"},
        {&SparsePrefillArgs::max_logits, "max_logits"}, {&SparsePrefillArgs::lse, "lse"}})
    for (PrefillImpl impl : {PrefillImpl::kCpuOracle, PrefillImpl::kCpuFast}) {
      w.poison_outputs();
      EXPECT_EQ("", latentkv::testing::refuses_doubled_strides<SparsePrefillArgs>(
                        w.args(), member, name, [&](const SparsePrefillArgs& a) { sparse_prefill(a, nullptr, impl); }));
      for (float l : w.lse) ASSERT_TRUE(std::isnan(l)) << name << ": lse written";
      for (float l : w.max_logits) ASSERT_TRUE(std::isnan(l)) << name << ": max_logits written";
      for (uint16_t x : w.out) ASSERT_EQ(x, 0x7fc0) << name << ": out written";
    }
}

TEST(PrefillErrors, BadSequenceOffsetsAreNamed) {
  PrefillWorkloadOptions o;
  o.seq_q = {2, 3};
  o.seq_kv = {50, 60};
  o.h_q = 2;
  PrefillWorkload w = make_prefill_workload(o);
  struct Case {
    std::vector<int64_t> oq, okv;
    const char* message;
  };
  const std::vector<Case> cases = {
      {{1, 2, 5}, {0, 50, 110}, "seq_offsets_q[0] must be 0, got 1"},
      {{0, 4, 3, 5}, {0, 50, 60, 110}, "seq_offsets_q must be non-decreasing, got seq_offsets_q[1]=4 > seq_offsets_q[2]=3"},
      {{0, 6, 5}, {0, 50, 110}, "seq_offsets_q must be non-decreasing, got seq_offsets_q[1]=6 > seq_offsets_q[2]=5"},
      {{0, 2, 5}, {0, 120, 110}, "seq_offsets_kv must be non-decreasing, got seq_offsets_kv[1]=120 > seq_offsets_kv[2]=110"},
      {{0, 2, 4}, {0, 50, 110}, "seq_offsets_q[2] must equal s_q=5, got 4"},
      {{0, 2, 5}, {0, 50, 111}, "seq_offsets_kv[2] must equal s_kv=110, got 111"},
      {{0, 2, 5}, {0, 50, 60, 110}, "expected seq_offsets_kv of shape [num_seqs + 1] i64, got [4] i64"},
      {{0}, {0}, "needs at least one sequence (offsets of length >= 2), got offsets of length 1"},
  };
  for (const Case& c : cases) {
    w.poison_outputs();
    std::vector<int64_t> oq = c.oq, okv = c.okv;
    const TensorView tq(oq.data(), DType::i64, {static_cast<int64_t>(oq.size())});
    const TensorView tkv(okv.data(), DType::i64, {static_cast<int64_t>(okv.size())});
    const std::string msg =
        latentkv::testing::error_of([&] { sparse_prefill_batched(w.args(), tq, tkv); });
    EXPECT_NE(msg.find(c.message), std::string::npos) << c.message << ": got \"" << msg << "\"";
    for (float l : w.lse) ASSERT_TRUE(std::isnan(l)) << c.message;
  }
  std::vector<int32_t> o32 = {0, 2, 5};
  const std::string msg = latentkv::testing::error_of([&] {
    sparse_prefill_batched(w.args(), TensorView(o32.data(), DType::i32, {3}),
                           TensorView(w.seq_offsets_kv.data(), DType::i64, {3}));
  });
  EXPECT_NE(msg.find("expected seq_offsets_q of shape [num_seqs + 1] i64"), std::string::npos) << msg;
  // Offsets must be contiguous (here every other element of a longer buffer).
  std::vector<int64_t> spaced = {0, 9, 2, 9, 5};
  const std::string msg2 = latentkv::testing::error_of([&] {
    sparse_prefill_batched(w.args(), TensorView(spaced.data(), DType::i64, {3}, {2}),
                           TensorView(w.seq_offsets_kv.data(), DType::i64, {3}));
  });
  EXPECT_NE(msg2.find("seq_offsets_q must be contiguous, got stride 2"), std::string::npos) << msg2;
}

// The limits from the accepted side: d_qk 65536, and 1-D views of length 1 with any stride.
TEST(PrefillErrors, LimitsFromTheAcceptedSide) {
  PrefillWorkloadOptions o;
  o.s_q = 1;
  o.h_q = 1;
  o.s_kv = 8;
  o.topk = 1;
  o.d_qk = 65536;
  o.topk_length = true;
  o.sink = true;
  PrefillWorkload w = make_prefill_workload(o);
  SparsePrefillArgs a = w.args();
  a.topk_length = TensorView(w.topk_length.data(), DType::i32, {1}, {5});
  a.attn_sink = TensorView(w.sink.data(), DType::f32, {1}, {9});
  EXPECT_NO_THROW(sparse_prefill(a, nullptr, PrefillImpl::kCpuFast));
  // h_q 0 is an empty problem.
  a = w.args();
  a.q = TensorView(w.q.data(), DType::bf16, {1, 0, 65536});
  a.out = TensorView(w.out.data(), DType::bf16, {1, 0, 512});
  a.max_logits = TensorView(w.max_logits.data(), DType::f32, {1, 0});
  a.lse = TensorView(w.lse.data(), DType::f32, {1, 0});
  a.attn_sink = TensorView(w.sink.data(), DType::f32, {0});
  const std::string msg = latentkv::testing::error_of([&] { sparse_prefill(a, nullptr, PrefillImpl::kCpuFast); });
  EXPECT_NE(msg.find("sparse_prefill: empty problem (s_q=1, h_q=0"), std::string::npos) << msg;
}

TEST(PrefillErrors, CudaTensorsWithoutCudaBuild) {
#ifdef LKV_WITH_CUDA
  GTEST_SKIP() << "this build has the CUDA backend (tests/cuda covers it)";
#endif
  // The views are never dereferenced: the not-built error comes after the shape checks only.
  PrefillWorkloadOptions o;
  o.seq_q = {3, 5};
  o.seq_kv = {10, 20};
  PrefillWorkload w = make_prefill_workload(o);
  SparsePrefillArgs a = w.args();
  for (TensorView* t : {&a.q, &a.kv, &a.indices, &a.out, &a.max_logits, &a.lse}) t->device = Device::cuda(0);
  TensorView oq(w.seq_offsets_q.data(), DType::i64, {3}, Device::cuda(0));
  TensorView okv(w.seq_offsets_kv.data(), DType::i64, {3}, Device::cuda(0));
  for (PrefillImpl impl : {PrefillImpl::kAuto, PrefillImpl::kCuda})
    for (bool batched : {false, true}) {
      try {
        if (batched) sparse_prefill_batched(a, oq, okv, nullptr, impl);
        else sparse_prefill(a, nullptr, impl);
        FAIL() << "no error";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kNotBuilt);
        EXPECT_NE(std::string(e.what()).find("sparse_prefill: latentkv was built without CUDA"),
                  std::string::npos)
            << e.what();
      }
    }
  // A CPU implementation on CUDA tensors, and the CUDA one on host tensors, are type errors.
  try {
    sparse_prefill(a, nullptr, PrefillImpl::kCpuFast);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kType);
    EXPECT_NE(std::string(e.what()).find("implementation cpu cannot run on tensors on cuda:0"),
              std::string::npos) << e.what();
  }
  try {
    sparse_prefill(w.args(), nullptr, PrefillImpl::kCuda);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kType);
  }
}
