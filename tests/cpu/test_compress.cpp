// compress_kv on the CPU: the fast path and the oracle against the float64 oracle's judgement
// (compress/check.h), the two modes, every stress shape of the issue, every error path, determinism.
#include <gtest/gtest.h>
#include <omp.h>

#include <climits>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "compress/check.h"
#include "compress/cpu/compress_cpu.h"
#include "compress/params.h"
#include "compress/plan.h"
#include "latentkv/compress.h"
#include "latentkv/error.h"
#include "testing/compress_workload.h"
#include "test_util.h"

using namespace latentkv;
using latentkv::testing::CompressWorkload;
using latentkv::testing::make_workload;
using latentkv::testing::WorkloadOptions;

namespace {

// Marks every byte that a record of an output with a valid slot occupies.
std::vector<bool> record_mask(CompressWorkload& w) {
  std::vector<bool> m(w.kv.size(), false);
  const compress::Params p = w.params();
  for (int64_t i = 0; i < w.num_outputs; ++i) {
    const int64_t slot = w.slot_mapping[w.boundary[i]];
    if (slot < 0) continue;
    for (int k = 0; k < compress::kDataBytes; ++k) m[compress::data_offset(p, slot) + k] = true;
    for (int k = 0; k < compress::kScaleBytes; ++k) m[compress::scale_offset(p, slot) + k] = true;
  }
  return m;
}

// Runs impl on w in place and judges the records; checks that no other byte changed.
compress::CheckReport run_and_check(CompressWorkload& w, CompressImpl impl) {
  const std::vector<uint8_t> before = w.kv;
  compress_kv(w.args(), nullptr, impl);
  const std::vector<bool> mask = record_mask(w);
  for (size_t k = 0; k < w.kv.size(); ++k)
    if (!mask[k]) {
      EXPECT_EQ(w.kv[k], before[k]) << "byte " << k << " outside every record changed";
      if (w.kv[k] != before[k]) break;
    }
  const compress::CheckReport rep = compress::check_records(w.params(), w.kv.data());
  EXPECT_TRUE(rep.ok()) << rep.first_failure << " (" << rep.failures << " wrong bytes)";
  // SPEC.md: accepted payload/scale ambiguities must be tiny, about 1e-5 of the bytes or less.
  EXPECT_LE(rep.ambiguous_accepted, std::max<int64_t>(3, rep.bytes / 50000))
      << rep.ambiguous_accepted << " ambiguities in " << rep.bytes << " bytes";
  return rep;
}

}  // namespace

TEST(CompressPlan, FillsTheGpuAndCoversTheWindow) {
  for (int64_t outputs : {1, 16, 64, 256, 1024, 100000})
    for (int64_t C : {1, 4, 7, 128, 256, 512, 1000, 4096}) {
      for (int64_t max_slices : {1, 2, 4, 8}) {
        const compress::SplitPlan p = compress::plan_splits(outputs, C, 528, max_slices);
        EXPECT_GE(p.num_splits * p.rows_per_split, C);
        EXPECT_LT((p.num_splits - 1) * p.rows_per_split, C) << "an empty split";
        EXPECT_LE(p.rows_per_split, compress::kMaxRowsPerSplit);
        EXPECT_GE(p.num_splits, 1);
        EXPECT_GE(p.dim_slices, 1);
        EXPECT_LE(p.dim_slices, max_slices);
        EXPECT_EQ(p.dim_slices & (p.dim_slices - 1), 0) << "slices must be a power of two";
      }
    }
  // 16 outputs of C = 512 (the 8192-token contest case) must spread over many CTAs, and with
  // slicing allowed the final merge reads at most one round of 4 splits.
  for (int64_t max_slices : {1, 8})
    EXPECT_GE(compress::plan_splits(16, 512, 528, max_slices).ctas_per_output() * 16, 256);
  EXPECT_LE(compress::plan_splits(16, 512, 528).num_splits, compress::kMergeSplitsPerRound);
  EXPECT_EQ(compress::plan_splits(16, 512, 528, 1).dim_slices, 1);
  // Enough outputs to fill the GPU: no splits (no merge traffic).
  EXPECT_EQ(compress::plan_splits(100000, 128, 528).num_splits, 1);
  EXPECT_EQ(compress::plan_splits(1024, 128, 528).num_splits, 1);
  // A wave's worth of CTAs: 256 outputs of C = 512 in 2 splits fill 528 slots once.
  EXPECT_EQ(compress::plan_splits(256, 512, 528).num_splits, 2);
  // ~2 CTAs per SM already saturate HBM (bench/NOTES.md v35): the contest's 8192-token cases run
  // 256 CTAs, and 256 outputs of C = 128 or 256 need no split at all.
  for (int64_t C : {128, 256, 512})
    EXPECT_EQ(compress::plan_splits(8192 / C, C, 528).ctas_per_output() * (8192 / C), 256) << C;
  EXPECT_EQ(compress::plan_splits(256, 128, 528).ctas_per_output(), 1);
  EXPECT_EQ(compress::plan_splits(256, 256, 528).ctas_per_output(), 1);
  // With slices finishing in clusters (no merge) the unsplit sliced plans win where a window fits
  // one split in few slices: 8192 tokens of C = 128 as 1 x 4 and 32768 of C = 256 as 1 x 2 (256
  // CTAs); 8192 of C = 256 keeps 4 x 2 (1 x 8's exchange and 4-level tree measured slower), and
  // C = 512 (over kMaxRowsPerSplit rows) keeps its splits.
  const struct { int64_t outputs, C, splits, slices; } clustered[] = {
      {64, 128, 1, 4}, {32, 256, 4, 2}, {16, 512, 4, 4}, {128, 256, 1, 2}, {256, 128, 1, 1}, {64, 512, 4, 1}};
  for (const auto& c : clustered) {
    const compress::SplitPlan p = compress::plan_splits(c.outputs, c.C, 528, compress::kMaxDimSlices, true);
    EXPECT_EQ(p.num_splits, c.splits) << c.outputs << " outputs of C " << c.C;
    EXPECT_EQ(p.dim_slices, c.slices) << c.outputs << " outputs of C " << c.C;
  }
}

TEST(CompressCpu, ContestShapesInt8AndFp8) {
  for (CacheFormat f : {CacheFormat::v4_int8, CacheFormat::v4_fp8})
    for (int64_t C : {128, 256, 512}) {
      WorkloadOptions o;
      o.num_reqs = 2;
      o.tokens_per_req = 2048;
      o.compress_ratio = C;
      o.format = f;
      o.seed = 11 + C;
      CompressWorkload fast = make_workload(o);
      const auto rep = run_and_check(fast, CompressImpl::kCpuFast);
      EXPECT_EQ(rep.records, 2 * 2048 / C);
      CompressWorkload oracle = make_workload(o);
      const auto rep2 = run_and_check(oracle, CompressImpl::kCpuOracle);
      EXPECT_EQ(rep2.differing_bytes, 0) << "the oracle disagrees with its own judgement";
    }
}

TEST(CompressCpu, FunctionalModeZeroesEverythingElse) {
  WorkloadOptions o;
  o.num_reqs = 2;
  o.tokens_per_req = 640;
  o.random_slots = true;
  o.random_initial_cache = true;
  o.page_pad_bytes = 48;
  CompressWorkload w = make_workload(o);
  compress_kv(w.args(CompressMode::kFunctional), nullptr, CompressImpl::kCpuFast);
  const std::vector<bool> mask = record_mask(w);
  int64_t nonzero_outside = 0;
  for (int64_t page = 0; page < w.num_pages; ++page)
    for (int64_t k = 0; k < w.page_stride; ++k)
      if (!mask[page * w.page_stride + k] && w.kv[page * w.page_stride + k] != 0) ++nonzero_outside;
  EXPECT_EQ(nonzero_outside, 0);
  EXPECT_TRUE(compress::check_records(w.params(), w.kv.data()).ok());
}

TEST(CompressCpu, InPlaceRewritesEveryByteOfItsRecords) {
  // Poison the cache with two different patterns: the records must come out identical.
  WorkloadOptions o;
  o.num_reqs = 3;
  o.tokens_per_req = 512;
  o.compress_ratio = 64;
  CompressWorkload a = make_workload(o), b = make_workload(o);
  std::memset(a.kv.data(), 0xab, a.kv.size());
  std::memset(b.kv.data(), 0x00, b.kv.size());
  compress_kv(a.args(), nullptr, CompressImpl::kCpuFast);
  compress_kv(b.args(), nullptr, CompressImpl::kCpuFast);
  const std::vector<bool> mask = record_mask(a);
  for (size_t k = 0; k < a.kv.size(); ++k)
    if (mask[k]) {
      ASSERT_EQ(a.kv[k], b.kv[k]) << "record byte " << k << " was not written";
    }
}

struct StressCase {
  int64_t block_size, C, P, tokens;
  bool shuffle, repeat, random_slots;
  float scale;
};

TEST(CompressCpu, StressGrid) {
  const StressCase cases[] = {
      {1, 128, 64, 512, true, false, false, 1.0f},   {4, 4, 2, 64, false, false, true, 1.0f},
      {8, 128, 64, 1000, true, true, true, 1.0f},   {16, 256, 256, 700, true, false, true, 1.0f},
      {64, 512, 64, 1100, false, true, false, 1.0f}, {8, 1, 2, 40, true, false, true, 1.0f},
      {8, 1000, 64, 2100, true, false, true, 1.0f},  {8, 128, 64, 512, true, false, true, 1e-3f},
      {8, 128, 64, 512, true, false, true, 1e3f},    {3, 37, 53, 300, true, true, true, 1.0f},
  };
  for (const StressCase& c : cases)
    for (CacheFormat f : {CacheFormat::v4_int8, CacheFormat::v4_fp8}) {
      WorkloadOptions o;
      o.num_reqs = 2;
      o.tokens_per_req = c.tokens;
      o.compress_ratio = c.C;
      o.block_size = c.block_size;
      o.page_size = c.P;
      o.shuffle_blocks = c.shuffle;
      o.repeat_blocks = c.repeat;
      o.random_slots = c.random_slots;
      o.random_initial_cache = true;
      o.state_scale = c.scale;
      o.format = f;
      o.page_pad_bytes = c.P == 53 ? 8 : 0;
      CompressWorkload w = make_workload(o);
      SCOPED_TRACE("bs=" + std::to_string(c.block_size) + " C=" + std::to_string(c.C) +
                   " P=" + std::to_string(c.P) + " scale=" + std::to_string(c.scale));
      run_and_check(w, CompressImpl::kCpuFast);
    }
}

TEST(CompressCpu, BitwiseDeterministic) {
  // Reruns, and other thread counts (which change how outputs and dim ranges meet threads), give the
  // same bytes: both formats, windows shorter than a chunk and longer than the 8-row chunking, random
  // slots over a random initial cache.
  struct Shape {
    int64_t C, tokens;
  };
  const int threads = omp_get_max_threads();
  for (const Shape sh : {Shape{128, 1024}, Shape{4, 64}, Shape{1000, 2100}})
    for (CacheFormat f : {CacheFormat::v4_int8, CacheFormat::v4_fp8}) {
      WorkloadOptions o;
      o.num_reqs = 4;
      o.tokens_per_req = sh.tokens;
      o.compress_ratio = sh.C;
      o.shuffle_blocks = true;
      o.random_slots = true;
      o.random_initial_cache = true;
      o.format = f;
      SCOPED_TRACE("C=" + std::to_string(sh.C) + " " + format_info(f).name);
      CompressWorkload a = make_workload(o);
      compress_kv(a.args(), nullptr, CompressImpl::kCpuFast);
      for (int run = 0; run < 2; ++run) {
        CompressWorkload b = make_workload(o);
        compress_kv(b.args(), nullptr, CompressImpl::kCpuFast);
        ASSERT_EQ(a.kv, b.kv) << "run " << run;
      }
      for (int t : {1, 3}) {
        CompressWorkload b = make_workload(o);
        omp_set_num_threads(t);
        compress_kv(b.args(), nullptr, CompressImpl::kCpuFast);
        omp_set_num_threads(threads);
        ASSERT_EQ(a.kv, b.kv) << t << " threads";
      }
    }
}

// The CPU fast path's pooling builds (compress/cpu/pool.h) compute each dim in its own lane with the
// same operations in the same order: every cut of the dims into tasks must give the same bytes, the
// two FMA builds (AVX2, AVX-512) must agree to the bit, and every build must pass the judge. Shapes
// cover full 8-row chunks, a short last chunk, windows shorter than a chunk, and skipped outputs.
TEST(CompressCpu, EveryInstructionSetAndDimSplitGivesTheSameBytes) {
  struct Shape {
    int64_t C, block_size, tokens;
  };
  const Shape shapes[] = {{128, 8, 1024}, {37, 3, 300}, {4, 4, 64}, {1, 8, 40}, {1000, 8, 2100}};
  std::string isas_run;
  int64_t sse_differs = 0, bytes = 0;
  for (const Shape& sh : shapes) {
    WorkloadOptions o;
    o.num_reqs = 2;
    o.tokens_per_req = sh.tokens;
    o.compress_ratio = sh.C;
    o.block_size = sh.block_size;
    o.shuffle_blocks = true;
    o.random_slots = true;
    o.random_initial_cache = true;
    SCOPED_TRACE("C=" + std::to_string(sh.C) + " block_size=" + std::to_string(sh.block_size));
    std::vector<uint8_t> fma_bytes, sse_bytes;
    for (compress::CpuIsa isa :
         {compress::CpuIsa::kSse4, compress::CpuIsa::kAvx2, compress::CpuIsa::kAvx512}) {
      if (!compress::cpu_supports(isa)) continue;
      if (&sh == &shapes[0]) isas_run += std::string(" ") + compress::cpu_isa_name(isa);
      std::vector<uint8_t> first;
      for (int splits : {1, 2, 8, 32}) {
        CompressWorkload w = make_workload(o);
        compress::compress_cpu_fast(w.params(), {.isa = isa, .dim_splits = splits});
        if (first.empty()) {
          first = w.kv;
          const compress::CheckReport rep = compress::check_records(w.params(), w.kv.data());
          EXPECT_TRUE(rep.ok()) << compress::cpu_isa_name(isa) << ": " << rep.first_failure;
        }
        ASSERT_EQ(w.kv, first) << compress::cpu_isa_name(isa) << ", " << splits << " dim splits";
      }
      if (isa == compress::CpuIsa::kSse4) {
        sse_bytes = first;
      } else if (fma_bytes.empty()) {
        fma_bytes = first;
      } else {
        ASSERT_EQ(first, fma_bytes) << "the AVX2 and AVX-512 builds disagree";
      }
    }
    if (!fma_bytes.empty()) {
      for (size_t k = 0; k < sse_bytes.size(); ++k) sse_differs += sse_bytes[k] != fma_bytes[k];
      bytes += static_cast<int64_t>(sse_bytes.size());
    }
  }
  std::printf("[info] pooling builds run on this CPU:%s; SSE4 vs FMA builds: %lld of %lld cache "
              "bytes differ\n",
              isas_run.c_str(), static_cast<long long>(sse_differs), static_cast<long long>(bytes));
}

TEST(CompressCpu, DimSplitsGiveEveryThreadWork) {
  // 2 threads: 1 output in 2 ranges, 3 in 2 (6 tasks, 3 rounds), an even count whole; a large odd
  // count stays whole (its imbalance is less than a cut costs).
  EXPECT_EQ(compress::cpu_dim_splits(1, 2), 2);
  EXPECT_EQ(compress::cpu_dim_splits(2, 2), 1);
  EXPECT_EQ(compress::cpu_dim_splits(3, 2), 2);
  EXPECT_EQ(compress::cpu_dim_splits(5, 2), 2);
  EXPECT_EQ(compress::cpu_dim_splits(16, 2), 1);
  EXPECT_EQ(compress::cpu_dim_splits(17, 2), 1);
  EXPECT_EQ(compress::cpu_dim_splits(1, 1), 1);  // one thread never cuts
  EXPECT_EQ(compress::cpu_dim_splits(0, 2), 1);
  EXPECT_EQ(compress::cpu_dim_splits(10, 64), 4);
  EXPECT_EQ(compress::cpu_dim_splits(1, 128), 8);  // at most 8 ranges of 64 dims
  for (int64_t outputs : {1, 3, 7, 100})
    for (int threads : {1, 2, 3, 16}) {
      const int s = compress::cpu_dim_splits(outputs, threads);
      EXPECT_EQ(compress::kDim % (s * compress::kPoolDimAlign), 0);
    }
  // An unsupported cut is an error, not a silent partial write.
  WorkloadOptions o;
  CompressWorkload w = make_workload(o);
  const std::string msg = latentkv::testing::error_of(
      [&] { compress::compress_cpu_fast(w.params(), {.isa = std::nullopt, .dim_splits = 3}); });
  EXPECT_NE(msg.find("dim_splits 3"), std::string::npos) << msg;
}

TEST(CompressCpu, ErrorsNameTheValueAndWriteNothing) {
  WorkloadOptions o;
  o.num_reqs = 2;
  o.tokens_per_req = 512;
  o.random_initial_cache = true;
  struct Bad {
    std::string expect;
    std::function<void(CompressWorkload&, CompressArgs&)> spoil;
  };
  const int64_t num_slots = make_workload(o).num_pages * 64, num_tokens = o.num_reqs * o.tokens_per_req;
  const Bad bads[] = {
      {"boundary_token_indices[1] = 5000", [](auto& w, auto&) { w.boundary[1] = 5000; }},
      {"slot 100000", [](auto& w, auto&) { w.slot_mapping[w.boundary[2]] = 100000; }},
      {"request 7", [](auto& w, auto&) { w.token_to_req[w.boundary[0]] = 7; }},
      {"position 126 with compress_ratio 128 has a window starting before position 0", [](auto& w, auto&) { w.positions[w.boundary[0]] = 126; }},
      {"position -9223372036854775807 with compress_ratio 128",  // no overflow past the check
       [](auto& w, auto&...) { w.positions[w.boundary[1]] = INT64_MIN + 1; }},
      {"logical block 64", [](auto& w, auto&) { w.positions[w.boundary[3]] = 512; }},
      {"to block 999", [](auto& w, auto&) { w.block_table[3] = 999; }},
      {"to block -4", [](auto& w, auto&) { w.block_table[5] = -4; }},
      {"slot 1 is written by outputs 1 and 2",
       [](auto& w, auto&) { w.slot_mapping[w.boundary[2]] = 1; }},
      {"RoPE row 512", [](auto& w, auto& a) {
         w.positions[w.boundary[3]] = 600;
         w.block_table.resize(w.block_table.size() * 2, 0);
         a.block_table = TensorView(w.block_table.data(), DType::i32, {2, 128});
       }},
      {"compress_ratio must be >= 1, got 0", [](auto&, auto& a) { a.compress_ratio = 0; }},
      {"block_size 4 differs", [](auto&, auto& a) { a.block_size = 4; }},
      {"expected rms_norm_weight of shape [512] bf16, got [512] f32",
       [](auto&, auto& a) { a.rms_norm_weight.dtype = DType::f32; }},
      {"expected state_cache of shape [num_blocks, block_size, 1024] f32",
       [](auto&, auto& a) { a.state_cache.shape[2] = 512; }},
      {"v4_int8 or v4_fp8", [](auto&, auto& a) { a.format = CacheFormat::v32_fp8; }},
      {"block_size must be >= 1, got 0", [](auto&, auto& a) { a.block_size = 0; }},
      {"rms_norm_eps must be >= 0, got -1", [](auto&, auto& a) { a.rms_norm_eps = -1.0f; }},
      {"boundary_token_indices[1] = -1 is outside [0, num_tokens = " + std::to_string(num_tokens) + ")",
       [](auto& w, auto&) { w.boundary[1] = -1; }},
      {"token_to_req gives request -1", [](auto& w, auto&) { w.token_to_req[w.boundary[2]] = -1; }},
      // One past the last slot (the cache holds num_pages * 64 of them).
      {"gives slot " + std::to_string(num_slots) + ", outside the cache's " + std::to_string(num_slots) + " slots",
       [](auto& w, auto&) { w.slot_mapping[w.boundary[3]] = w.num_pages * 64; }},
      {"kv_cache is on cuda:0, expected cpu", [](auto&, auto& a) { a.kv_cache.device = Device::cuda(0); }},
  };
  // Every rejection in both modes: functional mode zeroes the cache, so its checks must all come
  // before that as well.
  for (CompressMode mode : {CompressMode::kInPlace, CompressMode::kFunctional})
    for (const Bad& bad : bads) {
      CompressWorkload w = make_workload(o);
      CompressArgs a = w.args(mode);
      bad.spoil(w, a);
      const std::vector<uint8_t> before = w.kv;
      const std::string msg = latentkv::testing::error_of([&] { compress_kv(a, nullptr, CompressImpl::kCpuFast); });
      EXPECT_NE(msg.find(bad.expect), std::string::npos) << "got: " << msg;
      EXPECT_EQ(w.kv, before) << "cache changed after rejecting: " << bad.expect
                              << (mode == CompressMode::kFunctional ? " (functional)" : " (in place)");
    }
}

// The 1-D index inputs must be contiguous; a strided view (here over a buffer twice as long, so
// that the view itself is valid memory) is named with its stride and nothing is written.
TEST(CompressCpu, StridedIndexInputsAreRefused) {
  WorkloadOptions o;
  o.num_reqs = 2;
  o.tokens_per_req = 512;
  o.random_initial_cache = true;
  for (const char* name : {"token_to_req", "positions", "boundary_token_indices", "kv_slot_mapping"}) {
    CompressWorkload w = make_workload(o);
    CompressArgs a = w.args();
    TensorView* t = std::string(name) == "token_to_req"             ? &a.token_to_req
                    : std::string(name) == "positions"              ? &a.positions
                    : std::string(name) == "boundary_token_indices" ? &a.boundary_token_indices
                                                                     : &a.kv_slot_mapping;
    const size_t elem = dtype_size(t->dtype);
    std::vector<uint8_t> wide(static_cast<size_t>(2 * t->size(0)) * elem, 0);
    for (int64_t k = 0; k < t->size(0); ++k)
      std::memcpy(wide.data() + 2 * k * elem, static_cast<const uint8_t*>(t->data) + k * elem, elem);
    *t = TensorView(wide.data(), t->dtype, {t->size(0)}, {2});
    const std::vector<uint8_t> before = w.kv;
    const std::string msg = latentkv::testing::error_of([&] { compress_kv(a, nullptr, CompressImpl::kCpuFast); });
    EXPECT_NE(msg.find(std::string(name) + " must be contiguous, got stride 2"), std::string::npos)
        << "got: " << msg;
    EXPECT_EQ(w.kv, before) << name;
  }
}

// The dense inputs must be contiguous in their last dimension (rms_norm_weight, 1-D, in its only
// one): the same values under every stride doubled are named with the stride and nothing is
// written, in either mode.
TEST(CompressCpu, StridedDenseInputsAreRefused) {
  WorkloadOptions o;
  o.num_reqs = 2;
  o.tokens_per_req = 512;
  o.random_initial_cache = true;
  struct Input {
    TensorView CompressArgs::*member;
    const char* expect;
  };
  const Input inputs[] = {
      {&CompressArgs::state_cache, "state_cache must be contiguous in its last dimension, got stride 2"},
      {&CompressArgs::block_table, "block_table must be contiguous in its last dimension, got stride 2"},
      {&CompressArgs::cos_sin_cache, "cos_sin_cache must be contiguous in its last dimension, got stride 2"},
      {&CompressArgs::rms_norm_weight, "rms_norm_weight must be contiguous, got stride 2"},
  };
  for (CompressMode mode : {CompressMode::kInPlace, CompressMode::kFunctional})
    for (const Input& in : inputs) {
      CompressWorkload w = make_workload(o);
      CompressArgs a = w.args(mode);
      TensorView& t = a.*in.member;
      ASSERT_TRUE(t.is_contiguous()) << in.expect;
      std::vector<uint8_t> wide;
      t = latentkv::testing::doubled_strides(t, wide);
      const std::vector<uint8_t> before = w.kv;
      const std::string msg =
          latentkv::testing::error_of([&] { compress_kv(a, nullptr, CompressImpl::kCpuFast); });
      EXPECT_NE(msg.find(in.expect), std::string::npos) << "got: " << msg;
      EXPECT_EQ(w.kv, before) << in.expect << (mode == CompressMode::kFunctional ? " (functional)" : " (in place)");
    }
}

TEST(CompressCpu, NegativeSlotsAreSkipped) {
  WorkloadOptions o;
  o.num_reqs = 1;
  o.tokens_per_req = 512;
  o.random_initial_cache = true;
  CompressWorkload w = make_workload(o);
  for (int64_t i = 0; i < w.num_outputs; ++i) w.slot_mapping[w.boundary[i]] = -1;
  // A skipped output is not read either: its indices may be garbage.
  w.token_to_req[w.boundary[0]] = 99;
  const std::vector<uint8_t> before = w.kv;
  compress_kv(w.args(), nullptr, CompressImpl::kCpuFast);
  EXPECT_EQ(w.kv, before);
}

TEST(CompressCpu, CheckerRejectsWrongBytes) {
  // The judge must be able to fail: one wrong payload, scale, RoPE or pad byte each is caught.
  WorkloadOptions o;
  o.num_reqs = 1;
  o.tokens_per_req = 256;
  CompressWorkload w = make_workload(o);
  compress_kv(w.args(), nullptr, CompressImpl::kCpuFast);
  const compress::Params p = w.params();
  ASSERT_TRUE(compress::check_records(p, w.kv.data()).ok());
  const int64_t data = compress::data_offset(p, 1), scales = compress::scale_offset(p, 1);
  for (int64_t at : {data + 5, data + 447, data + 448 + 1, data + 575, scales + 3, scales + 7}) {
    std::vector<uint8_t> bad = w.kv;
    bad[at] = static_cast<uint8_t>(bad[at] + 2);
    EXPECT_FALSE(compress::check_records(p, bad.data()).ok()) << "byte " << at - data;
  }
  // And one step off, record-wide (a single such byte may be one the judge accepts as ambiguous):
  // every payload code + 1, every RoPE value 2 bf16 ulps up (its low byte + 2), every scale
  // exponent - 1, in both formats.
  for (CacheFormat f : {CacheFormat::v4_int8, CacheFormat::v4_fp8}) {
    o.format = f;
    CompressWorkload v = make_workload(o);
    compress_kv(v.args(), nullptr, CompressImpl::kCpuFast);
    const compress::Params q = v.params();
    ASSERT_TRUE(compress::check_records(q, v.kv.data()).ok()) << format_info(f).name;
    const int64_t d = compress::data_offset(q, 1), sc = compress::scale_offset(q, 1);
    std::vector<uint8_t> payload = v.kv, rope = v.kv, scale = v.kv;
    for (int64_t k = 0; k < 448; ++k) payload[d + k] = static_cast<uint8_t>(payload[d + k] + 1);
    for (int64_t j = 0; j < 64; ++j) rope[d + 448 + 2 * j] = static_cast<uint8_t>(rope[d + 448 + 2 * j] + 2);
    for (int64_t g = 0; g < 7; ++g) scale[sc + g] = static_cast<uint8_t>(scale[sc + g] - 1);
    EXPECT_FALSE(compress::check_records(q, payload.data()).ok()) << format_info(f).name << " payload + 1";
    EXPECT_FALSE(compress::check_records(q, rope.data()).ok()) << format_info(f).name << " RoPE + 2 ulps";
    EXPECT_FALSE(compress::check_records(q, scale.data()).ok()) << format_info(f).name << " scales - 1";
  }
}
