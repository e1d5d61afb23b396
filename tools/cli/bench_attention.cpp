// `latentkv bench prefill` and `latentkv bench dense`: FlashMLA's sparse-prefill and dense-decode
// performance cases on the GPU (or, with --device cpu, one small case each on the CPU fast path).
//
// Inputs are random bf16 values (and random finite v32_fp8 records for the fp8 dense cache) made by
// a counter-based generator; values do not change the kernels' work. Figures use SPEC.md section 8's
// formulas; the JSON's notes state each one.
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "commands.h"
#include "latentkv/decode.h"
#include "latentkv/dense.h"
#include "latentkv/error.h"
#include "latentkv/numerics.h"
#include "latentkv/prefill.h"
#include "testing/compress_workload.h"
#ifdef LKV_WITH_CUDA
#include "cuda_common/bench.h"
#include "decode/cuda/launch.h"
#include "decode/sm90/launch.h"
#include "decode/plan.h"
#include "dense/cuda/launch.h"
#endif

namespace latentkv::cli {
namespace {

// Device selection, ceilings and buffer placement shared by both benches.
// The flags both benches take.
struct Options {
  std::string device, json, filter, plot, kernel;
  int reps = 0;      // CUDA: event-timed calls per case
  int cpu_reps = 0;  // CPU: wall-timed calls per case, --reps if given, else 3 (CPU calls are slow)
};

Options parse_options(const Args& args, int default_reps) {
  Options o;
  o.device = args.get("device", "auto");
  o.json = args.get("json", "");
  o.filter = args.get("filter", "");
  o.plot = args.get("plot", "");
  const bool reps_given = !args.get("reps", "").empty();
  o.reps = args.get_reps(default_reps);
  o.cpu_reps = reps_given ? o.reps : 3;
  o.kernel = args.get("kernel", "auto");
  args.check_all_used();
  LKV_CHECK(o.kernel == "auto" || o.kernel == "portable" || o.kernel == "sm90" || o.kernel == "compact",
            "--kernel must be auto, portable, sm90 or compact, got '", o.kernel, "'");
  return o;
}

struct Bench {
  bool cuda = false;
  int cpu_reps = 3;
  double hbm = 0, empty_launch = 0;  // measured HBM read rate (GB/s), empty-launch span (us)
  CpuRoof roof;                      // CPU runs: the roofline measured in the run
  std::vector<void*> allocations;

  // Fills the result's header (op, command, date, device, ceilings, timing note) and prints the
  // table's header.
  Bench(const char* op, const Options& o, const Args& args, BenchResult& res) {
    res.op = op;
    cpu_reps = o.cpu_reps;
    res.command = args.command_line();
    res.date = utc_now();
    const std::string& device = o.device;
    cuda = bench_wants_cuda(device);
#ifdef LKV_WITH_CUDA
    if (cuda) {
      res.device = bench_cuda::device_name(0);
      hbm = bench_cuda::measure_hbm_read_GBps();
      res.ceilings["hbm_read_GBps"] = hbm;
      empty_launch = bench_cuda::measure_empty_launch_us(1);  // for each case's floor_time_us
      res.ceilings["empty_launch_us"] = empty_launch;
      res.ceilings["bf16_dense_TFLOPS_datasheet"] = kDatasheetTFLOPS;
      using decode::cuda::KernelChoice;
      if (o.kernel != "auto")
        decode::cuda::set_kernel_choice(o.kernel == "sm90"      ? KernelChoice::kSm90
                                        : o.kernel == "compact" ? KernelChoice::kCompact
                                                                : KernelChoice::kPortable);
      // f16 cases run the portable kernel under the sm90 choice (compact where it is chosen or forced).
      res.notes["kernel"] = std::string(decode::cuda::kernel_for_device(0)) + " (bf16 cases)" + decode::sm90::switch_notes();
    }
#endif
    if (!cuda) {
      res.device = "cpu";
      roof = measure_cpu_roof(res);
    }
    res.notes["timing"] = cuda ? "median of " + std::to_string(o.reps) +
                                     " event-timed calls (kernel through combine), L2 flushed before each"
                               : "median wall time of " + std::to_string(o.cpu_reps) + " calls after one warm-up call";
    std::printf("%s on %s%s%s\n%-44s %10s %9s %9s %8s %7s\n", op, res.device.c_str(),
                cuda ? ", kernel " : "", cuda ? res.notes["kernel"].c_str() : "", "case", "us",
                "TFLOPS", "GB/s", cuda ? "of HBM" : "of roof", "splits");
  }
  ~Bench() { release(); }
  Device where() const { return cuda ? Device::cuda(0) : Device::cpu(); }
  // The host vector's bytes on the bench's device (the host pointer itself on the CPU).
  template <typename T>
  void* place(std::vector<T>& v) {
#ifdef LKV_WITH_CUDA
    if (cuda) {
      void* d = bench_cuda::alloc(v.size() * sizeof(T));
      bench_cuda::to_device(d, v.data(), v.size() * sizeof(T));
      allocations.push_back(d);
      return d;
    }
#endif
    return v.data();
  }
  void release() {
#ifdef LKV_WITH_CUDA
    for (void* d : allocations) bench_cuda::free(d);
#endif
    allocations.clear();
  }
  // The plan sparse prefill's planner makes (the decode planner's rule, as src/prefill/cuda applies
  // it for bf16 keys: its splits and unsplit rows); one split on the CPU.
  DecodePlan plan(int64_t rows, int64_t s_q, int64_t head_rows, int64_t candidates) const {
#ifdef LKV_WITH_CUDA
    if (cuda)
      return plan_decode_slots(rows, s_q, head_rows, candidates, 0, bench_cuda::sm_count(0), DecodePlanKernel::kAuto,
                               plan_ctas_per_sm(DecodePlanKernel::kAuto, head_rows, false, false));
#endif
    (void)rows, (void)s_q, (void)head_rows, (void)candidates;
    return DecodePlan{};
  }
  double time(const std::function<void()>& fn, int reps) const {
#ifdef LKV_WITH_CUDA
    if (cuda) return bench_cuda::time_us(fn, reps);
#endif
    (void)reps;
    return cpu_time_us(fn, cpu_reps);
  }
};

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> v(n);
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < static_cast<int64_t>(n); ++k)
    v[k] = num::f32_to_bf16(testing::normal_at(seed, static_cast<uint64_t>(k)));
  return v;
}

void finish(BenchResult& res, const Bench& b, const std::string& json, const std::string& plot,
            const char* summary_case, const char* summary_key) {
  std::vector<double> tf;
  for (const auto& c : res.cases) tf.push_back(c.numbers.at("TFLOPS"));
  res.summary["geomean_TFLOPS"] = geomean(tf);
  for (const auto& c : res.cases)
    if (c.name == summary_case) res.summary[summary_key] = c.numbers.at("TFLOPS");
  summarise_memory_bound(res);
  summarise_cpu_roof(res);
  if (!json.empty()) write_json(res, json);
  if (!plot.empty())
    write_svg(res, "TFLOPS", b.cuda ? "bf16_dense_TFLOPS_datasheet" : "fp32_TFLOPS", "TFLOPS", plot);
}

// The fraction column: of the HBM rate on the GPU, of the CPU roofline (frac_of_roof) on the CPU.
void print_case(const BenchCase& bc, double hbm) {
  const auto roof = bc.numbers.find("frac_of_roof");
  const double frac = hbm > 0 ? bc.numbers.at("GBps") / hbm : roof != bc.numbers.end() ? roof->second : 0.0;
  std::printf("%-44s %10.1f %9.2f %9.1f %7.1f%% %7.0f\n", bc.name.c_str(), bc.time_us,
              bc.numbers.at("TFLOPS"), bc.numbers.at("GBps"), 100.0 * frac, bc.numbers.at("num_splits"));
  std::fflush(stdout);
}

}  // namespace

// ---- sparse prefill ------------------------------------------------------------------------------
int cmd_bench_prefill(const Args& args) {
  const Options opt = parse_options(args, 10);
  BenchResult res;
  Bench bench("sparse_prefill", opt, args, res);
  res.notes["flops"] = "2 * h_q * attended * (d_qk + d_v), attended = sum over query rows of their valid candidates";
  res.notes["bytes"] = "valid * d_qk * 2 + s_q * h_q * (d_qk + d_v) * 2, valid = attended rows (SPEC section 8; GBps "
                      "and frac_of_ceiling, which can pass 1: most gathered rows are L2 hits)";
  res.notes["dram_bytes"] = "distinct attended kv rows * d_qk * 2 + attended * 4 (indices) + s_q * 4 (lengths, with_len) + "
                           "s_q * h_q * (d_qk + d_v) * 2: the least HBM traffic of a call; flops_per_byte, "
                           "memory_bound, floor_time_us and hbm_frac_at_floor use it";
  res.notes["inputs"] = "indices uniform over [0, s_kv); with_len: topk_length uniform in [1, topk] per row";

  struct Case { int64_t s_q, s_kv, topk, h_q, d_qk; bool len; };
  std::vector<Case> cases;
  if (!bench.cuda) {
    cases.push_back({64, 4096, 256, 64, 576, false});
  } else {
    for (int64_t d : {576, 512})
      for (int64_t h : {128, 64})
        for (int64_t s_kv : {8192, 32768, 65536})
          for (bool len : {false, true}) cases.push_back({4096, s_kv, 2048, h, d, len});
  }
  for (const Case& c : cases) {
    const std::string name = "sq" + std::to_string(c.s_q) + "_skv" + std::to_string(c.s_kv) + "_topk" +
                             std::to_string(c.topk) + "_h" + std::to_string(c.h_q) + "_d" +
                             std::to_string(c.d_qk) + (c.len ? "_len" : "");
    if (!opt.filter.empty() && name.find(opt.filter) == std::string::npos) continue;
    std::vector<uint16_t> q = random_bf16(static_cast<size_t>(c.s_q * c.h_q * c.d_qk), 21);
    std::vector<uint16_t> kv = random_bf16(static_cast<size_t>(c.s_kv * c.d_qk), 23);
    std::vector<int32_t> idx(static_cast<size_t>(c.s_q * c.topk));
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < static_cast<int64_t>(idx.size()); ++k)
      idx[k] = static_cast<int32_t>(testing::bits_at(25, static_cast<uint64_t>(k)) % c.s_kv);
    std::vector<int32_t> len;
    double attended = static_cast<double>(c.s_q * c.topk);
    if (c.len) {
      len.resize(static_cast<size_t>(c.s_q));
      attended = 0;
      for (int64_t t = 0; t < c.s_q; ++t) {
        len[t] = static_cast<int32_t>(1 + testing::bits_at(27, static_cast<uint64_t>(t)) % c.topk);
        attended += len[t];
      }
    }
    // The least DRAM traffic a call needs: each distinct attended kv row once (a row that several
    // query rows gather is read from HBM once and from L2 after that, and with s_q 4096 x topk 2048
    // over s_kv <= 65536 nearly every row is gathered dozens of times), the attended indices, q and
    // out. SPEC section 8's bytes count every gathered row, so they can exceed what HBM carries.
    std::vector<uint8_t> seen(static_cast<size_t>(c.s_kv), 0);
    int64_t distinct = 0;
    for (int64_t t = 0; t < c.s_q; ++t) {
      const int64_t n = c.len ? len[t] : c.topk;
      for (int64_t k = 0; k < n; ++k) {
        uint8_t& s = seen[static_cast<size_t>(idx[t * c.topk + k])];
        distinct += s == 0;
        s = 1;
      }
    }
    std::vector<uint16_t> out(static_cast<size_t>(c.s_q * c.h_q * 512));
    std::vector<float> mx(static_cast<size_t>(c.s_q * c.h_q)), lse(mx.size());
    const Device w = bench.where();
    SparsePrefillArgs a;
    a.q = TensorView(bench.place(q), DType::bf16, {c.s_q, c.h_q, c.d_qk}, w);
    a.kv = TensorView(bench.place(kv), DType::bf16, {c.s_kv, 1, c.d_qk}, w);
    a.indices = TensorView(bench.place(idx), DType::i32, {c.s_q, 1, c.topk}, w);
    if (c.len) a.topk_length = TensorView(bench.place(len), DType::i32, {c.s_q}, w);
    a.sm_scale = 1.0f / 24.0f;
    a.out = TensorView(bench.place(out), DType::bf16, {c.s_q, c.h_q, 512}, w);
    a.max_logits = TensorView(bench.place(mx), DType::f32, {c.s_q, c.h_q}, w);
    a.lse = TensorView(bench.place(lse), DType::f32, {c.s_q, c.h_q}, w);
    BenchCase bc;
    bc.name = name;
    bc.time_us = bench.time([&] { sparse_prefill(a); }, opt.reps);
    bench.release();
    const double flops = 2.0 * c.h_q * attended * (c.d_qk + 512);
    const double bytes = 2.0 * attended * c.d_qk + 2.0 * c.s_q * c.h_q * (c.d_qk + 512);
    bc.numbers["TFLOPS"] = flops / (bc.time_us * 1e-6) / 1e12;
    bc.numbers["GBps"] = bytes / (bc.time_us * 1e-6) / 1e9;
    if (bench.hbm > 0) bc.numbers["frac_of_ceiling"] = bc.numbers["GBps"] / bench.hbm;
    const double dram_bytes = 2.0 * static_cast<double>(distinct) * c.d_qk + 4.0 * attended +
                              (c.len ? 4.0 * c.s_q : 0.0) + 2.0 * c.s_q * c.h_q * (c.d_qk + 512);
    bc.numbers["dram_bytes"] = dram_bytes;
    bc.numbers["distinct_kv_rows"] = static_cast<double>(distinct);
    add_roofline(bc, flops, dram_bytes, bench.hbm, kDatasheetTFLOPS, bench.empty_launch);
    if (!bench.cuda) add_cpu_roof(bc, flops, dram_bytes, bench.roof);
    const DecodePlan plan = bench.plan(c.s_q, 1, c.h_q, c.topk);
    bc.numbers["num_splits"] = static_cast<double>(plan.num_splits);
    bc.numbers["unsplit_rows"] = static_cast<double>(plan.unsplit_b);
    print_case(bc, bench.hbm);
    res.cases.push_back(bc);
  }
  finish(res, bench, opt.json, opt.plot, "sq4096_skv65536_topk2048_h128_d576", "h128_d576_skv65536_TFLOPS");
  return 0;
}

// ---- dense decode --------------------------------------------------------------------------------
int cmd_bench_dense(const Args& args) {
  const Options opt = parse_options(args, 20);
  BenchResult res;
  Bench bench("dense_decode", opt, args, res);
  res.notes["flops"] = "b * h_q * s_q * 2 * mean_len * (d_qk + d_v) (causal masking not subtracted, as FlashMLA counts)";
  res.notes["bytes"] = "b * (2*s_q*h_q*d_qk + mean_len*h_kv*bytes_per_token + 2*s_q*h_q*d_v), bytes_per_token 1152 (bf16) or 656 (v32_fp8)";
  res.notes["inputs"] = "d_qk 576, h_kv 1, page 64, every request at length s_k, pages in order";

  struct Case { int64_t b, s_k, h_q, s_q; bool fp8; };
  std::vector<Case> cases;
  if (!bench.cuda) {
    cases.push_back({4, 1024, 16, 1, false});
  } else {
    for (bool fp8 : {false, true})
      for (int64_t s_k : {4096, 8192})
        for (int64_t s_q : {1, 2})
          for (int64_t h : {16, 32, 64, 128}) cases.push_back({128, s_k, h, s_q, fp8});
  }
  constexpr int64_t kD = 576, kP = 64;
  std::vector<uint16_t> kc;
  std::vector<uint8_t> kf;
  bool cache_fp8 = false;
  int64_t cache_pages = -1;
  for (const Case& c : cases) {
    const std::string name = std::string(c.fp8 ? "fp8" : "bf16") + "_b" + std::to_string(c.b) + "_sk" +
                             std::to_string(c.s_k) + "_h" + std::to_string(c.h_q) + "_sq" +
                             std::to_string(c.s_q) + "_causal";
    if (!opt.filter.empty() && name.find(opt.filter) == std::string::npos) continue;
    const int64_t pages_per_req = (c.s_k + kP - 1) / kP, num_pages = c.b * pages_per_req;
    std::vector<uint16_t> q = random_bf16(static_cast<size_t>(c.b * c.s_q * c.h_q * kD), 31);
    // The cache (up to 1.2 GB) is made once per (dtype, s_k) and shared by the cases that follow.
    if (c.fp8 != cache_fp8 || num_pages != cache_pages) {
      kc.clear();
      kf.clear();
      if (c.fp8) kf = random_cache(CacheFormat::v32_fp8, num_pages, kP, 33);
      else kc = random_bf16(static_cast<size_t>(num_pages * kP * kD), 33);
      cache_fp8 = c.fp8;
      cache_pages = num_pages;
    }
    std::vector<int32_t> bt(static_cast<size_t>(num_pages)), lens(static_cast<size_t>(c.b), static_cast<int32_t>(c.s_k));
    for (int64_t k = 0; k < num_pages; ++k) bt[k] = static_cast<int32_t>(k);
    std::vector<uint16_t> out(static_cast<size_t>(c.b * c.s_q * c.h_q * 512));
    std::vector<float> lse(static_cast<size_t>(c.b * c.h_q * c.s_q));
    const Device w = bench.where();
    DenseDecodeArgs a;
    a.q = TensorView(bench.place(q), DType::bf16, {c.b, c.s_q, c.h_q, kD}, w);
    if (c.fp8) {
      a.k_cache = TensorView(bench.place(kf), DType::u8, {num_pages, kP, 1, 656}, w);
      a.fp8 = true;
    } else {
      a.k_cache = TensorView(bench.place(kc), DType::bf16, {num_pages, kP, 1, kD}, w);
    }
    a.block_table = TensorView(bench.place(bt), DType::i32, {c.b, pages_per_req}, w);
    a.cache_seqlens = TensorView(bench.place(lens), DType::i32, {c.b}, w);
    a.causal = true;
    a.out = TensorView(bench.place(out), DType::bf16, {c.b, c.s_q, c.h_q, 512}, w);
    a.lse = TensorView(bench.place(lse), DType::f32, {c.b, c.h_q, c.s_q}, w);
    BenchCase bc;
    bc.name = name;
    bc.time_us = bench.time([&] { dense_decode(a); }, opt.reps);
    bench.release();
    const double bpt = c.fp8 ? 656.0 : 2.0 * kD;
    const double flops = static_cast<double>(c.b) * c.h_q * c.s_q * 2.0 * c.s_k * (kD + 512);
    const double bytes = c.b * (2.0 * c.s_q * c.h_q * kD + c.s_k * bpt + 2.0 * c.s_q * c.h_q * 512);
    bc.numbers["TFLOPS"] = flops / (bc.time_us * 1e-6) / 1e12;
    bc.numbers["GBps"] = bytes / (bc.time_us * 1e-6) / 1e9;
    if (bench.hbm > 0) bc.numbers["frac_of_ceiling"] = bc.numbers["GBps"] / bench.hbm;
    add_roofline(bc, flops, bytes, bench.hbm, kDatasheetTFLOPS, bench.empty_launch);
    if (!bench.cuda) add_cpu_roof(bc, flops, bytes, bench.roof);
    // The plan dense decode makes for this case (dense/cuda plan_splits: packed query tokens, and
    // the CTAs per SM of the kernel the rows run on); one split on the CPU.
    int64_t num_splits = 1, unsplit_rows = 0;
#ifdef LKV_WITH_CUDA
    if (bench.cuda) {
      dense::Params dp{};
      dp.b = c.b;
      dp.s_q = c.s_q;
      dp.h_q = c.h_q;
      dp.h_kv = 1;
      dp.d_qk = kD;
      dp.dtype = dense::Half::bf16;
      dp.fp8 = c.fp8;
      dp.page_size = kP;
      dp.max_pages = pages_per_req;
      const dense::cuda::SplitPlan sp = dense::cuda::plan_splits(dp, bench_cuda::sm_count(0));
      num_splits = sp.num_splits;
      unsplit_rows = sp.unsplit_r1;
    }
#endif
    bc.numbers["num_splits"] = static_cast<double>(num_splits);
    bc.numbers["unsplit_rows"] = static_cast<double>(unsplit_rows);
    print_case(bc, bench.hbm);
    res.cases.push_back(bc);
  }
  std::vector<double> frac;
  for (const auto& c : res.cases)
    if (c.numbers.count("frac_of_ceiling")) frac.push_back(c.numbers.at("frac_of_ceiling"));
  if (!frac.empty()) res.summary["max_frac_of_hbm"] = *std::max_element(frac.begin(), frac.end());
  finish(res, bench, opt.json, opt.plot, "bf16_b128_sk8192_h128_sq2_causal", "bf16_b128_sk8192_h128_sq2_TFLOPS");
  return 0;
}

}  // namespace latentkv::cli
