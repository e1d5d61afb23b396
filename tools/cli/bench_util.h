// tools/cli/bench_util.h: what every `latentkv bench` shares: argument parsing, timing statistics,
// and the one benchmark-results JSON shape (docs/benchmarks.md).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace latentkv::cli {

// --key value / --flag arguments after the subcommand words.
class Args {
 public:
  Args(int argc, char** argv, int first);
  std::string get(const std::string& key, const std::string& fallback) const;
  // The whole value must be an integer ("5x" is an error, not 5).
  int get_int(const std::string& key, int fallback) const;
  // --reps: at least 1.
  int get_reps(int fallback) const;
  bool flag(const std::string& key) const;
  const std::string& command_line() const { return command_; }
  // Throws naming every option that was given but never read.
  void check_all_used() const;

 private:
  std::map<std::string, std::string> values_;
  mutable std::map<std::string, bool> used_;
  std::string command_;
};

// The median of v: the middle value, or the mean of the two middle values when v has an even
// count (as Python's statistics.median, which the reference drivers use); 0 for an empty v.
double median(std::vector<double> v);

// Median wall time of fn in microseconds (CPU benchmarks).
double cpu_time_us(const std::function<void()>& fn, int reps, int warmup = 1);

// CPU memory ceilings for the CPU benchmarks, measured with every OpenMP thread, each on its own
// slice of a 256 MiB buffer (8x a 32 MiB L3): the median of 5 passes after one that faults the
// pages in. memcpy: bytes copied per second (each byte read once and written once). read: a
// streaming float sum, bytes read per second.
double measure_cpu_memcpy_GBps();
double measure_cpu_read_GBps();

// The CPU roofline of the attention benches (decode, prefill, dense), measured in the same run with
// every OpenMP thread: read_GBps (measure_cpu_read_GBps) and fp32_GFLOPS, the multiply-add rate of
// the head block's build that the fast paths run (cpu_common::multiply_add_fn: independent
// accumulators in registers, 2 FLOPs per lane per multiply-add; the fastest of 7 passes). Both are
// ceilings: the fast paths also convert, gather and take exponentials, which the FLOP counts of
// SPEC section 8 do not count.
struct CpuRoof {
  double read_GBps = 0, fp32_GFLOPS = 0;
  std::string isa;  // the build measured (cpu_common::cpu_isa_name)
};
CpuRoof measure_cpu_roof();

double geomean(const std::vector<double>& v);

// --device of the benches and `verify`: "auto" (CUDA device 0 when one is visible, else the CPU),
// "cpu" or "cuda" (device 0; an error when none is visible or the build has no CUDA). Anything else
// is an error naming the value, rather than a silent choice.
bool bench_wants_cuda(const std::string& device);

// The H100/H200 SXM dense bf16 tensor-core rate (NVIDIA's datasheet, without sparsity), the
// compute ceiling of the attention benches' roofline.
inline constexpr double kDatasheetTFLOPS = 989.0;
std::string utc_now();

struct BenchCase {
  std::string name;
  double time_us = 0;
  std::map<std::string, double> numbers;      // GBps, frac_of_ceiling, speedup_vs_reference, ...
  std::map<std::string, std::string> labels;  // anything else worth keeping
};

struct BenchResult {
  std::string op, device, command, date;
  std::map<std::string, double> ceilings;  // hbm_read_GBps, ...
  std::vector<BenchCase> cases;
  std::map<std::string, double> summary;  // geomeans
  std::map<std::string, std::string> notes;
};

// The roofline class of an attention case, for targets set on memory-bound cases: its FLOPs per
// byte (SPEC section 8's counts) against the ridge, `peak_TFLOPS` over the HBM read rate measured
// in the run. Records numbers flops_per_byte and memory_bound (1 or 0); nothing without a measured
// HBM rate (CPU runs).
// The shortest flushed call the hardware allows: an empty launch's span (empty_launch_us,
// bench_cuda::measure_empty_launch_us, timed as the ops are) plus the longer of `bytes` at the HBM
// rate and `flops` at peak_TFLOPS (no compute term when peak_TFLOPS is 0).
double floor_time_us(double empty_launch_us, double bytes, double hbm_GBps, double flops = 0,
                     double peak_TFLOPS = 0);

// With empty_launch_us > 0 (bench_cuda::measure_empty_launch_us, timed as the op is) also
// floor_time_us, the shortest flushed call the hardware allows: that launch span plus the longer of
// bytes at the HBM rate and flops at the peak, and hbm_frac_at_floor, the fraction of the HBM rate
// a call at that floor would show (below 1 where the launch span is a sizeable part of the call).
void add_roofline(BenchCase& bc, double flops, double bytes, double hbm_GBps, double peak_TFLOPS,
                  double empty_launch_us = 0);

// measure_cpu_roof() for a CPU bench: records its ceilings (read_GBps, fp32_TFLOPS) and
// notes.cpu_isa in r and prints them on one line.
CpuRoof measure_cpu_roof(BenchResult& r);

// A CPU case under measure_cpu_roof()'s roof: flops_per_byte, memory_bound (below the ridge
// fp32_GFLOPS / read_GBps), floor_time_us (the longer of bytes at read_GBps and flops at
// fp32_GFLOPS; no launch term) and frac_of_roof (floor_time_us over the measured time: 1 would be a
// call at the roof).
void add_cpu_roof(BenchCase& bc, double flops, double bytes, const CpuRoof& roof);
// The summary of those: geomean_frac_of_roof and min_frac_of_roof over the cases that have one.
void summarise_cpu_roof(BenchResult& r);

// The same stamps as durations within each CTA: for each (from, to) pair of phases, over the CTAs
// that reached both, the median and the longest time from `from` to `to` in microseconds, printed
// as " from->to med/max" and kept as trace_<from>_to_<to>_median_us / _max_us. Unlike phase
// medians over all CTAs, these compare one CTA with itself (e.g. a finishing CTA's merge alone).
void add_step_stats(BenchCase& bc, const std::vector<unsigned long long>& stamps, int64_t ctas, int phases,
                    const char* const* names, const std::vector<std::pair<int, int>>& steps);

// Phase stamps of a traced kernel (ns, [ctas][phases], 0 where a CTA did not reach a phase): for
// each phase, the median and the latest CTA in microseconds after t0, printed as " name med/max"
// and kept as trace_<name>_median_us / trace_<name>_max_us.
void add_phase_stats(BenchCase& bc, const std::vector<unsigned long long>& stamps, int64_t ctas, int phases,
                     const char* const* names, unsigned long long t0);
#ifdef LKV_WITH_CUDA
// Calls queued back to back in several forms (bench_cuda::stream_time_us, each batch behind a lead
// kernel of 40 us per call, so that the host has queued them all before the first may start): 15
// batches per form, the forms alternating batch by batch; before a batch of form f, set_form(f)
// selects it. Form f's median per-call time goes to bc.numbers[keys[f]], the largest host time to
// queue one call to stream_host_us_per_call (the figures are the device's while it stays below the
// lead's 40 us per call), `calls` to stream_calls.
void time_stream_forms(const std::function<void(int)>& call, int calls, const std::vector<std::string>& keys,
                       const std::function<void(int)>& set_form, BenchCase& bc);
#endif
// summary memory_bound_cases and min_frac_of_hbm_memory_bound over the cases add_roofline marked
// memory-bound (absent when there are none), and min_hbm_frac_at_floor over the same cases where
// their floor was computed.
void summarise_memory_bound(BenchResult& r);

void write_json(const BenchResult& r, const std::string& path);
// An SVG picture of a result: one bar per case of `metric` (e.g. "GBps", "TFLOPS") against the
// ceiling `ceiling_name` of r.ceilings (a dashed line; omitted when absent), in `unit`.
void write_svg(const BenchResult& r, const std::string& metric, const std::string& ceiling_name,
               const std::string& unit, const std::string& path);
// Reads {"cases": [{"name": ..., "<key>": ...}]} written by bench/compress_reference.py: key
// "reference_time_us" (the int8 reference) or "reference_fp8_time_us"; cases without it are absent.
std::map<std::string, double> read_reference_times(const std::string& path, const std::string& key);
// Each case's eager timings per round (key "reference_time_us_rounds" or
// "reference_fp8_time_us_rounds", bench/compress_reference.py --rounds); cases without them are absent.
std::map<std::string, std::vector<double>> read_reference_rounds(const std::string& path, const std::string& key);

}  // namespace latentkv::cli
