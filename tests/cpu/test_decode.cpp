// sparse_decode on the CPU: the fast fp32 path against the float64 oracle over a FlashMLA-style
// grid of shapes (sized for a 2-core CI), the corner cases of SPEC.md section 4 (invalid and
// adversarial indices, zero lengths, infinite sinks, NaN in unattended records), bitwise
// determinism, strided views, every error path, the planner's properties, and a hand-computed case.
#include <gtest/gtest.h>
#include <omp.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "decode/sm90/nan_bits.h"

#include "decode/plan.h"
#include "formats/record_codec.h"
#include "latentkv/decode.h"
#include "latentkv/error.h"
#include "latentkv/numerics.h"
#include "testing/decode_workload.h"
#include "test_util.h"

using namespace latentkv;
using latentkv::testing::compare_decode;
using latentkv::testing::decode_close;
using latentkv::testing::DecodeDiff;
using latentkv::testing::DecodeWorkload;
using latentkv::testing::DecodeWorkloadOptions;
using latentkv::testing::make_decode_workload;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Result {
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

// Runs one implementation on poisoned outputs and returns copies of them.
Result run(DecodeWorkload& w, DecodeImpl impl, float softmax_scale = 0.0f) {
  w.poison_outputs();
  SparseDecodeArgs a = w.args();
  a.softmax_scale = softmax_scale;
  sparse_decode(a, nullptr, impl);
  return {w.out, w.lse};
}

std::string describe(const DecodeWorkloadOptions& o) {
  char buf[256];
  int n = std::snprintf(buf, sizeof(buf), "%s b=%ld s_q=%ld h_q=%ld topk=%ld P=%ld len=%d sink=%d",
                        format_info(o.format).name, static_cast<long>(o.b),
                        static_cast<long>(o.s_q), static_cast<long>(o.h_q),
                        static_cast<long>(o.topk), static_cast<long>(o.page_size), o.topk_length,
                        o.sink);
  if (o.extra)
    std::snprintf(buf + n, sizeof(buf) - n, " extra(%s topk=%ld P=%ld len=%d)",
                  format_info(o.extra_format.value_or(o.format)).name, static_cast<long>(o.extra_topk),
                  static_cast<long>(o.extra_page_size), o.extra_topk_length);
  return buf;
}

// The worst fast-vs-oracle agreement seen by a test, printed at its end.
struct Worst {
  double max_rel = 0, cos_sim = 1;
  void add(const DecodeDiff& d) {
    max_rel = std::max(max_rel, d.max_rel);
    cos_sim = std::min(cos_sim, d.cos_sim);
  }
  void print(const char* what) const {
    std::printf("[ decode   ] %s: worst max_rel %.3e, worst cos_sim %.9f\n", what, max_rel, cos_sim);
  }
};

// Runs the fast path and the oracle on one workload and expects them close.
DecodeDiff expect_fast_matches_oracle(const DecodeWorkloadOptions& o, float softmax_scale = 0.0f) {
  DecodeWorkload w = make_decode_workload(o);
  const Result ref = run(w, DecodeImpl::kCpuOracle, softmax_scale);
  const Result fast = run(w, DecodeImpl::kCpuFast, softmax_scale);
  const DecodeDiff d = compare_decode(w, fast.out, fast.lse, ref.out, ref.lse);
  EXPECT_TRUE(decode_close(d)) << describe(o) << ": max_rel " << d.max_rel << " cos " << d.cos_sim
                               << " lse_mismatch " << d.lse_mismatch << " mask_mismatch "
                               << d.mask_mismatch << " nan_out " << d.nan_out;
  // The oracle itself must write every element and never produce NaN from finite inputs.
  const DecodeDiff self = compare_decode(w, ref.out, ref.lse, ref.out, ref.lse);
  EXPECT_EQ(self.nan_out, 0) << describe(o);
  for (float l : ref.lse) EXPECT_FALSE(std::isnan(l)) << describe(o);
  return d;
}

bool is_zero_bf16(uint16_t x) { return (x & 0x7fffu) == 0; }

// The grid of one format: b x s_q x (topk, page) with heads and features cycling through the cases.
// With extra_format, every case has an extra cache in that format.
void run_grid(CacheFormat f, const char* name, std::optional<CacheFormat> extra_format = std::nullopt) {
  const int64_t topk_page[4][2] = {{64, 2}, {64, 64}, {64, 69}, {576, 61}};
  const int64_t heads[3] = {1, 16, 64};
  const int64_t extra_pages[3] = {64, 2, 61};
  Worst worst;
  int c = 0;
  for (int64_t b : {1, 4})
    for (int64_t s_q : {1, 3})
      for (const auto& tp : topk_page) {
        DecodeWorkloadOptions o;
        o.format = f;
        o.b = b;
        o.s_q = s_q;
        o.topk = tp[0];
        o.page_size = tp[1];
        o.h_q = heads[c % 3];
        o.topk_length = c % 2 == 1;
        o.sink = (c / 2) % 2 == 1;
        o.extra = extra_format || (c / 4) % 2 == 1;
        o.extra_format = extra_format;
        o.extra_topk = c % 3 == 0 ? 64 : 100;
        o.extra_page_size = extra_pages[(c / 2) % 3];
        o.extra_topk_length = o.extra && c % 3 != 1;
        o.seed = 100 + c;
        // Every fifth case passes an explicit softmax scale instead of the default d_qk^-0.5.
        worst.add(expect_fast_matches_oracle(o, c % 5 == 4 ? 0.07f : 0.0f));
        ++c;
      }
  worst.print(name);
}

}  // namespace

// ---- fast path against the oracle ------------------------------------------------------------

TEST(DecodeCpu, GridV32Fp8) { run_grid(CacheFormat::v32_fp8, "grid v32_fp8"); }

TEST(DecodeCpu, GridV4Fp8) { run_grid(CacheFormat::v4_fp8, "grid v4_fp8"); }

TEST(DecodeCpu, GridV41Fp8) { run_grid(CacheFormat::v41_fp8, "grid v41_fp8"); }

// DeepSeek V4.1's pairing: a v41_fp8 cache with a v41_fp4 extra cache (288-byte records).
TEST(DecodeCpu, GridV41Fp8WithFp4Extra) {
  run_grid(CacheFormat::v41_fp8, "grid v41_fp8 + v41_fp4 extra", CacheFormat::v41_fp4);
}

TEST(DecodeCpu, LongTopk2048) {
  Worst worst;
  for (CacheFormat f : {CacheFormat::v32_fp8, CacheFormat::v4_fp8, CacheFormat::v41_fp8}) {
    DecodeWorkloadOptions o;
    o.format = f;
    o.b = 2;
    o.h_q = 8;
    o.topk = 2048;
    o.page_size = 64;
    o.topk_length = true;
    o.sink = true;
    worst.add(expect_fast_matches_oracle(o));
  }
  worst.print("topk 2048");
}

TEST(DecodeCpu, Heads128) {
  DecodeWorkloadOptions o;
  o.b = 1;
  o.h_q = 128;
  o.topk = 576;
  o.page_size = 64;
  o.extra = true;
  o.extra_topk = 64;
  o.sink = true;
  Worst worst;
  worst.add(expect_fast_matches_oracle(o));
  worst.print("h_q 128");
}

// The points of the grid that the per-format grids above leave out, at sizes a 2-core CI
// runs in seconds: the batch sizes 74 and 321 (few heads), the (topk 2048, page 576) pair, and
// h_q 128 with query tokens, lengths, a sink and an extra cache.
TEST(DecodeCpu, FlashMlaGridCorners) {
  struct Case {
    CacheFormat f;
    int64_t b, s_q, h_q, topk, page;
    bool features;  // topk_length, sink and an extra cache (with its own lengths)
  };
  const Case cases[] = {
      {CacheFormat::v32_fp8, 74, 1, 16, 64, 69, false}, {CacheFormat::v4_fp8, 74, 3, 1, 64, 2, true},
      {CacheFormat::v41_fp8, 321, 3, 1, 64, 2, false},  {CacheFormat::v32_fp8, 321, 1, 1, 64, 64, true},
      {CacheFormat::v4_fp8, 4, 3, 16, 2048, 576, true}, {CacheFormat::v32_fp8, 4, 1, 16, 2048, 576, false},
      {CacheFormat::v41_fp8, 4, 3, 128, 576, 61, true},
  };
  Worst worst;
  int c = 0;
  for (const Case& k : cases) {
    DecodeWorkloadOptions o;
    o.format = k.f;
    o.b = k.b;
    o.s_q = k.s_q;
    o.h_q = k.h_q;
    o.topk = k.topk;
    o.page_size = k.page;
    o.topk_length = k.features;
    o.sink = k.features;
    o.extra = k.features;
    o.extra_topk = 100;
    o.extra_page_size = 61;
    o.extra_topk_length = k.features;
    o.seed = 900 + c++;
    worst.add(expect_fast_matches_oracle(o));
  }
  worst.print("grid corners");
}

// ---- corner cases -----------------------------------------------------------------------------

// Every format sparse_decode reads, and the one mixed pairing (the extra cache's format second).
struct FormatPair {
  CacheFormat f;
  std::optional<CacheFormat> extra;
};
const FormatPair kFormatPairs[] = {{CacheFormat::v32_fp8, std::nullopt},
                                   {CacheFormat::v4_fp8, std::nullopt},
                                   {CacheFormat::v41_fp8, std::nullopt},
                                   {CacheFormat::v41_fp8, CacheFormat::v41_fp4}};

TEST(DecodeCorner, AllIndicesInvalidGiveZeroAndPlusInf) {
  for (const FormatPair& fp : kFormatPairs)
    for (bool sink : {false, true}) {
      DecodeWorkloadOptions o;
      o.format = fp.f;
      o.extra_format = fp.extra;
      o.b = 2;
      o.s_q = 2;
      o.h_q = 5;
      o.all_invalid = true;
      o.extra = true;
      o.sink = sink;
      o.nan_unused = true;  // every record is then NaN: nothing may be read
      DecodeWorkload w = make_decode_workload(o);
      for (DecodeImpl impl : {DecodeImpl::kCpuOracle, DecodeImpl::kCpuFast}) {
        const Result r = run(w, impl);
        for (uint16_t x : r.out) ASSERT_EQ(x, 0u) << describe(o);
        for (float l : r.lse) ASSERT_EQ(l, kInf) << describe(o);
      }
    }
}

TEST(DecodeCorner, ZeroTopkLengthIsLonelyUnlessTheExtraCacheAttends) {
  for (bool extra : {false, true}) {
    DecodeWorkloadOptions o;
    o.b = 4;
    o.s_q = 2;
    o.h_q = 3;
    o.topk_length = true;
    o.zero_lengths = true;  // requests 0 and 2 attend no main candidate
    o.extra = extra;
    o.sink = true;
    expect_fast_matches_oracle(o);
    DecodeWorkload w = make_decode_workload(o);
    const Result r = run(w, DecodeImpl::kCpuFast);
    for (int64_t i = 0; i < o.b; ++i)
      for (int64_t h = 0; h < o.h_q; ++h)
        for (int64_t j = 0; j < o.s_q; ++j) {
          const float l = r.lse[(i * o.h_q + h) * o.s_q + j];
          if (i % 2 == 0 && !extra) {
            EXPECT_EQ(l, kInf) << "request " << i;
            for (int d = 0; d < 512; ++d)
              ASSERT_EQ(r.out[((i * o.s_q + j) * o.h_q + h) * 512 + d], 0u);
          } else {
            EXPECT_TRUE(std::isfinite(l)) << "request " << i << " extra " << extra;
          }
        }
  }
}

TEST(DecodeCorner, SinkPlusInfZeroesOutputAndKeepsLse) {
  for (CacheFormat f : {CacheFormat::v32_fp8, CacheFormat::v4_fp8, CacheFormat::v41_fp8}) {
    DecodeWorkloadOptions o;
    o.format = f;
    o.s_q = 2;
    o.h_q = 6;
    o.topk_length = true;
    DecodeWorkload plain = make_decode_workload(o);
    o.sink = true;
    o.sink_special = kInf;
    DecodeWorkload sunk = make_decode_workload(o);
    for (DecodeImpl impl : {DecodeImpl::kCpuOracle, DecodeImpl::kCpuFast}) {
      const Result a = run(plain, impl), r = run(sunk, impl);
      for (uint16_t x : r.out) ASSERT_TRUE(is_zero_bf16(x));
      ASSERT_EQ(std::memcmp(a.lse.data(), r.lse.data(), a.lse.size() * sizeof(float)), 0);
    }
  }
}

TEST(DecodeCorner, SinkMinusInfHasNoEffect) {
  for (const FormatPair& fp : kFormatPairs) {
    DecodeWorkloadOptions o;
    o.format = fp.f;
    o.extra_format = fp.extra;
    o.s_q = 2;
    o.h_q = 6;
    o.extra = true;
    DecodeWorkload plain = make_decode_workload(o);
    o.sink = true;
    o.sink_special = -kInf;
    DecodeWorkload sunk = make_decode_workload(o);
    for (DecodeImpl impl : {DecodeImpl::kCpuOracle, DecodeImpl::kCpuFast}) {
      const Result a = run(plain, impl), r = run(sunk, impl);
      ASSERT_EQ(a.out, r.out);
      ASSERT_EQ(std::memcmp(a.lse.data(), r.lse.data(), a.lse.size() * sizeof(float)), 0);
    }
  }
}

TEST(DecodeCorner, AdversarialIndicesAreSkippedLikeMinusOne) {
  for (const FormatPair& fp : kFormatPairs) {
    DecodeWorkloadOptions o;
    o.format = fp.f;
    o.extra_format = fp.extra;
    o.b = 3;
    o.s_q = 2;
    o.h_q = 16;
    o.topk = 128;
    o.page_size = 61;
    o.topk_length = true;
    o.extra = true;
    o.extra_page_size = 5;
    o.adversarial = true;
    o.sink = true;
    expect_fast_matches_oracle(o);
    DecodeWorkload w = make_decode_workload(o);
    DecodeWorkload minus_one = w;
    ASSERT_GT(minus_one.invalid_indices_to_minus_one(), 0);
    for (DecodeImpl impl : {DecodeImpl::kCpuOracle, DecodeImpl::kCpuFast}) {
      const Result a = run(w, impl), r = run(minus_one, impl);
      ASSERT_EQ(a.out, r.out);
      ASSERT_EQ(std::memcmp(a.lse.data(), r.lse.data(), a.lse.size() * sizeof(float)), 0);
    }
  }
}

TEST(DecodeCorner, NanInUnattendedRecordsNeverReachesTheOutput) {
  for (const FormatPair& fp : kFormatPairs) {
    DecodeWorkloadOptions o;
    o.format = fp.f;
    o.extra_format = fp.extra;
    o.b = 4;
    o.s_q = 2;
    o.h_q = 8;
    o.topk = 64;
    o.page_size = 7;
    o.topk_length = true;  // entries past the length point at NaN records too
    o.extra = true;
    o.extra_topk_length = true;
    o.adversarial = true;
    o.sink = true;
    o.nan_unused = true;
    // The workload must really hold NaN records for the test to mean anything.
    const DecodeWorkload w = make_decode_workload(o);
    int64_t nan_bytes = 0;
    for (uint8_t x : w.kv) nan_bytes += x == 0x7f;
    ASSERT_GT(nan_bytes, 10000) << describe(o);
    // The extra cache's unattended records must hold NaN scales: a v41_fp4 record's only NaN (its
    // e2m1 payload has no NaN code; the poison's 0x7f payload bytes are finite).
    const CacheFormat ef = w.extra_format();
    int64_t nan_scale_records = 0;
    for (int64_t slot = 0; slot < w.extra_num_slots(); ++slot) {
      const uint8_t* sc =
          w.extra_kv.data() + formats::record_byte_offsets(ef, o.extra_page_size, w.extra_page_stride, slot).scale;
      const float first = ef == CacheFormat::v32_fp8   ? num::bits_f32(formats::load_u32_le(sc))
                          : ef == CacheFormat::v41_fp4 ? num::e4m3_to_f32(sc[0])
                                                       : num::ue8m0_to_f32(sc[0]);
      nan_scale_records += std::isnan(first);
    }
    ASSERT_GT(nan_scale_records, 10) << describe(o);
    const DecodeDiff d = expect_fast_matches_oracle(o);
    EXPECT_EQ(d.nan_out, 0);
  }
}

TEST(DecodeCorner, PaddedPagesAndStridedViews) {
  // V4's page-split records, and V4.1's with the v41_fp4 extra cache.
  for (const FormatPair& fp : {FormatPair{CacheFormat::v4_fp8, std::nullopt},
                               FormatPair{CacheFormat::v41_fp8, CacheFormat::v41_fp4}}) {
    DecodeWorkloadOptions o;
    o.format = fp.f;
    o.extra_format = fp.extra;
    o.b = 2;
    o.s_q = 3;
    o.h_q = 5;
    o.page_size = 13;
    o.page_pad_bytes = 100;
    o.extra = true;
    o.extra_page_size = 7;
    expect_fast_matches_oracle(o);
    DecodeWorkload w = make_decode_workload(o);
    const Result ref = run(w, DecodeImpl::kCpuFast);

    // The same inputs and outputs through padded rows, and both caches in their 2-D form.
    const int64_t b = o.b, s_q = o.s_q, h_q = o.h_q, d_qk = w.d_qk, pad = 8;
    std::vector<uint16_t> q(static_cast<size_t>(b * s_q * h_q * (d_qk + pad)), 0x7fc0);
    for (int64_t r = 0; r < b * s_q * h_q; ++r)
      std::memcpy(&q[r * (d_qk + pad)], &w.q[r * d_qk], d_qk * sizeof(uint16_t));
    std::vector<uint16_t> out(static_cast<size_t>(b * s_q * h_q * (512 + pad)), 0x7fc0);
    std::vector<float> lse(static_cast<size_t>(b * h_q * (s_q + 1)), 0.0f);
    SparseDecodeArgs a = w.args();
    a.q = TensorView(q.data(), DType::bf16, {b, s_q, h_q, d_qk},
                     {s_q * h_q * (d_qk + pad), h_q * (d_qk + pad), d_qk + pad, 1});
    a.k_cache = TensorView(w.kv.data(), DType::u8, {w.num_pages, w.page_stride});
    a.page_size = o.page_size;
    a.extra_k_cache = TensorView(w.extra_kv.data(), DType::u8, {w.extra_num_pages, w.extra_page_stride});
    a.extra_page_size = o.extra_page_size;
    a.out = TensorView(out.data(), DType::bf16, {b, s_q, h_q, 512},
                       {s_q * h_q * (512 + pad), h_q * (512 + pad), 512 + pad, 1});
    a.lse = TensorView(lse.data(), DType::f32, {b, h_q, s_q}, {h_q * (s_q + 1), s_q + 1, 1});
    sparse_decode(a, nullptr, DecodeImpl::kCpuFast);
    for (int64_t r = 0; r < b * s_q * h_q; ++r)
      ASSERT_EQ(std::memcmp(&out[r * (512 + pad)], &ref.out[r * 512], 512 * sizeof(uint16_t)), 0);
    for (int64_t i = 0; i < b; ++i)
      for (int64_t h = 0; h < h_q; ++h)
        for (int64_t j = 0; j < s_q; ++j)
          ASSERT_EQ(lse[(i * h_q + h) * (s_q + 1) + j], ref.lse[(i * h_q + h) * s_q + j]);
  }
}

// lse may have any strides under which its elements are distinct: FlashMLA's (a [b, s_q, h_q]
// buffer seen as [b, h_q, s_q]) and a padded one give the contiguous run's values bit for bit; a
// layout that puts two elements at one address, in lse or in out, is refused naming its strides,
// before anything is written.
TEST(DecodeCorner, LseInAnyLayoutWithDistinctElements) {
  DecodeWorkloadOptions o;
  o.b = 3;
  o.s_q = 2;
  o.h_q = 5;
  o.topk_length = true;
  o.sink = true;
  DecodeWorkload w = make_decode_workload(o);
  const int64_t b = o.b, s_q = o.s_q, h_q = o.h_q;
  for (DecodeImpl impl : {DecodeImpl::kCpuOracle, DecodeImpl::kCpuFast}) {
    const Result ref = run(w, impl);
    struct Layout {
      std::vector<int64_t> strides;
      int64_t elements;
    };
    for (const Layout& l : {Layout{{s_q * h_q, 1, h_q}, b * s_q * h_q},                     // FlashMLA's
                            Layout{{2 * h_q * s_q + 1, 2 * s_q, 2}, b * (2 * h_q * s_q + 1)}}) {  // padded
      std::vector<float> lse(static_cast<size_t>(l.elements), NAN);
      w.poison_outputs();
      SparseDecodeArgs a = w.args();
      a.lse = TensorView(lse.data(), DType::f32, {b, h_q, s_q}, l.strides);
      sparse_decode(a, nullptr, impl);
      ASSERT_EQ(w.out, ref.out);
      ASSERT_EQ("", latentkv::testing::lse_layout_mismatch(lse, l.strides, ref.lse, b, h_q, s_q));
    }
    std::vector<float> lse(static_cast<size_t>(b * s_q * h_q), NAN);
    w.poison_outputs();
    const std::vector<uint16_t> out_before = w.out;
    SparseDecodeArgs a = w.args();
    a.lse = TensorView(lse.data(), DType::f32, {b, h_q, s_q}, {s_q * h_q, 1, 1});  // heads 1.. overlap
    EXPECT_NE(latentkv::testing::error_of([&] { sparse_decode(a, nullptr, impl); })
                  .find("lse [3, 5, 2] f32 has strides [10, 1, 1] under which two of its elements share an address"),
              std::string::npos);
    a = w.args();
    a.out = TensorView(w.out.data(), DType::bf16, {b, s_q, h_q, 512}, {h_q * 512, 0, 512, 1});
    EXPECT_NE(latentkv::testing::error_of([&] { sparse_decode(a, nullptr, impl); })
                  .find("out [3, 2, 5, 512] bf16 has strides [2560, 0, 512, 1]"),
              std::string::npos);
    for (float x : lse) ASSERT_TRUE(std::isnan(x)) << "lse written";
    for (float x : w.lse) ASSERT_TRUE(std::isnan(x)) << "lse written";
    ASSERT_EQ(w.out, out_before) << "out written";
  }
}

TEST(DecodeCpu, FastPathIsBitwiseDeterministic) {
  DecodeWorkloadOptions o;
  o.format = CacheFormat::v4_fp8;
  o.b = 4;
  o.s_q = 3;
  o.h_q = 16;
  o.topk = 576;
  o.page_size = 61;
  o.topk_length = true;
  o.extra = true;
  o.sink = true;
  DecodeWorkload w = make_decode_workload(o);
  const Result first = run(w, DecodeImpl::kCpuFast);
  for (int rep = 0; rep < 5; ++rep) {
    const Result again = run(w, DecodeImpl::kCpuFast);
    ASSERT_EQ(again.out, first.out) << "rerun " << rep;
    ASSERT_EQ(std::memcmp(again.lse.data(), first.lse.data(), first.lse.size() * sizeof(float)), 0);
  }
  // The thread count changes which thread computes a pair, never the pair's result.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Result single = run(w, DecodeImpl::kCpuFast);
  omp_set_num_threads(threads);
  ASSERT_EQ(single.out, first.out);
  // kAuto on host tensors is the fast path.
  const Result automatic = run(w, DecodeImpl::kAuto);
  ASSERT_EQ(automatic.out, first.out);
}

// Fewer (request, query token) pairs than threads: the threads share each pair (its tokens'
// decoding, then its blocks of 16 heads). The result must be the oracle's and bitwise the same as
// one thread taking each pair whole, for every thread count (the pairs are shared from 3 threads
// up); with adversarial indices, both caches, a sink, 5 head blocks of which the last is partial,
// and for v32_fp8 zero lengths (request 0 lonely, request 1 shared alone).
TEST(DecodeCpu, FewPairsShareTheirHeadsAcrossThreadsBitwise) {
  const int threads = omp_get_max_threads();
  for (CacheFormat f : {CacheFormat::v32_fp8, CacheFormat::v4_fp8, CacheFormat::v41_fp8}) {
    SCOPED_TRACE(format_info(f).name);
    DecodeWorkloadOptions o;
    o.format = f;
    o.b = 2;
    o.s_q = 1;
    o.h_q = 70;
    o.topk = 300;
    o.page_size = 61;
    o.extra = true;
    o.sink = true;
    o.extra_topk_length = true;
    o.zero_lengths = f == CacheFormat::v32_fp8;  // request 0 attends nothing in either cache
    o.adversarial = true;
    DecodeWorkload w = make_decode_workload(o);
    omp_set_num_threads(1);
    const Result single = run(w, DecodeImpl::kCpuFast);
    for (int t : {2, 3, 4, 7}) {
      omp_set_num_threads(t);
      const Result shared = run(w, DecodeImpl::kCpuFast);
      EXPECT_EQ(shared.out, single.out) << t << " threads";
      EXPECT_EQ(std::memcmp(shared.lse.data(), single.lse.data(), single.lse.size() * sizeof(float)), 0) << t;
    }
    omp_set_num_threads(4);
    expect_fast_matches_oracle(o);
    omp_set_num_threads(threads);
  }
}

// A v41_fp4 extra cache attends exactly like a v41_fp8 one holding the same values. Latents whose
// every 16 dims are e2m1 grid values times one power of two per 32 dims, the largest magnitude
// 6 x that power, dequantize to themselves from both formats (checked first), so the two calls see
// the same keys from records of different sizes (288 and 528 bytes) and page strides, and must
// agree bit for bit: a record located or decoded with the main cache's format would not.
TEST(DecodeCpu, Fp4ExtraCacheEqualsFp8ExtraWhereTheValuesAgree) {
  DecodeWorkloadOptions o;
  o.format = CacheFormat::v41_fp8;
  o.b = 3;
  o.s_q = 2;
  o.h_q = 20;
  o.topk = 96;
  o.page_size = 7;
  o.extra = true;
  o.extra_topk = 80;
  o.extra_page_size = 5;
  o.extra_topk_length = true;
  o.adversarial = true;
  o.sink = true;
  DecodeWorkload w = make_decode_workload(o);
  const int64_t slots = w.extra_num_slots(), pages = w.extra_num_pages;

  // The shared latents: e2m1 grid values (signs and zeros included) times 2^e, e in [-4, 3] per 32
  // dims, with +/-6 x 2^e at the start of every 16.
  const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::vector<float> latents(static_cast<size_t>(slots * 512));
  uint64_t r = 12345;
  auto next = [&] { return (r = r * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  for (int64_t t = 0; t < slots; ++t)
    for (int g = 0; g < 16; ++g) {
      const float e = std::ldexp(1.0f, static_cast<int>(next() % 8) - 4);
      for (int d = 0; d < 32; ++d) {
        const float v = d % 16 == 0 ? 6.0f : grid[next() % 8];
        latents[t * 512 + g * 32 + d] = (next() % 2 ? -v : v) * e;
      }
    }
  std::vector<int32_t> all(static_cast<size_t>(slots));
  for (int64_t s = 0; s < slots; ++s) all[s] = static_cast<int32_t>(s);
  const TensorView latent_view(latents.data(), DType::f32, {slots, 512});
  const TensorView slot_view(all.data(), DType::i32, {slots});
  struct Extra {
    CacheFormat f;
    int64_t pages, bpt, stride;  // pages of 5 tokens; stride padded beyond the records
    std::vector<uint8_t> bytes;
    TensorView view() { return TensorView(bytes.data(), DType::u8, {pages, 5, 1, bpt}, {stride, bpt, bpt, 1}); }
  };
  ASSERT_EQ(o.extra_page_size, 5);
  Extra fp8{CacheFormat::v41_fp8, pages, 528, 5 * 528 + 16, {}}, fp4{CacheFormat::v41_fp4, pages, 288, 5 * 288 + 48, {}};
  for (Extra* e : {&fp8, &fp4}) {
    e->bytes.assign(static_cast<size_t>(pages * e->stride), 0);
    quantize(e->f, latent_view, slot_view, e->view());
    std::vector<uint16_t> back(static_cast<size_t>(slots * 512));
    dequantize(e->f, e->view(), slot_view, TensorView(back.data(), DType::bf16, {slots, 512}));
    for (int64_t k = 0; k < slots * 512; ++k)
      ASSERT_EQ(num::bf16_to_f32(back[k]), latents[k]) << format_info(e->f).name << " element " << k;
  }

  for (DecodeImpl impl : {DecodeImpl::kCpuOracle, DecodeImpl::kCpuFast}) {
    Result res[2];
    for (int k = 0; k < 2; ++k) {
      Extra& e = k == 0 ? fp8 : fp4;
      w.poison_outputs();
      SparseDecodeArgs a = w.args();
      a.extra_k_cache = e.view();
      a.extra_format = e.f;
      sparse_decode(a, nullptr, impl);
      res[k] = {w.out, w.lse};
    }
    EXPECT_EQ(res[0].out, res[1].out);
    EXPECT_EQ(std::memcmp(res[0].lse.data(), res[1].lse.data(), res[0].lse.size() * sizeof(float)), 0);
    // The extra cache mattered: without it the outputs differ.
    w.poison_outputs();
    SparseDecodeArgs none = w.args();
    none.extra_k_cache = none.extra_indices = none.extra_topk_length = TensorView();
    sparse_decode(none, nullptr, impl);
    EXPECT_NE(w.out, res[1].out);
  }
}

// ---- a case small enough to compute by hand ---------------------------------------------------
// One request, one query, one head, two tokens of v32_fp8 whose values quantize exactly:
//   k0 = e_0 + 0.5 e_1 + 0.25 e_575,  k1 = 3 e_0,  q = e_0 + 2 e_575, softmax_scale 1.
// s0 = 1 + 2 * 0.25 = 1.5 (the RoPE dim counts in the score), s1 = 3; lse = ln(e^1.5 + e^3);
// out = p0 * (1, 0.5, 0, ...) + p1 * (3, 0, ...) with p = softmax(s); V stops at dim 512.
TEST(DecodeOracle, HandComputedTwoTokens) {
  const CacheFormat f = CacheFormat::v32_fp8;
  const int64_t d_qk = 576, P = 4, bpt = 656;
  std::vector<uint8_t> kv(static_cast<size_t>(P * bpt), 0);
  std::vector<float> lat(2 * d_qk, 0.0f);
  lat[0] = 1.0f;
  lat[1] = 0.5f;
  lat[575] = 0.25f;
  lat[d_qk + 0] = 3.0f;
  std::vector<int32_t> slots = {2, 0};  // token 0 at slot 2, token 1 at slot 0
  const TensorView cache(kv.data(), DType::u8, {1, P, 1, bpt});
  quantize(f, TensorView(lat.data(), DType::f32, {2, d_qk}), TensorView(slots.data(), DType::i32, {2}),
           cache);

  std::vector<uint16_t> q(d_qk, 0);
  q[0] = num::f32_to_bf16(1.0f);
  q[575] = num::f32_to_bf16(2.0f);
  // Candidates: token 1, an invalid -1, an out-of-range 4, token 0, then garbage past topk_length.
  std::vector<int32_t> idx = {0, -1, 4, 2, 1};
  std::vector<int32_t> len = {4};

  const double s0 = 1.5, s1 = 3.0;
  const double lse = std::log(std::exp(s0) + std::exp(s1));
  const double p0 = std::exp(s0 - lse), p1 = std::exp(s1 - lse);
  const double want0 = p0 * 1.0 + p1 * 3.0, want1 = p0 * 0.5;

  for (float sink : {std::numeric_limits<float>::quiet_NaN(), static_cast<float>(lse)})
    for (DecodeImpl impl : {DecodeImpl::kCpuOracle, DecodeImpl::kCpuFast}) {
      std::vector<uint16_t> out(512, 0x7fc0);
      float lse_out = 0;
      SparseDecodeArgs a;
      a.q = TensorView(q.data(), DType::bf16, {1, 1, 1, d_qk});
      a.k_cache = cache;
      a.format = f;
      a.indices = TensorView(idx.data(), DType::i32, {1, 1, 5});
      a.topk_length = TensorView(len.data(), DType::i32, {1});
      // A sink equal to lse halves the output: 1 / (1 + e^0).
      const bool with_sink = !std::isnan(sink);
      if (with_sink) a.attn_sink = TensorView(&sink, DType::f32, {1});
      a.softmax_scale = 1.0f;
      a.out = TensorView(out.data(), DType::bf16, {1, 1, 1, 512});
      a.lse = TensorView(&lse_out, DType::f32, {1, 1, 1});
      sparse_decode(a, nullptr, impl);
      const double factor = with_sink ? 0.5 : 1.0;
      const double got0 = num::bf16_to_f32(out[0]), got1 = num::bf16_to_f32(out[1]);
      if (impl == DecodeImpl::kCpuOracle) {
        // The oracle rounds the exact value once (double -> float -> bf16).
        EXPECT_EQ(out[0], num::f32_to_bf16(static_cast<float>(want0 * factor)));
        EXPECT_EQ(out[1], num::f32_to_bf16(static_cast<float>(want1 * factor)));
      } else {
        // fp32 may land on the other side of a bf16 rounding boundary: one bf16 ulp (2^-8 rel).
        EXPECT_NEAR(got0, want0 * factor, want0 * factor / 256);
        EXPECT_NEAR(got1, want1 * factor, want1 * factor / 256);
      }
      for (int d = 2; d < 512; ++d) EXPECT_EQ(out[d], 0u) << "dim " << d;
      EXPECT_NEAR(lse_out, lse, 1e-6);
    }
}

// ---- errors -----------------------------------------------------------------------------------

TEST(DecodeErrors, BadShapesAndDtypesAreNamed) {
  DecodeWorkloadOptions o;
  o.h_q = 4;
  o.s_q = 2;
  DecodeWorkload w = make_decode_workload(o);
  std::vector<uint16_t> q512(static_cast<size_t>(o.b * o.s_q * o.h_q * 512));
  std::vector<int64_t> idx64(w.indices.begin(), w.indices.end());
  std::vector<uint16_t> out576(static_cast<size_t>(o.b * o.s_q * o.h_q * 576));
  std::vector<float> lse2(static_cast<size_t>(2 * o.b * o.h_q * o.s_q));

  struct Case {
    const char* what;
    std::function<void(SparseDecodeArgs&)> bend;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"q with d_qk 512 for v32_fp8",
       [&](SparseDecodeArgs& a) { a.q = TensorView(q512.data(), DType::bf16, {o.b, o.s_q, o.h_q, 512}); },
       "expected q of shape [b, s_q, h_q, 576] bf16"},
      {"q as f32", [&](SparseDecodeArgs& a) { a.q.dtype = DType::f32; },
       "expected q of shape [b, s_q, h_q, 576] bf16"},
      {"indices as i64",
       [&](SparseDecodeArgs& a) { a.indices = TensorView(idx64.data(), DType::i64, {o.b, o.s_q, o.topk}); },
       "expected indices of shape [b, s_q, topk] i32"},
      {"out with 576 dims",
       [&](SparseDecodeArgs& a) { a.out = TensorView(out576.data(), DType::bf16, {o.b, o.s_q, o.h_q, 576}); },
       "expected out of shape [b, s_q, h_q, 512] bf16"},
      {"lse as [b, s_q, h_q]",
       [&](SparseDecodeArgs& a) { a.lse = TensorView(w.lse.data(), DType::f32, {o.b, o.s_q, o.h_q}); },
       "expected lse of shape [b, h_q, s_q] f32"},
      {"sink of the wrong length",
       [&](SparseDecodeArgs& a) { a.attn_sink = TensorView(w.lse.data(), DType::f32, {o.h_q + 1}); },
       "expected attn_sink of shape [h_q] f32"},
      {"topk_length of the wrong length",
       [&](SparseDecodeArgs& a) { a.topk_length = TensorView(w.indices.data(), DType::i32, {o.b + 1}); },
       "expected topk_length of shape [b] i32"},
      {"extra indices without an extra cache",
       [&](SparseDecodeArgs& a) { a.extra_indices = a.indices; },
       "extra_k_cache and extra_indices must be given together, got extra_indices without extra_k_cache"},
      {"an extra cache without extra indices",
       [&](SparseDecodeArgs& a) {
         a.extra_k_cache = a.k_cache;
         a.extra_page_size = a.page_size;
       },
       "extra_k_cache and extra_indices must be given together, got extra_k_cache without extra_indices"},
      {"a v4_int8 cache", [&](SparseDecodeArgs& a) { a.format = CacheFormat::v4_int8; },
       "sparse_decode supports v32_fp8, v4_fp8 and v41_fp8 caches (v41_fp4 only as the extra cache of a "
       "v41_fp8 one), got v4_int8"},
      {"extra_format without an extra cache", [&](SparseDecodeArgs& a) { a.extra_format = CacheFormat::v32_fp8; },
       "sparse_decode: extra_format (v32_fp8) given without extra_k_cache"},
      {"a negative softmax scale", [&](SparseDecodeArgs& a) { a.softmax_scale = -1.0f; },
       "softmax_scale must be finite and >= 0"},
      {"a NaN softmax scale",
       [&](SparseDecodeArgs& a) { a.softmax_scale = std::numeric_limits<float>::quiet_NaN(); },
       "softmax_scale must be finite and >= 0"},
      {"topk 0",
       [&](SparseDecodeArgs& a) { a.indices = TensorView(w.indices.data(), DType::i32, {o.b, o.s_q, 0}); },
       "sparse_decode: empty problem"},
      {"an infinite softmax scale",
       [&](SparseDecodeArgs& a) { a.softmax_scale = std::numeric_limits<float>::infinity(); },
       "softmax_scale must be finite and >= 0"},
      {"extra_topk_length without an extra cache",
       [&](SparseDecodeArgs& a) { a.extra_topk_length = TensorView(w.indices.data(), DType::i32, {o.b}); },
       "extra_topk_length given without extra_k_cache"},
      {"extra indices of another batch size",
       [&](SparseDecodeArgs& a) {
         a.extra_k_cache = a.k_cache;
         a.extra_page_size = a.page_size;
         a.extra_indices = TensorView(w.indices.data(), DType::i32, {o.b + 1, o.s_q, 1});
       },
       "expected extra_indices of shape [b, s_q, extra_topk] i32"},
      {"lse with elements at one address (strided lse is fine: LseInAnyLayoutWithDistinctElements)",
       [&](SparseDecodeArgs& a) {
         a.lse = TensorView(lse2.data(), DType::f32, {o.b, o.h_q, o.s_q}, {o.h_q * o.s_q, 1, 1});
       },
       "under which two of its elements share an address"},
      {"k_cache on another device", [&](SparseDecodeArgs& a) { a.k_cache.device = Device::cuda(0); },
       "k_cache is on cuda:0, expected cpu"},
  };
  for (const Case& c : cases)
    for (DecodeImpl impl : {DecodeImpl::kCpuOracle, DecodeImpl::kCpuFast}) {
      w.poison_outputs();
      std::fill(lse2.begin(), lse2.end(), std::numeric_limits<float>::quiet_NaN());
      const std::vector<uint16_t> out_before = w.out;
      SparseDecodeArgs a = w.args();
      c.bend(a);
      const std::string msg = latentkv::testing::error_of([&] { sparse_decode(a, nullptr, impl); });
      EXPECT_NE(msg.find(c.message), std::string::npos) << c.what << ": got \"" << msg << "\"";
      // Nothing is written before every check has passed.
      for (float l : w.lse) ASSERT_TRUE(std::isnan(l)) << c.what;
      for (float l : lse2) ASSERT_TRUE(std::isnan(l)) << c.what;
      ASSERT_EQ(w.out, out_before) << c.what;
    }
}

// Every array but the caches and the 1-D ones must be contiguous in its last dimension: the same
// values under every stride doubled are named with the stride, and nothing is written (the doubled
// view's own bytes included, where it is an output).
TEST(DecodeErrors, ViewsStridedInTheLastDimensionAreNamed) {
  DecodeWorkloadOptions o;
  o.h_q = 4;
  o.s_q = 2;
  o.extra = true;
  DecodeWorkload w = make_decode_workload(o);
  for (const auto& [member, name] :
       {std::pair{&SparseDecodeArgs::q, "q"}, {&SparseDecodeArgs::indices, "indices"},
        {&SparseDecodeArgs::extra_indices, "extra_indices"}, {&SparseDecodeArgs::out, "out"}})
    for (DecodeImpl impl : {DecodeImpl::kCpuOracle, DecodeImpl::kCpuFast}) {
      w.poison_outputs();
      const std::vector<uint16_t> out_before = w.out;
      EXPECT_EQ("", latentkv::testing::refuses_doubled_strides<SparseDecodeArgs>(
                        w.args(), member, name, [&](const SparseDecodeArgs& a) { sparse_decode(a, nullptr, impl); }));
      for (float l : w.lse) ASSERT_TRUE(std::isnan(l)) << name << ": lse written";
      ASSERT_EQ(w.out, out_before) << name << ": out written";
    }
}

// The extra cache's format: k_cache's, or v41_fp4 with a v41_fp8 k_cache; the view must be that
// format's records.
TEST(DecodeErrors, ExtraCacheFormatPairings) {
  struct Case {
    CacheFormat f;
    std::optional<CacheFormat> extra;
    std::function<void(SparseDecodeArgs&)> bend;
    const char* message;
  };
  const std::vector<Case> cases = {
      {CacheFormat::v4_fp8, CacheFormat::v41_fp4, nullptr,
       "the extra cache's format must be k_cache's (v4_fp8) or, with a v41_fp8 k_cache, v41_fp4; got extra_format "
       "v41_fp4"},
      {CacheFormat::v41_fp8, CacheFormat::v4_fp8, nullptr,
       "the extra cache's format must be k_cache's (v41_fp8) or, with a v41_fp8 k_cache, v41_fp4; got extra_format "
       "v4_fp8"},
      {CacheFormat::v32_fp8, CacheFormat::v41_fp4, nullptr, "got extra_format v41_fp4"},
      {CacheFormat::v41_fp8, CacheFormat::v41_fp4,
       [](SparseDecodeArgs& a) { a.format = CacheFormat::v41_fp4; },
       "sparse_decode supports v32_fp8, v4_fp8 and v41_fp8 caches (v41_fp4 only as the extra cache of a v41_fp8 "
       "one), got v41_fp4"},
      // v41_fp8 records (528 bytes) named v41_fp4 (288).
      {CacheFormat::v41_fp8, std::nullopt, [](SparseDecodeArgs& a) { a.extra_format = CacheFormat::v41_fp4; },
       "288"},
  };
  for (const Case& c : cases) {
    DecodeWorkloadOptions o;
    o.format = c.f;
    o.extra = true;
    // The workload is built with a pairing it supports; the case then names the one under test.
    o.extra_format = c.extra && format_info(*c.extra).d_qk == format_info(c.f).d_qk && c.f == CacheFormat::v41_fp8
                         ? c.extra
                         : std::nullopt;
    DecodeWorkload w = make_decode_workload(o);
    for (DecodeImpl impl : {DecodeImpl::kCpuOracle, DecodeImpl::kCpuFast}) {
      w.poison_outputs();
      const std::vector<uint16_t> out_before = w.out;
      SparseDecodeArgs a = w.args();
      a.extra_format = c.extra;
      if (c.bend) c.bend(a);
      const std::string msg = latentkv::testing::error_of([&] { sparse_decode(a, nullptr, impl); });
      EXPECT_NE(msg.find(c.message), std::string::npos) << "got \"" << msg << "\"";
      for (float l : w.lse) ASSERT_TRUE(std::isnan(l)) << msg;
      ASSERT_EQ(w.out, out_before) << msg;
    }
  }
}

// Views whose only odd stride is that of a dimension of length 1 (one request, one query token)
// are accepted: that stride is never stepped over.
TEST(DecodeErrors, LengthOneDimensionsMayHaveAnyStride) {
  DecodeWorkloadOptions o;
  o.b = 1;
  o.s_q = 1;
  o.topk_length = true;
  o.sink = true;
  DecodeWorkload w = make_decode_workload(o);
  SparseDecodeArgs a = w.args();
  a.topk_length = TensorView(w.topk_length.data(), DType::i32, {1}, {7});
  a.lse = TensorView(w.lse.data(), DType::f32, {1, o.h_q, 1}, {o.h_q, 1, 7});
  EXPECT_NO_THROW(sparse_decode(a, nullptr, DecodeImpl::kCpuFast));
}

// softmax_scale 0 means d_qk^-0.5: the same bits as passing that value, on both CPU paths.
TEST(DecodeCpu, DefaultScaleIsTheInverseSquareRootOfDqk) {
  for (CacheFormat f : {CacheFormat::v32_fp8, CacheFormat::v4_fp8}) {
    DecodeWorkloadOptions o;
    o.format = f;
    o.b = 2;
    o.s_q = 2;
    DecodeWorkload w = make_decode_workload(o);
    const float explicit_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(format_info(f).d_qk)));
    for (DecodeImpl impl : {DecodeImpl::kCpuOracle, DecodeImpl::kCpuFast}) {
      const Result by_default = run(w, impl, 0.0f), given = run(w, impl, explicit_scale);
      ASSERT_EQ(by_default.out, given.out) << format_info(f).name;
      ASSERT_EQ(0, std::memcmp(by_default.lse.data(), given.lse.data(), given.lse.size() * 4)) << format_info(f).name;
      // And not what another scale gives.
      ASSERT_NE(run(w, impl, explicit_scale * 1.5f).out, given.out);
    }
  }
}

TEST(DecodeErrors, CudaImplOnHostTensorsIsATypeError) {
  DecodeWorkload w = make_decode_workload({});
  try {
    sparse_decode(w.args(), nullptr, DecodeImpl::kCuda);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kType);
    EXPECT_NE(std::string(e.what()).find("cannot run on tensors on cpu"), std::string::npos) << e.what();
  }
}

TEST(DecodeErrors, PlanForOtherShapes) {
  // The CPU paths need no plan, but a plan made for other shapes is a caller bug on every path.
  DecodeWorkloadOptions o;
  o.b = 2;
  o.topk = 64;
  DecodeWorkload w = make_decode_workload(o);
  const DecodePlan other = plan_decode(2, 1, o.h_q, 128, 0, 132);
  SparseDecodeArgs a = w.args();
  a.plan = &other;
  const std::vector<uint16_t> before = w.out;
  try {
    sparse_decode(a);
    FAIL() << "a plan for topk 128 was accepted for topk 64";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the plan was made for b=2 s_q=1 h_q=16 topk=128"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(0, std::memcmp(before.data(), w.out.data(), before.size() * 2)) << "out was written";
  const DecodePlan same = plan_decode(2, 1, o.h_q, 64, 0, 132);
  a.plan = &same;
  EXPECT_NO_THROW(sparse_decode(a));
}

// ---- the planner ------------------------------------------------------------------------------

// The planner's expectations below are for the portable kernel's cost model, named explicitly so
// that they hold on any machine (kAuto would pick the Hopper kernel's model on an H100/H200).
constexpr DecodePlanKernel kPortablePlan = DecodePlanKernel::kPortable;

TEST(DecodePlan, CoversEveryCandidateInWholeBlocks) {
  for (int64_t b : {1, 2, 8, 64})
    for (int64_t s_q : {1, 2, 4})
      for (int64_t h_q : {1, 16, 64, 128})
        for (int64_t topk : {1, 64, 100, 576, 2048})
          for (int64_t extra : {0, 64, 513})
            for (int sms : {1, 78, 132}) {
              const DecodePlan p = plan_decode(b, s_q, h_q, topk, extra, sms, kPortablePlan);
              const int64_t total = topk + extra;
              EXPECT_GE(p.num_splits, 1);
              EXPECT_EQ(p.keys_per_split % 64, 0);
              EXPECT_GE(p.num_splits * p.keys_per_split, total);
              EXPECT_LT((p.num_splits - 1) * p.keys_per_split, total) << "an empty split";
              EXPECT_EQ(p.b, b);
              EXPECT_EQ(p.topk, topk);
              EXPECT_EQ(p.extra_topk, extra);
              // A pure function: the same arguments, the same plan.
              const DecodePlan again = plan_decode(b, s_q, h_q, topk, extra, sms, kPortablePlan);
              EXPECT_EQ(again.num_splits, p.num_splits);
              EXPECT_EQ(again.keys_per_split, p.keys_per_split);
              EXPECT_EQ(sparse_decode_workspace_bytes(p) == 0, p.num_splits == 1);
            }
}

TEST(DecodePlan, SplitsFewItemsAndNotMany) {
  // One request, one query, 64 heads: one item for 132 SMs, so topk 2048 is split.
  EXPECT_GT(plan_decode(1, 1, 64, 2048, 0, 132, kPortablePlan).num_splits, 1);
  EXPECT_GT(plan_decode(2, 1, 128, 2048, 512, 132, kPortablePlan).num_splits, 1);
  // 128 requests x 2 query tokens x 2 head blocks: 512 items already fill 132 SMs.
  EXPECT_EQ(plan_decode(128, 2, 128, 2048, 0, 132, kPortablePlan).num_splits, 1);
  // Too few candidates to split: fewer than two blocks of 64.
  EXPECT_EQ(plan_decode(1, 1, 64, 64, 0, 132, kPortablePlan).num_splits, 1);
  EXPECT_EQ(plan_decode(1, 1, 16, 100, 0, 132, kPortablePlan).num_splits, 1);
  EXPECT_THROW(plan_decode(0, 1, 64, 64, 0, 132, kPortablePlan), Error);
  EXPECT_THROW(plan_decode(1, 1, 64, 64, 0, 0, kPortablePlan), Error);
}

namespace {

// Work items of a plan's launch: (request, query token, block of 64 heads).
int64_t plan_items(const DecodePlan& p) { return p.b * p.s_q * ((p.h_q + 63) / 64); }

// The fraction of the launched CTA slots that hold a CTA: items * splits CTAs run in waves of
// num_sms (one CTA per SM).
double wave_fill(const DecodePlan& p, int num_sms) {
  const int64_t ctas = plan_items(p) * p.num_splits;
  const int64_t waves = (ctas + num_sms - 1) / num_sms;
  return static_cast<double>(ctas) / static_cast<double>(waves * num_sms);
}

}  // namespace

TEST(DecodePlan, SplitsToFillTheLastWave) {
  // V3.2 b 73 (h_q 128, s_q 2, topk 2048) in one launch: 292 items on 132 SMs leave the third wave
  // 21% full. Four splits of 512 candidates give 1168 CTAs, 8.85 of 9 waves. (With two launches
  // allowed it runs 66 requests unsplit instead: TwoLaunchesForALeftover; wave_fill models one
  // launch, so the one-launch plan is what this test checks.)
  const DecodePlan b73 = plan_decode(73, 2, 128, 2048, 0, 132, kPortablePlan);
  EXPECT_EQ(b73.unsplit_b, 66);
  DecodePlan one = b73;
  one.unsplit_b = 0;
  EXPECT_GE(wave_fill(one, 132), 0.95) << one.num_splits << " splits";
  EXPECT_EQ(one.num_splits, 4);
  EXPECT_EQ(one.keys_per_split, 512);
  // The peak cases (b 148, s_q 2, topk 16384): h_q 64 fills 75% unsplit, h_q 128 90%.
  for (int64_t h_q : {64, 128}) {
    const DecodePlan peak = plan_decode(148, 2, h_q, 16384, 0, 132, kPortablePlan);
    EXPECT_EQ(peak.unsplit_b, 0) << "h_q " << h_q << ": one launch";
    EXPECT_GT(peak.num_splits, 1) << "h_q " << h_q;
    EXPECT_GE(wave_fill(peak, 132), 0.95) << "h_q " << h_q << ": " << peak.num_splits << " splits";
  }
}

TEST(DecodePlan, LeavesFullWavesUnsplit) {
  // 512 items (b 128) and 256 items (b 64) already fill 97% of their 4 and 2 waves; splitting could
  // not fill them better by more than the combine costs.
  EXPECT_EQ(plan_decode(128, 2, 128, 2048, 0, 132, kPortablePlan).num_splits, 1);
  EXPECT_EQ(plan_decode(64, 2, 128, 2048, 0, 132, kPortablePlan).num_splits, 1);
  // Exactly two full waves.
  EXPECT_EQ(plan_decode(66, 2, 128, 2048, 0, 132, kPortablePlan).num_splits, 1);
  EXPECT_EQ(plan_decode(132, 1, 64, 16384, 0, 132, kPortablePlan).num_splits, 1);
}

TEST(DecodePlan, PrefersOneWaveOfLongerSplits) {
  // b 2 (8 items): 16 splits of 128 candidates are one wave of 128 CTAs; 32 splits of 64 would be
  // two waves of the same length in candidates per wave, plus twice the combine.
  const DecodePlan b2 = plan_decode(2, 2, 128, 2048, 0, 132, kPortablePlan);
  EXPECT_EQ(b2.num_splits, 16);
  EXPECT_EQ(b2.keys_per_split, 128);
  // One item, many candidates: at most one wave (132 CTAs), and more than half of it.
  const DecodePlan one = plan_decode(1, 1, 64, 65536, 0, 132, kPortablePlan);
  EXPECT_LE(one.num_splits, 132);
  EXPECT_GT(one.num_splits, 66);
}

TEST(DecodePlan, SplitsOnlyToFillWavesBetter) {
  // Whatever the shape, a split plan fills its waves better than the unsplit launch would (a
  // split count that fills them no better cannot be faster, and pays the combine).
  for (int64_t b : {1, 2, 5, 33, 64, 74, 100, 128, 148, 257})
    for (int64_t s_q : {1, 2, 3})
      for (int64_t h_q : {16, 64, 128})
        for (int64_t total : {64, 640, 1152, 2048, 16384})
          for (int sms : {78, 108, 132}) {
            const DecodePlan p = plan_decode(b, s_q, h_q, total, 0, sms, kPortablePlan);
            // wave_fill models one launch; two-launch plans: TwoLaunchesForALeftover.
            if (p.num_splits == 1 || p.unsplit_b > 0) continue;
            DecodePlan unsplit = p;
            unsplit.num_splits = 1;
            EXPECT_GT(wave_fill(p, sms), wave_fill(unsplit, sms))
                << "b " << b << " s_q " << s_q << " h_q " << h_q << " candidates " << total
                << " sms " << sms << ": " << p.num_splits << " splits";
          }
}

TEST(DecodePlan, HugeCandidateCountsPlanQuickly) {
  // Dense decode plans over every token a request could hold (up to 2^31); the search stops early.
  const DecodePlan p = plan_decode(1, 1, 128, int64_t{1} << 30, 0, 132, kPortablePlan);
  EXPECT_GE(p.num_splits * p.keys_per_split, int64_t{1} << 30);
  EXPECT_LE(p.num_splits, 65535) << "the kernel's grid.z";
  EXPECT_GE(wave_fill(p, 132), 0.9);
}

TEST(DecodePlan, HopperKernelSplitsLess) {
  // The Hopper kernel's key steps are ~2.8x shorter while the combine is not, so a split costs it
  // ~4 key steps per head row (src/decode/decode.cpp): V3.2 b 67 runs 66 requests unsplit and
  // splits the last one (4 items) 16 ways, where the portable kernel takes 32.
  constexpr DecodePlanKernel kSm90 = DecodePlanKernel::kSm90;
  EXPECT_EQ(plan_decode(67, 2, 128, 2048, 0, 132, kPortablePlan).num_splits, 32);
  EXPECT_EQ(plan_decode(67, 2, 128, 2048, 0, 132, kSm90).num_splits, 16);
  EXPECT_EQ(plan_decode(67, 2, 128, 2048, 0, 132, kSm90).unsplit_b, 66);
  // Long candidate lists still split: the peak cases keep their portable plans (4 splits for h_q 64,
  // 2 for h_q 128).
  EXPECT_EQ(plan_decode(148, 2, 64, 16384, 0, 132, kSm90).num_splits, 4);
  EXPECT_EQ(plan_decode(148, 2, 128, 16384, 0, 132, kSm90).num_splits, 2);
  // b 2 (8 items) still splits within one wave, into fewer and longer splits (the portable model's
  // 16 x 128 candidates becomes 11 x 192).
  const DecodePlan b2 = plan_decode(2, 2, 128, 2048, 0, 132, kSm90);
  EXPECT_GT(b2.num_splits, 1);
  EXPECT_LE(b2.num_splits * 8, 132) << "one wave";
  EXPECT_LT(b2.num_splits, 16);
  // With at most 4 head rows per SM (decode/cuda/config.h: the combine's four-warp form) and an
  // extra cache, one block of 64 candidates per split when that fits one wave: V4 b 2 with a
  // 512-token extra cache (8 items x 10 splits), and with 1024 at h_q 64 (4 x 18); not at h_q 128
  // (8 x 18 > 132 CTAs), nor b 3 (768 rows), nor without an extra cache (V3.2 b 1 keeps 16 x 128).
  EXPECT_EQ(plan_decode(2, 2, 128, 128, 512, 132, kSm90).num_splits, 10);
  EXPECT_EQ(plan_decode(2, 2, 64, 128, 1024, 132, kSm90).num_splits, 18);
  EXPECT_EQ(plan_decode(2, 2, 128, 128, 1024, 132, kSm90).num_splits, 9);
  EXPECT_EQ(plan_decode(3, 2, 128, 128, 512, 132, kSm90).num_splits, 5) << "768 rows: the model's plan";
  EXPECT_EQ(plan_decode(1, 1, 128, 2048, 0, 132, kSm90).num_splits, 16) << "no extra cache: the model's plan";
  // A candidate count that is not a multiple of 64: the last one-block split is partial.
  const DecodePlan odd = plan_decode(2, 2, 128, 100, 500, 132, kSm90);
  EXPECT_EQ(odd.num_splits, 10);
  EXPECT_EQ(odd.keys_per_split, 64);
  // Full waves stay unsplit under both models.
  EXPECT_EQ(plan_decode(128, 2, 128, 2048, 0, 132, kSm90).num_splits, 1);
  // Never more splits than the portable model takes, over a grid of shapes with 64-row CTAs.
  for (int64_t b : {1, 2, 9, 64, 74, 148})
    for (int64_t h_q : {64, 128})
      for (int64_t total : {128, 640, 2048, 16384}) {
        const DecodePlan hop = plan_decode(b, 2, h_q, total, 0, 132, kSm90);
        const DecodePlan por = plan_decode(b, 2, h_q, total, 0, 132, kPortablePlan);
        if (hop.unsplit_b == 0 && por.unsplit_b == 0) {
          EXPECT_LE(hop.num_splits, por.num_splits) << b << " " << h_q << " " << total;
        }
        EXPECT_GE(hop.num_splits * hop.keys_per_split, total);
      }
}

TEST(DecodePlan, NarrowHopperCtasTwoPerSm) {
  // h_q <= 16 runs the narrow Hopper kernel (decode/sm90/narrow.cuh), two CTAs per SM, so the waves
  // hold 264 CTAs on 132 SMs: b 128 / s_q 2 (256 items) stays unsplit in one wave, b 64 (128
  // items, half a wave) splits in two; the portable model, one CTA per SM, splits neither. Dense
  // decode's pages take the narrow kernel's warp-specialised form by default (decode/sm90/launch.h
  // narrow_ws): one CTA of 512 threads per SM.
  constexpr DecodePlanKernel kSm90 = DecodePlanKernel::kSm90;
  EXPECT_EQ(plan_ctas_per_sm(kSm90, 16, true, false), 2);
  EXPECT_EQ(plan_ctas_per_sm(kSm90, 16, true, true), 1) << "dense pages: the warp-specialised form";
  EXPECT_EQ(plan_ctas_per_sm(kSm90, 17, true, false), 1);
  EXPECT_EQ(plan_ctas_per_sm(kSm90, 17, true, true), 1);
  EXPECT_EQ(plan_ctas_per_sm(kSm90, 16, false, false), 1) << "16-bit keys run the 64-row kernel";
  EXPECT_EQ(plan_ctas_per_sm(kSm90, 16, false, true), 1) << "16-bit keys run the 64-row kernel";
  EXPECT_EQ(plan_ctas_per_sm(kPortablePlan, 16, true, false), 1);
  EXPECT_EQ(plan_ctas_per_sm(kPortablePlan, 16, true, true), 1);
  EXPECT_EQ(plan_decode(128, 2, 16, 2048, 0, 132, kSm90).num_splits, 1);
  EXPECT_EQ(plan_decode(64, 2, 16, 2048, 0, 132, kSm90).num_splits, 2);
  EXPECT_EQ(plan_decode(64, 2, 16, 2048, 0, 132, kPortablePlan).num_splits, 1);
  EXPECT_EQ(plan_decode(64, 2, 32, 2048, 0, 132, kSm90).num_splits, 1) << "32 rows: the 64-row kernel";
}

TEST(DecodePlan, TwoLaunchesForALeftover) {
  // V4 h_q 64 / s_q 2 at b 74: 148 items on 132 SMs. One launch would take 2 waves unsplit or 3
  // waves of half the candidates with 2 splits; two launches run 66 requests (132 items, one whole
  // wave) unsplit, then the other 8 split into one wave of short CTAs.
  for (DecodePlanKernel k : {kPortablePlan, DecodePlanKernel::kSm90}) {
    const DecodePlan p = plan_decode(74, 2, 64, 128, 512, 132, k);
    EXPECT_EQ(p.unsplit_b, 66);
    EXPECT_GT(p.num_splits, 1);
    EXPECT_LE((74 - 66) * 2 * p.num_splits, 132) << "the split requests' CTAs fit one wave";
    EXPECT_GE(p.num_splits * p.keys_per_split, 640);
    EXPECT_LT((p.num_splits - 1) * p.keys_per_split, 640);
    // Only the split requests' rows take workspace: partial outputs (512 fp32 each, the block
    // rounded to 256 bytes), then one lse each.
    const size_t rows = static_cast<size_t>((74 - 66) * 2 * 64 * p.num_splits);
    EXPECT_EQ(sparse_decode_workspace_bytes(p), (rows * 512 * 4 + 255) / 256 * 256 + rows * 4);
  }
  // V3.2 b 74 (296 items): 66 requests fill two waves unsplit, the other 8 split 4 ways.
  const DecodePlan v32 = plan_decode(74, 2, 128, 2048, 0, 132, kPortablePlan);
  EXPECT_EQ(v32.unsplit_b, 66);
  EXPECT_EQ(v32.num_splits, 4);
  // Whole waves, or a leftover that a single launch handles as well: one launch.
  EXPECT_EQ(plan_decode(66, 2, 128, 2048, 0, 132, kPortablePlan).unsplit_b, 0);
  EXPECT_EQ(plan_decode(128, 2, 128, 2048, 0, 132, kPortablePlan).unsplit_b, 0);
  EXPECT_EQ(plan_decode(256, 2, 64, 128, 512, 132, kPortablePlan).unsplit_b, 0);
  // Fewer items than SMs: no whole wave to leave unsplit.
  EXPECT_EQ(plan_decode(2, 2, 128, 2048, 0, 132, kPortablePlan).unsplit_b, 0);
  // Every two-launch plan over a grid: the unsplit requests fill whole waves at most, some
  // requests are split, and the plan covers the candidates exactly once.
  for (int64_t b : {33, 67, 74, 100, 140, 148, 200, 257})
    for (int64_t h_q : {16, 64, 128})
      for (int64_t total : {128, 640, 2048, 16384})
        for (int sms : {78, 108, 132}) {
          const DecodePlan p = plan_decode(b, 2, h_q, total, 0, sms, kPortablePlan);
          if (p.unsplit_b == 0) continue;
          const int64_t per_request = 2 * ((h_q + 63) / 64);
          EXPECT_LT(p.unsplit_b, b);
          EXPECT_GT(p.num_splits, 1);
          EXPECT_LE(p.unsplit_b * per_request, b * per_request / sms * sms) << b << " " << h_q << " " << total << " " << sms;
          EXPECT_GE(p.num_splits * p.keys_per_split, total);
          EXPECT_LT((p.num_splits - 1) * p.keys_per_split, total);
        }
}

// b requests of h_q 16 and topk 128 (s_q 1), for the tests of edited plans.
DecodeWorkload plan_test_workload(int64_t b) {
  DecodeWorkloadOptions o;
  o.b = b;
  o.h_q = 16;
  o.topk = 128;
  return latentkv::testing::make_decode_workload(o);
}

TEST(DecodePlan, UnsplitRequestsChecked) {
  // A plan's unsplit_b must leave some requests to split: [0, b).
  DecodeWorkload w = plan_test_workload(3);
  SparseDecodeArgs a = w.args();
  DecodePlan p = plan_decode(3, 1, 16, 128, 0, 1, kPortablePlan);
  for (int64_t bad : {int64_t{-1}, int64_t{3}, int64_t{7}}) {
    p.unsplit_b = bad;
    a.plan = &p;
    try {
      sparse_decode(a, nullptr, DecodeImpl::kCpuFast);
      ADD_FAILURE() << "unsplit_b " << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("unsplit_b must be in [0, b) = [0, 3), got " + std::to_string(bad)),
                std::string::npos) << e.what();
    }
  }
  p.unsplit_b = 2;
  EXPECT_NO_THROW(sparse_decode(a, nullptr, DecodeImpl::kCpuFast));
  // The workspace size of a split plan checks it as well.
  DecodePlan split = plan_decode(3, 1, 16, 128, 0, 1, kPortablePlan);
  split.num_splits = 2;
  split.keys_per_split = 64;
  split.unsplit_b = 3;
  EXPECT_THROW(sparse_decode_workspace_bytes(split), Error);
  split.unsplit_b = 1;
  EXPECT_GT(sparse_decode_workspace_bytes(split), 0u);
  // Fields no plan has are refused by the workspace size too (before: a garbage size).
  split.h_q = -4;
  EXPECT_NE(latentkv::testing::error_of([&] { sparse_decode_workspace_bytes(split); }).find("h_q=-4"), std::string::npos);
}

TEST(DecodePlan, EditedSplitSizesThatWrapAreRefused) {
  // 5 splits of 2^62 candidates: 5 * 2^62 wraps to 2^62 (>= 128) and 4 * 2^62 to 0 (< 128), so
  // unguarded products passed, and split 4's first candidate wrapped to 0 (every candidate attended
  // a second time on the GPU). The coverage test must see the true products.
  DecodeWorkload w = plan_test_workload(2);
  SparseDecodeArgs a = w.args();
  DecodePlan p = plan_decode(2, 1, 16, 128, 0, 1, kPortablePlan);
  p.num_splits = 5;
  p.keys_per_split = int64_t{1} << 62;
  a.plan = &p;
  const std::string e = latentkv::testing::error_of([&] { sparse_decode(a, nullptr, DecodeImpl::kCpuFast); });
  EXPECT_NE(e.find("do not cover topk + extra_topk = 128 exactly once"), std::string::npos) << e;
  // A split count out of range is refused before any product is formed (INT64_MIN - 1 was UB).
  for (const int64_t bad : {INT64_MIN, int64_t{0}, int64_t{65536}}) {
    p.num_splits = bad;
    EXPECT_NE(latentkv::testing::error_of([&] { sparse_decode(a, nullptr, DecodeImpl::kCpuFast); })
                  .find("num_splits must be in [1, 65535], got " + std::to_string(bad)),
              std::string::npos) << bad;
  }
  p.num_splits = 2;
  for (const int64_t bad : {INT64_MIN, int64_t{0}}) {
    p.keys_per_split = bad;
    EXPECT_NE(latentkv::testing::error_of([&] { sparse_decode(a, nullptr, DecodeImpl::kCpuFast); })
                  .find("keys_per_split must be >= 1, got " + std::to_string(bad)),
              std::string::npos) << bad;
  }
  p.keys_per_split = int64_t{1} << 62;
  // One split of any size >= 128 covers them.
  p.num_splits = 1;
  EXPECT_NO_THROW(sparse_decode(a, nullptr, DecodeImpl::kCpuFast));
}

// Each limit of the planner and of the plan checks, on both sides of it.
TEST(DecodePlan, LimitsOnBothSides) {
  // The planner: topk >= 1, extra_topk >= 0, b * s_q up to 2^31 - 1.
  for (const auto& [topk, extra] : {std::pair<int64_t, int64_t>{0, 0}, {128, -1}})
    EXPECT_NE(latentkv::testing::error_of([&] { plan_decode(1, 1, 16, topk, extra, 132, kPortablePlan); })
                  .find("plan_decode: bad shape"),
              std::string::npos) << topk << " " << extra;
  EXPECT_NO_THROW(plan_decode(INT32_MAX, 1, 16, 128, 0, 132, kPortablePlan));
  // The workspace of 65535 splits is sized; 65536 splits are no plan's.
  DecodePlan many = plan_decode(1, 1, 1, 128, 0, 132, kPortablePlan);
  many.num_splits = 65535;
  many.keys_per_split = 64;
  many.unsplit_b = 0;
  EXPECT_GT(sparse_decode_workspace_bytes(many), 0u);
  many.num_splits = 65536;
  EXPECT_THROW(sparse_decode_workspace_bytes(many), Error);
  // sparse_decode's plan check: a last split with no candidate is not an exact cover; a plan made
  // for an extra cache the call does not have is another call's.
  DecodeWorkload w = plan_test_workload(2);
  SparseDecodeArgs a = w.args();
  DecodePlan p = plan_decode(2, 1, 16, 128, 0, 1, kPortablePlan);
  p.num_splits = 3;
  p.keys_per_split = 64;
  a.plan = &p;
  EXPECT_NE(latentkv::testing::error_of([&] { sparse_decode(a, nullptr, DecodeImpl::kCpuFast); })
                .find("do not cover topk + extra_topk = 128 exactly once"),
            std::string::npos);
  p.num_splits = 2;
  EXPECT_NO_THROW(sparse_decode(a, nullptr, DecodeImpl::kCpuFast));
  p.extra_topk = 64;
  EXPECT_NE(latentkv::testing::error_of([&] { sparse_decode(a, nullptr, DecodeImpl::kCpuFast); })
                .find("the plan was made for b=2 s_q=1 h_q=16 topk=128 extra_topk=64"),
            std::string::npos);
  // 65536 splits of one candidate each cover 65536 candidates exactly, but are one split too many.
  DecodeWorkloadOptions o;
  o.b = 1;
  o.h_q = 1;
  o.topk = 65536;
  o.all_invalid = true;
  DecodeWorkload big = latentkv::testing::make_decode_workload(o);
  SparseDecodeArgs ab = big.args();
  DecodePlan one = plan_decode(1, 1, 1, 65536, 0, 1, kPortablePlan);
  one.num_splits = 65536;
  one.keys_per_split = 1;
  one.unsplit_b = 0;
  ab.plan = &one;
  EXPECT_NE(latentkv::testing::error_of([&] { sparse_decode(ab, nullptr, DecodeImpl::kCpuFast); })
                .find("num_splits must be in [1, 65535], got 65536"),
            std::string::npos);
  one.num_splits = 32768;
  one.keys_per_split = 2;
  EXPECT_NO_THROW(sparse_decode(ab, nullptr, DecodeImpl::kCpuFast));
}

TEST(DecodePlan, ShapesBeyondTheLaunchLimitsAreRefused) {
  // Huge but positive arguments overflowed the planner's products (b * s_q, h_q + 63, topk + extra).
  const struct {
    int64_t b, s_q, h_q, topk, extra;
  } bad[] = {{int64_t{1} << 40, int64_t{1} << 40, 16, 128, 0}, {1, 1, INT64_MAX, 128, 0},
             {1, 1, 16, INT64_MAX, 1}, {1, 1, 16, int64_t{1} << 62, 0}, {INT64_MAX, 1, 16, 128, 0}};
  for (const auto& c : bad)
    EXPECT_NE(latentkv::testing::error_of([&] { plan_decode(c.b, c.s_q, c.h_q, c.topk, c.extra, 132, kPortablePlan); })
                  .find("plan_decode: b * s_q must be < 2^31"),
              std::string::npos)
        << c.b << " " << c.s_q << " " << c.h_q << " " << c.topk << " " << c.extra;
  EXPECT_NO_THROW(plan_decode(int64_t{1} << 20, 2, 4194240, int64_t{1} << 30, (int64_t{1} << 30) - 1, 132, kPortablePlan));
}

// The Hopper kernel's two-instruction NaN check (decode/sm90/nan_bits.h) against a byte-by-byte one:
// every byte value at every position of every word among neighbours of every value class, and random
// words with several NaN bytes.
TEST(Sm90NanBits, FlagsExactlyTheWordsWithANanByte) {
  using latentkv::decode::sm90::nan_bits_words;
  auto has_nan = [](uint32_t w) {
    for (int k = 0; k < 4; ++k)
      if (((w >> (8 * k)) & 0x7fu) == 0x7fu) return true;
    return false;
  };
  auto flagged = [&](uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
    return (nan_bits_words(w0, w1, w2, w3) & 0x80808080u) != 0;
  };
  const uint32_t fills[] = {0x00u, 0x7eu, 0x7fu, 0x80u, 0xfeu, 0xffu, 0x01u, 0x3cu};
  int64_t checked = 0;
  for (uint32_t fill : fills)
    for (int pos = 0; pos < 4; ++pos)
      for (uint32_t v = 0; v < 256; ++v) {
        uint32_t w = fill * 0x01010101u;
        w = (w & ~(0xffu << (8 * pos))) | (v << (8 * pos));
        for (int slot = 0; slot < 4; ++slot) {
          uint32_t ws[4] = {0x3c3c3c3cu, 0x3c3c3c3cu, 0x3c3c3c3cu, 0x3c3c3c3cu};
          ws[slot] = w;
          ASSERT_EQ(flagged(ws[0], ws[1], ws[2], ws[3]), has_nan(w)) << std::hex << "word " << w << " slot " << slot;
          ++checked;
        }
      }
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 200000; ++i) {
    uint32_t ws[4];
    for (uint32_t& w : ws) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      w = static_cast<uint32_t>(x >> 11);
    }
    const bool want = has_nan(ws[0]) || has_nan(ws[1]) || has_nan(ws[2]) || has_nan(ws[3]);
    ASSERT_EQ(flagged(ws[0], ws[1], ws[2], ws[3]), want) << std::hex << ws[0] << " " << ws[1] << " " << ws[2] << " " << ws[3];
    ++checked;
  }
  EXPECT_GT(checked, 200000);
}

