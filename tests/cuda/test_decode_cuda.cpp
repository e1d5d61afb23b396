// sparse_decode on the GPU against the float64 CPU oracle: a FlashMLA-style grid of shapes, both
// cache formats, the optional features, the corner cases (all indices invalid, zero lengths,
// infinite sinks, adversarial index values, NaN in unattended slots), plan reuse, bitwise
// determinism, and records past 4 GiB. Runs only where a CUDA device exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/switches.h"
#include "cuda_common/bench.h"
#include "latentkv/decode.h"
#include "latentkv/error.h"
#include "decode/cuda/launch.h"
#include "decode/sm90/launch.h"
#include "formats/record_codec.h"
#include "testing/decode_workload.h"
#include "test_util.h"

using namespace latentkv;
using latentkv::testing::DecodeWorkload;
using latentkv::testing::DecodeWorkloadOptions;
using latentkv::testing::DeviceBuffer;
using latentkv::testing::DeviceArena;
using latentkv::testing::far_rows;
using latentkv::testing::kFarOffsetBytes;
using latentkv::testing::place_far;

namespace {

struct GpuResult {
  std::vector<uint16_t> out;
  std::vector<float> lse;
};

// A workload's tensors copied to the device, and its arguments pointing at them.
struct OnDevice {
  DeviceBuffer<uint16_t> q, out;
  DeviceBuffer<uint8_t> kv, extra_kv;
  DeviceBuffer<int32_t> idx, eidx, len, elen;
  DeviceBuffer<float> sink, lse;
  SparseDecodeArgs args;

  explicit OnDevice(DecodeWorkload& w)
      : q(w.q), out(w.out), kv(w.kv), extra_kv(w.extra_kv.empty() ? std::vector<uint8_t>(16) : w.extra_kv),
        idx(w.indices), eidx(w.extra_indices.empty() ? std::vector<int32_t>(1) : w.extra_indices),
        len(w.topk_length.empty() ? std::vector<int32_t>(1) : w.topk_length),
        elen(w.extra_topk_length.empty() ? std::vector<int32_t>(1) : w.extra_topk_length),
        sink(w.sink.empty() ? std::vector<float>(1) : w.sink), lse(w.lse), args(w.args()) {
    auto move = [](TensorView& t, void* p) {
      if (t.data) {
        t.data = p;
        t.device = Device::cuda(0);
      }
    };
    move(args.q, q.get());
    move(args.k_cache, kv.get());
    move(args.indices, idx.get());
    move(args.topk_length, len.get());
    move(args.attn_sink, sink.get());
    move(args.extra_k_cache, extra_kv.get());
    move(args.extra_indices, eidx.get());
    move(args.extra_topk_length, elen.get());
    move(args.out, out.get());
    move(args.lse, lse.get());
  }
};

// Copies the workload to the device, runs sparse_decode there, returns out and lse. Right behind the
// call, on its stream, out and lse are also copied aside: a kernel queued after the call must see
// what the call left (with PDL, the call's last kernel may complete only after all of its others),
// so the copies must equal the results read after synchronising.
// exact_workspace: the call gets a workspace of exactly sparse_decode_workspace_bytes(*plan) bytes
// (NaN bytes before the run) instead of latentkv's cached one, which only grows.
// graph_replays > 0: the call and the copies are captured on a stream of their own into a CUDA graph
// (with an exact workspace), which is then replayed that many times with the outputs and the
// workspace poisoned before each replay; every replay must give the first one's bytes, and the last
// is returned.
GpuResult run_gpu(DecodeWorkload& w, const DecodePlan* plan = nullptr, bool exact_workspace = false,
                  int graph_replays = 0) {
  OnDevice d(w);
  SparseDecodeArgs a = d.args;
  DeviceBuffer<uint16_t>& out = d.out;
  DeviceBuffer<float>& lse = d.lse;
  DeviceBuffer<uint16_t> out_after(w.out);
  DeviceBuffer<float> lse_after(w.lse);
  a.plan = plan;
  DeviceBuffer<uint8_t> ws;
  std::vector<uint8_t> ws_poison;
  if ((exact_workspace || graph_replays > 0) && plan) {
    a.workspace_bytes = sparse_decode_workspace_bytes(*plan);
    ws_poison.assign(a.workspace_bytes, 0xff);
    ws.upload(ws_poison);
    a.workspace = ws.get();
  }
  // The call, then the copies behind it on its stream.
  auto call = [&](cudaStream_t stream) {
    sparse_decode(a, stream, DecodeImpl::kCuda);
    EXPECT_EQ(cudaMemcpyAsync(out_after.get(), out.get(), out.size() * 2, cudaMemcpyDeviceToDevice, stream), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(lse_after.get(), lse.get(), lse.size() * 4, cudaMemcpyDeviceToDevice, stream), cudaSuccess);
  };
  auto results = [&](const std::string& label) {
    GpuResult r{out.download(), lse.download()};
    EXPECT_EQ(out_after.download(), r.out) << label << ": out as a kernel queued after the call saw it";
    const std::vector<float> seen = lse_after.download();
    EXPECT_EQ(0, std::memcmp(seen.data(), r.lse.data(), r.lse.size() * 4))
        << label << ": lse as a kernel queued after the call saw it";
    return r;
  };
  if (graph_replays <= 0) {
    call(nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return results("eager");
  }
  if (!plan) {
    ADD_FAILURE() << "graph replays need a plan (for an exact workspace)";
    return {};
  }
  cudaStream_t stream = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  GpuResult first, r;
  bool ok = cudaStreamCreate(&stream) == cudaSuccess &&
            cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  if (ok) {
    call(stream);
    ok = cudaStreamEndCapture(stream, &graph) == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  }
  EXPECT_TRUE(ok) << "capturing the call into a CUDA graph failed";
  for (int i = 0; ok && i < graph_replays; ++i) {
    w.poison_outputs();
    out.upload(w.out);
    lse.upload(w.lse);
    out_after.upload(w.out);
    lse_after.upload(w.lse);
    ws.upload(ws_poison);
    EXPECT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    r = results("graph replay " + std::to_string(i));
    if (i == 0) first = r;
    EXPECT_EQ(first.out, r.out) << "graph replay " << i;
    EXPECT_EQ(0, std::memcmp(first.lse.data(), r.lse.data(), r.lse.size() * 4)) << "graph replay " << i;
  }
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (stream) cudaStreamDestroy(stream);
  return r;
}

GpuResult run_oracle(DecodeWorkload& w) {
  w.poison_outputs();
  sparse_decode(w.args(), nullptr, DecodeImpl::kCpuOracle);
  return {w.out, w.lse};
}

// lse: the same class (+inf / finite) everywhere, finite values within fp32 accumulation error:
// 1e-5 + 1e-5 |ref|, the CPU fast path's bound (the CUDA grid's worst logged error: 2.9e-6).
int64_t lse_errors(const std::vector<float>& got, const std::vector<float>& ref, double* max_err) {
  int64_t bad = 0;
  *max_err = 0;
  for (size_t k = 0; k < ref.size(); ++k) {
    if (std::isinf(ref[k]) || std::isinf(got[k]) || std::isnan(got[k]) || std::isnan(ref[k])) {
      bad += !(got[k] == ref[k]);
      continue;
    }
    const double e = std::fabs(static_cast<double>(got[k]) - ref[k]);
    *max_err = std::max(*max_err, e);
    bad += e > 1e-5 + 1e-5 * std::fabs(ref[k]);
  }
  return bad;
}

// A GPU result against a reference (the oracle's, or another kernel's): no NaN, the reference's
// lonely-row masks, lse within fp32 accumulation error, out within bf16 rounding.
void expect_close(const DecodeWorkload& w, const GpuResult& got, const GpuResult& ref, const std::string& label) {
  const auto d = latentkv::testing::compare_decode(w, got.out, got.lse, ref.out, ref.lse);
  double lse_max_err = 0;
  const int64_t lse_bad = lse_errors(got.lse, ref.lse, &lse_max_err);
  std::printf("[decode] %-52s max_rel %.2e cos %.7f lse_err %.1e masks %lld nan %lld\n",
              label.c_str(), d.max_rel, d.cos_sim, lse_max_err,
              static_cast<long long>(d.mask_mismatch), static_cast<long long>(d.nan_out));
  EXPECT_EQ(d.nan_out, 0) << label;
  EXPECT_EQ(d.mask_mismatch, 0) << label;
  EXPECT_EQ(lse_bad, 0) << label << " (max lse error " << lse_max_err << ")";
  EXPECT_LE(d.max_rel, latentkv::testing::kDecodeMaxRelTol) << label;
  EXPECT_GE(d.cos_sim, latentkv::testing::kDecodeCosTol) << label;
}

// (plan: the split plan of the GPU run; null: the planner's for this device.)
void check_case(const DecodeWorkloadOptions& o, const std::string& label, const DecodePlan* plan = nullptr) {
  DecodeWorkload w = latentkv::testing::make_decode_workload(o);
  const GpuResult ref = run_oracle(w);
  w.poison_outputs();
  expect_close(w, run_gpu(w, plan), ref, label);
}

using latentkv::decode::cuda::KernelChoice;

// The kernels this device runs: the portable one where its layout fits (every device but the 99 KB
// parts), the compact one always, the Hopper one on compute capability 9.0.
std::vector<KernelChoice> kernels() {
  std::vector<KernelChoice> k;
  if (latentkv::testing::portable_kernel_fits()) k.push_back(KernelChoice::kPortable);
  k.push_back(KernelChoice::kCompact);
  if (latentkv::decode::sm90::usable(0)) k.push_back(KernelChoice::kSm90);
  return latentkv::testing::only_listed_kernels(k);
}
const char* kernel_name(KernelChoice k) {
  return k == KernelChoice::kSm90 ? "sm90" : k == KernelChoice::kCompact ? "compact" : "portable";
}

// Forces one kernel for its lifetime.
struct UseKernel {
  explicit UseKernel(KernelChoice k) { latentkv::decode::cuda::set_kernel_choice(k); }
  ~UseKernel() { latentkv::decode::cuda::set_kernel_choice(KernelChoice::kAuto); }
};

#define REQUIRE_GPU() \
  if (!latentkv::testing::has_cuda_device()) GTEST_SKIP() << "no CUDA device"

// The cases on which the kernel's variants (layouts, copy issuers) are compared:
// s_q 2 on 61-token pages with lengths and a sink, v4's extra cache on 2-token pages, and, where
// `hostile`, adversarial index values and NaN in the unattended slots.
DecodeWorkloadOptions variant_case(CacheFormat f, int64_t b, int64_t h_q, int64_t topk, bool hostile, uint64_t seed) {
  DecodeWorkloadOptions o;
  o.format = f;
  o.b = b;
  o.s_q = 2;
  o.h_q = h_q;
  o.topk = topk;
  o.page_size = 61;
  o.topk_length = true;
  o.sink = true;
  o.adversarial = hostile;
  o.nan_unused = hostile;
  o.extra = f != CacheFormat::v32_fp8;
  o.extra_topk = 100;
  o.extra_page_size = 2;
  o.seed = seed;
  return o;
}

// The formats the variant tests take: each cache format, and V4.1's fp4 extra cache beside v41_fp8
// (variant_case gives v4 and v41 an extra cache).
const std::pair<CacheFormat, std::optional<CacheFormat>> kVariantFormats[] = {
    {CacheFormat::v32_fp8, std::nullopt},
    {CacheFormat::v4_fp8, std::nullopt},
    {CacheFormat::v41_fp8, std::nullopt},
    {CacheFormat::v41_fp8, CacheFormat::v41_fp4}};
std::string variant_name(const DecodeWorkloadOptions& o) {
  return std::string(format_info(o.format).name) + (o.extra_format ? std::string("+") + format_info(*o.extra_format).name : "");
}

// The workload run again on the GPU, its outputs poisoned first.
GpuResult rerun_gpu(DecodeWorkload& w, const DecodePlan* plan = nullptr, bool exact_workspace = false,
                    int graph_replays = 0) {
  w.poison_outputs();
  return run_gpu(w, plan, exact_workspace, graph_replays);
}

// A one-launch plan of 256 candidates per split (the main and extra caches' candidates together).
DecodePlan splits_of_256(const DecodeWorkloadOptions& o) {
  const int64_t total = o.topk + (o.extra ? o.extra_topk : 0);
  DecodePlan plan = plan_decode(o.b, o.s_q, o.h_q, o.topk, o.extra ? o.extra_topk : 0, 1);
  plan.keys_per_split = 256;
  plan.num_splits = (total + 255) / 256;
  plan.unsplit_b = 0;
  return plan;
}

// Two runs gave the same bytes.
void expect_same(const GpuResult& a, const GpuResult& b, const std::string& label) {
  EXPECT_EQ(a.out, b.out) << label;
  EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4)) << label;
}

// One kernel's result (`kernel` names it in the printed line) within the oracle's tolerance, with
// the oracle's lonely-row masks and no NaN.
void expect_near_oracle(const DecodeWorkload& w, const GpuResult& got, const GpuResult& ref, const char* kernel,
                        const std::string& label) {
  const auto d = latentkv::testing::compare_decode(w, got.out, got.lse, ref.out, ref.lse);
  std::printf("[decode] %-8s %-44s max_rel %.2e cos %.7f\n", kernel, label.c_str(), d.max_rel, d.cos_sim);
  EXPECT_LE(d.max_rel, latentkv::testing::kDecodeMaxRelTol) << kernel << " " << label;
  EXPECT_GE(d.cos_sim, latentkv::testing::kDecodeCosTol) << kernel << " " << label;
  EXPECT_EQ(d.mask_mismatch, 0) << kernel << " " << label;
  EXPECT_EQ(d.nan_out, 0) << kernel << " " << label;
}

}  // namespace

TEST(DecodeCuda, FlashMlaStyleGrid) {
  REQUIRE_GPU();
  struct Shape { int64_t b, s_q, topk, page, h_q; };
  // A sample of FlashMLA's grid sized so the float64 oracle stays within seconds.
  const Shape shapes[] = {
      {4, 1, 64, 2, 1},     {4, 3, 64, 64, 16},   {74, 1, 64, 69, 64},  {4, 3, 576, 61, 128},
      {74, 3, 576, 61, 16}, {4, 1, 2048, 64, 64}, {4, 3, 2048, 576, 16}, {321, 1, 64, 64, 1},
      {74, 1, 2048, 64, 128}, {321, 3, 64, 2, 16},
  };
  // Each case's oracle runs once; every kernel is held to it, and the Hopper kernel to the portable
  // one directly as well (issue: identical within bf16 rounding on the whole grid).
  const std::vector<KernelChoice> ks = kernels();
  int n = 0;
  for (const Shape& s : shapes)
    for (CacheFormat f : {CacheFormat::v32_fp8, CacheFormat::v4_fp8, CacheFormat::v41_fp8})
      for (int features = 0; features < 2; ++features) {
        DecodeWorkloadOptions o;
        o.b = s.b;
        o.s_q = s.s_q;
        o.topk = s.topk;
        o.page_size = s.page;
        o.h_q = s.h_q;
        o.format = f;
        o.topk_length = features;
        o.sink = features;
        o.extra = features;
        o.extra_topk = 512;
        o.extra_page_size = (n % 2) ? 2 : 64;
        o.extra_topk_length = features;
        o.seed = 100 + n++;
        const std::string label = std::string(format_info(f).name) + " b" + std::to_string(s.b) + " sq" +
                                  std::to_string(s.s_q) + " topk" + std::to_string(s.topk) + " P" +
                                  std::to_string(s.page) + " h" + std::to_string(s.h_q) +
                                  (features ? " +len+sink+extra" : "");
        DecodeWorkload w = latentkv::testing::make_decode_workload(o);
        const GpuResult ref = run_oracle(w);
        GpuResult portable, sm90;
        for (KernelChoice kernel : ks) {
          UseKernel use(kernel);
          const GpuResult got = rerun_gpu(w);
          expect_close(w, got, ref, std::string(kernel_name(kernel)) + " " + label);
          if (kernel == KernelChoice::kPortable) portable = got;
          if (kernel == KernelChoice::kSm90) sm90 = got;
        }
        if (!portable.out.empty() && !sm90.out.empty()) expect_close(w, sm90, portable, "sm90 vs portable " + label);
      }
}

// h_q 70: not a multiple of 64, padded head rows inside the kernel; h_q 16: the sm90 kernel's
// narrow form (decode/sm90/narrow.cuh), where the head count fits one 16-row CTA; h_q 32: its
// 32-row instance, turned on here with the narrow kernel (decode/sm90/launch.h narrow_wide_rows).
TEST(DecodeCuda, CornerCases) {
  REQUIRE_GPU();
  namespace s9 = latentkv::decode::sm90;
  latentkv::testing::RestoreSwitch<bool> restore_wide(s9::narrow_wide_rows, s9::set_narrow_wide_rows);
  latentkv::testing::RestoreSwitch<bool> restore_narrow(s9::narrow_rows, s9::set_narrow_rows);
  const bool narrow_as_set = s9::narrow_rows();
  for (KernelChoice kernel : kernels())
  for (int64_t h_q : {70, 16, 32})
  for (CacheFormat f : {CacheFormat::v32_fp8, CacheFormat::v4_fp8, CacheFormat::v41_fp8}) {
    UseKernel use(kernel);
    s9::set_narrow_wide_rows(h_q == 32);
    s9::set_narrow_rows(narrow_as_set || h_q == 32);
    const std::string fmt = std::string(kernel_name(kernel)) + " h_q " + std::to_string(h_q) + " " + format_info(f).name;
    DecodeWorkloadOptions o;
    o.b = 6;
    o.s_q = 2;
    o.h_q = h_q;
    o.topk = 200;
    o.page_size = 53;
    o.format = f;
    o.topk_length = true;
    o.sink = true;
    // With and without an extra cache: every index of both invalid; both lengths 0 on even requests.
    for (bool extra : {false, true}) {
      DecodeWorkloadOptions c = o;
      c.extra = extra;
      c.extra_topk = 100;
      c.extra_page_size = 2;
      c.extra_topk_length = extra;
      c.all_invalid = true;
      check_case(c, fmt + " all indices invalid" + (extra ? " +extra" : ""));
      c.all_invalid = false;
      c.zero_lengths = true;
      check_case(c, fmt + " zero lengths" + (extra ? " +extra" : ""));
    }
    for (float s : {INFINITY, -INFINITY}) {
      DecodeWorkloadOptions c = o;
      c.sink_special = s;
      check_case(c, fmt + (s > 0 ? " sink +inf" : " sink -inf"));
    }
    {
      DecodeWorkloadOptions c = o;
      c.adversarial = true;
      c.nan_unused = true;
      c.extra = f != CacheFormat::v32_fp8;
      c.extra_topk = 100;
      c.extra_page_size = 2;
      check_case(c, fmt + " adversarial indices, NaN unused");
      // Every out-of-range value is skipped exactly as -1 is: the same bytes as the workload with
      // -1 in their place (as the CPU suite's DecodeCorner.AdversarialIndicesAreSkippedLikeMinusOne).
      DecodeWorkload w = latentkv::testing::make_decode_workload(c);
      DecodeWorkload minus_one = w;
      ASSERT_GT(minus_one.invalid_indices_to_minus_one(), 0) << fmt;
      expect_same(rerun_gpu(w), rerun_gpu(minus_one), fmt + " adversarial indices against -1");
    }
    {
      DecodeWorkloadOptions c = o;
      c.topk = 1;
      c.h_q = 1;
      check_case(c, fmt + " topk 1 h_q 1");
    }
  }
}

// q and out rows not aligned to 16 bytes (the kernels move them with 16-byte accesses) are refused
// on CUDA with the address, before anything is launched: each view starts 2 bytes into a buffer of
// its own, and the outputs, in buffers of 0x7f bytes, stay so.
TEST(DecodeCuda, MisalignedRowsAreNamed) {
  REQUIRE_GPU();
  using latentkv::testing::view_at;
  DecodeWorkloadOptions o;
  o.h_q = 16;
  o.s_q = 2;
  DecodeWorkload w = latentkv::testing::make_decode_workload(o);
  for (const std::string name : {"q", "out"}) {
    OnDevice d(w);
    SparseDecodeArgs a = d.args;
    DeviceArena moved((name == "q" ? w.q.size() : w.out.size()) * 2 + 16, 0x7f), out(w.out.size() * 2, 0x7f),
        lse(w.lse.size() * 4, 0x7f);
    ASSERT_TRUE(moved.get() && out.get() && lse.get());
    a.out = view_at(a.out, out.get());
    a.lse = view_at(a.lse, lse.get());
    TensorView& t = name == "q" ? a.q : a.out;
    t = view_at(t, moved.get() + 2);
    const std::string msg = latentkv::testing::error_of([&] { sparse_decode(a, nullptr, DecodeImpl::kCuda); });
    EXPECT_NE(msg.find("sparse_decode on CUDA needs " + name + " rows aligned to 16 bytes, got address % 16 = 2"),
              std::string::npos)
        << name << ": got \"" << msg << "\"";
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_TRUE(out.all(0x7f) && lse.all(0x7f) && moved.all(0x7f)) << name;
  }
}

// DeepSeek V4.1's v41_fp4 extra cache beside a v41_fp8 cache (KeyStorage::kV41Mixed) on the
// portable kernel, on the compact one and on the Hopper one (its 64-row kernel for h_q 64-128, its narrow kernel for h_q
// 1 and 16; records.cuh reads fp4 records by 4 lanes per token) against the float64 oracle (the layouts and
// copy-warp counts: WideAndNarrowLayoutsAgreeBitwise, CopyWarpsAgreeBitwise): main topk a
// multiple of 64 and not (a block of candidates holding both kinds), lengths, sinks, hostile
// indices with NaN in unattended records (fp4 records' NaN is in their e4m3 scales), all indices
// invalid, zero lengths, split plans, pages whose last record ends the allocation (memcheck runs
// this test); reruns bitwise equal.
TEST(DecodeCuda, Fp4ExtraCacheAgainstTheOracle) {
  REQUIRE_GPU();
  struct Case {
    int64_t b, s_q, h_q, topk, page, extra_topk, extra_page;
    bool hostile, lengths;
  };
  const Case cases[] = {
      {3, 2, 64, 128, 64, 512, 64, false, false}, {4, 1, 16, 100, 61, 64, 2, true, true},
      {2, 3, 70, 64, 53, 100, 7, true, true},     {20, 2, 128, 128, 256, 1024, 2, false, true},
      {5, 1, 1, 1, 1, 1, 1, true, false},
  };
  for (KernelChoice kernel : kernels()) {
    UseKernel use(kernel);
    int n = 0;
    for (const Case& c : cases) {
      DecodeWorkloadOptions o;
      o.format = CacheFormat::v41_fp8;
      o.extra = true;
      o.extra_format = CacheFormat::v41_fp4;
      o.b = c.b;
      o.s_q = c.s_q;
      o.h_q = c.h_q;
      o.topk = c.topk;
      o.page_size = c.page;
      o.extra_topk = c.extra_topk;
      o.extra_page_size = c.extra_page;
      o.adversarial = o.nan_unused = c.hostile;
      o.topk_length = o.extra_topk_length = c.lengths;
      o.sink = n % 2 == 0;
      o.seed = 700 + n;
      const std::string label = std::string(kernel_name(kernel)) + " fp4 extra case " + std::to_string(n++);
      check_case(o, label);
      DecodeWorkload w = latentkv::testing::make_decode_workload(o);
      const DecodePlan plan = splits_of_256(o);
      const GpuResult ref = run_oracle(w);
      const GpuResult a = rerun_gpu(w, &plan, true), b = rerun_gpu(w, &plan, true);
      expect_close(w, a, ref, label + " splits of 256");
      expect_same(a, b, label + " rerun");
      DecodeWorkloadOptions z = o;
      z.all_invalid = true;
      check_case(z, label + " all invalid");
      z.all_invalid = false;
      z.zero_lengths = z.topk_length = z.extra_topk_length = true;
      check_case(z, label + " zero lengths");
    }
  }
}

TEST(DecodeCuda, PlanReuseSplitsAndDeterminism) {
  REQUIRE_GPU();
  for (KernelChoice kernel : kernels()) {
  UseKernel use(kernel);
  SCOPED_TRACE(kernel_name(kernel));
  DecodeWorkloadOptions o;
  o.b = 2;
  o.s_q = 2;
  o.h_q = 64;
  o.topk = 2048;
  o.format = CacheFormat::v32_fp8;
  o.topk_length = true;
  o.sink = true;
  DecodeWorkload w = latentkv::testing::make_decode_workload(o);
  const GpuResult ref = run_oracle(w);
  // A plan with many splits exercises the combine; the same plan serves a second "layer".
  DecodePlan plan = plan_decode(o.b, o.s_q, o.h_q, o.topk, 0, 132);
  EXPECT_GT(plan.num_splits, 1);
  w.poison_outputs();
  const GpuResult first = run_gpu(w, &plan);
  const auto d = latentkv::testing::compare_decode(w, first.out, first.lse, ref.out, ref.lse);
  EXPECT_LE(d.max_rel, latentkv::testing::kDecodeMaxRelTol);
  EXPECT_EQ(d.mask_mismatch, 0);
  for (int run = 0; run < 5; ++run) {
    w.poison_outputs();
    const GpuResult again = run_gpu(w, &plan);
    ASSERT_EQ(again.out, first.out) << "run " << run;
    ASSERT_EQ(0, std::memcmp(again.lse.data(), first.lse.data(), first.lse.size() * 4)) << run;
  }
  // A plan made for other shapes is refused.
  DecodePlan other = plan_decode(o.b, o.s_q, o.h_q, 1024, 0, 132);
  w.poison_outputs();
  try {
    run_gpu(w, &other);
    FAIL() << "a plan for topk 1024 was accepted for topk 2048";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("plan was made for"), std::string::npos) << e.what();
  }
  }
}

// lse in FlashMLA's layout (a [b, s_q, h_q] buffer seen as [b, h_q, s_q], heads innermost), as
// latentkv.flash_mla passes it: every kernel writes the bytes of the contiguous run, unsplit and
// through the split combine, with wide (h_q 70: a padded second head block) and narrow (h_q 16) CTAs.
TEST(DecodeCuda, LseInFlashMlaLayoutBitwise) {
  REQUIRE_GPU();
  for (KernelChoice k : kernels()) {
    UseKernel use(k);
    for (const auto& [f, extra] : kVariantFormats)
      for (int64_t h_q : {16, 70}) {
        DecodeWorkloadOptions o = variant_case(f, 3, h_q, 300, true, 40 + h_q);
        o.extra_format = extra;
        DecodeWorkload w = latentkv::testing::make_decode_workload(o);
        const DecodePlan split = splits_of_256(o);
        for (const DecodePlan* plan : {static_cast<const DecodePlan*>(nullptr), &split}) {
          const std::string label = std::string(kernel_name(k)) + " " + variant_name(o) + " h_q " +
                                    std::to_string(h_q) + (plan ? " split" : " planned per call");
          const GpuResult ref = rerun_gpu(w, plan);
          w.poison_outputs();
          OnDevice d(w);
          const int64_t b = o.b, s_q = o.s_q;
          DeviceBuffer<float> lse_t(std::vector<float>(static_cast<size_t>(b * s_q * h_q), NAN));
          SparseDecodeArgs a = d.args;
          a.plan = plan;
          a.lse = TensorView(lse_t.get(), DType::f32, {b, h_q, s_q}, {s_q * h_q, 1, h_q}, Device::cuda(0));
          sparse_decode(a, nullptr, DecodeImpl::kCuda);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << label;
          EXPECT_EQ(d.out.download(), ref.out) << label;
          EXPECT_EQ("", latentkv::testing::lse_layout_mismatch(lse_t.download(), {s_q * h_q, 1, h_q}, ref.lse, b,
                                                                h_q, s_q))
              << label;
        }
      }
  }
}

TEST(DecodeCuda, WideAndNarrowLayoutsAgreeBitwise) {
  REQUIRE_GPU();
  // Devices with more than 163 KB of shared memory per CTA dequantize the next tile while the
  // current one is multiplied (the wide layout); the narrow one serves the others. Same arithmetic
  // in the same order: the two must give the same bytes. Both layouts are the portable kernel's,
  // which sm_90 devices would not pick for bf16 queries on their own.
  UseKernel use(KernelChoice::kPortable);
  int n = 0;
  for (const auto& [f, ef] : kVariantFormats)
    for (int shape = 0; shape < 3; ++shape) {
      DecodeWorkloadOptions o = variant_case(f, shape == 2 ? 74 : 4, shape == 0 ? 70 : (shape == 1 ? 16 : 128),
                                             shape == 1 ? 2048 : 200, shape == 0, 900 + n++);
      o.extra_format = ef;
      const std::string label = variant_name(o) + " shape " + std::to_string(shape);
      DecodeWorkload w = latentkv::testing::make_decode_workload(o);
      const GpuResult ref = run_oracle(w);
      w.poison_outputs();
      const GpuResult wide = run_gpu(w);
      latentkv::decode::cuda::set_wide_layout_allowed(false);
      w.poison_outputs();
      const GpuResult narrow = run_gpu(w);
      latentkv::decode::cuda::set_wide_layout_allowed(true);
      const auto d = latentkv::testing::compare_decode(w, narrow.out, narrow.lse, ref.out, ref.lse);
      std::printf("[decode] narrow layout %-40s max_rel %.2e cos %.7f\n", label.c_str(), d.max_rel,
                  d.cos_sim);
      EXPECT_LE(d.max_rel, latentkv::testing::kDecodeMaxRelTol) << label;
      EXPECT_EQ(d.mask_mismatch, 0) << label;
      EXPECT_EQ(wide.out, narrow.out) << label;
      EXPECT_EQ(0, std::memcmp(wide.lse.data(), narrow.lse.data(), wide.lse.size() * 4)) << label;
    }
}

// On sm_90 the portable kernel's tile copies are bulk copies issued by the last 1, 2, 4 or 8 warps
// (Geometry::copy_warps): who issues them changes no arithmetic, so every count must give the
// same bytes as one issuer, which is checked against the oracle. v4_fp8 exercises the 8 scale
// bytes each issuing lane copies beside a record; 70 heads (a 64-row and a 6-row CTA), 16 heads
// (token groups), 128; partial tiles, adversarial indices, NaN-filled slots, the extra cache.
// (Elsewhere there are no bulk copies and the counts are checked all the same.)
TEST(DecodeCuda, CopyWarpsAgreeBitwise) {
  REQUIRE_GPU();
  namespace dc = latentkv::decode::cuda;
  UseKernel use(KernelChoice::kPortable);
  latentkv::testing::RestoreSwitch<int> restore(dc::copy_warps_override, dc::set_copy_warps_override);
  int n = 0;
  for (const auto& [f, ef] : kVariantFormats)
    for (int shape = 0; shape < 3; ++shape) {
      DecodeWorkloadOptions o = variant_case(f, shape == 2 ? 9 : 4, shape == 0 ? 70 : (shape == 1 ? 16 : 128),
                                             shape == 1 ? 2048 : 200, shape == 0, 950 + n++);
      o.extra_format = ef;
      const std::string label = variant_name(o) + " h" + std::to_string(o.h_q);
      dc::set_copy_warps_override(1);
      check_case(o, "copy warps 1: " + label);
      DecodeWorkload w = latentkv::testing::make_decode_workload(o);
      const GpuResult one = rerun_gpu(w);
      for (int warps : {2, 4, 8}) {
        dc::set_copy_warps_override(warps);
        expect_same(one, rerun_gpu(w), label + " copy warps " + std::to_string(warps));
      }
    }
  EXPECT_THROW(dc::set_copy_warps_override(3), Error);
}

// In the portable kernel's overlapped layout, warps 4-7 dequantize each next tile alone where they
// have no rows to multiply (Geometry::idle_dequant: CTAs of at most 16 rows, token groups). Which
// threads convert a chunk changes no arithmetic, so the results must be the bytes of equal shares,
// which are checked against the oracle; the other shapes (one group, 32 and 70 heads) must not
// change with the switch. Each format, V4.1's fp4 extra cache
// included; 16 heads with token groups and without, 32 heads (one group), and 70 heads (a 64-row
// CTA beside a 6-row one in the same launch); partial tiles, adversarial and NaN-filled slots.
TEST(DecodeCuda, IdleWarpsDequantizeBitwise) {
  REQUIRE_GPU();
  namespace dc = latentkv::decode::cuda;
  UseKernel use(KernelChoice::kPortable);
  latentkv::testing::RestoreSwitch<int> restore_idle(dc::idle_dequant_override, dc::set_idle_dequant_override);
  latentkv::testing::RestoreSwitch<bool> restore_groups(dc::token_groups_allowed, dc::set_token_groups_allowed);
  struct Shape { int64_t b, h_q, topk; bool groups, hostile; };
  const Shape shapes[] = {{4, 16, 2048, true, false}, {5, 16, 200, false, true}, {4, 32, 700, true, true},
                          {3, 70, 200, true, true},   {6, 5, 100, true, true}};
  int n = 0;
  for (const auto& [f, ef] : kVariantFormats)
    for (const Shape& sh : shapes) {
      DecodeWorkloadOptions o = variant_case(f, sh.b, sh.h_q, sh.topk, sh.hostile, 1700 + n++);
      o.extra_format = ef;
      const std::string label = variant_name(o) + " h" + std::to_string(sh.h_q) + " topk" + std::to_string(sh.topk) +
                                (sh.groups ? "" : " one group");
      dc::set_token_groups_allowed(sh.groups);
      dc::set_idle_dequant_override(0);
      check_case(o, "equal dequantization shares: " + label);
      DecodeWorkload w = latentkv::testing::make_decode_workload(o);
      const GpuResult half = rerun_gpu(w);
      dc::set_idle_dequant_override(1);
      expect_same(half, rerun_gpu(w), label + " idle warps dequantize more");
    }
  EXPECT_THROW(dc::set_idle_dequant_override(2), Error);
}

// Plans with unsplit requests (DecodePlan::unsplit_b): requests [0, unsplit_b) run unsplit in a
// launch of their own and the others split, in a second launch whose partials alone take the
// workspace. Each request must get the bytes of a single launch with its split count: the first
// unsplit_b those of the unsplit plan, the others those of the same splits for every request.
// Checked against the oracle too (v32_fp8 and v4_fp8 with the extra cache, lengths, sink,
// adversarial and NaN-filled slots, 64 and 100 heads), on each kernel; then a shape on which the
// planner itself chooses two launches for this device.
TEST(DecodeCuda, UnsplitRequestsAgreeBitwise) {
  REQUIRE_GPU();
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  for (KernelChoice kernel : kernels()) {
    UseKernel use(kernel);
    int n = 0;
    for (CacheFormat f : {CacheFormat::v32_fp8, CacheFormat::v4_fp8, CacheFormat::v41_fp8})
      for (int64_t h_q : {64, 100}) {
        const DecodeWorkloadOptions o = variant_case(f, 7, h_q, 600, n % 2 == 0, 1200 + n);
        ++n;
        const int64_t total = o.topk + (o.extra ? o.extra_topk : 0);
        const DecodePlan split = splits_of_256(o);
        DecodePlan two = split;
        two.unsplit_b = 4;
        DecodePlan one = split;
        one.num_splits = 1;
        one.keys_per_split = total;
        const std::string label = std::string(kernel_name(kernel)) + " " + format_info(f).name + " h" +
                                  std::to_string(h_q) + " " + std::to_string(split.num_splits) + " splits";
        check_case(o, "unsplit 4 of 7: " + label, &two);
        DecodeWorkload w = latentkv::testing::make_decode_workload(o);
        const GpuResult got = rerun_gpu(w, &two), whole = rerun_gpu(w, &one), parts = rerun_gpu(w, &split);
        // The same with a caller workspace of exactly the plan's size (the split requests' rows).
        expect_same(got, rerun_gpu(w, &two, true), label + " exact workspace");
        // The split and unsplit launches differ somewhere, so the comparison below can tell them apart.
        EXPECT_NE(whole.out, parts.out) << label;
        const size_t out_per = static_cast<size_t>(o.s_q * o.h_q * 512), lse_per = static_cast<size_t>(o.h_q * o.s_q);
        for (int64_t i = 0; i < o.b; ++i) {
          const GpuResult& want = i < two.unsplit_b ? whole : parts;
          EXPECT_TRUE(std::equal(got.out.begin() + i * out_per, got.out.begin() + (i + 1) * out_per,
                                 want.out.begin() + i * out_per)) << label << " request " << i;
          EXPECT_EQ(0, std::memcmp(got.lse.data() + i * lse_per, want.lse.data() + i * lse_per, lse_per * 4))
              << label << " request " << i;
        }
      }
    // V4's h_q 64 / s_q 2 with sm_count / 2 + 4 requests: whole waves of requests and 4 left over.
    DecodeWorkloadOptions o = variant_case(CacheFormat::v4_fp8, sms / 2 + 4, 64, 128, true, 1300);
    o.extra_topk = 512;
    const DecodePlan planned =
        plan_decode(o.b, o.s_q, o.h_q, o.topk, o.extra_topk, sms,
                    kernel == KernelChoice::kSm90 ? DecodePlanKernel::kSm90 : DecodePlanKernel::kPortable);
    EXPECT_GT(planned.unsplit_b, 0) << "b " << o.b << " on " << sms << " SMs";
    EXPECT_GT(planned.num_splits, 1);
    check_case(o, std::string(kernel_name(kernel)) + " v4_fp8 b" + std::to_string(o.b) + " planned: unsplit " +
                      std::to_string(planned.unsplit_b) + ", " + std::to_string(planned.num_splits) + " splits");
    DecodeWorkload w = latentkv::testing::make_decode_workload(o);
    const GpuResult first = rerun_gpu(w, &planned);
    expect_same(first, rerun_gpu(w), "planned plan and the call's own plan");
  }
}

// The combine and a plan's second launch go out with programmatic dependent launch where the device
// runs sm_90 code (decode::cuda::pdl_launches): the bytes must be those of ordinary launches, for a
// one-launch split plan and a two-launch plan (whose first launch, 5 requests over all candidates,
// outlasts the second, so a second launch that completed before it would leave poisoned rows for
// the copies run_gpu queues behind the call), with and without the combine's PDL (modes 1 and 2),
// with CTA pairs on the Hopper kernel (h_q 128), eagerly and replayed from a CUDA graph (the decode
// step is graph-capturable: no host synchronisation, no allocation with a caller workspace). Every
// run gets a fresh workspace of NaN bytes, so a combine that read partials early would show.
TEST(DecodeCuda, DependentLaunchesAndGraphsAgreeBitwise) {
  REQUIRE_GPU();
  namespace dc = latentkv::decode::cuda;
  latentkv::testing::RestoreSwitch<int> restore(dc::pdl_mode, dc::set_pdl_mode);
  latentkv::testing::RestoreSwitch<bool> restore_first(dc::first_launch_pdl, dc::set_first_launch_pdl);
  dc::set_first_launch_pdl(false);
  latentkv::testing::RestoreSwitch<bool> restore_pairs(latentkv::decode::sm90::cta_pairs,
                                                        latentkv::decode::sm90::set_cta_pairs);
  int cc_major = 0, cc_minor = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
  dc::set_pdl_mode(1);
  const bool pdl = dc::pdl_launches(0);
  std::printf("[pdl] compute capability %d.%d: launches with PDL %s\n", cc_major, cc_minor, pdl ? "on" : "off");
  // The build carries sm_90a code, so a compute capability 9.0 device must run it with PDL.
  if (cc_major * 10 + cc_minor == 90) {
    EXPECT_TRUE(pdl);
  }
  for (KernelChoice kernel : kernels()) {
    UseKernel use(kernel);
    int n = 0;
    for (CacheFormat f : {CacheFormat::v32_fp8, CacheFormat::v4_fp8, CacheFormat::v41_fp8})
      for (int64_t h_q : {64, 128})
        for (bool pairs : {false, true}) {
          if (pairs && (kernel != KernelChoice::kSm90 || h_q != 128)) continue;
          latentkv::decode::sm90::set_cta_pairs(pairs);
          const DecodeWorkloadOptions o = variant_case(f, 9, h_q, 600, n % 2 == 0, 1400 + n);
          ++n;
          DecodePlan split = splits_of_256(o), two = split;
          two.unsplit_b = 5;
          DecodeWorkload w = latentkv::testing::make_decode_workload(o);
          for (const DecodePlan* plan : {&split, &two}) {
            const std::string label = std::string(kernel_name(kernel)) + " " + format_info(f).name + " h" +
                                      std::to_string(h_q) + (pairs ? " pairs" : "") +
                                      (plan->unsplit_b ? " two launches" : " one launch") + ", " +
                                      std::to_string(plan->num_splits) + " splits";
            dc::set_pdl_mode(0);
            const GpuResult plain = rerun_gpu(w, plan, true);
            dc::set_pdl_mode(2);
            expect_same(plain, rerun_gpu(w, plan, true), label + ", PDL for second launches only");
            dc::set_pdl_mode(1);
            if (plan == &two) check_case(o, "PDL on: " + label, plan);
            expect_same(plain, rerun_gpu(w, plan, true), label + ", PDL on against off");
            expect_same(plain, rerun_gpu(w, plan, true, 3), label + ", graph replays");
            dc::set_first_launch_pdl(true);
            expect_same(plain, rerun_gpu(w, plan, true), label + ", first launches with PDL");
            expect_same(plain, rerun_gpu(w, plan, true, 3), label + ", first launches with PDL, graph replays");
            dc::set_first_launch_pdl(false);
          }
        }
  }
}

// A call's first launch with PDL (decode::cuda::first_launch_pdl): a kernel queued just ahead of the
// call, which lets its dependents in at once and writes one input (q, the indices or the cache) only
// after 200 us, must be waited for before that input is read, so out and lse equal an ordinary
// launch's. Plans of one split (no combine), of several splits in one launch, and of two launches
// (the second of which waits only at exit, so it must not start before the first has waited). On a
// device that runs the sm_90 code the attention CTAs do start during the delay (the kernel ahead
// holds 8 SMs), so a wait in the wrong place reads the stale input and fails here.
TEST(DecodeCuda, FirstLaunchWaitsForTheKernelAhead) {
  REQUIRE_GPU();
  namespace dc = latentkv::decode::cuda;
  latentkv::testing::RestoreSwitch<int> restore(dc::pdl_mode, dc::set_pdl_mode);
  latentkv::testing::RestoreSwitch<bool> restore_first(dc::first_launch_pdl, dc::set_first_launch_pdl);
  dc::set_pdl_mode(1);
  dc::set_first_launch_pdl(true);
  int cc_major = 0, cc_minor = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
  std::printf("[pdl] compute capability %d.%d: first launches with PDL %s\n", cc_major, cc_minor,
              dc::first_launch_pdl_on(0) ? "on" : "off");
  if (cc_major * 10 + cc_minor == 90) {
    EXPECT_TRUE(dc::first_launch_pdl_on(0));
  }
  struct OwnStream {  // destroyed however the test ends
    cudaStream_t s = nullptr;
    ~OwnStream() {
      if (s) cudaStreamDestroy(s);
    }
  } own;
  ASSERT_EQ(cudaStreamCreate(&own.s), cudaSuccess);
  const cudaStream_t stream = own.s;
  int n = 0;
  for (KernelChoice kernel : kernels()) {
    UseKernel use(kernel);
    for (CacheFormat f : {CacheFormat::v32_fp8, CacheFormat::v4_fp8}) {
      const DecodeWorkloadOptions o = variant_case(f, 9, 64, 600, false, 1700 + n++);
      DecodeWorkload w = latentkv::testing::make_decode_workload(o);
      DecodePlan split = splits_of_256(o), two = split, whole = split;
      two.unsplit_b = 5;
      whole.num_splits = 1;
      whole.keys_per_split = (o.topk + o.extra_topk + 63) / 64 * 64;
      for (const DecodePlan* plan : {&whole, &split, &two}) {
        dc::set_first_launch_pdl(false);
        const GpuResult plain = rerun_gpu(w, plan, true);
        dc::set_first_launch_pdl(true);
        OnDevice d(w);
        SparseDecodeArgs a = d.args;
        DeviceBuffer<uint16_t>& q = d.q;
        DeviceBuffer<uint16_t>& out = d.out;
        DeviceBuffer<int32_t>& idx = d.idx;
        DeviceBuffer<uint8_t>& kv = d.kv;
        DeviceBuffer<float>& lse = d.lse;
        const DeviceBuffer<uint16_t> q_truth(w.q);
        const DeviceBuffer<int32_t> idx_truth(w.indices);
        const DeviceBuffer<uint8_t> kv_truth(w.kv);
        a.plan = plan;
        const size_t ws_bytes = sparse_decode_workspace_bytes(*plan);
        DeviceBuffer<uint8_t> ws(std::vector<uint8_t>(std::max<size_t>(16, ws_bytes), 0xff));
        if (ws_bytes > 0) {
          a.workspace = ws.get();
          a.workspace_bytes = ws_bytes;
        }
        const char* names[3] = {"q", "indices", "cache"};
        for (int input = 0; input < 3; ++input) {
          const std::string label = std::string(kernel_name(kernel)) + " " + format_info(f).name + ", " +
                                    (plan == &whole ? "one split" : plan == &split ? "splits" : "two launches") +
                                    ", " + names[input] + " written ahead";
          w.poison_outputs();
          out.upload(w.out);
          lse.upload(w.lse);
          // Stale but valid: zero queries, index 0 everywhere, a zero cache (zero scales).
          if (input == 0) {
            q.upload(std::vector<uint16_t>(w.q.size(), 0));
            latentkv::bench_cuda::delayed_copy(q.get(), q_truth.get(), w.q.size() * 2, 200.0, stream);
          } else if (input == 1) {
            idx.upload(std::vector<int32_t>(w.indices.size(), 0));
            latentkv::bench_cuda::delayed_copy(idx.get(), idx_truth.get(), w.indices.size() * 4, 200.0, stream);
          } else {
            kv.upload(std::vector<uint8_t>(w.kv.size(), 0));
            latentkv::bench_cuda::delayed_copy(kv.get(), kv_truth.get(), w.kv.size(), 200.0, stream);
          }
          sparse_decode(a, stream, DecodeImpl::kCuda);
          ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << label;
          expect_same(plain, GpuResult{out.download(), lse.download()}, label);
          q.upload(w.q);
          idx.upload(w.indices);
          kv.upload(w.kv);
        }
      }
    }
  }
}

// CTAs of at most 16 rows (h_q <= 16 here) run two token groups in the portable kernel
// (decode::cuda::token_groups_pay); each case is checked against the oracle with the groups and
// without, and the grouped run repeated bitwise. Partial tiles (topk 200, 100), adversarial and
// NaN-filled slots, sink, lengths, the extra cache and a split case (b 2, topk 5000).
TEST(DecodeCuda, TokenGroups) {
  REQUIRE_GPU();
  UseKernel use(KernelChoice::kPortable);
  latentkv::testing::RestoreSwitch<bool> restore(latentkv::decode::cuda::token_groups_allowed,
                                                  latentkv::decode::cuda::set_token_groups_allowed);
  struct Shape { CacheFormat f; int64_t b, h_q, topk; bool hard; };
  const Shape shapes[] = {{CacheFormat::v32_fp8, 5, 16, 200, true},  {CacheFormat::v32_fp8, 4, 8, 2048, false},
                          {CacheFormat::v32_fp8, 6, 1, 100, true},   {CacheFormat::v4_fp8, 5, 13, 200, true},
                          {CacheFormat::v4_fp8, 4, 16, 128, false},  {CacheFormat::v32_fp8, 2, 16, 5000, false},
                          {CacheFormat::v41_fp8, 5, 13, 200, true}};
  int n = 0;
  for (const Shape& sh : shapes) {
    DecodeWorkloadOptions o;
    o.format = sh.f;
    o.b = sh.b;
    o.s_q = 2;
    o.h_q = sh.h_q;
    o.topk = sh.topk;
    o.page_size = 61;
    o.topk_length = sh.hard;
    o.sink = sh.hard;
    o.adversarial = sh.hard;
    o.nan_unused = sh.hard;
    o.extra = sh.f != CacheFormat::v32_fp8;
    o.extra_topk = 100;
    o.extra_page_size = 2;
    o.seed = 1300 + n++;
    const std::string label = std::string(format_info(sh.f).name) + " b" + std::to_string(sh.b) + " h" +
                              std::to_string(sh.h_q) + " topk" + std::to_string(sh.topk) + (sh.hard ? " hard" : "");
    latentkv::decode::cuda::set_token_groups_allowed(false);
    check_case(o, "one group: " + label);
    latentkv::decode::cuda::set_token_groups_allowed(true);
    check_case(o, "token groups: " + label);
    DecodeWorkload w = latentkv::testing::make_decode_workload(o);
    w.poison_outputs();
    const GpuResult first = run_gpu(w);
    w.poison_outputs();
    const GpuResult again = run_gpu(w);
    EXPECT_EQ(first.out, again.out) << label;
    EXPECT_EQ(0, std::memcmp(first.lse.data(), again.lse.data(), first.lse.size() * 4)) << label;
  }
}

TEST(DecodeCuda, Sm90AgreesWithPortable) {
  REQUIRE_GPU();
  if (!latentkv::decode::sm90::usable(0)) GTEST_SKIP() << "needs a compute capability 9.0 device";
  // The two kernels accumulate in different orders (64- against 32-token tiles), so they agree to
  // bf16 rounding, not bitwise. Scales that are not powers of two (v32) or outside the fast
  // dequantization's range (v4, v41: scale byte 2, dims 128-191 or 64-95) take the Hopper kernel's
  // fallback path; both must still match the oracle. V4.1's fp4 extra cache (main topk 700: the
  // block of candidates 640-703 holds both kinds): with odd scales its records' e4m3 scales also
  // take zero (+0 and -0) and subnormal (2^-9 x 3) values.
  int n = 0;
  for (const auto& [f, ef] : kVariantFormats)
    for (int odd_scales = 0; odd_scales < 2; ++odd_scales) {
      DecodeWorkloadOptions o;
      o.format = f;
      o.extra = ef.has_value();
      o.extra_format = ef;
      o.extra_topk = 200;
      o.extra_page_size = 2;
      o.b = 3;
      o.s_q = 2;
      o.h_q = 128;
      o.topk = 700;
      o.page_size = 64;
      o.topk_length = true;
      o.sink = true;
      o.seed = 1300 + n++;
      DecodeWorkload w = latentkv::testing::make_decode_workload(o);
      if (odd_scales) {
        int64_t changed = 0;
        for (int64_t slot = 0; slot < w.num_slots(); slot += 3) {
          const auto off = formats::record_byte_offsets(f, o.page_size, w.page_stride, slot);
          if (f == CacheFormat::v32_fp8) {
            float sc;
            std::memcpy(&sc, &w.kv[off.scale + 4], 4);
            sc *= 1.5f;
            std::memcpy(&w.kv[off.scale + 4], &sc, 4);
          } else {
            w.kv[off.scale + 2] = 5;  // 2^-122: products below the normal range (v4, v41)
          }
          ++changed;
        }
        ASSERT_GT(changed, 0);
        if (ef) {  // the fp4 records' scale bytes 256 + c (c: the chunk of 16 dims)
          const uint8_t odd[3] = {0x00, 0x80, 0x03};
          int64_t fp4_changed = 0;
          for (int64_t slot = 0; slot < w.extra_num_slots(); slot += 2) {
            const auto off = formats::record_byte_offsets(*ef, o.extra_page_size, w.extra_page_stride, slot);
            w.extra_kv[off.scale + slot % 32] = odd[slot % 3];
            ++fp4_changed;
          }
          ASSERT_GT(fp4_changed, 0);
        }
      }
      const GpuResult ref = run_oracle(w);
      GpuResult got[2];
      for (int k = 0; k < 2; ++k) {
        UseKernel use(k ? KernelChoice::kSm90 : KernelChoice::kPortable);
        w.poison_outputs();
        got[k] = run_gpu(w);
      }
      const std::string label = variant_name(o) + (odd_scales ? " odd scales" : "");
      for (int k = 0; k < 2; ++k) expect_near_oracle(w, got[k], ref, k ? "sm90" : "portable", label);
      const auto d = latentkv::testing::compare_decode(w, got[1].out, got[1].lse, got[0].out, got[0].lse);
      std::printf("[decode] sm90 vs portable %-22s max_rel %.2e cos %.7f\n", label.c_str(), d.max_rel,
                  d.cos_sim);
      EXPECT_LE(d.max_rel, latentkv::testing::kDecodeMaxRelTol) << label;
      EXPECT_EQ(d.mask_mismatch, 0) << label;
    }
}

// CTA pairs (two head blocks of a row in a cluster, each dequantizing half of every block for both)
// against single CTAs, for the kernel the process runs (the two-warpgroup one, or the
// warp-specialised one under LKV_SM90_WS=1): the same products in the same order, so
// bitwise-identical out and lse; and
// both within the oracle's tolerance. h_q 128 (two full head blocks), 100 (the second one partial:
// padded rows) and 192 (three blocks: no pairs, the single-CTA path under the same switch); with
// splits (b 2: the planner splits) and without; NaN-free adversarial indices included; each format
// and V4.1's fp4 extra cache (kVariantFormats).
TEST(DecodeCuda, Sm90PairsAgreeBitwiseWithSingleCtas) {
  REQUIRE_GPU();
  if (!latentkv::decode::sm90::usable(0)) GTEST_SKIP() << "no sm_90a device";
  UseKernel use(KernelChoice::kSm90);
  // Restores the pair setting however the test ends.
  latentkv::testing::RestoreSwitch<bool> restore(latentkv::decode::sm90::cta_pairs, latentkv::decode::sm90::set_cta_pairs);
  int n = 0;
  for (const auto& [f, ef] : kVariantFormats)
    for (int64_t h_q : {128, 100, 192})
      for (int64_t b : {2, 9}) {
        DecodeWorkloadOptions o;
        o.format = f;
        o.extra_format = ef;
        o.b = b;
        o.s_q = 2;
        o.h_q = h_q;
        o.topk = 333;
        o.page_size = 64;
        o.topk_length = true;
        o.sink = true;
        o.extra = f != CacheFormat::v32_fp8;
        o.seed = 1900 + n++;
        DecodeWorkload w = latentkv::testing::make_decode_workload(o);
        const GpuResult ref = run_oracle(w);
        GpuResult got[2];
        for (int pairs = 0; pairs < 2; ++pairs) {
          latentkv::decode::sm90::set_cta_pairs(pairs == 1);
          w.poison_outputs();
          got[pairs] = run_gpu(w);
        }
        const std::string label = variant_name(o) + " h_q " + std::to_string(h_q) + " b " + std::to_string(b);
        EXPECT_EQ(got[0].out, got[1].out) << label;
        EXPECT_EQ(std::memcmp(got[0].lse.data(), got[1].lse.data(), got[0].lse.size() * 4), 0) << label;
        const auto d = latentkv::testing::compare_decode(w, got[1].out, got[1].lse, ref.out, ref.lse);
        std::printf("[decode] sm90 pairs %-30s max_rel %.2e cos %.7f\n", label.c_str(), d.max_rel, d.cos_sim);
        EXPECT_LE(d.max_rel, latentkv::testing::kDecodeMaxRelTol) << label;
        EXPECT_GE(d.cos_sim, latentkv::testing::kDecodeCosTol) << label;
        EXPECT_EQ(d.mask_mismatch, 0) << label;
        EXPECT_EQ(d.nan_out, 0) << label;
      }
}

namespace {

// The narrow-kernel tests' common loop: every variant format, each h_q of `h_qs` at s_q 2, b 3 and
// 70 (hostile indices in every other case; seeds from seed0), under the planner, a one-launch
// split plan and a two-launch one. `choose(k)` picks the 64-row kernel (k 0) or the variant under
// test (k 1, named `name`); both are held to the oracle, to each other within bf16 rounding with
// the same lonely-row masks, and the variant bitwise across two reruns. `also(w, plan, variant's
// result, ref, label)` adds a test's own checks.
template <class Choose, class Also>
void narrow_against_64_row(std::initializer_list<int64_t> h_qs, uint64_t seed0, const std::string& name,
                           Choose choose, Also also) {
  int n = 0;
  for (const auto& [f, ef] : kVariantFormats)
    for (int64_t h_q : h_qs)
      for (int64_t b : {3, 70}) {
        const bool hostile = n % 2 == 0;
        DecodeWorkloadOptions o = variant_case(f, b, h_q, b == 3 ? 700 : 300, hostile, seed0 + n++);
        o.extra_format = ef;
        DecodeWorkload w = latentkv::testing::make_decode_workload(o);
        const GpuResult ref = run_oracle(w);
        DecodePlan split = splits_of_256(o), two = split;
        two.unsplit_b = 1;
        for (const DecodePlan* plan : std::initializer_list<const DecodePlan*>{nullptr, &split, &two}) {
          const std::string label = variant_name(o) + " h_q " + std::to_string(h_q) + " b " +
                                    std::to_string(b) + (hostile ? " hostile" : "") +
                                    (plan == nullptr ? ", planner" : plan == &split ? ", split" : ", two launches");
          GpuResult got[2];
          for (int k = 0; k < 2; ++k) {
            choose(k);
            got[k] = rerun_gpu(w, plan);
            expect_near_oracle(w, got[k], ref, k ? name.c_str() : "64-row", label);
          }
          const auto d = latentkv::testing::compare_decode(w, got[1].out, got[1].lse, got[0].out, got[0].lse);
          EXPECT_LE(d.max_rel, latentkv::testing::kDecodeMaxRelTol) << label << ": " << name << " against 64-row";
          EXPECT_EQ(d.mask_mismatch, 0) << label << ": " << name << " against 64-row";
          for (int run = 0; run < 2; ++run) expect_same(got[1], rerun_gpu(w, plan), label + ": " + name + " rerun");
          also(w, plan, got[1], ref, label);
        }
      }
}

}  // namespace

// The narrow Hopper kernel (decode/sm90/narrow.cuh: CTAs of at most 16 rows, the tokens as wgmma's M)
// against the 64-row one (kernel.cuh, with sm90::set_narrow_rows(false)) and the oracle: each
// format and V4.1's fp4 extra cache (kVariantFormats), h_q 1, 5 and 16 (15, 11 and 0 padding columns), with lengths, sink, extra caches,
// adversarial indices and NaN in unused slots, unsplit (b 70 h_q 16: the planner's choice) and in
// one-launch and two-launch split plans (partials and the combine). Both kernels within the
// oracle's tolerance with the same lonely-row masks and no NaN, each other within bf16 rounding,
// and the narrow kernel bitwise the same across three runs. The narrow kernel's warp-specialised
// form (set_narrow_form) within the oracle's tolerance under the planner (which gives it other
// splits), and bitwise equal to the two-CTA form under the same given plan: the same arithmetic in
// the same order.
TEST(DecodeCuda, Sm90NarrowRowsAgreeWithWideRows) {
  REQUIRE_GPU();
  namespace s9 = latentkv::decode::sm90;
  if (!s9::usable(0)) GTEST_SKIP() << "no sm_90a device";
  UseKernel use(KernelChoice::kSm90);
  latentkv::testing::RestoreSwitch<bool> restore(s9::narrow_rows, s9::set_narrow_rows);
  latentkv::testing::RestoreSwitch<s9::NarrowForm> restore_ws(s9::narrow_form, s9::set_narrow_form);
  s9::set_narrow_form(s9::NarrowForm::kTwoCtas);
  narrow_against_64_row(
      {1, 5, 16}, 3100, "narrow", [](int k) { s9::set_narrow_rows(k == 1); },
      [&](DecodeWorkload& w, const DecodePlan* plan, const GpuResult& two_ctas, const GpuResult& ref,
          const std::string& label) {
        s9::set_narrow_form(s9::NarrowForm::kWarpSpecialised);
        const GpuResult ws = rerun_gpu(w, plan);
        s9::set_narrow_form(s9::NarrowForm::kTwoCtas);
        if (plan == nullptr) expect_near_oracle(w, ws, ref, "narrow ws", label);
        else expect_same(two_ctas, ws, label + ": narrow ws against two CTAs");
      });
}

// The narrow kernel's 32-row instance (decode/sm90/launch.h narrow_wide_rows: CTAs of 17-32 rows,
// warp-specialised, wgmma N = 32) against the 64-row kernel, which runs those CTAs otherwise, and
// the oracle, as above: h_q 17 (15 padding columns), 24 and 32.
TEST(DecodeCuda, Sm90Narrow32RowsAgreeWith64RowKernel) {
  REQUIRE_GPU();
  namespace s9 = latentkv::decode::sm90;
  if (!s9::usable(0)) GTEST_SKIP() << "no sm_90a device";
  UseKernel use(KernelChoice::kSm90);
  latentkv::testing::RestoreSwitch<bool> restore(s9::narrow_rows, s9::set_narrow_rows);
  latentkv::testing::RestoreSwitch<bool> restore_wide(s9::narrow_wide_rows, s9::set_narrow_wide_rows);
  s9::set_narrow_rows(true);
  narrow_against_64_row(
      {17, 24, 32}, 3300, "narrow 32-row", [](int k) { s9::set_narrow_wide_rows(k == 1); },
      [](DecodeWorkload&, const DecodePlan*, const GpuResult&, const GpuResult&, const std::string&) {});
}

// The phase stamps of a build with LKV_SM90_TRACE (bench decode --trace): every CTA of every
// launch of the traced call stamps entry and exit, the phases it reaches come in order, the stream
// marks bracket the CTAs, and stamping changes no output byte. A one-launch split plan, the
// planner's plan and a two-launch plan (requests 0..1 unsplit, then the rest split), with padded
// head rows (h_q 100) and an extra cache. Skipped in the default build (no stamps compiled in).
TEST(DecodeCuda, Sm90TraceStampsInOrder) {
  namespace s9 = latentkv::decode::sm90;
  REQUIRE_GPU();
  if (!s9::trace_built()) GTEST_SKIP() << "a build with LKV_SM90_TRACE=ON";
  if (!s9::usable(0) || s9::warp_specialised()) GTEST_SKIP() << "the two-warpgroup Hopper kernel";
  UseKernel use(KernelChoice::kSm90);
  DecodeWorkloadOptions o = variant_case(CacheFormat::v4_fp8, 5, 100, 300, /*hostile=*/true, 2500);
  DecodeWorkload w = latentkv::testing::make_decode_workload(o);
  const DecodePlan one = splits_of_256(o);
  DecodePlan two = one;
  two.unsplit_b = 2;
  const DecodePlan planned = plan_decode(o.b, o.s_q, o.h_q, o.topk, o.extra_topk, 132);
  const DecodePlan* plans[3] = {&one, &planned, &two};
  const char* names[3] = {"one launch", "planner", "two launches"};
  for (int k = 0; k < 3; ++k) {
    const GpuResult plain = rerun_gpu(w, plans[k]);
    w.poison_outputs();
    GpuResult traced;
    {
      struct TraceOn {
        TraceOn() { s9::set_trace(true); }
        ~TraceOn() { s9::set_trace(false); }
      } on;
      s9::mark_trace(0);
      traced = run_gpu(w, plans[k]);
      s9::mark_trace(1);
    }
    const s9::KernelTrace t = s9::last_trace();
    expect_same(plain, traced, names[k]);
    ASSERT_GT(t.ctas, 0) << names[k];
    ASSERT_EQ(t.stamps.size(), static_cast<size_t>(t.ctas * s9::kTracePhases)) << names[k];
    int64_t sum = 0;
    for (int64_t n : t.launches) sum += n;
    EXPECT_EQ(sum, t.ctas) << names[k];
    if (plans[k] != &planned) {
      EXPECT_EQ(t.launches.size(), plans[k] == &two ? 2u : 1u) << names[k];
    }
    ASSERT_NE(t.before, 0u) << names[k];
    ASSERT_NE(t.after, 0u) << names[k];
    int64_t out_of_order = 0, unstamped = 0;
    for (int64_t c = 0; c < t.ctas; ++c) {
      const unsigned long long* s = &t.stamps[static_cast<size_t>(c * s9::kTracePhases)];
      if (s[0] == 0 || s[s9::kTracePhases - 1] == 0) {
        ++unstamped;
        continue;
      }
      unsigned long long last = t.before;
      for (int ph = 0; ph < s9::kTracePhases; ++ph) {
        if (s[ph] == 0) continue;  // a block the CTA did not have
        if (s[ph] < last) ++out_of_order;
        last = s[ph];
      }
      if (t.after < last) ++out_of_order;
    }
    EXPECT_EQ(unstamped, 0) << names[k];
    EXPECT_EQ(out_of_order, 0) << names[k];
    std::printf("[decode] sm90 trace %-13s %lld CTAs in %zu launch(es), call %.2f us\n", names[k],
                static_cast<long long>(t.ctas), t.launches.size(), static_cast<double>(t.after - t.before) * 1e-3);
  }
}

// Records past 4 GiB: each workload is run once as made and once with its caches placed beyond
// 4.5 GiB in caches that many pages longer (every other byte NaN) and its valid indices shifted by
// as many slots; each kernel must give the same bytes. A record offset computed in 32 bits would
// wrap into the NaN pages below 4 GiB and show as NaN or a different output.
TEST(DecodeCuda, RecordsPast4GiB) {
  REQUIRE_GPU();
  const size_t arena_bytes = kFarOffsetBytes + (size_t{64} << 20);
  DeviceArena main_arena(arena_bytes, 0xff), extra_arena(arena_bytes, 0xff);
  if (!main_arena.get() || !extra_arena.get()) GTEST_SKIP() << "the device lacks 2 x 4.6 GiB of free memory";
  int n = 0;
  for (KernelChoice k : kernels()) {
    UseKernel use(k);
    for (const auto& [f, ef] : kVariantFormats)
      for (int64_t h_q : {16, 128}) {
        DecodeWorkloadOptions o = variant_case(f, 3, h_q, 300, /*hostile=*/false, 2100 + n++);
        o.extra_format = ef;
        DecodeWorkload w = latentkv::testing::make_decode_workload(o);
        const std::string label = variant_name(o) + " h_q " + std::to_string(h_q);
        w.poison_outputs();
        const GpuResult near = run_gpu(w);
        expect_near_oracle(w, near, run_oracle(w), kernel_name(k), label);

        DecodeWorkload far = w;
        const int64_t far_pages = far_rows(w.page_stride);
        latentkv::testing::shift_valid(far.indices, w.num_slots(), far_pages * o.page_size);
        const int64_t extra_far_pages = o.extra ? far_rows(w.extra_page_stride) : 0;
        if (o.extra) latentkv::testing::shift_valid(far.extra_indices, w.extra_num_slots(), extra_far_pages * o.extra_page_size);
        far.poison_outputs();
        OnDevice d(far);
        ASSERT_TRUE(place_far(main_arena, w.kv.data(), w.kv.size(), w.page_stride, far_pages, d.args.k_cache)) << kernel_name(k) << " " << label;
        if (o.extra) {
          ASSERT_TRUE(place_far(extra_arena, w.extra_kv.data(), w.extra_kv.size(), w.extra_page_stride, extra_far_pages,
                                d.args.extra_k_cache))
              << label;
        }
        ASSERT_LE(far_pages * o.page_size + w.num_slots(), INT32_MAX) << label;
        sparse_decode(d.args, nullptr, DecodeImpl::kCuda);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << label;
        const GpuResult got{d.out.download(), d.lse.download()};
        std::printf("[decode] %-8s %-44s records past %.1f GiB: %s\n", kernel_name(k), label.c_str(),
                    static_cast<double>(far_pages) * w.page_stride / (1 << 30),
                    got.out == near.out ? "same bytes" : "DIFFERENT");
        expect_same(got, near, std::string(kernel_name(k)) + " " + label + " (records past 4 GiB)");
      }
  }
}

// Queries and outputs past 4 GiB: request 1's q, out and lse rows start 4.5 GiB after request 0's,
// through first-dimension strides that long; each kernel must give the same bytes as with compact
// tensors.
TEST(DecodeCuda, QueriesAndOutputsPast4GiB) {
  REQUIRE_GPU();
  int n = 0;
  for (KernelChoice k : kernels()) {
    UseKernel use(k);
    for (int64_t h_q : {16, 128}) {
      DecodeWorkloadOptions o = variant_case(CacheFormat::v4_fp8, 2, h_q, 200, /*hostile=*/true, 2500 + n++);
      DecodeWorkload w = latentkv::testing::make_decode_workload(o);
      const std::string label = std::string(kernel_name(k)) + " h_q " + std::to_string(h_q);
      w.poison_outputs();
      const GpuResult near = run_gpu(w);
      const int64_t per_b = o.s_q * o.h_q;
      const latentkv::testing::DeviceSpreadRows q(o.b, per_b * w.d_qk * 2), out(o.b, per_b * 512 * 2), lse(o.b, per_b * 4);
      if (!q.ok() || !out.ok() || !lse.ok()) GTEST_SKIP() << "the device lacks 3 x 4.5 GiB of free memory";
      ASSERT_TRUE(q.put(w.q.data())) << label;
      OnDevice d(w);
      d.args.q = q.view<uint16_t>(DType::bf16, {o.b, o.s_q, o.h_q, w.d_qk});
      d.args.out = out.view<uint16_t>(DType::bf16, {o.b, o.s_q, o.h_q, 512});
      d.args.lse = lse.view<float>(DType::f32, {o.b, o.h_q, o.s_q});
      sparse_decode(d.args, nullptr, DecodeImpl::kCuda);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << label;
      const GpuResult got{out.gather<uint16_t>(), lse.gather<float>()};
      std::printf("[decode] %-24s q, out and lse rows past 4 GiB: %s\n", label.c_str(),
                  got.out == near.out ? "same bytes" : "DIFFERENT");
      expect_same(got, near, label + " (rows past 4 GiB)");
    }
  }
}
