// `latentkv bench compress`, `latentkv verify` and `latentkv run compress`.
//
// bench: the 12 contest workloads (and, with --shuffled, the same with a shuffled block table) on
// the CPU or the GPU: µs per call, GB/s, the fraction of the HBM read bandwidth measured in the same
// run, and the speedup against the contest's PyTorch reference when its times are given
// (--reference FILE, written by bench/compress_reference.py in the same device session).
// verify: runs small workloads on every backend built and judges them against the float64 oracle.
// run: loads inputs written by bench/compress_reference.py and writes the functional-mode cache.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "bench_util.h"
#include "commands.h"
#include "compress/check.h"
#include "compress/cpu/pool.h"
#include "compress/params.h"
#include "latentkv/compress.h"
#include "latentkv/error.h"
#include "testing/compress_workload.h"
#include "testing/decode_workload.h"
#include "latentkv/decode.h"
#ifdef LKV_WITH_CUDA
#include "compress/cuda/config.h"  // kTracePhases
#include "compress/cuda/launch.h"
#include "cuda_common/bench.h"
#endif

namespace latentkv::cli {
namespace {

using testing::CompressWorkload;
using testing::WorkloadOptions;

#ifdef LKV_WITH_CUDA
// Device copies of a workload's tensors; args() points a host CompressArgs at them.
class DeviceCopy {
 public:
  explicit DeviceCopy(CompressWorkload& w) : w_(w) {
    put(w.state);
    put(w.token_to_req);
    put(w.positions);
    put(w.boundary);
    put(w.block_table);
    put(w.weight);
    put(w.cos_sin);
    put(w.slot_mapping);
    put(w.kv);
  }
  ~DeviceCopy() {
    for (void* p : ptrs_) bench_cuda::free(p);
  }
  CompressArgs args(CompressMode mode) {
    CompressArgs a = w_.args(mode);
    TensorView* views[] = {&a.state_cache,   &a.token_to_req,  &a.positions,
                           &a.boundary_token_indices, &a.block_table, &a.rms_norm_weight,
                           &a.cos_sin_cache, &a.kv_slot_mapping, &a.kv_cache};
    for (size_t i = 0; i < ptrs_.size(); ++i) {
      views[i]->data = ptrs_[i];
      views[i]->device = Device::cuda(0);
    }
    return a;
  }
  std::vector<uint8_t> kv() {
    std::vector<uint8_t> h(w_.kv.size());
    bench_cuda::to_host(h.data(), ptrs_.back(), h.size());
    return h;
  }

 private:
  template <typename T>
  void put(const std::vector<T>& v) {
    void* p = bench_cuda::alloc(v.size() * sizeof(T));
    bench_cuda::to_device(p, v.data(), v.size() * sizeof(T));
    ptrs_.push_back(p);
  }
  CompressWorkload& w_;
  std::vector<void*> ptrs_;
};
#endif

CacheFormat compressor_format(const std::string& s) {
  const CacheFormat f = parse_format(s);
  LKV_CHECK(f == CacheFormat::v4_int8 || f == CacheFormat::v4_fp8,
            "--format must be v4_int8 or v4_fp8, got ", s);
  return f;
}


#ifdef LKV_WITH_CUDA
// Calls queued back to back with PDL, each call's CTAs stamped: per call (after the first CTA of the
// first call started, us) the first CTA's entry, the median and latest row table ready (streaming
// starts), rows streamed, and the latest record written; then over calls 1.. the medians of how far
// each call's first entry and median streaming start lie after the previous call's last record
// (negative: before it), and of the period between the calls' last records.
void print_stream_trace(const std::string& name, const compress::cuda::CompressTrace& t, BenchCase& bc) {
  namespace cc = compress::cuda;
  const int64_t ctas = t.num_outputs * t.ctas_per_output;
  if (ctas == 0 || t.calls < 2) return;
  auto at = [&](int64_t call, int64_t c, int ph) {
    return t.stamps[static_cast<size_t>((call * ctas + c) * cc::kTracePhases + ph)];
  };
  unsigned long long t0 = ~0ull;
  for (int64_t c = 0; c < ctas; ++c)
    if (at(0, c, 0) != 0) t0 = std::min(t0, at(0, c, 0));
  auto us = [&](unsigned long long s) { return static_cast<double>(static_cast<long long>(s - t0)) * 1e-3; };
  struct Call {
    double entry, rows_med, rows_max, streamed_med, streamed_max, written;
  };
  std::vector<Call> calls;
  for (int64_t k = 0; k < t.calls; ++k) {
    std::vector<double> rows, streamed;
    double entry = 1e30, written = -1e30;
    for (int64_t c = 0; c < ctas; ++c) {
      if (at(k, c, 0) != 0) entry = std::min(entry, us(at(k, c, 0)));
      if (at(k, c, 2) != 0) rows.push_back(us(at(k, c, 2)));
      if (at(k, c, 3) != 0) streamed.push_back(us(at(k, c, 3)));
      if (at(k, c, cc::kTraceWritten) != 0) written = std::max(written, us(at(k, c, cc::kTraceWritten)));
    }
    if (rows.empty() || streamed.empty()) return;
    calls.push_back({entry, median(rows), *std::max_element(rows.begin(), rows.end()), median(streamed),
                     *std::max_element(streamed.begin(), streamed.end()), written});
  }
  std::printf("  trace back to back %s (%lld calls, PDL): entry, rows med/max, streamed med/max, written (us)\n   ",
              name.c_str(), static_cast<long long>(t.calls));
  for (size_t k = 0; k < calls.size(); ++k)
    std::printf(" [%zu] %.2f %.2f/%.2f %.2f/%.2f %.2f", k, calls[k].entry, calls[k].rows_med, calls[k].rows_max,
                calls[k].streamed_med, calls[k].streamed_max, calls[k].written);
  std::vector<double> entry_gap, rows_gap, period;
  for (size_t k = 1; k < calls.size(); ++k) {
    entry_gap.push_back(calls[k].entry - calls[k - 1].written);
    rows_gap.push_back(calls[k].rows_med - calls[k - 1].written);
    period.push_back(calls[k].written - calls[k - 1].written);
  }
  bc.numbers["trace_stream_entry_after_prev_us"] = median(entry_gap);
  bc.numbers["trace_stream_rows_after_prev_us"] = median(rows_gap);
  bc.numbers["trace_stream_period_us"] = median(period);
  std::printf("\n    after the previous call's last record: first entry %.2f, median streaming start %.2f; "
              "period %.2f us\n",
              median(entry_gap), median(rows_gap), median(period));
}

// Calls back to back (bench_cuda::stream_time_us), each on the next of R device copies of the state,
// R x the state >= 256 MiB (over 4x the L2), so that no call finds its rows in the L2 from an earlier
// one: per-call time with the compressor's programmatic dependent launch (default), the same with
// overlap_prologue (the call ahead writes none of its indices: it is another compressor call), and
// with ordinary launches. Each call's own work is the flushed call's; what differs is the gap
// between calls and what of a call may run under the previous one's tail.
// trace_stream: one more batch with PDL (the first call ordinary), each call's CTAs stamped
// (set_compress_trace_calls), printed by print_stream_trace.
void stream_times(const std::string& name, const CompressWorkload& w, CompressArgs a, BenchCase& bc,
                  bool trace_stream) {
  namespace cc = compress::cuda;
  const size_t bytes = w.state.size() * sizeof(float);
  const int copies = static_cast<int>(std::max<size_t>(2, ((size_t{256} << 20) + bytes - 1) / bytes));
  std::vector<void*> states{a.state_cache.data};
  for (int r = 1; r < copies; ++r) {
    states.push_back(bench_cuda::alloc(bytes));
    bench_cuda::to_device(states.back(), w.state.data(), bytes);
  }
  const int calls = std::max(16, copies);
  bool pdl = true;
  auto call = [&](int i) {
    // The first call of a timed batch is an ordinary launch, so that none of its work can start
    // before the start event (PDL would let it in under the lead kernel).
    cc::set_compress_pdl(pdl && i > 0);
    a.state_cache.data = states[static_cast<size_t>(i % copies)];
    compress_kv(a);
  };
  const bool pdl_was = cc::compress_pdl();
  time_stream_forms(call, calls, {"stream_time_us", "stream_overlap_time_us", "stream_ordinary_time_us"},
                    [&](int form) {
                      pdl = form < 2;
                      a.overlap_prologue = form == 1;
                    },
                    bc);
  if (trace_stream) {
    pdl = true;
    a.overlap_prologue = false;
    int invoked = 0;
    auto traced = [&](int i) {
      if (invoked++ == calls) {  // stream_time_us' warm-up batch is over: trace the timed one
        cc::set_compress_trace_calls(calls);
        cc::set_compress_trace(true);
      }
      call(i);
    };
    // Its time is not kept: the batch also carries the memset that clears the stamp buffer.
    bench_cuda::stream_time_us(traced, calls, 1, 40.0 * calls, nullptr);
    cc::set_compress_trace(false);
    const cc::CompressTrace t = cc::last_compress_trace();
    cc::set_compress_trace_calls(1);
    print_stream_trace(name, t, bc);
  }
  cc::set_compress_pdl(pdl_was);
  bc.numbers["stream_pdl"] = cc::compress_pdl_on(0) ? 1.0 : 0.0;
  for (size_t r = 1; r < states.size(); ++r) bench_cuda::free(states[r]);
}

// One flushed call with phase stamps: for each phase, the median and the latest CTA to reach it, in
// microseconds after the first CTA started. Printed, and kept in the case's numbers.
// dir non-empty: the raw stamps also go to dir/<case>.csv, one row per CTA (output, split, slice, then
// each phase in ns after the first CTA started; -1 where a CTA never reached it), for analysis per
// output (which CTA finished an output, how far behind its peers it was).
void trace_case(const std::string& name, const CompressArgs& a, BenchCase& bc, const std::string& dir) {
  namespace cc = compress::cuda;
  bench_cuda::flush_l2();
  cc::set_compress_trace(true);
  compress_kv(a);
  cc::set_compress_trace(false);
  const cc::CompressTrace t = cc::last_compress_trace();
  const int64_t ctas = t.num_outputs * t.ctas_per_output;
  if (ctas == 0) return;
  unsigned long long t0 = ~0ull;
  for (int64_t c = 0; c < ctas; ++c) {
    const unsigned long long s = t.stamps[static_cast<size_t>(c) * cc::kTracePhases];
    if (s != 0) t0 = std::min(t0, s);
  }
  static const char* const kNames[cc::kTracePhases] = {"entry",  "header", "rows", "streamed", "groups",  "ticket",
                                                       "loaded", "merged", "norm", "written",  "boundary", "table"};
  std::printf("  trace %s: %lld outputs x %lld splits x %lld slices; phase median/max us:", name.c_str(),
              static_cast<long long>(t.num_outputs), static_cast<long long>(t.plan.num_splits),
              static_cast<long long>(t.plan.dim_slices));
  bc.numbers["plan_splits"] = static_cast<double>(t.plan.num_splits);
  bc.numbers["plan_dim_slices"] = static_cast<double>(t.plan.dim_slices);
  add_phase_stats(bc, t.stamps, ctas, cc::kTracePhases, kNames, t0);
  // Each CTA's own steps after the streaming: its row-group merge, its publish and ticket, and for
  // the finishing CTAs the split merge (partials read back) and the record.
  std::printf("\n    steps within a CTA, median/max us:");
  add_step_stats(bc, t.stamps, ctas, cc::kTracePhases, kNames, {{0, 10}, {10, 1}, {1, 11}, {11, 2}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 8}, {8, 9}});
  std::printf("\n");
  if (dir.empty()) return;
  const std::string path = dir + "/" + name + ".csv";
  std::FILE* f = std::fopen(path.c_str(), "w");
  LKV_CHECK(f != nullptr, "bench compress: cannot write ", path);
  std::fprintf(f, "output,split,slice");
  for (const char* n : kNames) std::fprintf(f, ",%s", n);
  std::fprintf(f, "\n");
  const int64_t slices = t.plan.dim_slices;
  for (int64_t c = 0; c < ctas; ++c) {
    const int64_t y = c % t.ctas_per_output;
    std::fprintf(f, "%lld,%lld,%lld", static_cast<long long>(c / t.ctas_per_output),
                 static_cast<long long>(y / slices), static_cast<long long>(y % slices));
    for (int ph = 0; ph < cc::kTracePhases; ++ph) {
      const unsigned long long s = t.stamps[static_cast<size_t>(c) * cc::kTracePhases + ph];
      std::fprintf(f, ",%lld", s == 0 ? -1LL : static_cast<long long>(s - t0));
    }
    std::fprintf(f, "\n");
  }
  std::fclose(f);
}
#endif

}  // namespace

int cmd_bench_compress(const Args& args) {
  const bool cuda = bench_wants_cuda(args.get("device", "auto"));
  const CacheFormat format = compressor_format(args.get("format", "v4_int8"));
  const std::string which = args.get("cases", "contest");
  const bool shuffled = args.flag("shuffled");
  const std::string json = args.get("json", "");
  const std::string ref_path = args.get("reference", "");
  const std::string plot = args.get("plot", "");
  // --trace (CUDA): one more flushed call per case with per-CTA phase stamps (%globaltimer).
  const bool trace = args.flag("trace");
  const std::string trace_dir = args.get("trace-dir", "");  // --trace: raw stamps per case as CSV
  // --trace-stream (CUDA): one more batch of calls back to back with PDL, each call's CTAs stamped.
  const bool trace_stream = args.flag("trace-stream");
  LKV_CHECK(!trace_stream || cuda, "bench compress: --trace-stream needs --device cuda");
  LKV_CHECK(!trace || cuda, "bench compress: --trace needs --device cuda");
  LKV_CHECK(trace_dir.empty() || trace, "bench compress: --trace-dir needs --trace");
  // CPU: 11 calls, as single calls on a shared 2-core machine swing by 2x (bench/NOTES.md).
  const int reps = args.get_reps(cuda ? 50 : 11);
  args.check_all_used();
  LKV_CHECK(which == "contest" || which == "quick", "--cases must be contest or quick, got ",
            which);

  BenchResult res;
  res.op = "compress_kv";
  res.command = args.command_line();
  res.date = utc_now();
  res.notes["format"] = format_info(format).name;
  res.notes["timing"] = cuda ? "median of " + std::to_string(reps) +
                                   " event-timed calls, L2 flushed (a 256 MiB read) before each, checks off; "
                                   "warm_time_us: the same without the flush, each right after an untimed call "
                                   "(which keeps the GPU busy while the timed call is queued); stream_*_time_us: "
                                   "calls queued back to back on rotating copies of the state (>= 256 MiB in all), "
                                   "event span / calls, median of 15 (with PDL, PDL and overlap_prologue, ordinary "
                                   "launches)"
                             : "median of " + std::to_string(reps) + " wall-clock calls";
  std::map<std::string, double> ref;
  std::map<std::string, std::vector<double>> ref_rounds;
  if (!ref_path.empty()) {
    // Each payload format against its own reference variant (bench/compress_reference.py times the
    // int8 one under reference_time_us, the fp8 one under reference_fp8_time_us); a file without fp8
    // times (written before 2026-12-07) gives the int8 ones, and the notes say so.
    const bool fp8 = format == CacheFormat::v4_fp8;
    std::string key = fp8 ? "reference_fp8_time_us" : "reference_time_us";
    ref = read_reference_times(ref_path, key);
    if (fp8 && ref.empty()) {
      key = "reference_time_us";
      ref = read_reference_times(ref_path, key);
    }
    ref_rounds = read_reference_rounds(ref_path, key + "_rounds");
    res.notes["reference"] = ref_path + ": " + key + " (the " +
                             (key == "reference_time_us" ? "contest's v4_int8" : "v4_fp8") +
                             " reference, functional: its time includes zeroing a new cache)";
  }
  double hbm = 0, empty_launch = 0;
  int wave_ctas = 0;
#ifdef LKV_WITH_CUDA
  if (cuda) {
    res.device = bench_cuda::device_name(0);
    hbm = bench_cuda::measure_hbm_read_GBps();
    res.ceilings["hbm_read_GBps"] = hbm;
    // The floor of a flushed call (floor_time_us below): an empty launch, timed the same way, plus
    // the state bytes at the HBM read rate. One CTA gives the smallest launch span, so the floor is
    // a lower bound for any kernel; the full-wave span (4 CTAs of 256 threads per SM, as the
    // compressor's plans launch) is reported beside it.
    empty_launch = bench_cuda::measure_empty_launch_us(1);
    res.ceilings["empty_launch_us"] = empty_launch;
    wave_ctas = 4 * bench_cuda::sm_count(0);
    res.ceilings["empty_launch_wave_us"] = bench_cuda::measure_empty_launch_us(wave_ctas);
    res.notes["split_merge"] = compress::cuda::compress_clusters()
                                   ? "in thread-block clusters where a plan has 2-16 splits (LKV_COMPRESS_CLUSTER=1, sm_90)"
                                   : "global";
    res.notes["max_dim_slices"] = std::to_string(compress::cuda::compress_max_slices());
  }
#endif
  // On the CPU the ceiling is a memcpy with as many threads, timed in the same run (the issue's
  // yardstick); the streaming-read rate is reported beside it, since the op's traffic is reads.
  double cpu_memcpy = 0;
  if (!cuda) {
    res.device = "cpu";
    cpu_memcpy = measure_cpu_memcpy_GBps();
    res.ceilings["memcpy_GBps"] = cpu_memcpy;
    res.ceilings["read_GBps"] = measure_cpu_read_GBps();
    res.notes["cpu_isa"] = compress::cpu_isa_name(compress::default_cpu_isa());
    res.notes["threads"] = std::to_string(omp_get_max_threads());
  }
  const double ceiling = cuda ? hbm : cpu_memcpy;

  std::printf("compress_kv %s on %s%s\n", format_info(format).name, res.device.c_str(),
              cuda ? "" : (" (fast fp32 path, " + res.notes["cpu_isa"] + ")").c_str());
  if (hbm > 0)
    std::printf("measured HBM read bandwidth: %.0f GB/s; empty launch %.2f us (1 CTA), %.2f us (%d CTAs); "
                "floor = empty launch + state bytes at the HBM rate\n",
                hbm, empty_launch, res.ceilings["empty_launch_wave_us"], wave_ctas);
  if (!cuda)
    std::printf("measured with %s threads: memcpy %.1f GB/s (bytes copied / s), read %.1f GB/s\n",
                res.notes["threads"].c_str(), cpu_memcpy, res.ceilings["read_GBps"]);
  std::printf("%-26s %10s %10s %8s %10s %10s %10s%s\n", "case", "us", "GB/s",
              cuda ? "of HBM" : "of mcpy", "vs torch", "checked us", "warm us",
              cuda ? "  floor us  stream us: pdl / overlap / ordinary (host us per call)" : "");
  std::vector<double> speedups, functional_speedups, floor_speedups, fracs_large, shuffle_ratio;
  double worst_8192 = 0;
  std::map<std::string, double> identity_time;
  for (const auto& c : testing::contest_cases()) {
    if (which == "quick" && c.total_tokens > 32768) continue;
    for (int shuffle = 0; shuffle <= (shuffled ? 1 : 0); ++shuffle) {
      WorkloadOptions o;
      o.num_reqs = c.num_reqs;
      o.tokens_per_req = c.total_tokens / c.num_reqs;
      o.compress_ratio = c.compress_ratio;
      o.format = format;
      o.shuffle_blocks = shuffle;
      o.seed = 42;
      CompressWorkload w = testing::make_workload(o);
      const std::string name = std::string(c.name) + (shuffle ? "_shuffled" : "");
      const double bytes_read = static_cast<double>(w.state_bytes_read());
      const double bytes = bytes_read + static_cast<double>(w.num_outputs) * compress::kRecordBytes;
      BenchCase bc;
      bc.name = name;
      double checked_us = 0;
      if (cuda) {
#ifdef LKV_WITH_CUDA
        DeviceCopy d(w);
        CompressArgs a = d.args(CompressMode::kInPlace);
        compress_kv(a);  // once with the index checks, which also proves the inputs valid
        bench_cuda::synchronize();
        checked_us = bench_cuda::time_us([&] { compress_kv(a); }, 10);
        a.check_indices = false;
        bc.time_us = bench_cuda::time_us([&] { compress_kv(a); }, reps);
        // Warm: the same call right after an untimed one, no flush (inputs that fit in the L2 stay
        // there). The untimed call runs while the host queues the events and the timed call; without
        // it the GPU would sit idle between the start event and the launch, and the time would carry
        // the host's launch latency (measured ~5 us longer than the flushed time that way, v5 files).
        bc.numbers["warm_time_us"] =
            bench_cuda::time_us([&] { compress_kv(a); }, reps, 3, false, [&] { compress_kv(a); });
        // The functional mode, as the contest's function and the reference: a fresh cache, zeroed
        // (one memset) then written. The headline time is the in-place call, which on the contest's
        // zeroed cache leaves the same bytes, as the contest's solutions reused that cache.
        {
          CompressArgs f = d.args(CompressMode::kFunctional);
          f.check_indices = false;
          bc.numbers["functional_time_us"] = bench_cuda::time_us([&] { compress_kv(f); }, reps);
        }
        stream_times(name, w, a, bc, trace_stream);
        const compress::SplitPlan plan = compress::cuda::plan_for(w.params(), 0);
        bc.numbers["plan_splits"] = static_cast<double>(plan.num_splits);
        bc.numbers["plan_dim_slices"] = static_cast<double>(plan.dim_slices);
        bc.numbers["plan_clusters"] = compress::cuda::merges_in_clusters(w.params(), 0) ? 1.0 : 0.0;
        if (trace) trace_case(name, a, bc, trace_dir);
#endif
      } else {
        CompressArgs a = w.args(CompressMode::kInPlace);
        bc.time_us = cpu_time_us([&] { compress_kv(a); }, reps);
      }
      bc.numbers["GBps"] = bytes / (bc.time_us * 1e-6) / 1e9;
      bc.numbers["state_bytes"] = bytes_read;
      bc.numbers["num_outputs"] = static_cast<double>(w.num_outputs);
      if (cuda) bc.numbers["checked_time_us"] = checked_us;
      if (ceiling > 0) {
        bc.numbers["frac_of_ceiling"] = bytes_read / (bc.time_us * 1e-6) / 1e9 / ceiling;
        if (c.total_tokens == 131072 && !shuffle) fracs_large.push_back(bc.numbers["frac_of_ceiling"]);
      }
      if (cuda && hbm > 0) {
        bc.numbers["floor_time_us"] = floor_time_us(empty_launch, bytes_read, hbm);
        bc.numbers["frac_of_floor"] = bc.numbers["floor_time_us"] / bc.time_us;
      }
      if (c.total_tokens == 8192 && !shuffle) worst_8192 = std::max(worst_8192, bc.time_us);
      if (ref.count(name)) {
        bc.numbers["reference_time_us"] = ref[name];
        bc.numbers["speedup_vs_reference"] = ref[name] / bc.time_us;
        if (!shuffle) speedups.push_back(bc.numbers["speedup_vs_reference"]);
        if (bc.numbers.count("functional_time_us")) {
          bc.numbers["functional_speedup_vs_reference"] = ref[name] / bc.numbers["functional_time_us"];
          if (!shuffle) functional_speedups.push_back(bc.numbers["functional_speedup_vs_reference"]);
        }
        if (!shuffle && bc.numbers.count("floor_time_us"))
          floor_speedups.push_back(ref[name] / bc.numbers["floor_time_us"]);
      }
      if (!shuffle) identity_time[c.name] = bc.time_us;
      else shuffle_ratio.push_back(bc.time_us / identity_time[c.name]);
      std::printf("%-26s %10.1f %10.1f %7.1f%% %9.1fx %10.1f %10.1f", name.c_str(), bc.time_us,
                  bc.numbers["GBps"], 100.0 * (ceiling > 0 ? bc.numbers["frac_of_ceiling"] : 0.0),
                  ref.count(name) ? bc.numbers["speedup_vs_reference"] : 0.0, checked_us,
                  cuda ? bc.numbers["warm_time_us"] : 0.0);
      if (cuda && bc.numbers.count("floor_time_us")) std::printf("  floor %.1f", bc.numbers["floor_time_us"]);
      if (cuda)
        std::printf("  %.1f / %.1f / %.1f (%.1f)", bc.numbers["stream_time_us"], bc.numbers["stream_overlap_time_us"],
                    bc.numbers["stream_ordinary_time_us"], bc.numbers["stream_host_us_per_call"]);
      std::printf("\n");
      std::fflush(stdout);
      res.cases.push_back(bc);
    }
  }
  if (!speedups.empty()) res.summary["geomean_speedup_vs_reference"] = geomean(speedups);
  if (!functional_speedups.empty())
    res.summary["geomean_functional_speedup_vs_reference"] = geomean(functional_speedups);
  // The eager reference is partly host-bound, so its driver times it in rounds: the geomean against
  // each round's times, lowest and highest, shows how much of the figure is the host's.
  if (!speedups.empty() && !ref_rounds.empty()) {
    size_t rounds = SIZE_MAX;
    std::vector<std::pair<const std::vector<double>*, double>> per_case;  // (rounds, kernel time)
    for (const auto& c : res.cases) {
      if (c.name.find("shuffled") != std::string::npos || !c.numbers.count("reference_time_us")) continue;
      const auto it = ref_rounds.find(c.name);
      if (it == ref_rounds.end()) { rounds = 0; break; }
      rounds = std::min(rounds, it->second.size());
      per_case.push_back({&it->second, c.time_us});
    }
    if (rounds != SIZE_MAX && rounds >= 2) {
      std::vector<double> by_round;
      for (size_t r = 0; r < rounds; ++r) {
        std::vector<double> s;
        for (const auto& [times, t] : per_case) s.push_back((*times)[r] / t);
        by_round.push_back(geomean(s));
      }
      res.summary["geomean_speedup_vs_reference_round_min"] = *std::min_element(by_round.begin(), by_round.end());
      res.summary["geomean_speedup_vs_reference_round_max"] = *std::max_element(by_round.begin(), by_round.end());
    }
  }
  // What a kernel at the floor of every case would score against the same reference times: the
  // most any flushed single call can reach in this run.
  if (!floor_speedups.empty()) res.summary["geomean_speedup_at_floor"] = geomean(floor_speedups);
  double floor_8192 = 0;
  for (const auto& c : res.cases)
    if (c.name.rfind("r1_t8192_", 0) == 0 && c.numbers.count("floor_time_us"))
      floor_8192 = std::max(floor_8192, c.numbers.at("floor_time_us"));
  if (floor_8192 > 0) res.summary["max_floor_time_us_8192"] = floor_8192;
  if (!fracs_large.empty())
    res.summary["min_frac_of_ceiling_131072"] =
        *std::min_element(fracs_large.begin(), fracs_large.end());
  if (worst_8192 > 0) res.summary["max_time_us_8192"] = worst_8192;
  double worst_8192_warm = 0;
  for (const auto& c : res.cases)
    if (c.name.rfind("r1_t8192_", 0) == 0 && c.name.find("shuffled") == std::string::npos &&
        c.numbers.count("warm_time_us"))
      worst_8192_warm = std::max(worst_8192_warm, c.numbers.at("warm_time_us"));
  if (worst_8192_warm > 0) res.summary["max_warm_time_us_8192"] = worst_8192_warm;
  // Calls back to back (stream_times): the 8192-token worst case per form, and the geomean speedup
  // over the reference with the PDL stream time in place of the flushed single call's.
  std::vector<double> stream_speedups;
  for (const char* key : {"stream_time_us", "stream_overlap_time_us", "stream_ordinary_time_us"}) {
    double worst = 0;
    for (const auto& c : res.cases)
      if (c.name.rfind("r1_t8192_", 0) == 0 && c.name.find("shuffled") == std::string::npos && c.numbers.count(key))
        worst = std::max(worst, c.numbers.at(key));
    if (worst > 0) res.summary[std::string("max_") + key + "_8192"] = worst;
  }
  for (const auto& c : res.cases)
    if (c.numbers.count("reference_time_us") && c.numbers.count("stream_time_us") &&
        c.name.find("shuffled") == std::string::npos)
      stream_speedups.push_back(c.numbers.at("reference_time_us") / c.numbers.at("stream_time_us"));
  if (!stream_speedups.empty()) res.summary["geomean_stream_speedup_vs_reference"] = geomean(stream_speedups);
  if (!shuffle_ratio.empty())
    res.summary["max_shuffled_over_identity"] =
        *std::max_element(shuffle_ratio.begin(), shuffle_ratio.end());
  std::vector<double> gbps;
  for (const auto& c : res.cases) gbps.push_back(c.numbers.at("GBps"));
  res.summary["geomean_GBps"] = geomean(gbps);
  std::printf("summary:");
  for (const auto& [k, v] : res.summary) std::printf(" %s=%.3g", k.c_str(), v);
  std::printf("\n");
  if (!json.empty()) write_json(res, json);
  if (!plot.empty()) write_svg(res, "GBps", cuda ? "hbm_read_GBps" : "memcpy_GBps", "GB/s", plot);
  return 0;
}

int cmd_verify(const Args& args) {
  const std::string device = args.get("device", "auto");
  args.check_all_used();
  const bool cuda = bench_wants_cuda(device);
  std::vector<std::pair<std::string, CompressImpl>> impls = {{"cpu", CompressImpl::kCpuFast}};
  if (cuda) impls.push_back({"cuda", CompressImpl::kCuda});
  int failures = 0;
  std::printf("%-6s %-24s %8s %10s %10s %9s %8s\n", "impl", "workload", "records", "bytes",
              "ambiguous", "rope-ulp", "result");
  for (const auto& [label, impl] : impls)
    for (CacheFormat f : {CacheFormat::v4_int8, CacheFormat::v4_fp8})
      for (int64_t C : {4, 128, 512}) {
        WorkloadOptions o;
        o.num_reqs = 2;
        o.tokens_per_req = 2048;
        o.compress_ratio = C;
        o.format = f;
        o.shuffle_blocks = true;
        o.random_slots = true;
        o.seed = 7 + C;
        CompressWorkload w = testing::make_workload(o);
        std::vector<uint8_t> out;
        if (impl == CompressImpl::kCuda) {
#ifdef LKV_WITH_CUDA
          DeviceCopy d(w);
          compress_kv(d.args(CompressMode::kFunctional), nullptr, impl);
          out = d.kv();
#endif
        } else {
          compress_kv(w.args(CompressMode::kFunctional), nullptr, impl);
          out = w.kv;
        }
        const compress::CheckReport rep = compress::check_records(w.params(out.data()), out.data());
        const std::string name = std::string(format_info(f).name) + " C=" + std::to_string(C);
        std::printf("%-6s %-24s %8lld %10lld %10lld %9lld %8s\n", label.c_str(), name.c_str(),
                    static_cast<long long>(rep.records), static_cast<long long>(rep.bytes),
                    static_cast<long long>(rep.ambiguous_accepted),
                    static_cast<long long>(rep.rope_accepted), rep.ok() ? "ok" : "FAIL");
        if (!rep.ok()) {
          std::printf("  %s\n", rep.first_failure.c_str());
          ++failures;
        }
      }
  int checks = static_cast<int>(impls.size()) * 6;

  // sparse_decode: every backend against the float64 oracle on small workloads with every feature,
  // for each cache format and V4.1's fp4 extra cache (which the CUDA kernels do not take).
  std::printf("%-6s %-24s %10s %10s %8s\n", "impl", "decode workload", "max_rel", "cos", "result");
  const std::pair<CacheFormat, std::optional<CacheFormat>> decode_formats[] = {
      {CacheFormat::v32_fp8, std::nullopt},
      {CacheFormat::v4_fp8, CacheFormat::v4_fp8},
      {CacheFormat::v41_fp8, CacheFormat::v41_fp8},
      {CacheFormat::v41_fp8, CacheFormat::v41_fp4}};
  for (const auto& [f, extra] : decode_formats) {
    testing::DecodeWorkloadOptions o;
    o.b = 3;
    o.s_q = 2;
    o.h_q = 70;
    o.topk = 300;
    o.page_size = 53;
    o.format = f;
    o.topk_length = true;
    o.sink = true;
    o.extra = extra.has_value();
    o.extra_format = extra;
    o.extra_topk = 100;
    o.adversarial = true;
    const std::string name = std::string(format_info(f).name) +
                             (extra ? std::string(" + ") + format_info(*extra).name + " extra" : std::string());
    testing::DecodeWorkload w = testing::make_decode_workload(o);
    sparse_decode(w.args(), nullptr, DecodeImpl::kCpuOracle);
    const std::vector<uint16_t> ref_out = w.out;
    const std::vector<float> ref_lse = w.lse;
    for (const auto& [label, impl] : impls) {
      w.poison_outputs();
      std::vector<uint16_t> out;
      std::vector<float> lse;
      if (impl == CompressImpl::kCuda) {
#ifdef LKV_WITH_CUDA
        SparseDecodeArgs a = w.args();
        std::vector<void*> dev;
        auto move = [&](TensorView& t, size_t bytes) {
          if (!t.data) return;
          void* d = bench_cuda::alloc(bytes);
          bench_cuda::to_device(d, t.data, bytes);
          t.data = d;
          t.device = Device::cuda(0);
          dev.push_back(d);
        };
        move(a.q, w.q.size() * 2);
        move(a.k_cache, w.kv.size());
        move(a.indices, w.indices.size() * 4);
        move(a.topk_length, w.topk_length.size() * 4);
        move(a.attn_sink, w.sink.size() * 4);
        move(a.extra_k_cache, w.extra_kv.size());
        move(a.extra_indices, w.extra_indices.size() * 4);
        move(a.extra_topk_length, w.extra_topk_length.size() * 4);
        move(a.out, w.out.size() * 2);
        move(a.lse, w.lse.size() * 4);
        sparse_decode(a);
        out.resize(w.out.size());
        lse.resize(w.lse.size());
        bench_cuda::to_host(out.data(), a.out.data, out.size() * 2);
        bench_cuda::to_host(lse.data(), a.lse.data, lse.size() * 4);
        for (void* d : dev) bench_cuda::free(d);
#endif
      } else {
        sparse_decode(w.args(), nullptr, DecodeImpl::kCpuFast);
        out = w.out;
        lse = w.lse;
      }
      const testing::DecodeDiff d = testing::compare_decode(w, out, lse, ref_out, ref_lse);
      const bool ok = testing::decode_close(d);
      std::printf("%-6s %-24s %10.2e %10.7f %8s\n", label.c_str(), name.c_str(), d.max_rel, d.cos_sim,
                  ok ? "ok" : "FAIL");
      ++checks;
      if (!ok) ++failures;
    }
  }
  std::printf("verify: %d passed, %d failed\n", checks - failures, failures);
  return failures == 0 ? 0 : 1;
}

int cmd_run_compress(const Args& args) {
  const std::string dir = args.get("inputs", "");
  const std::string out_path = args.get("out", "");
  const CacheFormat format = compressor_format(args.get("format", "v4_int8"));
  const bool cuda = bench_wants_cuda(args.get("device", "auto"));
  args.check_all_used();
  LKV_CHECK(!dir.empty() && !out_path.empty(), "run compress needs --inputs DIR and --out FILE");
  std::ifstream meta(dir + "/meta.txt");
  LKV_CHECK(meta.good(), "cannot read ", dir, "/meta.txt");
  int64_t num_blocks, block_size, num_tokens, num_outputs, num_reqs, blocks_per_req, max_pos,
      num_pages, page_bytes, C, P;
  meta >> num_blocks >> block_size >> num_tokens >> num_outputs >> num_reqs >> blocks_per_req >>
      max_pos >> num_pages >> page_bytes >> C >> P;
  LKV_CHECK(!meta.fail(), dir, "/meta.txt: expected 11 integers");
  const std::pair<const char*, int64_t> counts[] = {
      {"num_blocks", num_blocks}, {"block_size", block_size},         {"num_tokens", num_tokens},
      {"num_outputs", num_outputs}, {"num_reqs", num_reqs},           {"blocks_per_req", blocks_per_req},
      {"max_pos", max_pos},         {"num_pages", num_pages},         {"page_bytes", page_bytes},
      {"compress_ratio", C},        {"page_size", P}};
  for (const auto& [name, v] : counts) LKV_CHECK(v >= 0, dir, "/meta.txt: ", name, " must be >= 0, got ", v);
  // An element count of a buffer read or allocated here; a product that overflows is refused (the
  // op validates the sizes' meaning itself).
  auto product = [&](const char* what, int64_t a, int64_t b) {
    int64_t r = 0;
    LKV_CHECK(!__builtin_mul_overflow(a, b, &r) && r <= (int64_t{1} << 40), dir, "/meta.txt: ", what, " = ", a,
              " * ", b, " is too large");
    return r;
  };
  auto load = [&](const std::string& name, auto& vec, int64_t n) {
    vec.resize(static_cast<size_t>(n));
    std::ifstream is(dir + "/" + name, std::ios::binary);
    LKV_CHECK(is.good(), "cannot read ", dir, "/", name);
    is.read(reinterpret_cast<char*>(vec.data()),
            static_cast<std::streamsize>(n * sizeof(vec[0])));
    LKV_CHECK(is.gcount() == static_cast<std::streamsize>(n * sizeof(vec[0])), dir, "/", name,
              " is shorter than ", n, " elements");
  };
  CompressWorkload w;
  w.opt.num_reqs = num_reqs;
  w.opt.block_size = block_size;
  w.opt.compress_ratio = C;
  w.opt.page_size = P;
  w.opt.format = format;
  w.num_tokens = num_tokens;
  w.num_outputs = num_outputs;
  w.num_blocks = num_blocks;
  w.blocks_per_req = blocks_per_req;
  w.max_pos = max_pos;
  w.num_pages = num_pages;
  w.page_stride = page_bytes;
  load("state.f32", w.state, product("num_blocks * block_size * 1024", product("num_blocks * block_size", num_blocks, block_size), 1024));
  load("token_to_req.i32", w.token_to_req, num_tokens);
  load("positions.i64", w.positions, num_tokens);
  load("boundary.i64", w.boundary, num_outputs);
  load("block_table.i32", w.block_table, product("num_reqs * blocks_per_req", num_reqs, blocks_per_req));
  load("weight.bf16", w.weight, 512);
  load("cos_sin.f32", w.cos_sin, product("max_pos * 64", max_pos, 64));
  load("slots.i64", w.slot_mapping, num_tokens);
  // (functional mode zeroes it)
  w.kv.assign(static_cast<size_t>(product("num_pages * page_bytes", num_pages, page_bytes)), 0xab);
  std::vector<uint8_t> out;
  if (cuda) {
#ifdef LKV_WITH_CUDA
    DeviceCopy d(w);
    compress_kv(d.args(CompressMode::kFunctional));
    out = d.kv();
#endif
  } else {
    compress_kv(w.args(CompressMode::kFunctional));
    out = w.kv;
  }
  std::ofstream os(out_path, std::ios::binary);
  os.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  LKV_CHECK(os.good(), "cannot write ", out_path);
  const compress::CheckReport rep = compress::check_records(w.params(out.data()), out.data());
  std::printf("run compress: %lld records, %lld ambiguous bytes accepted, %s against the oracle\n",
              static_cast<long long>(rep.records), static_cast<long long>(rep.ambiguous_accepted),
              rep.ok() ? "ok" : ("FAIL: " + rep.first_failure).c_str());
  return rep.ok() ? 0 : 1;
}

}  // namespace latentkv::cli
