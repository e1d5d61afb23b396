// sparse_prefill and dense_decode on the GPU against the float64 CPU oracle: shape grids with odd
// sizes (h_q 1, 3, 63, 126; topk 1, 100; page sizes 1, 53, 64; s_q up to 70000 for prefill), both
// head widths, causal and not, bf16 / f16 / v32_fp8 caches, zero lengths, all-invalid and
// adversarial indices, garbage block-table entries, NaN in unread rows, splits, bitwise
// determinism, and kv rows and pages past 4 GiB. Runs only where a CUDA device exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/switches.h"
#include "decode/compact/config.h"
#include "decode/cuda/launch.h"
#include "decode/sm90/launch.h"
#include "dense/cuda/launch.h"
#include "latentkv/decode.h"
#include "latentkv/dense.h"
#include "latentkv/error.h"
#include "latentkv/numerics.h"
#include "latentkv/prefill.h"
#include "testing/attention_workload.h"
#include "test_util.h"

using namespace latentkv;
using latentkv::testing::AttentionDiff;
using latentkv::testing::DenseWorkload;
using latentkv::testing::DenseWorkloadOptions;
using latentkv::testing::DeviceArena;
using latentkv::testing::DeviceBuffer;
using latentkv::testing::far_rows;
using latentkv::testing::kFarOffsetBytes;
using latentkv::testing::place_far;
using latentkv::testing::PrefillWorkload;
using latentkv::testing::PrefillWorkloadOptions;

namespace {

#define REQUIRE_GPU() \
  if (!latentkv::testing::has_cuda_device()) GTEST_SKIP() << "no CUDA device"

using latentkv::decode::cuda::KernelChoice;

// The kernels this device runs: the portable one always, the Hopper one on compute capability 9.0
// (bf16 only: f16 cases run the portable kernel under either choice).
// The compact kernel runs everywhere; the portable one where its layout fits.
std::vector<KernelChoice> kernels() {
  std::vector<KernelChoice> k;
  if (latentkv::testing::portable_kernel_fits()) k.push_back(KernelChoice::kPortable);
  k.push_back(KernelChoice::kCompact);
  if (latentkv::decode::sm90::usable(0)) k.push_back(KernelChoice::kSm90);
  return latentkv::testing::only_listed_kernels(k);
}
std::string g_kernel = "auto";  // printed with every case

// Forces one kernel for its lifetime.
struct UseKernel {
  explicit UseKernel(KernelChoice k) {
    latentkv::decode::cuda::set_kernel_choice(k);
    g_kernel = k == KernelChoice::kSm90 ? "sm90" : k == KernelChoice::kCompact ? "compact" : "portable";
  }
  ~UseKernel() {
    latentkv::decode::cuda::set_kernel_choice(KernelChoice::kAuto);
    g_kernel = "auto";
  }
};

template <typename T>
std::vector<T> or_one(const std::vector<T>& v) {
  return v.empty() ? std::vector<T>(1) : v;
}

void to_device(TensorView& t, void* p) {
  if (t.data) {
    t.data = p;
    t.device = Device::cuda(0);
  }
}

struct PrefillResult {
  std::vector<uint16_t> out;
  std::vector<float> max_logits, lse;
};

// (adjust: applied to the device views before the call; the far-row test moves kv with it.)
PrefillResult run_prefill_gpu(PrefillWorkload& w, const std::function<void(SparsePrefillArgs&)>& adjust = {}) {
  SparsePrefillArgs a = w.args();
  DeviceBuffer<uint16_t> q(w.q), kv(w.kv), out(w.out);
  DeviceBuffer<int32_t> idx(w.indices), len(or_one(w.topk_length));
  DeviceBuffer<float> sink(or_one(w.sink)), mx(w.max_logits), lse(w.lse);
  DeviceBuffer<int64_t> oq(or_one(w.seq_offsets_q)), okv(or_one(w.seq_offsets_kv));
  to_device(a.q, q.get());
  to_device(a.kv, kv.get());
  to_device(a.indices, idx.get());
  to_device(a.topk_length, len.get());
  to_device(a.attn_sink, sink.get());
  to_device(a.out, out.get());
  to_device(a.max_logits, mx.get());
  to_device(a.lse, lse.get());
  if (adjust) adjust(a);
  if (w.batched()) {
    const int64_t n = static_cast<int64_t>(w.seq_offsets_q.size());
    sparse_prefill_batched(a, TensorView(oq.get(), DType::i64, {n}, Device::cuda(0)),
                           TensorView(okv.get(), DType::i64, {n}, Device::cuda(0)), nullptr,
                           PrefillImpl::kCuda);
  } else {
    sparse_prefill(a, nullptr, PrefillImpl::kCuda);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {out.download(), mx.download(), lse.download()};
}

void check_prefill(const PrefillWorkloadOptions& o, const std::string& label) {
  PrefillWorkload w = latentkv::testing::make_prefill_workload(o);
  w.run(PrefillImpl::kCpuOracle);
  const PrefillResult ref{w.out, w.max_logits, w.lse};
  w.poison_outputs();
  const PrefillResult got = run_prefill_gpu(w);
  const AttentionDiff d = latentkv::testing::compare_prefill(w, got.out, got.max_logits, got.lse,
                                                             ref.out, ref.max_logits, ref.lse);
  std::printf("[prefill] %-8s %-58s max_rel %.2e cos %.7f lse_err %.1e lse/max/mask %lld/%lld/%lld nan %lld\n",
              g_kernel.c_str(), label.c_str(), d.max_rel, d.cos_sim, d.max_lse_err,
              static_cast<long long>(d.lse_mismatch), static_cast<long long>(d.max_logits_mismatch),
              static_cast<long long>(d.mask_mismatch), static_cast<long long>(d.nan_out));
  EXPECT_TRUE(latentkv::testing::attention_close(d)) << g_kernel << " " << label;
}

struct DenseResult {
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

// (adjust: applied to the device views before the call; the far-page test moves k_cache with it.)
DenseResult run_dense_gpu(DenseWorkload& w, const std::function<void(DenseDecodeArgs&)>& adjust = {}) {
  DenseDecodeArgs a = w.args();
  DeviceBuffer<uint16_t> q(w.q), kc(or_one(w.k_cache)), out(w.out);
  DeviceBuffer<uint8_t> kf(or_one(w.k_cache_fp8));
  DeviceBuffer<int32_t> bt(w.block_table), lens(w.cache_seqlens);
  DeviceBuffer<float> lse(w.lse);
  to_device(a.q, q.get());
  to_device(a.k_cache, w.opt.fp8 ? static_cast<void*>(kf.get()) : static_cast<void*>(kc.get()));
  to_device(a.block_table, bt.get());
  to_device(a.cache_seqlens, lens.get());
  to_device(a.out, out.get());
  to_device(a.lse, lse.get());
  if (adjust) adjust(a);
  dense_decode(a, nullptr, DenseImpl::kCuda);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {out.download(), lse.download()};
}

DenseResult check_dense(const DenseWorkloadOptions& o, const std::string& label) {
  DenseWorkload w = latentkv::testing::make_dense_workload(o);
  w.run(DenseImpl::kCpuOracle);
  const DenseResult ref{w.out, w.lse};
  w.poison_outputs();
  const DenseResult got = run_dense_gpu(w);
  const AttentionDiff d = latentkv::testing::compare_dense(w, got.out, got.lse, ref.out, ref.lse);
  std::printf("[dense] %-8s %-60s max_rel %.2e cos %.7f lse_err %.1e lse/mask %lld/%lld nan %lld\n",
              g_kernel.c_str(), label.c_str(), d.max_rel, d.cos_sim, d.max_lse_err,
              static_cast<long long>(d.lse_mismatch), static_cast<long long>(d.mask_mismatch),
              static_cast<long long>(d.nan_out));
  EXPECT_TRUE(latentkv::testing::attention_close(d)) << g_kernel << " " << label;
  return got;
}

// The prefill case on which the kernel's variants are compared: s_kv 3000, topk 300 with lengths,
// a sink and adversarial index values.
PrefillWorkloadOptions variant_prefill(int64_t s_q, int64_t h_q, int64_t d_qk, uint64_t seed) {
  PrefillWorkloadOptions o;
  o.s_q = s_q;
  o.s_kv = 3000;
  o.h_q = h_q;
  o.topk = 300;
  o.d_qk = d_qk;
  o.topk_length = true;
  o.sink = true;
  o.adversarial = true;
  o.seed = seed;
  return o;
}

// The dense case on which the kernel's variants are compared: d_qk 576 on 53-token pages, causal,
// garbage block-table entries past each request's pages.
DenseWorkloadOptions variant_dense(int64_t b, int64_t s_q, int64_t h_q, int64_t max_len, bool fp8, uint64_t seed) {
  DenseWorkloadOptions o;
  o.b = b;
  o.s_q = s_q;
  o.h_q = h_q;
  o.d_qk = 576;
  o.page_size = 53;
  o.max_len = max_len;
  o.fp8 = fp8;
  o.causal = true;
  o.garbage_block_table = true;
  o.seed = seed;
  return o;
}

// Two runs gave the same bytes.
void expect_same(const DenseResult& a, const DenseResult& b, const std::string& label) {
  EXPECT_EQ(a.out, b.out) << label;
  EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4)) << label;
}
void expect_same(const PrefillResult& a, const PrefillResult& b, const std::string& label) {
  EXPECT_EQ(a.out, b.out) << label;
  EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4)) << label;
  EXPECT_EQ(0, std::memcmp(a.max_logits.data(), b.max_logits.data(), a.lse.size() * 4)) << label;
}

// The workload run again on the GPU, its outputs poisoned first.
DenseResult rerun_dense(DenseWorkload& w) {
  w.poison_outputs();
  return run_dense_gpu(w);
}
PrefillResult rerun_prefill(PrefillWorkload& w) {
  w.poison_outputs();
  return run_prefill_gpu(w);
}

}  // namespace

TEST(PrefillCuda, ShapeGrid) {
  REQUIRE_GPU();
  for (KernelChoice kernel : kernels()) {
  UseKernel use(kernel);
  struct Shape { int64_t s_q, s_kv, h_q, topk, d_qk; };
  const Shape shapes[] = {
      {5, 300, 1, 1, 576},    {9, 400, 3, 100, 512},  {17, 1000, 63, 100, 576},
      {4, 5000, 126, 576, 512}, {33, 2048, 64, 2048, 576}, {2, 700, 128, 256, 512},
  };
  int n = 0;
  for (const Shape& s : shapes)
    for (int features = 0; features < 2; ++features) {
      PrefillWorkloadOptions o;
      o.s_q = s.s_q;
      o.s_kv = s.s_kv;
      o.h_q = s.h_q;
      o.topk = s.topk;
      o.d_qk = s.d_qk;
      o.topk_length = features;
      o.sink = features;
      o.seed = 300 + n++;
      check_prefill(o, "sq" + std::to_string(s.s_q) + " skv" + std::to_string(s.s_kv) + " h" +
                           std::to_string(s.h_q) + " topk" + std::to_string(s.topk) + " d" +
                           std::to_string(s.d_qk) + (features ? " +len+sink" : ""));
    }
  }
}

TEST(PrefillCuda, CornerCasesAndBatched) {
  REQUIRE_GPU();
  for (KernelChoice kernel : kernels()) {
  UseKernel use(kernel);
  PrefillWorkloadOptions o;
  o.s_q = 12;
  o.s_kv = 500;
  o.h_q = 70;
  o.topk = 130;
  o.topk_length = true;
  o.sink = true;
  for (int d : {512, 576}) {
    o.d_qk = d;
    const std::string dn = " d" + std::to_string(d);
    { PrefillWorkloadOptions c = o; c.all_invalid = true; check_prefill(c, "all indices invalid" + dn); }
    { PrefillWorkloadOptions c = o; c.zero_lengths = true; check_prefill(c, "zero lengths" + dn); }
    for (float s : {INFINITY, -INFINITY}) {
      PrefillWorkloadOptions c = o;
      c.sink_special = s;
      check_prefill(c, std::string(s > 0 ? "sink +inf" : "sink -inf") + dn);
    }
    {
      PrefillWorkloadOptions c = o;
      c.adversarial = true;
      c.nan_unused = true;
      check_prefill(c, "adversarial indices, NaN unused" + dn);
    }
    {
      PrefillWorkloadOptions c = o;
      c.seq_q = {5, 0, 9, 3};
      c.seq_kv = {100, 50, 0, 300};
      c.adversarial = true;
      check_prefill(c, "batched 4 sequences (one without kv), adversarial" + dn);
    }
  }
  }
}

TEST(PrefillCuda, SeventyThousandRows) {
  REQUIRE_GPU();
  for (KernelChoice kernel : kernels()) {
  UseKernel use(kernel);
  // More rows than a 16-bit grid dimension holds; small topk keeps the float64 oracle quick.
  PrefillWorkloadOptions o;
  o.s_q = 70000;
  o.s_kv = 3000;
  o.h_q = 3;
  o.topk = 16;
  o.d_qk = 512;
  o.topk_length = true;
  check_prefill(o, "s_q 70000 h3 topk16");
  }
}

TEST(PrefillCuda, SplitsAndDeterminism) {
  REQUIRE_GPU();
  for (KernelChoice kernel : kernels()) {
  UseKernel use(kernel);
  // One row and 64 heads leave the SMs idle: the planner splits the 4096 candidates, and the
  // combine merges max_logits as well as out and lse.
  PrefillWorkloadOptions o;
  o.s_q = 1;
  o.s_kv = 9000;
  o.h_q = 64;
  o.topk = 4096;
  o.topk_length = true;
  o.sink = true;
  check_prefill(o, "s_q 1 topk 4096 (split)");
  PrefillWorkload w = latentkv::testing::make_prefill_workload(o);
  const PrefillResult first = run_prefill_gpu(w);
  for (int run = 0; run < 3; ++run) {
    w.poison_outputs();
    const PrefillResult again = run_prefill_gpu(w);
    ASSERT_EQ(again.out, first.out) << run;
    ASSERT_EQ(0, std::memcmp(again.lse.data(), first.lse.data(), first.lse.size() * 4)) << run;
    ASSERT_EQ(0, std::memcmp(again.max_logits.data(), first.max_logits.data(), first.lse.size() * 4)) << run;
  }
  }
}

// Row maxima that rise along the candidates (PrefillWorkloadOptions::rising_scores): the online
// softmax's rescale runs past the first block, and the Hopper kernel's exponent base (which moves
// only by more than 8 in log2 units) ends below some rows' true maximum, which max_logits must
// still report. s_q 40: each row block's candidates in a few long runs (on the H200, 3 splits of 11
// blocks), where the base lags; s_q 1: many one-block splits, whose max_logits the combine merges.
// The workload's property is checked on the host first, so that the case cannot pass vacuously.
TEST(PrefillCuda, RisingRowMaxima) {
  REQUIRE_GPU();
  for (KernelChoice kernel : kernels()) {
  UseKernel use(kernel);
  for (int64_t d_qk : {512, 576})
    for (int64_t s_q : {1, 40}) {
      const PrefillWorkloadOptions o{.s_q = s_q, .s_kv = 6000, .h_q = 64, .d_qk = d_qk, .topk = 2048,
                                     .seq_q = {}, .seq_kv = {}, .rising_scores = true,
                                     .seed = static_cast<uint64_t>(900 + d_qk + s_q)};
      const std::string label = "rising maxima d" + std::to_string(d_qk) + " s_q " + std::to_string(s_q);
      if (kernel == KernelChoice::kPortable) {
        // The base rule over a row's blocks of 64 candidates in order (one segment: indices are kv
        // rows), rows 0 and s_q - 1, heads 0-15: blocks past the first that move the base, and rows
        // that end with the base below their maximum (needed where the runs are long, s_q 40).
        PrefillWorkload w = latentkv::testing::make_prefill_workload(o);
        const double scale = std::log2(std::exp(1.0)) / std::sqrt(static_cast<double>(d_qk));
        int64_t late_moves = 0, lagging = 0;
        for (int64_t row = 0; row < s_q; row += std::max<int64_t>(s_q - 1, 1))
          for (int64_t h = 0; h < 16; ++h) {
            double top = -INFINITY, base = -INFINITY;
            for (int64_t b = 0; b < o.topk / 64; ++b) {
              double m = -INFINITY;
              for (int64_t k = 64 * b; k < 64 * b + 64; ++k) {
                const int64_t kv = w.indices[static_cast<size_t>(row * o.topk + k)];
                double dot = 0;
                for (int64_t d = 0; d < d_qk; ++d)
                  dot += static_cast<double>(num::bf16_to_f32(w.q[static_cast<size_t>((row * o.h_q + h) * d_qk + d)])) *
                         num::bf16_to_f32(w.kv[static_cast<size_t>(kv * d_qk + d)]);
                m = std::max(m, dot * scale);
              }
              if (m > base + 8) {
                late_moves += b > 0;
                base = m;
              }
              top = std::max(top, m);
            }
            lagging += top > base;
          }
        std::printf("[prefill] %s: base moves past block 0 %lld, rows ending with base < maximum %lld\n",
                    label.c_str(), static_cast<long long>(late_moves), static_cast<long long>(lagging));
        ASSERT_GT(late_moves, 0) << label;
        if (s_q > 1) {
          ASSERT_GT(lagging, 0) << label;
        }
      }
      check_prefill(o, label);
    }
  }
}

TEST(DenseCuda, ShapeGrid) {
  REQUIRE_GPU();
  for (KernelChoice kernel : kernels()) {
  UseKernel use(kernel);
  struct Shape { int64_t b, s_q, h_q, h_kv, d_qk, page, max_len; };
  const Shape shapes[] = {
      {3, 1, 1, 1, 576, 1, 200},   {4, 2, 3, 1, 512, 53, 700},  {2, 1, 63, 1, 576, 64, 1500},
      {5, 2, 126, 2, 512, 64, 300}, {2, 1, 128, 1, 576, 64, 4096}, {3, 3, 16, 4, 576, 53, 500},
  };
  int n = 0;
  for (const Shape& s : shapes)
    for (int variant = 0; variant < 3; ++variant) {  // bf16, f16, v32_fp8 (576, h_kv 1 only)
      if (variant == 2 && (s.d_qk != 576 || s.h_kv != 1)) continue;
      for (bool causal : {false, true}) {
        DenseWorkloadOptions o;
        o.b = s.b;
        o.s_q = s.s_q;
        o.h_q = s.h_q;
        o.h_kv = s.h_kv;
        o.d_qk = s.d_qk;
        o.page_size = s.page;
        o.max_len = s.max_len;
        o.f16 = variant == 1;
        o.fp8 = variant == 2;
        o.causal = causal;
        o.seed = 500 + n++;
        check_dense(o, std::string(variant == 0 ? "bf16" : variant == 1 ? "f16" : "v32_fp8") +
                           " b" + std::to_string(s.b) + " sq" + std::to_string(s.s_q) + " h" +
                           std::to_string(s.h_q) + "/" + std::to_string(s.h_kv) + " d" +
                           std::to_string(s.d_qk) + " P" + std::to_string(s.page) + " len" +
                           std::to_string(s.max_len) + (causal ? " causal" : ""));
      }
    }
  }
}

TEST(DenseCuda, CornerCasesAndDeterminism) {
  REQUIRE_GPU();
  for (KernelChoice kernel : kernels()) {
  UseKernel use(kernel);
  for (int variant = 0; variant < 3; ++variant) {
    const std::string vn = variant == 0 ? "bf16" : variant == 1 ? "f16" : "v32_fp8";
    DenseWorkloadOptions o;
    o.b = 6;
    o.s_q = 2;
    o.h_q = 70;
    o.d_qk = 576;
    o.page_size = 53;
    o.max_len = 400;
    o.f16 = variant == 1;
    o.fp8 = variant == 2;
    o.causal = true;
    {
      DenseWorkloadOptions c = o;
      c.zero_lengths = true;
      c.garbage_block_table = true;
      c.nan_unused = true;
      check_dense(c, vn + " zero lengths, garbage block table, NaN unused");
    }
    {
      DenseWorkloadOptions c = o;
      c.lengths = {1, 0, 2, 53, 54, 400};  // early causal rows see nothing
      check_dense(c, vn + " lengths 1 0 2 53 54 400 causal");
    }
    {
      // b 1 with a long context: the planner splits; repeated runs give the same bytes.
      DenseWorkloadOptions c = o;
      c.b = 1;
      c.s_q = 1;
      c.max_len = 6000;
      c.page_size = 64;
      const DenseResult first = check_dense(c, vn + " b1 len 6000 (split)");
      DenseWorkload w = latentkv::testing::make_dense_workload(c);
      for (int run = 0; run < 3; ++run) {
        w.poison_outputs();
        const DenseResult again = run_dense_gpu(w);
        ASSERT_EQ(again.out, first.out) << vn << " run " << run;
        ASSERT_EQ(0, std::memcmp(again.lse.data(), first.lse.data(), first.lse.size() * 4)) << vn;
      }
    }
  }
  }
}

// On CUDA the host reads neither cache_seqlens nor block_table (docs/dense.md): the kernel clamps a
// length into [0, max_pages * P] and skips the tokens of a block-table entry outside [0, num_pages).
// Each bad value is held to the oracle on the valid input it stands for (a length of INT_MAX is
// max_pages * P, -1 and INT_MIN are 0, a bad last block ends the request before it); a bad entry in
// the middle of a request leaves every other request's bytes as they were, with no NaN. gpu.sh's
// sanitize stage runs this test under memcheck.
TEST(DenseCuda, BadDeviceValuesAreClampedOrSkipped) {
  REQUIRE_GPU();
  for (KernelChoice kernel : kernels()) {
    UseKernel use(kernel);
    for (int variant = 0; variant < 3; ++variant) {
      const std::string vn = variant == 0 ? "bf16" : variant == 1 ? "f16" : "v32_fp8";
      DenseWorkloadOptions o;
      o.b = 5;
      o.s_q = 2;
      o.h_q = 16;
      o.d_qk = 576;
      o.page_size = 53;
      o.lengths = {100, 200, 150, 120, 90};  // max_pages 5 (4 for the longest, one spare column)
      o.f16 = variant == 1;
      o.fp8 = variant == 2;
      o.seed = 2100 + variant;
      const DenseWorkload clean = latentkv::testing::make_dense_workload(o);
      const int64_t P = o.page_size, mp = clean.max_pages;
      ASSERT_EQ(mp, 5);
      DenseWorkload bad = clean, good = clean;  // good: the valid input each bad value stands for
      bad.cache_seqlens[0] = INT_MAX;
      good.cache_seqlens[0] = static_cast<int32_t>(mp * P);  // every entry of request 0 is a valid page
      bad.cache_seqlens[1] = -1;
      good.cache_seqlens[1] = 0;
      bad.cache_seqlens[4] = INT_MIN;
      good.cache_seqlens[4] = 0;
      bad.block_table[2 * mp + 2] = static_cast<int32_t>(clean.num_pages);  // request 2: tokens 106-149
      good.cache_seqlens[2] = static_cast<int32_t>(2 * P);
      bad.block_table[3 * mp + 2] = -1;  // request 3: tokens 106-119
      good.cache_seqlens[3] = static_cast<int32_t>(2 * P);
      good.run(DenseImpl::kCpuOracle);
      bad.poison_outputs();
      const DenseResult got = run_dense_gpu(bad);
      const AttentionDiff d = latentkv::testing::compare_dense(good, got.out, got.lse, good.out, good.lse);
      std::printf("[dense] %-8s %-60s max_rel %.2e cos %.7f lse/mask %lld/%lld nan %lld\n", g_kernel.c_str(),
                  (vn + " bad lengths and last blocks").c_str(), d.max_rel, d.cos_sim,
                  static_cast<long long>(d.lse_mismatch), static_cast<long long>(d.mask_mismatch),
                  static_cast<long long>(d.nan_out));
      EXPECT_TRUE(latentkv::testing::attention_close(d)) << g_kernel << " " << vn;

      // A hole in the middle: request 1's block 1 (tokens 53-105 of 200) outside the cache.
      DenseWorkload base = clean, holed = clean;
      holed.block_table[1 * mp + 1] = INT_MIN;
      base.poison_outputs();
      holed.poison_outputs();
      const DenseResult a = run_dense_gpu(base), h = run_dense_gpu(holed);
      const int64_t per_req_out = o.s_q * o.h_q * 512, per_req_lse = o.h_q * o.s_q;
      // (The outputs are poisoned with NaN: an unwritten element reads as NaN too.)
      auto is_nan = [&](uint16_t x) {
        return o.f16 ? (x & 0x7c00u) == 0x7c00u && (x & 0x03ffu) != 0 : (x & 0x7f80u) == 0x7f80u && (x & 0x007fu) != 0;
      };
      for (int64_t i = 0; i < o.b; ++i) {
        for (int64_t k = i * per_req_out; k < (i + 1) * per_req_out; ++k) {
          if (i != 1) {
            ASSERT_EQ(h.out[k], a.out[k]) << g_kernel << " " << vn << " request " << i;
          } else {
            ASSERT_FALSE(is_nan(h.out[k])) << g_kernel << " " << vn << " request 1 (unwritten or NaN)";
          }
        }
        for (int64_t k = i * per_req_lse; k < (i + 1) * per_req_lse; ++k) {
          if (i != 1) {
            ASSERT_EQ(0, std::memcmp(&h.lse[k], &a.lse[k], 4)) << g_kernel << " " << vn << " request " << i;
          } else {
            ASSERT_TRUE(std::isfinite(h.lse[k])) << g_kernel << " " << vn << " request 1 lse " << h.lse[k];
          }
        }
      }
    }
  }
}

// Dense decode runs up to 64 / heads_per_kv query tokens of a request in one CTA (they share every
// key; packed causal rows keep their own limits). Shapes that pack, with lengths around s_q (so
// that early causal rows see fewer keys, or none), some with splits; each checked against the
// oracle packed and unpacked, and the packed run repeated bitwise. (Finite keys: with causal
// packing a non-finite key reaches the earlier queries of its group through P V's 0 x NaN, see
// docs/dense.md.)
TEST(DenseCuda, PackedQueryTokens) {
  REQUIRE_GPU();
  latentkv::testing::RestoreSwitch<bool> restore(latentkv::dense::cuda::pack_allowed,
                                                  latentkv::dense::cuda::set_pack_allowed);
  // pack = min(s_q, 64 / heads_per_kv): one group per request (2 x 16, 3 x 8, 5 x 3, 4 x 16 of
  // h_kv 2), several with a partial last one (9 x 16: groups of 4, 4, 1; 3 x 32: 2, 1; 70 x 1:
  // 64, 6), and long contexts that split, where a split can hold keys the last query of a group
  // sees and its earlier queries do not (70 x 1 with 6000 tokens: limits 63 apart).
  struct Shape { int64_t b, s_q, h_q, h_kv, max_len; };
  const Shape shapes[] = {{6, 2, 16, 1, 300},  {6, 3, 8, 1, 200},  {6, 5, 3, 1, 100},   {6, 4, 32, 2, 250},
                          {6, 9, 16, 1, 300},  {6, 3, 32, 1, 200}, {6, 70, 1, 1, 400},  {1, 2, 16, 1, 6000},
                          {2, 70, 1, 1, 6000}};
  for (KernelChoice kernel : kernels()) {
    UseKernel use(kernel);
    int n = 0;
    for (const Shape& sh : shapes)
      for (int variant = 0; variant < 3; ++variant) {
        if (variant == 2 && sh.h_kv != 1) continue;
        for (bool causal : {true, false}) {
          DenseWorkloadOptions o;
          o.b = sh.b;
          o.s_q = sh.s_q;
          o.h_q = sh.h_q;
          o.h_kv = sh.h_kv;
          o.d_qk = 576;
          o.page_size = 53;
          o.max_len = sh.max_len;
          if (sh.b == 6) o.lengths = {0, 1, static_cast<int32_t>(sh.s_q - 1), static_cast<int32_t>(sh.s_q),
                                      static_cast<int32_t>(sh.s_q + 1), static_cast<int32_t>(sh.max_len)};
          o.f16 = variant == 1;
          o.fp8 = variant == 2;
          o.causal = causal;
          o.seed = 1700 + n++;
          const std::string label = std::string(variant == 0 ? "bf16" : variant == 1 ? "f16" : "v32_fp8") +
                                    " b" + std::to_string(sh.b) + " sq" + std::to_string(sh.s_q) + " h" +
                                    std::to_string(sh.h_q) + "/" + std::to_string(sh.h_kv) +
                                    (causal ? " causal" : "");
          latentkv::dense::cuda::set_pack_allowed(false);
          check_dense(o, label + " unpacked");
          latentkv::dense::cuda::set_pack_allowed(true);
          const DenseResult first = check_dense(o, label + " packed");
          DenseWorkload w = latentkv::testing::make_dense_workload(o);
          w.poison_outputs();
          const DenseResult again = run_dense_gpu(w);
          ASSERT_EQ(again.out, first.out) << label;
          ASSERT_EQ(0, std::memcmp(again.lse.data(), first.lse.data(), first.lse.size() * 4)) << label;
        }
      }
  }
}

namespace {

// The narrow-kernel dense tests' cases: v32_fp8 pages of 53 tokens, one kv head, b 6 with lengths
// 0, 1, s_q, 63, 64 and max_len (else every request max_len), causal or not; `shape` names it.
struct NarrowDenseShape {
  int64_t b, s_q, h_q, max_len;
};
DenseWorkloadOptions narrow_dense_case(const NarrowDenseShape& sh, bool causal, uint64_t seed, std::string* shape) {
  DenseWorkloadOptions o;
  o.b = sh.b;
  o.s_q = sh.s_q;
  o.h_q = sh.h_q;
  o.h_kv = 1;
  o.d_qk = 576;
  o.page_size = 53;
  o.max_len = sh.max_len;
  if (sh.b == 6) o.lengths = {0, 1, static_cast<int32_t>(sh.s_q), 63, 64, static_cast<int32_t>(sh.max_len)};
  o.fp8 = true;
  o.causal = causal;
  o.seed = seed;
  *shape = "v32_fp8 b" + std::to_string(sh.b) + " sq" + std::to_string(sh.s_q) + " h" + std::to_string(sh.h_q) +
           " len " + std::to_string(sh.max_len) + (causal ? " causal" : "");
  return o;
}

}  // namespace

// The narrow Hopper kernel on dense v32_fp8 pages with at most 16 rows per CTA, in both forms
// (decode/sm90/launch.h narrow_form): h_q 16 at s_q 1, packed query tokens (their causal limits),
// h_q 3 (13 padding columns), lengths 0 to past the split size, against the oracle and bitwise
// across reruns. The default (kAuto) gives these launches the warp-specialised form, bitwise equal
// to forcing it (the same plan: one CTA per SM). (The two forms' plans differ, so they are not
// compared with each other here; the decode test compares them under one plan bitwise.)
TEST(DenseCuda, Sm90NarrowBothForms) {
  REQUIRE_GPU();
  namespace s9 = latentkv::decode::sm90;
  if (!s9::usable(0) || !s9::narrow_rows()) GTEST_SKIP() << "the narrow sm_90a kernel";
  UseKernel use(KernelChoice::kSm90);
  latentkv::testing::RestoreSwitch<s9::NarrowForm> restore(s9::narrow_form, s9::set_narrow_form);
  const NarrowDenseShape shapes[] = {{6, 1, 16, 300}, {6, 2, 8, 200}, {6, 5, 3, 100}, {2, 1, 16, 6000}, {3, 4, 4, 5000}};
  int n = 0;
  for (const NarrowDenseShape& sh : shapes)
    for (bool causal : {true, false}) {
      std::string shape;
      const DenseWorkloadOptions o = narrow_dense_case(sh, causal, 2900 + n++, &shape);
      DenseResult ws;
      for (s9::NarrowForm form : {s9::NarrowForm::kWarpSpecialised, s9::NarrowForm::kTwoCtas}) {
        s9::set_narrow_form(form);
        const bool is_ws = form == s9::NarrowForm::kWarpSpecialised;
        const std::string label = shape + (is_ws ? ", warp-specialised" : ", two CTAs");
        const DenseResult first = check_dense(o, label);
        DenseWorkload w = latentkv::testing::make_dense_workload(o);
        w.poison_outputs();
        const DenseResult again = run_dense_gpu(w);
        ASSERT_EQ(again.out, first.out) << label;
        ASSERT_EQ(0, std::memcmp(again.lse.data(), first.lse.data(), first.lse.size() * 4)) << label;
        if (is_ws) ws = first;
      }
      s9::set_narrow_form(s9::NarrowForm::kAuto);
      DenseWorkload w = latentkv::testing::make_dense_workload(o);
      w.poison_outputs();
      const DenseResult by_default = run_dense_gpu(w);
      ASSERT_EQ(by_default.out, ws.out) << shape << ": the default against the warp-specialised form";
      ASSERT_EQ(0, std::memcmp(by_default.lse.data(), ws.lse.data(), ws.lse.size() * 4)) << shape;
    }
}

// The narrow kernel's 32-row instance on dense v32_fp8 pages (decode/sm90/launch.h
// narrow_wide_rows: CTAs of 17-32 rows), against the oracle and bitwise across reruns, and the
// 64-row kernel, which runs those CTAs with the switch off, against the oracle on the same cases:
// h_q 32 at s_q 1, packed query tokens (h_q 16 x 2, 7 x 3: 11 padding columns, 8 x 4), lengths 0
// to past a split, causal and not.
TEST(DenseCuda, Sm90Narrow32Rows) {
  REQUIRE_GPU();
  namespace s9 = latentkv::decode::sm90;
  if (!s9::usable(0) || !s9::narrow_rows()) GTEST_SKIP() << "the narrow sm_90a kernel";
  UseKernel use(KernelChoice::kSm90);
  latentkv::testing::RestoreSwitch<bool> restore(s9::narrow_wide_rows, s9::set_narrow_wide_rows);
  // Packing on, so that the s_q > 1 shapes make CTAs of 21-32 rows whatever LKV_DENSE_PACK says.
  latentkv::testing::RestoreSwitch<bool> restore_pack(latentkv::dense::cuda::pack_allowed,
                                                      latentkv::dense::cuda::set_pack_allowed);
  latentkv::dense::cuda::set_pack_allowed(true);
  const NarrowDenseShape shapes[] = {{6, 1, 32, 300}, {6, 2, 16, 200}, {6, 3, 7, 100}, {2, 1, 32, 6000}, {3, 4, 8, 5000}};
  int n = 0;
  for (const NarrowDenseShape& sh : shapes)
    for (bool causal : {true, false}) {
      std::string shape;
      const DenseWorkloadOptions o = narrow_dense_case(sh, causal, 3500 + n++, &shape);
      for (bool wide : {true, false}) {
        s9::set_narrow_wide_rows(wide);
        const std::string label = shape + (wide ? ", 32-row narrow" : ", 64-row");
        const DenseResult first = check_dense(o, label);
        if (!wide) continue;
        DenseWorkload w = latentkv::testing::make_dense_workload(o);
        for (int run = 0; run < 2; ++run) {
          w.poison_outputs();
          const DenseResult again = run_dense_gpu(w);
          ASSERT_EQ(again.out, first.out) << label;
          ASSERT_EQ(0, std::memcmp(again.lse.data(), first.lse.data(), first.lse.size() * 4)) << label;
        }
      }
    }
}

// lse with heads innermost (FlashMLA's sparse layout, which dense callers may pass too): every
// kernel writes the contiguous run's bytes, for packed query tokens (h_q 16, s_q 3), 128 heads, and
// a context long enough to split (the combine writes lse), bf16 and v32_fp8 pages.
TEST(DenseCuda, LseWithHeadsInnermostBitwise) {
  REQUIRE_GPU();
  for (KernelChoice kernel : kernels()) {
    UseKernel use(kernel);
    for (bool fp8 : {false, true})
      for (const auto& [h_q, max_len] : {std::pair<int64_t, int64_t>{16, 300}, {128, 300}, {16, 6000}}) {
        const DenseWorkloadOptions o = variant_dense(3, 3, h_q, max_len, fp8, 90 + h_q + max_len);
        const std::string label = g_kernel + (fp8 ? " v32_fp8" : " bf16") + " h_q " + std::to_string(h_q) +
                                  " len " + std::to_string(max_len);
        DenseWorkload w = latentkv::testing::make_dense_workload(o);
        const DenseResult ref = rerun_dense(w);
        const int64_t b = o.b, s_q = o.s_q;
        DeviceBuffer<float> lse_t(std::vector<float>(static_cast<size_t>(b * s_q * h_q), NAN));
        w.poison_outputs();
        const DenseResult got = run_dense_gpu(w, [&](DenseDecodeArgs& a) {
          a.lse = TensorView(lse_t.get(), DType::f32, {b, h_q, s_q}, {s_q * h_q, 1, h_q}, Device::cuda(0));
        });
        EXPECT_EQ(got.out, ref.out) << label;
        EXPECT_EQ("", latentkv::testing::lse_layout_mismatch(lse_t.download(), {s_q * h_q, 1, h_q}, ref.lse, b, h_q,
                                                              s_q))
            << label;
      }
  }
}

TEST(DenseCuda, Errors) {
  REQUIRE_GPU();
  // f16 queries with a v32_fp8 cache: refused on CUDA, nothing launched.
  DenseWorkloadOptions o;
  o.fp8 = true;
  o.f16 = true;
  DenseWorkload w = latentkv::testing::make_dense_workload(o);
  try {
    run_dense_gpu(w);
    FAIL() << "f16 q with a v32_fp8 cache was accepted on CUDA";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs bf16 q"), std::string::npos) << e.what();
  }
}

// The CUDA-only refusals of prefill and dense decode, each named with its value before anything is
// launched: rows not aligned to 16 bytes (the kernels move q, kv / k_cache and out rows with 16-byte
// accesses; each view here starts 2 bytes into a buffer of its own) and d_qk other than 512 or 576
// (which the CPU paths take). The outputs go to buffers of 0x7f bytes, which must stay so.
TEST(AttentionCuda, MisalignedRowsAndOtherWidthsAreNamed) {
  REQUIRE_GPU();
  using latentkv::testing::view_at;
  for (const std::string name : {"q", "kv", "out", "d_qk"}) {
    PrefillWorkload w = latentkv::testing::make_prefill_workload(variant_prefill(2, 16, name == "d_qk" ? 640 : 576, 2900));
    const size_t bytes = name == "kv" ? w.kv.size() * 2 : name == "q" ? w.q.size() * 2 : w.out.size() * 2;
    DeviceArena moved(bytes + 16, 0x7f), out(w.out.size() * 2, 0x7f), mx(w.max_logits.size() * 4, 0x7f),
        lse(w.lse.size() * 4, 0x7f);
    ASSERT_TRUE(moved.get() && out.get() && mx.get() && lse.get());
    const std::string msg = latentkv::testing::error_of([&] {
      run_prefill_gpu(w, [&](SparsePrefillArgs& a) {
        a.out = view_at(a.out, out.get());
        a.max_logits = view_at(a.max_logits, mx.get());
        a.lse = view_at(a.lse, lse.get());
        if (name == "d_qk") return;
        TensorView& t = name == "q" ? a.q : name == "kv" ? a.kv : a.out;
        t = view_at(t, moved.get() + 2);
      });
    });
    const std::string want = name == "d_qk" ? "sparse_prefill on CUDA supports d_qk 512 and 576, got d_qk=640"
                                            : "sparse_prefill on CUDA needs " + name +
                                                  " rows aligned to 16 bytes, got address % 16 = 2";
    EXPECT_NE(msg.find(want), std::string::npos) << "prefill " << name << ": got \"" << msg << "\"";
    EXPECT_TRUE(out.all(0x7f) && mx.all(0x7f) && lse.all(0x7f) && moved.all(0x7f)) << "prefill " << name;
  }
  for (const std::string name : {"q", "k_cache", "out", "d_qk"}) {
    DenseWorkloadOptions o = variant_dense(2, 1, 16, 200, false, 2901);
    if (name == "d_qk") o.d_qk = 640;
    DenseWorkload w = latentkv::testing::make_dense_workload(o);
    const size_t bytes = name == "k_cache" ? w.k_cache.size() * 2 : name == "q" ? w.q.size() * 2 : w.out.size() * 2;
    DeviceArena moved(bytes + 16, 0x7f), out(w.out.size() * 2, 0x7f), lse(w.lse.size() * 4, 0x7f);
    ASSERT_TRUE(moved.get() && out.get() && lse.get());
    const std::string msg = latentkv::testing::error_of([&] {
      run_dense_gpu(w, [&](DenseDecodeArgs& a) {
        a.out = view_at(a.out, out.get());
        a.lse = view_at(a.lse, lse.get());
        if (name == "d_qk") return;
        TensorView& t = name == "q" ? a.q : name == "k_cache" ? a.k_cache : a.out;
        t = view_at(t, moved.get() + 2);
      });
    });
    const std::string want = name == "d_qk" ? "dense_decode on CUDA supports d_qk 512 and 576, got d_qk=640"
                                            : "dense_decode on CUDA needs " + name +
                                                  " rows (and pages) aligned to 16 bytes, got address % 16 = 2";
    EXPECT_NE(msg.find(want), std::string::npos) << "dense " << name << ": got \"" << msg << "\"";
    EXPECT_TRUE(out.all(0x7f) && lse.all(0x7f) && moved.all(0x7f)) << "dense " << name;
  }
}

TEST(AttentionCuda, WideAndNarrowLayoutsAgreeBitwise) {
  REQUIRE_GPU();
  UseKernel use(KernelChoice::kPortable);  // both layouts are the portable kernel's
  // Wide devices dequantize v32_fp8 pages while multiplying (the narrow layout does it in its own
  // phase); for 16-bit keys the wide layout is three key tiles deep on sm_90 where a CTA has fewer
  // than 64 rows (decode::cuda::deep_keys_pay: prefill h_q 24 and dense h_q 40 here; prefill h_q 70
  // and elsewhere this checks that the switch changes nothing). Same arithmetic in the same order:
  // same bytes. (Score and value warps, which CTAs of at most 32 rows take in the deep layout, are
  // turned off here: they agree to rounding, AttentionCuda.ScoreAndValueWarps.)
  latentkv::testing::RestoreSwitch<bool> restore_roles(latentkv::decode::cuda::roles_allowed,
                                                        latentkv::decode::cuda::set_roles_allowed);
  latentkv::decode::cuda::set_roles_allowed(false);
  auto both = [](auto&& run) {
    const auto wide = run();
    latentkv::decode::cuda::set_wide_layout_allowed(false);
    const auto narrow = run();
    latentkv::decode::cuda::set_wide_layout_allowed(true);
    return std::pair{wide, narrow};
  };
  for (const auto& [d, h] : {std::pair{512, 70}, std::pair{576, 24}, std::pair{512, 24}}) {
    const PrefillWorkloadOptions o = variant_prefill(9, h, d, 1);
    check_prefill(o, "layouts: prefill d" + std::to_string(d) + " h" + std::to_string(h));
    PrefillWorkload w = latentkv::testing::make_prefill_workload(o);
    const auto [wide, narrow] = both([&] {
      w.poison_outputs();
      return run_prefill_gpu(w);
    });
    EXPECT_EQ(wide.out, narrow.out) << d << " " << h;
    EXPECT_EQ(0, std::memcmp(wide.lse.data(), narrow.lse.data(), wide.lse.size() * 4)) << d << " " << h;
    EXPECT_EQ(0, std::memcmp(wide.max_logits.data(), narrow.max_logits.data(), wide.lse.size() * 4)) << d << " " << h;
  }
  // Variant 3: v32_fp8 pages with 64 heads, whose CTAs' rows are all real, so the portable kernel
  // splits the score product over d_qk (decode::cuda::split_dqk_pays).
  for (int variant = 0; variant < 4; ++variant) {
    DenseWorkloadOptions o;
    o.b = 3;
    o.s_q = 2;
    o.h_q = variant == 3 ? 64 : 40;
    o.d_qk = 576;
    o.page_size = 53;
    o.max_len = 900;
    o.f16 = variant == 1;
    o.fp8 = variant >= 2;
    o.causal = true;
    o.garbage_block_table = true;
    check_dense(o, "layouts: dense variant " + std::to_string(variant));
    DenseWorkload w = latentkv::testing::make_dense_workload(o);
    const auto [wide, narrow] = both([&] {
      w.poison_outputs();
      return run_dense_gpu(w);
    });
    EXPECT_EQ(wide.out, narrow.out) << variant;
    EXPECT_EQ(0, std::memcmp(wide.lse.data(), narrow.lse.data(), wide.lse.size() * 4)) << variant;
  }
}

// Score and value warps (decode::cuda::roles_pay; kernel.cuh, kRoles): on sm_90, CTAs of at most 32
// rows with 16-bit keys split their warps into score warps (tile t) and value warps (tile t - 1).
// Every shape is checked against the oracle with them and without (token groups for 16 rows and
// fewer, one role above), and the run with them is repeated bitwise. (Elsewhere they are never
// taken.) Dense: bf16 and f16, 5-32 rows alone or as packed query tokens (causal), a long request
// that splits; prefill: lengths, sink and adversarial indices.
TEST(AttentionCuda, ScoreAndValueWarps) {
  REQUIRE_GPU();
  namespace dc = latentkv::decode::cuda;
  if (!latentkv::decode::sm90::usable(0) || !dc::wide_layout_allowed())
    GTEST_SKIP() << "score and value warps run on compute capability 9.0 with the wide layout only";
  UseKernel use(KernelChoice::kPortable);
  latentkv::testing::RestoreSwitch<bool> restore(dc::roles_allowed, dc::set_roles_allowed);
  auto twice = [](auto&& run) {
    auto first = run();
    auto second = run();
    return std::pair{first, second};
  };
  struct Shape { int64_t b, s_q, h_q, max_len; };
  const Shape shapes[] = {{4, 1, 32, 700}, {3, 1, 24, 500}, {4, 2, 16, 300}, {4, 3, 7, 200},
                          {4, 1, 16, 600}, {2, 1, 5, 90},   {1, 1, 32, 7000}};
  int n = 0;
  for (const Shape& sh : shapes)
    for (int variant = 0; variant < 2; ++variant) {
      DenseWorkloadOptions o;
      o.b = sh.b;
      o.s_q = sh.s_q;
      o.h_q = sh.h_q;
      o.d_qk = variant == 1 ? 512 : 576;
      o.page_size = variant == 1 ? 64 : 53;
      o.max_len = sh.max_len;
      o.f16 = variant == 1;
      o.causal = true;
      o.garbage_block_table = true;
      o.seed = 2300 + n++;
      const std::string label = std::string(variant == 0 ? "bf16" : "f16 d512") + " b" + std::to_string(sh.b) +
                                " sq" + std::to_string(sh.s_q) + " h" + std::to_string(sh.h_q) + " len" +
                                std::to_string(sh.max_len);
      dc::set_roles_allowed(false);
      check_dense(o, "no roles: dense " + label);
      dc::set_roles_allowed(true);
      check_dense(o, "roles: dense " + label);
      DenseWorkload w = latentkv::testing::make_dense_workload(o);
      const auto [first, second] = twice([&] {
        w.poison_outputs();
        return run_dense_gpu(w);
      });
      EXPECT_EQ(first.out, second.out) << label;
      EXPECT_EQ(0, std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * 4)) << label;
    }
  for (const auto& [h, d] : {std::pair{20, 576}, std::pair{32, 512}, std::pair{9, 576}}) {
    const PrefillWorkloadOptions o = variant_prefill(40, h, d, 2400 + h);
    const std::string label = "prefill h" + std::to_string(h) + " d" + std::to_string(d);
    dc::set_roles_allowed(false);
    check_prefill(o, "no roles: " + label);
    dc::set_roles_allowed(true);
    check_prefill(o, "roles: " + label);
    PrefillWorkload w = latentkv::testing::make_prefill_workload(o);
    const auto [first, second] = twice([&] {
      w.poison_outputs();
      return run_prefill_gpu(w);
    });
    EXPECT_EQ(first.out, second.out) << label;
    EXPECT_EQ(0, std::memcmp(first.lse.data(), second.lse.data(), first.lse.size() * 4)) << label;
    EXPECT_EQ(0, std::memcmp(first.max_logits.data(), second.max_logits.data(), first.lse.size() * 4)) << label;
  }
}

// Launches whose CTAs fill whole waves with a few rows left over run those rows split in a second
// launch (DecodePlan::unsplit_b; the shared planner chooses it for dense decode and prefill as for
// sparse decode): dense decode with sm_count + 8 requests of 64 heads (bf16 and v32_fp8 pages) and
// sm_count / 2 + 4 requests of packed query tokens, prefill with sm_count + 8 query tokens of 64 heads (lengths, sink, adversarial indices; the
// combine merges max_logits too). Each against the oracle, then repeated bitwise.
TEST(AttentionCuda, UnsplitRowsInASecondLaunch) {
  REQUIRE_GPU();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  for (KernelChoice kernel : kernels()) {
    UseKernel use(kernel);
    const DecodePlanKernel plan_kernel = kernel == KernelChoice::kSm90 ? DecodePlanKernel::kSm90 : DecodePlanKernel::kPortable;
    for (bool fp8 : {false, true}) {
      const DenseWorkloadOptions o = variant_dense(sms + 8, 1, 64, 300, fp8, 3100 + fp8);
      DenseWorkload w = latentkv::testing::make_dense_workload(o);
      // dense decode's own planning (dense/cuda/dense.cu, plan_splits): every page a request could hold.
      const int64_t max_pages = w.args().block_table.size(1);
      const DecodePlan plan = plan_decode(o.b, 1, 64, max_pages * o.page_size, 0, sms, plan_kernel);
      EXPECT_GT(plan.unsplit_b, 0) << "dense b " << o.b << " on " << sms << " SMs";
      const std::string label = std::string(fp8 ? "v32_fp8" : "bf16") + " b" + std::to_string(o.b) + " h64: unsplit " +
                                std::to_string(plan.unsplit_b) + ", " + std::to_string(plan.num_splits) + " splits";
      const DenseResult first = check_dense(o, label);
      expect_same(first, rerun_dense(w), label);
    }
    {
      // Packed query tokens (h_q 32, s_q 3: two per CTA, so a request's rows are two row groups,
      // the second of one query), causal, sm_count / 2 + 4 requests: the second launch's row groups
      // start past whole requests.
      const DenseWorkloadOptions o = variant_dense(sms / 2 + 4, 3, 32, 300, true, 3150);
      DenseWorkload w = latentkv::testing::make_dense_workload(o);
      const int64_t max_pages = w.args().block_table.size(1);
      const DecodePlan plan = plan_decode(o.b, 2, 64, max_pages * o.page_size, 0, sms, plan_kernel);
      EXPECT_GT(plan.unsplit_b, 0) << "dense b " << o.b << " s_q 3 on " << sms << " SMs";
      const std::string label = "v32_fp8 b" + std::to_string(o.b) + " s_q 3 h32 (packed): unsplit " +
                                std::to_string(plan.unsplit_b) + ", " + std::to_string(plan.num_splits) + " splits";
      const DenseResult first = check_dense(o, label);
      expect_same(first, rerun_dense(w), label);
    }
    PrefillWorkloadOptions o = variant_prefill(sms + 8, 64, 576, 3200);
    const DecodePlan plan = plan_decode(o.s_q, 1, o.h_q, o.topk, 0, sms, plan_kernel);
    EXPECT_GT(plan.unsplit_b, 0) << "prefill s_q " << o.s_q << " on " << sms << " SMs";
    const std::string label = "s_q " + std::to_string(o.s_q) + " h64: unsplit " + std::to_string(plan.unsplit_b) + ", " +
                              std::to_string(plan.num_splits) + " splits";
    check_prefill(o, label);
    PrefillWorkload w = latentkv::testing::make_prefill_workload(o);
    const PrefillResult first = rerun_prefill(w);
    expect_same(first, rerun_prefill(w), label);
  }
}

// The per-launch choice of copy issuers (decode::cuda::copy_warps_for; host code, no GPU needed):
// score and value warps 2, CTAs of more than 48 rows or token groups 4, other one-role CTAs 1; the
// override replaces every choice, 0 removes it, other counts are refused.
TEST(AttentionLaunch, CopyWarpsChoice) {
  namespace dc = latentkv::decode::cuda;
  latentkv::testing::RestoreSwitch<int> restore(dc::copy_warps_override, dc::set_copy_warps_override);
  dc::set_copy_warps_override(0);
  auto geometry = [](int64_t heads_per_kv, int64_t pack) {
    latentkv::decode::cuda::Geometry g{};
    g.heads_per_kv = heads_per_kv;
    g.pack = pack;
    return g;
  };
  EXPECT_EQ(dc::copy_warps_for(geometry(32, 1), true, false), 2);
  EXPECT_EQ(dc::copy_warps_for(geometry(16, 1), true, false), 2);
  EXPECT_EQ(dc::copy_warps_for(geometry(128, 1), false, false), 4);
  EXPECT_EQ(dc::copy_warps_for(geometry(16, 4), false, false), 4);  // 64 packed rows
  EXPECT_EQ(dc::copy_warps_for(geometry(49, 1), false, false), 4);
  EXPECT_EQ(dc::copy_warps_for(geometry(48, 1), false, false), 1);
  EXPECT_EQ(dc::copy_warps_for(geometry(32, 1), false, false), 1);
  EXPECT_EQ(dc::copy_warps_for(geometry(16, 1), false, true), 4);
  dc::set_copy_warps_override(8);
  EXPECT_EQ(dc::copy_warps_for(geometry(32, 1), true, false), 8);
  EXPECT_EQ(dc::copy_warps_for(geometry(128, 1), false, false), 8);
  dc::set_copy_warps_override(0);
  EXPECT_EQ(dc::copy_warps_for(geometry(128, 1), false, false), 4);
  for (int bad : {-1, 3, 5, 16}) EXPECT_THROW(dc::set_copy_warps_override(bad), Error) << bad;
}

// Which kernel a launch takes when the Hopper one does not run: the compact one where the device's
// shared memory per block is below the portable layout the launch would use, or where forced; the
// portable one otherwise. (The decode, prefill and dense suites run the compact kernel itself.)
TEST(AttentionLaunch, CompactChoice) {
  REQUIRE_GPU();
  namespace dc = latentkv::decode::cuda;
  int limit = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  {
    UseKernel use(KernelChoice::kAuto);
    EXPECT_FALSE(dc::use_compact(0, limit));
    EXPECT_TRUE(dc::use_compact(0, limit + 1));
    EXPECT_EQ(std::string(dc::kernel_for_device(0)) == "compact", !latentkv::testing::portable_kernel_fits());
  }
  {
    UseKernel use(KernelChoice::kPortable);
    EXPECT_FALSE(dc::use_compact(0, limit + 1));  // forced: the portable launch then reports the sizes
  }
  {
    UseKernel use(KernelChoice::kCompact);
    EXPECT_TRUE(dc::use_compact(0, 0));
    EXPECT_FALSE(dc::use_sm90(0));
    EXPECT_STREQ(dc::kernel_for_device(0), "compact");
  }
  // Slices of 16 rows cover each portable CTA's rows: heads of one head block times packed queries.
  auto slices = [](int64_t heads_per_kv, int64_t pack) {
    dc::Geometry g{};
    g.heads_per_kv = heads_per_kv;
    g.pack = pack;
    return latentkv::decode::compact::slice_count(g);
  };
  EXPECT_EQ(slices(1, 1), 1);
  EXPECT_EQ(slices(16, 1), 1);
  EXPECT_EQ(slices(17, 1), 2);
  EXPECT_EQ(slices(70, 1), 4);
  EXPECT_EQ(slices(128, 1), 4);
  EXPECT_EQ(slices(16, 4), 4);
  EXPECT_EQ(slices(3, 5), 1);
}

// The tile copies' issuing warps (Geometry::copy_warps, 1, 2, 4 or 8 on sm_90) change no
// arithmetic: every count gives the bytes of one issuer, checked against the oracle. Dense decode
// with score and value warps (32 and 16 rows), the deep layout (40 rows, roles off), 64-row CTAs
// (two tiles), v32_fp8 pages, and prefill (64 and 20 heads with lengths, sink and adversarial
// indices).
TEST(AttentionCuda, CopyWarpsAgreeBitwise) {
  REQUIRE_GPU();
  namespace dc = latentkv::decode::cuda;
  UseKernel use(KernelChoice::kPortable);
  latentkv::testing::RestoreSwitch<int> restore_warps(dc::copy_warps_override, dc::set_copy_warps_override);
  latentkv::testing::RestoreSwitch<bool> restore_roles(dc::roles_allowed, dc::set_roles_allowed);
  // One issuer's bytes, then every other count's against them.
  auto each_count = [&](auto&& run, const std::string& label) {
    dc::set_copy_warps_override(1);
    const auto one = run();
    for (int warps : {2, 4, 8}) {
      dc::set_copy_warps_override(warps);
      expect_same(one, run(), label + " copy warps " + std::to_string(warps));
    }
  };
  struct Shape { int64_t b, s_q, h_q, max_len; bool fp8, roles; };
  const Shape shapes[] = {{4, 1, 32, 700, false, true}, {4, 1, 16, 600, false, true}, {3, 1, 40, 500, false, false},
                          {3, 2, 64, 400, false, true}, {3, 1, 16, 500, true, true},  {2, 1, 64, 300, true, true},
                          {1, 1, 32, 7000, false, true}};
  int n = 0;
  for (const Shape& sh : shapes) {
    const DenseWorkloadOptions o = variant_dense(sh.b, sh.s_q, sh.h_q, sh.max_len, sh.fp8, 2500 + n++);
    const std::string label = std::string(sh.fp8 ? "v32_fp8" : "bf16") + " b" + std::to_string(sh.b) + " sq" +
                              std::to_string(sh.s_q) + " h" + std::to_string(sh.h_q) + " len" +
                              std::to_string(sh.max_len) + (sh.roles ? "" : " no roles");
    dc::set_roles_allowed(sh.roles);
    dc::set_copy_warps_override(1);
    check_dense(o, "copy warps 1: dense " + label);
    DenseWorkload w = latentkv::testing::make_dense_workload(o);
    each_count([&] { return rerun_dense(w); }, label);
  }
  dc::set_roles_allowed(true);
  for (const auto& [h, d] : {std::pair{64, 576}, std::pair{20, 512}}) {
    const PrefillWorkloadOptions o = variant_prefill(24, h, d, 2600 + h);
    const std::string label = "prefill h" + std::to_string(h) + " d" + std::to_string(d);
    dc::set_copy_warps_override(1);
    check_prefill(o, "copy warps 1: " + label);
    PrefillWorkload w = latentkv::testing::make_prefill_workload(o);
    each_count([&] { return rerun_prefill(w); }, label);
  }
}

// Dense decode over v32_fp8 pages in the portable kernel: where warps 4-7 have no rows (CTAs of at
// most 16 rows, token groups) they dequantize each next tile alone (Geometry::idle_dequant); the
// bytes must be those of equal shares, checked against the oracle. h_q 16 (token
// groups, and one group: unchanged), 32 and 40 (unchanged), packed 2 x 8 and 5 x 3 query rows,
// and a split case.
TEST(AttentionCuda, IdleWarpsDequantizeBitwise) {
  REQUIRE_GPU();
  namespace dc = latentkv::decode::cuda;
  UseKernel use(KernelChoice::kPortable);
  latentkv::testing::RestoreSwitch<int> restore_idle(dc::idle_dequant_override, dc::set_idle_dequant_override);
  latentkv::testing::RestoreSwitch<bool> restore_groups(dc::token_groups_allowed, dc::set_token_groups_allowed);
  struct Shape { int64_t b, s_q, h_q, max_len; bool groups; };
  const Shape shapes[] = {{4, 1, 16, 700, true}, {4, 1, 16, 600, false}, {3, 1, 32, 500, true}, {3, 1, 40, 400, true},
                          {4, 2, 8, 300, true},  {4, 5, 3, 200, true},   {1, 1, 16, 7000, true}};
  int n = 0;
  for (const Shape& sh : shapes) {
    const DenseWorkloadOptions o = variant_dense(sh.b, sh.s_q, sh.h_q, sh.max_len, true, 2700 + n++);
    const std::string label = "v32_fp8 b" + std::to_string(sh.b) + " sq" + std::to_string(sh.s_q) + " h" +
                              std::to_string(sh.h_q) + " len" + std::to_string(sh.max_len) +
                              (sh.groups ? "" : " one group");
    dc::set_token_groups_allowed(sh.groups);
    dc::set_idle_dequant_override(0);
    check_dense(o, "equal dequantization shares: dense " + label);
    DenseWorkload w = latentkv::testing::make_dense_workload(o);
    const DenseResult half = rerun_dense(w);
    dc::set_idle_dequant_override(1);
    expect_same(half, rerun_dense(w), label + " idle warps dequantize more");
  }
}

// CTAs of at most 16 rows run two token groups in the portable kernel
// (decode::cuda::token_groups_pay): dense decode with 16-bit and v32_fp8 pages (h_q 16 and 11 alone,
// packed 2 x 8 and 5 x 3 query tokens, causal, a split case) and prefill (h_q 16 and 12 with sink,
// lengths and adversarial indices), each against the oracle with the groups and without.
TEST(AttentionCuda, TokenGroups) {
  REQUIRE_GPU();
  UseKernel use(KernelChoice::kPortable);
  // 16-bit keys on sm_90 take score and value warps before token groups; off here, so that the
  // groups run on every device.
  latentkv::testing::RestoreSwitch<bool> restore_groups(latentkv::decode::cuda::token_groups_allowed,
                                                         latentkv::decode::cuda::set_token_groups_allowed);
  latentkv::testing::RestoreSwitch<bool> restore_roles(latentkv::decode::cuda::roles_allowed,
                                                        latentkv::decode::cuda::set_roles_allowed);
  latentkv::decode::cuda::set_roles_allowed(false);
  auto both = [](auto&& check) {
    latentkv::decode::cuda::set_token_groups_allowed(false);
    check(std::string("one group: "));
    latentkv::decode::cuda::set_token_groups_allowed(true);
    check(std::string("token groups: "));
  };
  struct Shape { int64_t b, s_q, h_q, max_len; };
  const Shape shapes[] = {{4, 1, 16, 700}, {3, 1, 11, 500}, {4, 2, 8, 300}, {4, 5, 3, 200}, {1, 1, 16, 7000}};
  int n = 0;
  for (const Shape& sh : shapes)
    for (int variant = 0; variant < 3; ++variant) {
      DenseWorkloadOptions o;
      o.b = sh.b;
      o.s_q = sh.s_q;
      o.h_q = sh.h_q;
      o.d_qk = variant == 1 ? 512 : 576;
      o.page_size = 53;
      o.max_len = sh.max_len;
      o.f16 = variant == 1;
      o.fp8 = variant == 2;
      o.causal = true;
      o.garbage_block_table = true;
      o.seed = 2100 + n++;
      const std::string label = std::string(variant == 0 ? "bf16" : variant == 1 ? "f16 d512" : "v32_fp8") + " b" +
                                std::to_string(sh.b) + " sq" + std::to_string(sh.s_q) + " h" +
                                std::to_string(sh.h_q) + " len" + std::to_string(sh.max_len);
      both([&](const std::string& how) { check_dense(o, how + "dense " + label); });
    }
  for (int64_t h : {16, 12}) {
    const PrefillWorkloadOptions o = variant_prefill(40, h, h == 16 ? 576 : 512, 2200 + static_cast<int>(h));
    both([&](const std::string& how) { check_prefill(o, how + "prefill h" + std::to_string(h)); });
  }
}

// kv rows past 4 GiB: each case (with adversarial index values) is run once as made and once with
// kv placed beyond 4.5 GiB in a kv that many rows longer (every other byte NaN) and its indices
// shifted by as many rows; each kernel must give the same bytes. A row offset computed in 32 bits
// would wrap into the NaN rows.
TEST(PrefillCuda, RowsPast4GiB) {
  REQUIRE_GPU();
  DeviceArena arena(kFarOffsetBytes + (size_t{64} << 20), 0xff);
  if (!arena.get()) GTEST_SKIP() << "the device lacks 4.6 GiB of free memory";
  int n = 0;
  for (KernelChoice k : kernels()) {
    UseKernel use(k);
    for (int64_t d_qk : {576, 512})
      for (int64_t h_q : {16, 128}) {
        PrefillWorkload w = latentkv::testing::make_prefill_workload(variant_prefill(5, h_q, d_qk, 2200 + n++));
        const std::string label = g_kernel + " d_qk " + std::to_string(d_qk) + " h_q " + std::to_string(h_q);
        w.poison_outputs();
        const PrefillResult near = run_prefill_gpu(w);
        const int64_t row_bytes = d_qk * 2, skip = far_rows(row_bytes);
        ASSERT_LE(skip + w.s_kv, INT32_MAX) << label;
        PrefillWorkload far = w;
        // Every index that can move does: the valid ones, and the adversarial s_kv, which stays one
        // past the end (INT_MAX, negative ones stay invalid as they are).
        for (int32_t& v : far.indices)
          if (v >= 0 && v <= INT32_MAX - skip) v = static_cast<int32_t>(v + skip);
        far.poison_outputs();
        bool placed = false;
        const PrefillResult got = run_prefill_gpu(far, [&](SparsePrefillArgs& a) {
          placed = place_far(arena, w.kv.data(), w.kv.size() * 2, row_bytes, skip, a.kv);
        });
        ASSERT_TRUE(placed) << label;
        std::printf("[prefill] %-32s kv rows past %.1f GiB: %s\n", label.c_str(),
                    static_cast<double>(skip) * row_bytes / (1 << 30), got.out == near.out ? "same bytes" : "DIFFERENT");
        EXPECT_EQ(got.out, near.out) << label;
        EXPECT_EQ(0, std::memcmp(got.lse.data(), near.lse.data(), near.lse.size() * 4)) << label;
        EXPECT_EQ(0, std::memcmp(got.max_logits.data(), near.max_logits.data(), near.max_logits.size() * 4)) << label;
      }
  }
}

// Pages past 4 GiB: each case is run once as made and once with its cache placed beyond 4.5 GiB in
// a cache that many pages longer (every other byte NaN) and its block-table entries for real pages
// shifted by as many pages (the garbage entries past each request's pages stay); each kernel must
// give the same bytes, for 16-bit and v32_fp8 pages.
TEST(DenseCuda, PagesPast4GiB) {
  REQUIRE_GPU();
  DeviceArena arena(kFarOffsetBytes + (size_t{64} << 20), 0xff);
  if (!arena.get()) GTEST_SKIP() << "the device lacks 4.6 GiB of free memory";
  int n = 0;
  for (KernelChoice k : kernels()) {
    UseKernel use(k);
    for (bool fp8 : {false, true})
      for (int64_t h_q : {16, 128}) {
        DenseWorkload w = latentkv::testing::make_dense_workload(variant_dense(3, 2, h_q, 700, fp8, 2300 + n++));
        const std::string label = g_kernel + (fp8 ? " v32_fp8" : " bf16") + " h_q " + std::to_string(h_q);
        w.poison_outputs();
        const DenseResult near = run_dense_gpu(w);
        const int64_t page_bytes = fp8 ? w.page_stride_fp8 : w.opt.page_size * w.opt.h_kv * w.opt.d_qk * 2;
        const int64_t far_pages = far_rows(page_bytes);
        DenseWorkload far = w;
        latentkv::testing::shift_valid(far.block_table, w.num_pages, far_pages);
        far.poison_outputs();
        bool placed = false;
        const DenseResult got = run_dense_gpu(far, [&](DenseDecodeArgs& a) {
          placed = fp8 ? place_far(arena, w.k_cache_fp8.data(), w.k_cache_fp8.size(), page_bytes, far_pages, a.k_cache)
                       : place_far(arena, w.k_cache.data(), w.k_cache.size() * 2, page_bytes, far_pages, a.k_cache);
        });
        ASSERT_TRUE(placed) << label;
        std::printf("[dense] %-32s pages past %.1f GiB: %s\n", label.c_str(),
                    static_cast<double>(far_pages) * page_bytes / (1 << 30), got.out == near.out ? "same bytes" : "DIFFERENT");
        expect_same(got, near, label + " (pages past 4 GiB)");
      }
  }
}

// Queries and outputs past 4 GiB: query row 1's (request 1's) q, out, lse and max_logits rows
// start 4.5 GiB after row 0's, through first-dimension strides that long; each kernel must give
// the same bytes as with compact tensors, for sparse prefill and dense decode.
TEST(AttentionCuda, QueriesAndOutputsPast4GiB) {
  REQUIRE_GPU();
  using latentkv::testing::DeviceSpreadRows;
  int n = 0;
  for (KernelChoice k : kernels()) {
    UseKernel use(k);
    for (int64_t h_q : {16, 128}) {
      {
        PrefillWorkload w = latentkv::testing::make_prefill_workload(variant_prefill(2, h_q, 576, 2600 + n++));
        const std::string label = g_kernel + " prefill h_q " + std::to_string(h_q);
        w.poison_outputs();
        const PrefillResult near = run_prefill_gpu(w);
        const DeviceSpreadRows q(2, h_q * 576 * 2), out(2, h_q * 512 * 2), mx(2, h_q * 4), lse(2, h_q * 4);
        if (!q.ok() || !out.ok() || !mx.ok() || !lse.ok()) GTEST_SKIP() << "the device lacks 4 x 4.5 GiB of free memory";
        ASSERT_TRUE(q.put(w.q.data())) << label;
        run_prefill_gpu(w, [&](SparsePrefillArgs& a) {
          a.q = q.view<uint16_t>(DType::bf16, {2, h_q, 576});
          a.out = out.view<uint16_t>(DType::bf16, {2, h_q, 512});
          a.max_logits = mx.view<float>(DType::f32, {2, h_q});
          a.lse = lse.view<float>(DType::f32, {2, h_q});
        });
        const std::vector<uint16_t> got = out.gather<uint16_t>();
        std::printf("[prefill] %-32s q and outputs past 4 GiB: %s\n", label.c_str(), got == near.out ? "same bytes" : "DIFFERENT");
        EXPECT_EQ(got, near.out) << label;
        const std::vector<float> got_lse = lse.gather<float>(), got_mx = mx.gather<float>();
        EXPECT_EQ(0, std::memcmp(got_lse.data(), near.lse.data(), near.lse.size() * 4)) << label;
        EXPECT_EQ(0, std::memcmp(got_mx.data(), near.max_logits.data(), near.max_logits.size() * 4)) << label;
      }
      for (bool fp8 : {false, true}) {
        DenseWorkload w = latentkv::testing::make_dense_workload(variant_dense(2, 2, h_q, 400, fp8, 2700 + n++));
        const std::string label = g_kernel + (fp8 ? " dense v32_fp8" : " dense bf16") + " h_q " + std::to_string(h_q);
        w.poison_outputs();
        const DenseResult near = run_dense_gpu(w);
        const int64_t per_b = 2 * h_q;
        const DeviceSpreadRows q(2, per_b * 576 * 2), out(2, per_b * 512 * 2), lse(2, per_b * 4);
        if (!q.ok() || !out.ok() || !lse.ok()) GTEST_SKIP() << "the device lacks 3 x 4.5 GiB of free memory";
        ASSERT_TRUE(q.put(w.q.data())) << label;
        run_dense_gpu(w, [&](DenseDecodeArgs& a) {
          a.q = q.view<uint16_t>(DType::bf16, {2, 2, h_q, 576});
          a.out = out.view<uint16_t>(DType::bf16, {2, 2, h_q, 512});
          a.lse = lse.view<float>(DType::f32, {2, h_q, 2});
        });
        const DenseResult got{out.gather<uint16_t>(), lse.gather<float>()};
        std::printf("[dense] %-32s q and outputs past 4 GiB: %s\n", label.c_str(), got.out == near.out ? "same bytes" : "DIFFERENT");
        expect_same(got, near, label + " (rows past 4 GiB)");
      }
    }
  }
}
