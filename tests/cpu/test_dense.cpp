// dense_decode on the CPU: the fast fp32 path against the float64 oracle over grids of shapes for
// bf16, f16 and v32_fp8 caches (odd head counts, h_kv 1 and 2, page sizes 1, 53 and 64, causal
// and not, zero lengths), the corner cases of SPEC.md section 6 (rows that see nothing, garbage
// block-table entries beyond the needed pages, NaN in unread cache slots), bitwise determinism,
// strided views, every error path, the not-built CUDA backend, a hand-computed case, and the f16
// conversions exhaustively over all 65536 codes.
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

#include "latentkv/numerics.h"
#include "latentkv/dense.h"
#include "latentkv/error.h"
#include "latentkv/numerics.h"
#include "test_util.h"
#include "testing/attention_workload.h"

using namespace latentkv;
using latentkv::testing::AttentionDiff;
using latentkv::testing::attention_close;
using latentkv::testing::compare_dense;
using latentkv::testing::DenseWorkload;
using latentkv::testing::DenseWorkloadOptions;
using latentkv::testing::make_dense_workload;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Result {
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

Result run(DenseWorkload& w, DenseImpl impl) {
  w.run(impl);
  return {w.out, w.lse};
}

void expect_bitwise_equal(const Result& a, const Result& b, const std::string& what) {
  ASSERT_EQ(a.out, b.out) << what;
  ASSERT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float))) << what;
}

const char* cache_name(const DenseWorkloadOptions& o) { return o.fp8 ? "v32_fp8" : o.f16 ? "f16" : "bf16"; }

std::string describe(const DenseWorkloadOptions& o) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s b=%ld s_q=%ld h_q=%ld h_kv=%ld P=%ld max_len=%ld causal=%d",
                cache_name(o), static_cast<long>(o.b), static_cast<long>(o.s_q),
                static_cast<long>(o.h_q), static_cast<long>(o.h_kv), static_cast<long>(o.page_size),
                static_cast<long>(o.max_len), o.causal);
  return buf;
}

struct Worst {
  double max_rel = 0, cos_sim = 1, lse_err = 0;
  void add(const AttentionDiff& d) {
    max_rel = std::max(max_rel, d.max_rel);
    cos_sim = std::min(cos_sim, d.cos_sim);
    lse_err = std::max(lse_err, d.max_lse_err);
  }
  void print(const char* what) const {
    std::printf("[ dense    ] %s: worst max_rel %.3e, worst cos_sim %.9f, worst |lse err| %.2e\n",
                what, max_rel, cos_sim, lse_err);
  }
};

AttentionDiff expect_fast_matches_oracle(const DenseWorkloadOptions& o) {
  DenseWorkload w = make_dense_workload(o);
  const Result ref = run(w, DenseImpl::kCpuOracle);
  const Result fast = run(w, DenseImpl::kCpuFast);
  const AttentionDiff d = compare_dense(w, fast.out, fast.lse, ref.out, ref.lse);
  EXPECT_TRUE(attention_close(d)) << describe(o) << ": max_rel " << d.max_rel << " cos " << d.cos_sim
                                  << " lse_mismatch " << d.lse_mismatch << " mask_mismatch "
                                  << d.mask_mismatch << " nan_out " << d.nan_out;
  const AttentionDiff self = compare_dense(w, ref.out, ref.lse, ref.out, ref.lse);
  EXPECT_EQ(self.nan_out, 0) << describe(o);
  for (float l : ref.lse) EXPECT_FALSE(std::isnan(l)) << describe(o);
  return d;
}

// One cache kind over page sizes x s_q x causal, with heads, kv heads and lengths cycling. Large
// head counts get shorter lengths so the float64 oracle stays fast on 2 cores.
void run_grid(bool f16, bool fp8, const char* name) {
  const int64_t heads[4][2] = {{1, 1}, {3, 1}, {126, 2}, {63, 1}};  // (h_q, h_kv)
  const int64_t lens[4] = {1, 100, 300, 0};
  Worst worst;
  int c = 0;
  for (int64_t P : {1, 53, 64})
    for (int64_t s_q : {1, 2, 5})
      for (bool causal : {false, true}) {
        DenseWorkloadOptions o;
        o.f16 = f16;
        o.fp8 = fp8;
        o.b = 3;
        o.s_q = s_q;
        o.page_size = P;
        o.causal = causal;
        o.h_q = heads[c % 4][0];
        o.h_kv = fp8 ? 1 : heads[c % 4][1];
        o.max_len = o.h_q >= 63 ? 60 : lens[c % 4];
        o.zero_lengths = c % 5 == 3;
        o.softmax_scale = c % 7 == 6 ? 0.05f : 0.0f;
        o.seed = 300 + c;
        worst.add(expect_fast_matches_oracle(o));
        ++c;
      }
  worst.print(name);
}

}  // namespace

// ---- fast path against the oracle ------------------------------------------------------------

TEST(DenseCpu, GridBf16) { run_grid(false, false, "grid bf16"); }

TEST(DenseCpu, GridF16) { run_grid(true, false, "grid f16"); }

TEST(DenseCpu, GridV32Fp8) { run_grid(false, true, "grid v32_fp8"); }

TEST(DenseCpu, LongContextManyHeads) {
  Worst worst;
  for (bool fp8 : {false, true}) {
    DenseWorkloadOptions o;
    o.b = 2;
    o.s_q = 2;
    o.h_q = 16;
    o.max_len = 2000;
    o.causal = true;
    o.fp8 = fp8;
    worst.add(expect_fast_matches_oracle(o));
  }
  worst.print("len 2000");
}

TEST(DenseCpu, FastPathIsBitwiseDeterministic) {
  DenseWorkloadOptions o;
  o.b = 4;
  o.s_q = 3;
  o.h_q = 16;
  o.h_kv = 2;
  o.page_size = 53;
  o.max_len = 400;
  o.causal = true;
  DenseWorkload w = make_dense_workload(o);
  const Result first = run(w, DenseImpl::kCpuFast);
  for (int rep = 0; rep < 5; ++rep) expect_bitwise_equal(run(w, DenseImpl::kCpuFast), first, "rerun");
  const int threads = omp_get_max_threads();
  for (int t : {1, 3}) {
    omp_set_num_threads(t);
    const Result other = run(w, DenseImpl::kCpuFast);
    omp_set_num_threads(threads);
    expect_bitwise_equal(other, first, "threads " + std::to_string(t));
  }
  expect_bitwise_equal(run(w, DenseImpl::kAuto), first, "kAuto");
}

// Fewer (request, query row) pairs than threads: the threads share each pair's key loading, then
// its blocks of heads, kv head by kv head. Bitwise the same as one thread per pair for every thread
// count, and the oracle's values: bf16, f16 and v32_fp8 caches; two kv heads of 35 query heads (3
// blocks, the last partial) or of 48 (3 whole blocks), one of 70 (5 blocks); causal rows; NaN in
// unused slots; in the fp8 case a request with no key (elsewhere both requests are shared).
TEST(DenseCpu, FewPairsShareTheirHeadsAcrossThreadsBitwise) {
  const int threads = omp_get_max_threads();
  for (int variant = 0; variant < 3; ++variant) {
    DenseWorkloadOptions o;
    o.b = 2;
    o.s_q = 1;
    o.h_q = variant == 1 ? 96 : 70;
    o.h_kv = variant == 2 ? 1 : 2;
    o.f16 = variant == 1;
    o.fp8 = variant == 2;
    o.page_size = 53;
    o.max_len = 300;
    o.causal = true;
    o.zero_lengths = variant == 2;  // request 0 sees no key
    o.nan_unused = true;
    SCOPED_TRACE(describe(o));
    DenseWorkload w = make_dense_workload(o);
    omp_set_num_threads(1);
    const Result single = run(w, DenseImpl::kCpuFast);
    for (int t : {2, 3, 4, 7}) {
      omp_set_num_threads(t);
      expect_bitwise_equal(run(w, DenseImpl::kCpuFast), single, "threads " + std::to_string(t));
    }
    omp_set_num_threads(4);
    expect_fast_matches_oracle(o);
    omp_set_num_threads(threads);
  }
}

// d_qk 512 (the CUDA backend's other head width), both 16-bit cache types, causal and not.
TEST(DenseCpu, HeadWidth512) {
  Worst worst;
  int c = 0;
  for (bool f16 : {false, true})
    for (bool causal : {false, true}) {
      DenseWorkloadOptions o;
      o.f16 = f16;
      o.causal = causal;
      o.d_qk = 512;
      o.b = 3;
      o.s_q = 2;
      o.h_q = 8;
      o.h_kv = 2;
      o.page_size = 53;
      o.max_len = 200;
      o.seed = 700 + c++;
      worst.add(expect_fast_matches_oracle(o));
    }
  worst.print("d_qk 512");
}

// softmax_scale 0 means d_qk^-0.5: the same bits as passing that value, on both CPU paths.
TEST(DenseCpu, DefaultScaleIsTheInverseSquareRootOfDqk) {
  DenseWorkloadOptions o;
  o.b = 2;
  o.s_q = 2;
  o.h_q = 4;
  DenseWorkload w = make_dense_workload(o);
  for (DenseImpl impl : {DenseImpl::kCpuOracle, DenseImpl::kCpuFast}) {
    w.opt.softmax_scale = 0.0f;
    const Result by_default = run(w, impl);
    w.opt.softmax_scale = static_cast<float>(1.0 / std::sqrt(576.0));
    const Result given = run(w, impl);
    expect_bitwise_equal(by_default, given, "default against explicit scale");
    w.opt.softmax_scale *= 1.5f;
    ASSERT_NE(run(w, impl).out, given.out);
  }
}

// ---- corner cases -----------------------------------------------------------------------------

TEST(DenseCorner, ZeroLengthsGiveZeroAndPlusInf) {
  for (bool fp8 : {false, true}) {
    DenseWorkloadOptions o;
    o.b = 3;
    o.s_q = 2;
    o.h_q = 5;
    o.fp8 = fp8;
    o.lengths = {0, 0, 0};
    o.nan_unused = true;  // every slot is then NaN: nothing may be read
    o.garbage_block_table = true;
    DenseWorkload w = make_dense_workload(o);
    for (DenseImpl impl : {DenseImpl::kCpuOracle, DenseImpl::kCpuFast}) {
      const Result r = run(w, impl);
      for (uint16_t x : r.out) ASSERT_EQ(x, 0u);
      for (float l : r.lse) ASSERT_EQ(l, kInf);
    }
  }
}

TEST(DenseCorner, CausalRowsThatSeeNothingAreLonely) {
  // s_q 4: row j sees len - (3 - j) keys. Request 0 (len 2): rows 0 and 1 see nothing, rows 2 and 3
  // see 1 and 2 keys. Request 1 (len 0): every row is lonely. Request 2 (len 5): 2, 3, 4, 5 keys.
  DenseWorkloadOptions o;
  o.b = 3;
  o.s_q = 4;
  o.h_q = 3;
  o.page_size = 2;
  o.lengths = {2, 0, 5};
  o.causal = true;
  o.f16 = true;
  expect_fast_matches_oracle(o);
  DenseWorkload w = make_dense_workload(o);
  const Result r = run(w, DenseImpl::kCpuFast);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      const bool lonely = (i == 0 && j < 2) || i == 1;
      for (int64_t h = 0; h < 3; ++h) {
        const float l = r.lse[(i * 3 + h) * 4 + j];
        EXPECT_EQ(l == kInf, lonely) << "request " << i << " row " << j;
        if (lonely) {
          for (int d = 0; d < 512; ++d) ASSERT_EQ(r.out[((i * 4 + j) * 3 + h) * 512 + d], 0u);
        }
      }
    }
  // A row that sees exactly one key returns that key's V (softmax of one score is 1): row 2 of
  // request 0 sees token 0 only.
  DenseWorkload one = make_dense_workload(o);
  const Result ref = run(one, DenseImpl::kCpuOracle);
  const int64_t slot0 = one.block_table[0] * o.page_size;
  for (int d = 0; d < 512; ++d)
    ASSERT_EQ(ref.out[((0 * 4 + 2) * 3 + 1) * 512 + d], one.k_cache[slot0 * 576 + d]) << d;
}

TEST(DenseCorner, CausalWithOneQueryRowEqualsNonCausal) {
  DenseWorkloadOptions o;
  o.b = 3;
  o.h_q = 8;
  o.page_size = 53;
  DenseWorkload plain = make_dense_workload(o);
  o.causal = true;
  DenseWorkload causal = make_dense_workload(o);
  for (DenseImpl impl : {DenseImpl::kCpuOracle, DenseImpl::kCpuFast})
    expect_bitwise_equal(run(plain, impl), run(causal, impl), "causal s_q 1");
}

TEST(DenseCorner, GarbageBlockTableBeyondNeededPagesIsNeverRead) {
  for (bool fp8 : {false, true}) {
    DenseWorkloadOptions o;
    o.b = 4;
    o.s_q = 2;
    o.h_q = 4;
    o.page_size = 53;
    o.fp8 = fp8;
    DenseWorkload clean = make_dense_workload(o);
    o.garbage_block_table = true;
    DenseWorkload garbage = make_dense_workload(o);
    int64_t bad = 0;
    for (int32_t e : garbage.block_table) bad += e < 0 || e >= garbage.num_pages;
    ASSERT_GT(bad, 0);
    for (DenseImpl impl : {DenseImpl::kCpuOracle, DenseImpl::kCpuFast})
      expect_bitwise_equal(run(clean, impl), run(garbage, impl), fp8 ? "fp8" : "bf16");
  }
}

TEST(DenseCorner, NanInUnreadSlotsNeverReachesTheOutput) {
  for (int kind = 0; kind < 3; ++kind) {
    DenseWorkloadOptions o;
    o.b = 3;
    o.s_q = 3;
    o.h_q = 6;
    o.h_kv = kind == 2 ? 1 : 2;
    o.page_size = 64;  // partly filled last pages: their tail slots are NaN
    o.max_len = 150;
    o.causal = true;
    o.f16 = kind == 1;
    o.fp8 = kind == 2;
    o.spare_pages = 3;
    o.nan_unused = true;
    o.garbage_block_table = true;
    const AttentionDiff d = expect_fast_matches_oracle(o);
    EXPECT_EQ(d.nan_out, 0) << describe(o);
  }
}

TEST(DenseCorner, StridedViewsMatchContiguous) {
  DenseWorkloadOptions o;
  o.b = 2;
  o.s_q = 3;
  o.h_q = 4;
  o.h_kv = 2;
  o.page_size = 5;
  o.max_len = 23;
  o.f16 = true;
  DenseWorkload w = make_dense_workload(o);
  const Result ref = run(w, DenseImpl::kCpuFast);
  const int64_t b = o.b, s_q = o.s_q, h_q = o.h_q, h_kv = o.h_kv, P = o.page_size, d = 576, pad = 8;
  std::vector<uint16_t> q(static_cast<size_t>(b * s_q * h_q * (d + pad)), 0x7e00);
  for (int64_t r = 0; r < b * s_q * h_q; ++r) std::memcpy(&q[r * (d + pad)], &w.q[r * d], d * 2);
  // Cache rows padded, pages padded further.
  const int64_t row = d + pad, page = P * h_kv * row + 40;
  std::vector<uint16_t> cache(static_cast<size_t>(w.num_pages * page), 0x7e00);
  for (int64_t pg = 0; pg < w.num_pages; ++pg)
    for (int64_t r = 0; r < P * h_kv; ++r)
      std::memcpy(&cache[pg * page + r * row], &w.k_cache[(pg * P * h_kv + r) * d], d * 2);
  std::vector<int32_t> bt(static_cast<size_t>(b * (w.max_pages + 2)), -7);
  for (int64_t i = 0; i < b; ++i)
    std::memcpy(&bt[i * (w.max_pages + 2)], &w.block_table[i * w.max_pages], w.max_pages * 4);
  std::vector<uint16_t> out(static_cast<size_t>(b * s_q * h_q * (512 + pad)), 0x7e00);
  std::vector<float> lse(static_cast<size_t>(b * h_q * (s_q + 1)), NAN);
  DenseDecodeArgs a = w.args();
  a.q = TensorView(q.data(), DType::f16, {b, s_q, h_q, d}, {s_q * h_q * (d + pad), h_q * (d + pad), d + pad, 1});
  a.k_cache = TensorView(cache.data(), DType::f16, {w.num_pages, P, h_kv, d}, {page, h_kv * row, row, 1});
  a.block_table = TensorView(bt.data(), DType::i32, {b, w.max_pages}, {w.max_pages + 2, 1});
  a.out = TensorView(out.data(), DType::f16, {b, s_q, h_q, 512},
                     {s_q * h_q * (512 + pad), h_q * (512 + pad), 512 + pad, 1});
  a.lse = TensorView(lse.data(), DType::f32, {b, h_q, s_q}, {h_q * (s_q + 1), s_q + 1, 1});
  dense_decode(a, nullptr, DenseImpl::kCpuFast);
  for (int64_t r = 0; r < b * s_q * h_q; ++r)
    ASSERT_EQ(0, std::memcmp(&out[r * (512 + pad)], &ref.out[r * 512], 512 * 2)) << r;
  for (int64_t i = 0; i < b; ++i)
    for (int64_t h = 0; h < h_q; ++h)
      for (int64_t j = 0; j < s_q; ++j)
        ASSERT_EQ(lse[(i * h_q + h) * (s_q + 1) + j], ref.lse[(i * h_q + h) * s_q + j]);
}

// lse may have any strides under which its elements are distinct (FlashMLA's: a [b, s_q, h_q]
// buffer seen as [b, h_q, s_q]); two elements at one address, in lse or out, are refused unwritten.
TEST(DenseCorner, LseInAnyLayoutWithDistinctElements) {
  DenseWorkloadOptions o;
  o.b = 2;
  o.s_q = 3;
  o.h_q = 4;
  o.page_size = 5;
  o.max_len = 23;
  o.causal = true;
  DenseWorkload w = make_dense_workload(o);
  const int64_t b = o.b, s_q = o.s_q, h_q = o.h_q;
  for (DenseImpl impl : {DenseImpl::kCpuOracle, DenseImpl::kCpuFast}) {
    const Result ref = run(w, impl);
    std::vector<float> lse(static_cast<size_t>(b * s_q * h_q), NAN);
    w.poison_outputs();
    DenseDecodeArgs a = w.args();
    a.lse = TensorView(lse.data(), DType::f32, {b, h_q, s_q}, {s_q * h_q, 1, h_q});
    dense_decode(a, nullptr, impl);
    ASSERT_EQ(w.out, ref.out);
    ASSERT_EQ("", latentkv::testing::lse_layout_mismatch(lse, {s_q * h_q, 1, h_q}, ref.lse, b, h_q, s_q));
    std::fill(lse.begin(), lse.end(), NAN);
    w.poison_outputs();
    a = w.args();
    a.lse = TensorView(lse.data(), DType::f32, {b, h_q, s_q}, {0, 1, h_q});  // requests overlap
    EXPECT_NE(latentkv::testing::error_of([&] { dense_decode(a, nullptr, impl); })
                  .find("lse [2, 4, 3] f32 has strides [0, 1, 4] under which two of its elements share an address"),
              std::string::npos);
    a = w.args();
    a.out = TensorView(w.out.data(), DType::bf16, {b, s_q, h_q, 512}, {512, 0, 0, 1});
    EXPECT_NE(latentkv::testing::error_of([&] { dense_decode(a, nullptr, impl); }).find("share an address"),
              std::string::npos);
    for (float x : lse) ASSERT_TRUE(std::isnan(x)) << "lse written";
    for (float x : w.lse) ASSERT_TRUE(std::isnan(x)) << "lse written";
    for (uint16_t x : w.out) ASSERT_EQ(x, 0x7fc0) << "out written";
  }
}

// ---- a case small enough to compute by hand ---------------------------------------------------
// One request of length 2 on pages of one token, its block table reversed (token 0 on page 1,
// token 1 on page 0), one query head, bf16, softmax_scale 1: k0 = e_0 + 0.5 e_1 + 0.25 e_575,
// k1 = 3 e_0, q = e_0 + 2 e_575. s0 = 1.5, s1 = 3; lse = ln(e^1.5 + e^3);
// out = p0 (1, 0.5, 0, ...) + p1 (3, 0, ...). Causal with s_q 2 gives the first row token 0 only.
TEST(DenseOracle, HandComputedTwoTokens) {
  const int64_t d = 576;
  std::vector<uint16_t> cache(static_cast<size_t>(3 * d), 0x7fc0);  // page 2 unused: NaN
  std::fill(cache.begin(), cache.begin() + 2 * d, uint16_t{0});
  cache[1 * d + 0] = num::f32_to_bf16(1.0f);
  cache[1 * d + 1] = num::f32_to_bf16(0.5f);
  cache[1 * d + 575] = num::f32_to_bf16(0.25f);
  cache[0 * d + 0] = num::f32_to_bf16(3.0f);
  std::vector<uint16_t> q(2 * d, 0);
  for (int j = 0; j < 2; ++j) {
    q[j * d + 0] = num::f32_to_bf16(1.0f);
    q[j * d + 575] = num::f32_to_bf16(2.0f);
  }
  std::vector<int32_t> bt = {1, 0, INT_MIN};  // the third entry is beyond the needed pages
  std::vector<int32_t> len = {2};
  const double s0 = 1.5, s1 = 3.0;
  const double lse = std::log(std::exp(s0) + std::exp(s1));
  const double p0 = std::exp(s0 - lse), p1 = std::exp(s1 - lse);
  const double want0 = p0 * 1.0 + p1 * 3.0, want1 = p0 * 0.5;

  for (bool causal : {false, true})
    for (DenseImpl impl : {DenseImpl::kCpuOracle, DenseImpl::kCpuFast}) {
      std::vector<uint16_t> out(2 * 512, 0x7fc0);
      std::vector<float> lse_out(2, NAN);
      DenseDecodeArgs a;
      a.q = TensorView(q.data(), DType::bf16, {1, 2, 1, d});
      a.k_cache = TensorView(cache.data(), DType::bf16, {3, 1, 1, d});
      a.block_table = TensorView(bt.data(), DType::i32, {1, 3});
      a.cache_seqlens = TensorView(len.data(), DType::i32, {1});
      a.causal = causal;
      a.softmax_scale = 1.0f;
      a.out = TensorView(out.data(), DType::bf16, {1, 2, 1, 512});
      a.lse = TensorView(lse_out.data(), DType::f32, {1, 1, 2});
      dense_decode(a, nullptr, impl);
      // Row 1 (and row 0 unless causal) sees both tokens; causal row 0 sees token 0 only.
      for (int j = 0; j < 2; ++j) {
        const bool first_only = causal && j == 0;
        const double w0 = first_only ? 1.0 : want0, w1 = first_only ? 0.5 : want1;
        const uint16_t* o = out.data() + j * 512;
        EXPECT_NEAR(num::bf16_to_f32(o[0]), w0, w0 / 256) << "row " << j;
        EXPECT_NEAR(num::bf16_to_f32(o[1]), w1, w1 / 256) << "row " << j;
        if (impl == DenseImpl::kCpuOracle) {
          EXPECT_EQ(o[0], num::f32_to_bf16(static_cast<float>(w0)));
          EXPECT_EQ(o[1], num::f32_to_bf16(static_cast<float>(w1)));
        }
        for (int dd = 2; dd < 512; ++dd) EXPECT_EQ(o[dd], 0u) << "dim " << dd;
        EXPECT_NEAR(lse_out[j], first_only ? s0 : lse, 1e-6) << "row " << j;
      }
    }
}

// ---- errors -----------------------------------------------------------------------------------

namespace {
// The small grouped-head case the error tests bend: b 2, s_q 2, h_q 4 over h_kv 2, 16-token pages.
DenseWorkloadOptions error_case() {
  DenseWorkloadOptions o;
  o.b = 2;
  o.s_q = 2;
  o.h_q = 4;
  o.h_kv = 2;
  o.page_size = 16;
  o.max_len = 40;
  return o;
}
}  // namespace

TEST(DenseErrors, BadShapesAndDtypesAreNamed) {
  const DenseWorkloadOptions o = error_case();
  DenseWorkload w = make_dense_workload(o);
  std::vector<uint16_t> big(static_cast<size_t>(w.num_pages * 16 * 4 * 1024));
  std::vector<uint8_t> bytes(static_cast<size_t>(w.num_pages * 16 * 656));

  struct Case {
    const char* what;
    std::function<void(DenseDecodeArgs&)> bend;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"q as f32", [&](DenseDecodeArgs& a) { a.q.dtype = DType::f32; }, "dense_decode: q must be bf16 or f16"},
      {"f16 cache with bf16 q", [&](DenseDecodeArgs& a) { a.k_cache.dtype = DType::f16; },
       "expected k_cache of shape [num_pages, P, h_kv, d_qk] bf16"},
      {"cache d_qk 512",
       [&](DenseDecodeArgs& a) { a.k_cache = TensorView(big.data(), DType::bf16, {w.num_pages, 16, 2, 512}); },
       "(d_qk is 576 elsewhere)"},
      {"h_q not a multiple of h_kv",
       [&](DenseDecodeArgs& a) { a.k_cache = TensorView(big.data(), DType::bf16, {w.num_pages, 16, 3, 576}); },
       "dense_decode: h_q=4 must be a multiple of h_kv=3"},
      {"fp8 with a bf16 cache", [&](DenseDecodeArgs& a) { a.fp8 = true; },
       "expected k_cache of shape [num_pages, P, 1, 656] u8, got"},
      {"fp8 with d_qk 512 q",
       [&](DenseDecodeArgs& a) {
         a.fp8 = true;
         a.q = TensorView(big.data(), DType::bf16, {2, 2, 4, 512});
         a.k_cache = TensorView(bytes.data(), DType::u8, {w.num_pages, 16, 1, 656});
       },
       "expected q of shape [b, s_q, h_q, 576] bf16"},
      {"block_table as i64", [&](DenseDecodeArgs& a) { a.block_table.dtype = DType::i64; },
       "expected block_table of shape [b, max_pages] i32"},
      {"cache_seqlens for 3 requests",
       [&](DenseDecodeArgs& a) { a.cache_seqlens = TensorView(w.block_table.data(), DType::i32, {3}); },
       "expected cache_seqlens of shape [b] i32, got [3] i32 (b is 2 elsewhere)"},
      {"d_v 576", [&](DenseDecodeArgs& a) { a.d_v = 576; }, "dense_decode supports d_v = 512, got d_v=576"},
      {"out as f16 with bf16 q", [&](DenseDecodeArgs& a) { a.out.dtype = DType::f16; },
       "expected out of shape [b, s_q, h_q, 512] bf16"},
      {"lse as [b, s_q, h_q]",
       [&](DenseDecodeArgs& a) { a.lse = TensorView(w.lse.data(), DType::f32, {2, 2, 4}); },
       "expected lse of shape [b, h_q, s_q] f32, got [2, 2, 4] f32"},
      {"negative scale", [&](DenseDecodeArgs& a) { a.softmax_scale = -1.0f; }, "softmax_scale must be finite and >= 0"},
      {"cache on another device", [&](DenseDecodeArgs& a) { a.k_cache.device = Device::cuda(0); },
       "k_cache is on cuda:0, expected cpu"},
      {"page size 0",
       [&](DenseDecodeArgs& a) { a.k_cache = TensorView(big.data(), DType::bf16, {w.num_pages, 0, 2, 576}); },
       "dense_decode: k_cache needs P >= 1 and h_kv >= 1"},
      {"d_qk 256 (below d_v)",
       [&](DenseDecodeArgs& a) {
         a.q = TensorView(big.data(), DType::bf16, {2, 2, 4, 256});
         a.k_cache = TensorView(big.data(), DType::bf16, {w.num_pages, 16, 2, 256});
       },
       "dense_decode needs d_v <= d_qk <= 65536"},
      {"cache_seqlens strided",
       [&](DenseDecodeArgs& a) { a.cache_seqlens = TensorView(w.block_table.data(), DType::i32, {2}, {2}); },
       "cache_seqlens must be contiguous, got stride 2"},
      {"lse with elements at one address (strided lse is fine: LseInAnyLayoutWithDistinctElements)",
       [&](DenseDecodeArgs& a) {
         a.lse = TensorView(reinterpret_cast<float*>(big.data()), DType::f32, {2, 4, 2}, {0, 2, 1});
       },
       "lse [2, 4, 2] f32 has strides [0, 2, 1] under which two of its elements share an address"},
  };
  for (const Case& c : cases)
    for (DenseImpl impl : {DenseImpl::kCpuOracle, DenseImpl::kCpuFast}) {
      w.poison_outputs();
      DenseDecodeArgs a = w.args();
      c.bend(a);
      const std::string msg = latentkv::testing::error_of([&] { dense_decode(a, nullptr, impl); });
      EXPECT_NE(msg.find(c.message), std::string::npos) << c.what << ": got \"" << msg << "\"";
      for (float l : w.lse) ASSERT_TRUE(std::isnan(l)) << c.what << ": lse written";
      for (uint16_t x : w.out) ASSERT_EQ(x, 0x7fc0) << c.what << ": out written";
    }
}

// Every array but cache_seqlens (1-D) must be contiguous in its last dimension: the same values
// under every stride doubled are named with the stride, and nothing is written (the doubled view's
// own bytes included, where it is an output).
TEST(DenseErrors, ViewsStridedInTheLastDimensionAreNamed) {
  DenseWorkload w = make_dense_workload(error_case());
  for (const auto& [member, name] :
       {std::pair{&DenseDecodeArgs::q, "q"}, {&DenseDecodeArgs::k_cache, "k_cache"},
        {&DenseDecodeArgs::block_table, "block_table"}, {&DenseDecodeArgs::out, "out"}})
    for (DenseImpl impl : {DenseImpl::kCpuOracle, DenseImpl::kCpuFast}) {
      w.poison_outputs();
      EXPECT_EQ("", latentkv::testing::refuses_doubled_strides<DenseDecodeArgs>(
                        w.args(), member, name, [&](const DenseDecodeArgs& a) { dense_decode(a, nullptr, impl); }));
      for (float l : w.lse) ASSERT_TRUE(std::isnan(l)) << name << ": lse written";
      for (uint16_t x : w.out) ASSERT_EQ(x, 0x7fc0) << name << ": out written";
    }
}

TEST(DenseErrors, BadBlockTableEntryNamesRequestBlockAndValue) {
  DenseWorkloadOptions o;
  o.b = 3;
  o.h_q = 2;
  o.page_size = 10;
  o.lengths = {30, 25, 7};
  DenseWorkload w = make_dense_workload(o);
  // Request 1 needs blocks 0, 1, 2; its block 2 points outside the cache.
  for (int32_t bad : {-1, static_cast<int32_t>(w.num_pages), INT_MAX, INT_MIN}) {
    DenseWorkload v = w;
    v.block_table[1 * v.max_pages + 2] = bad;
    for (DenseImpl impl : {DenseImpl::kCpuOracle, DenseImpl::kCpuFast}) {
      v.poison_outputs();
      const std::string msg = latentkv::testing::error_of([&] { dense_decode(v.args(), nullptr, impl); });
      const std::string want = "dense_decode: request 1 logical block 2: block_table[1][2]=" +
                               std::to_string(bad) + " is outside [0, num_pages=" +
                               std::to_string(v.num_pages) + ")";
      EXPECT_NE(msg.find(want), std::string::npos) << "got \"" << msg << "\"";
      for (float l : v.lse) ASSERT_TRUE(std::isnan(l)) << "lse written";
      for (uint16_t x : v.out) ASSERT_EQ(x, 0x7fc0) << "out written";
    }
  }
}

TEST(DenseErrors, BadLengthsAreNamed) {
  DenseWorkloadOptions o;
  o.b = 2;
  o.page_size = 10;
  o.lengths = {30, 25};  // max_pages = 4
  DenseWorkload w = make_dense_workload(o);
  for (const auto& [len, want] :
       {std::pair{-1, "cache_seqlens[1]=-1 is outside [0, max_pages * P] = [0, 40]"},
        std::pair{41, "cache_seqlens[1]=41 is outside [0, max_pages * P] = [0, 40]"}}) {
    DenseWorkload v = w;
    v.cache_seqlens[1] = len;
    v.poison_outputs();
    const std::string msg = latentkv::testing::error_of([&] { dense_decode(v.args()); });
    EXPECT_NE(msg.find(want), std::string::npos) << "got \"" << msg << "\"";
    for (float l : v.lse) ASSERT_TRUE(std::isnan(l));
  }
}

// The limits of the checks, from the accepted side: a length of exactly max_pages * P (every entry
// of the row a real page), d_qk = d_v = 512 and d_qk = 65536, and dimensions of length 1 with any
// stride; and the empty problem from the refused side.
TEST(DenseErrors, LimitsFromTheAcceptedSide) {
  {
    DenseWorkloadOptions o;
    o.b = 2;
    o.page_size = 10;
    o.lengths = {30, 25};  // max_pages = 4; request 1's last entry is another request's page
    DenseWorkload w = make_dense_workload(o);
    w.cache_seqlens[1] = static_cast<int32_t>(w.max_pages * 10);
    EXPECT_NO_THROW(dense_decode(w.args(), nullptr, DenseImpl::kCpuFast));
    EXPECT_TRUE(std::isfinite(w.lse[o.h_q * o.s_q]));
  }
  for (int64_t d_qk : {512, 65536}) {
    DenseWorkloadOptions o;
    o.b = 1;
    o.h_q = 1;
    o.d_qk = d_qk;
    o.page_size = 4;
    o.max_len = 6;
    DenseWorkload w = make_dense_workload(o);
    EXPECT_NO_THROW(dense_decode(w.args(), nullptr, DenseImpl::kCpuFast)) << d_qk;
  }
  {
    DenseWorkloadOptions o;
    o.b = 1;
    o.s_q = 1;
    DenseWorkload w = make_dense_workload(o);
    DenseDecodeArgs a = w.args();
    a.cache_seqlens = TensorView(w.cache_seqlens.data(), DType::i32, {1}, {3});
    a.lse = TensorView(w.lse.data(), DType::f32, {1, o.h_q, 1}, {o.h_q, 1, 7});
    EXPECT_NO_THROW(dense_decode(a, nullptr, DenseImpl::kCpuFast));
    a.q = TensorView(w.q.data(), DType::bf16, {1, 0, o.h_q, 576});
    a.out = TensorView(w.out.data(), DType::bf16, {1, 0, o.h_q, 512});
    a.lse = TensorView(w.lse.data(), DType::f32, {1, o.h_q, 0});
    const std::string msg = latentkv::testing::error_of([&] { dense_decode(a, nullptr, DenseImpl::kCpuFast); });
    EXPECT_NE(msg.find("dense_decode: empty problem"), std::string::npos) << msg;
  }
}

TEST(DenseErrors, CudaTensorsWithoutCudaBuild) {
#ifdef LKV_WITH_CUDA
  GTEST_SKIP() << "this build has the CUDA backend (tests/cuda covers it)";
#endif
  DenseWorkload w = make_dense_workload({});
  DenseDecodeArgs a = w.args();
  // The block table holds garbage here: the CUDA path must not read device data on the host.
  for (TensorView* t : {&a.q, &a.k_cache, &a.block_table, &a.cache_seqlens, &a.out, &a.lse})
    t->device = Device::cuda(0);
  w.block_table[0] = INT_MIN;
  for (DenseImpl impl : {DenseImpl::kAuto, DenseImpl::kCuda}) {
    try {
      dense_decode(a, nullptr, impl);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kNotBuilt);
      EXPECT_NE(std::string(e.what()).find("dense_decode: latentkv was built without CUDA"),
                std::string::npos) << e.what();
    }
  }
  try {
    dense_decode(a, nullptr, DenseImpl::kCpuOracle);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kType);
    EXPECT_NE(std::string(e.what()).find("implementation cpu cannot run on tensors on cuda:0"),
              std::string::npos) << e.what();
  }
}

// ---- f16 conversions, exhaustively ------------------------------------------------------------

namespace {

// The value of f16 code c from the IEEE 754 definition, in double (independent of the bit code).
double f16_reference(uint16_t c) {
  const int sign = c >> 15, e = (c >> 10) & 0x1f, m = c & 0x3ff;
  double v;
  if (e == 0x1f) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(static_cast<double>(m), -24);
  else v = std::ldexp(static_cast<double>(1024 + m), e - 25);
  return sign ? -v : v;
}

bool is_f16_nan(uint16_t c) { return (c & 0x7c00u) == 0x7c00u && (c & 0x3ffu) != 0; }

}  // namespace

TEST(DenseHalf, F16ToF32AllCodes) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint16_t h = static_cast<uint16_t>(c);
    const float got = num::f16_to_f32(h);
    const double want = f16_reference(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << c;
      ASSERT_EQ(std::signbit(got), (c >> 15) != 0) << c;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << c;
      ASSERT_EQ(std::signbit(got), (c >> 15) != 0) << c;  // -0 stays -0
    }
  }
}

TEST(DenseHalf, F32ToF16RoundTripsAndRoundsMidpointsToEven) {
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint16_t h = static_cast<uint16_t>(c);
    if (is_f16_nan(h)) {
      const uint16_t back = num::f32_to_f16(num::f16_to_f32(h));
      ASSERT_TRUE(is_f16_nan(back)) << c;
      ASSERT_EQ(back >> 15, h >> 15) << c;
      continue;
    }
    ASSERT_EQ(num::f32_to_f16(num::f16_to_f32(h)), h) << c;
    // Between this finite code and the next one up in magnitude (the largest finite code's
    // neighbour is 65536, which becomes infinity): the midpoint rounds to the even code, values
    // just off it to the nearer code. Midpoints need 12 significant bits, so fp32 holds them.
    const uint16_t mag = h & 0x7fffu;
    if (mag >= 0x7c00u) continue;
    const double lo = std::fabs(f16_reference(h));
    const double hi = mag == 0x7bffu ? 65536.0 : std::fabs(f16_reference(static_cast<uint16_t>(mag + 1)));
    const float sign = (c >> 15) ? -1.0f : 1.0f;
    const float mid = sign * static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(std::fabs(mid)), (lo + hi) / 2) << c;
    const uint16_t up = static_cast<uint16_t>(h + 1);  // next magnitude, same sign
    const uint16_t even = (mag & 1u) ? up : h;
    ASSERT_EQ(num::f32_to_f16(mid), even) << c;
    ASSERT_EQ(num::f32_to_f16(std::nextafter(mid, 0.0f)), h) << c;
    ASSERT_EQ(num::f32_to_f16(std::nextafter(mid, sign * kInf)), up) << c;
  }
  // Beyond the f16 range: infinities stay, anything from 65520 up overflows, below 2^-25 is 0.
  EXPECT_EQ(num::f32_to_f16(kInf), 0x7c00u);
  EXPECT_EQ(num::f32_to_f16(-kInf), 0xfc00u);
  EXPECT_EQ(num::f32_to_f16(1e30f), 0x7c00u);
  EXPECT_EQ(num::f32_to_f16(std::ldexp(1.0f, -26)), 0x0000u);
  EXPECT_EQ(num::f32_to_f16(-std::ldexp(1.0f, -140)), 0x8000u);
  EXPECT_TRUE(is_f16_nan(num::f32_to_f16(std::numeric_limits<float>::quiet_NaN())));
}

#if defined(__FLT16_MAX__)
// The compiler's own _Float16 conversion (round to nearest even) as a second reference, over a
// sweep of fp32 bit patterns that covers every exponent.
TEST(DenseHalf, F32ToF16MatchesCompilerFloat16) {
  for (uint64_t u = 0; u <= 0xffffffffull; u += 977) {
    const float x = num::bits_f32(static_cast<uint32_t>(u));
    const _Float16 ref = static_cast<_Float16>(x);
    uint16_t want;
    std::memcpy(&want, &ref, 2);
    const uint16_t got = num::f32_to_f16(x);
    if (std::isnan(x)) {
      ASSERT_TRUE(is_f16_nan(got)) << u;
    } else {
      ASSERT_EQ(got, want) << std::hex << u;
    }
  }
}
#endif
