// Shared benchmark plumbing of the CLI (see bench_util.h).
#include "bench_util.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "cpu_common/head_block.h"
#include "cpu_common/isa.h"
#include "latentkv/error.h"
#ifdef LKV_WITH_CUDA
#include "cuda_common/bench.h"
#endif

namespace latentkv::cli {

Args::Args(int argc, char** argv, int first) {
  for (int i = 0; i < argc; ++i) {
    if (i) command_ += ' ';
    command_ += argv[i];
  }
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    LKV_CHECK(a.rfind("--", 0) == 0, "unexpected argument '", a, "' (options start with --)");
    a.erase(0, 2);
    const size_t eq = a.find('=');
    if (eq != std::string::npos) values_[a.substr(0, eq)] = a.substr(eq + 1);
    else if (i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0) values_[a] = argv[++i];
    else values_[a] = "";
  }
}

std::string Args::get(const std::string& key, const std::string& fallback) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  used_[key] = true;
  return it->second;
}

int Args::get_int(const std::string& key, int fallback) const {
  const std::string v = get(key, "");
  if (v.empty()) return fallback;
  size_t end = 0;
  int x = 0;
  try {
    x = std::stoi(v, &end);
  } catch (...) {
    end = 0;
  }
  LKV_CHECK(end > 0 && end == v.size(), "option --", key, " needs an integer, got '", v, "'");
  return x;
}

int Args::get_reps(int fallback) const {
  const int reps = get_int("reps", fallback);
  LKV_CHECK(reps >= 1, "option --reps must be >= 1, got ", reps);
  return reps;
}

bool Args::flag(const std::string& key) const {
  if (!values_.count(key)) return false;
  used_[key] = true;
  return true;
}

void Args::check_all_used() const {
  for (const auto& [k, v] : values_)
    LKV_CHECK(used_.count(k), "unknown option --", k);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double cpu_time_us(const std::function<void()>& fn, int reps, int warmup) {
  LKV_CHECK(reps >= 1, "cpu_time_us: reps must be >= 1, got ", reps);
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    const auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::micro>(b - a).count());
  }
  return median(std::move(t));
}

namespace {
constexpr size_t kCeilingBytes = size_t{256} << 20;
}  // namespace

double measure_cpu_memcpy_GBps() {
  std::vector<char> src(kCeilingBytes, 1), dst(kCeilingBytes, 0);
  const double us = cpu_time_us(
      [&] {
#pragma omp parallel
        {
          const size_t n = static_cast<size_t>(omp_get_num_threads());
          const size_t k = static_cast<size_t>(omp_get_thread_num());
          const size_t lo = kCeilingBytes / n * k, hi = kCeilingBytes / n * (k + 1);
          std::memcpy(dst.data() + lo, src.data() + lo, hi - lo);
        }
      },
      5);
  return static_cast<double>(kCeilingBytes) / (us * 1e-6) / 1e9;
}

double measure_cpu_read_GBps() {
  const size_t n_floats = kCeilingBytes / sizeof(float);
  std::vector<float> buf(n_floats, 1.0f);
  volatile float sink = 0;
  const double us = cpu_time_us(
      [&] {
        float total = 0;
#pragma omp parallel reduction(+ : total)
        {
          const size_t n = static_cast<size_t>(omp_get_num_threads());
          const size_t k = static_cast<size_t>(omp_get_thread_num());
          const size_t lo = n_floats / n * k, hi = n_floats / n * (k + 1);
          float part[16] = {};  // 16 independent sums: the loop is not bound by add latency
          for (size_t j = lo; j + 16 <= hi; j += 16)
            for (int q = 0; q < 16; ++q) part[q] += buf[j + q];
          for (float x : part) total += x;
        }
        sink = total;
      },
      5);
  return static_cast<double>(kCeilingBytes) / (us * 1e-6) / 1e9;
}

namespace {
volatile float g_roof_sink = 0;
}  // namespace

CpuRoof measure_cpu_roof() {
  CpuRoof r;
  const cpu_common::CpuIsa isa = cpu_common::default_cpu_isa();
  r.isa = cpu_common::cpu_isa_name(isa);
  r.read_GBps = measure_cpu_read_GBps();
  const cpu_common::MultiplyAddFn fn = cpu_common::multiply_add_fn(isa);
  const int lanes = cpu_common::cpu_isa_lanes(isa);
  // ~4 GFLOP per thread and pass at 16 lanes (~17 ms on a core with two 16-lane FMA pipes). The
  // fastest of 7 passes after a warm-up: a ceiling is what the cores gave at their best in this
  // run, and on a shared machine a pass can only lose time.
  constexpr int64_t kIters = int64_t{1} << 23;
  int threads = 1;
  double best_us = 0;
  for (int pass = 0; pass < 8; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    float total = 0;
#pragma omp parallel reduction(+ : total)
    {
#pragma omp single
      threads = omp_get_num_threads();
      total += fn(kIters);
    }
    g_roof_sink = total;  // (kept: nothing may drop the passes as unused)
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (pass > 0 && (best_us == 0 || us < best_us)) best_us = us;
  }
  const double flops = 2.0 * static_cast<double>(threads) * static_cast<double>(kIters) *
                       cpu_common::kMultiplyAddChains(lanes) * lanes;
  r.fp32_GFLOPS = flops / (best_us * 1e-6) / 1e9;
  return r;
}

#ifdef LKV_WITH_CUDA
void time_stream_forms(const std::function<void(int)>& call, int calls, const std::vector<std::string>& keys,
                       const std::function<void(int)>& set_form, BenchCase& bc) {
  constexpr int kReps = 15;
  constexpr double kLeadUsPerCall = 40.0;
  const double lead_us = kLeadUsPerCall * calls;
  double host_us = 0;
  // The forms alternate batch by batch, so that a drift over the case's runs (clocks, heat) falls on
  // every form alike; each form's figure is the median of its batches.
  std::vector<std::vector<double>> per_call(keys.size());
  for (int r = 0; r < kReps; ++r)
    for (size_t f = 0; f < keys.size(); ++f) {
      set_form(static_cast<int>(f));
      double h = 0;
      per_call[f].push_back(bench_cuda::stream_time_us(call, calls, 1, lead_us, &h));
      host_us = std::max(host_us, h);
    }
  for (size_t f = 0; f < keys.size(); ++f) bc.numbers[keys[f]] = median(per_call[f]);
  bc.numbers["stream_host_us_per_call"] = host_us;
  bc.numbers["stream_calls"] = calls;
  bc.numbers["stream_lead_us_per_call"] = kLeadUsPerCall;
}
#endif

namespace {
// The median and the largest of v (microseconds), printed as " label med/max" and kept as
// <key>_median_us and <key>_max_us; nothing for an empty v.
void add_spread(BenchCase& bc, std::vector<double>& v, const std::string& label, const std::string& key) {
  if (v.empty()) return;
  const double med = median(v), mx = *std::max_element(v.begin(), v.end());
  std::printf(" %s %.2f/%.2f", label.c_str(), med, mx);
  bc.numbers[key + "_median_us"] = med;
  bc.numbers[key + "_max_us"] = mx;
}
}  // namespace

void add_phase_stats(BenchCase& bc, const std::vector<unsigned long long>& stamps, int64_t ctas, int phases,
                     const char* const* names, unsigned long long t0) {
  for (int k = 0; k < phases; ++k) {
    std::vector<double> v;
    for (int64_t c = 0; c < ctas; ++c) {
      const unsigned long long s = stamps[static_cast<size_t>(c * phases + k)];
      if (s >= t0 && s != 0) v.push_back(static_cast<double>(s - t0) * 1e-3);
    }
    add_spread(bc, v, names[k], std::string("trace_") + names[k]);
  }
}

void add_step_stats(BenchCase& bc, const std::vector<unsigned long long>& stamps, int64_t ctas, int phases,
                    const char* const* names, const std::vector<std::pair<int, int>>& steps) {
  for (const auto& [from, to] : steps) {
    std::vector<double> v;
    for (int64_t c = 0; c < ctas; ++c) {
      const unsigned long long a = stamps[static_cast<size_t>(c * phases + from)];
      const unsigned long long b = stamps[static_cast<size_t>(c * phases + to)];
      if (a != 0 && b >= a) v.push_back(static_cast<double>(b - a) * 1e-3);
    }
    add_spread(bc, v, std::string(names[from]) + "->" + names[to],
               std::string("trace_") + names[from] + "_to_" + names[to]);
  }
}

double floor_time_us(double empty_launch_us, double bytes, double hbm_GBps, double flops, double peak_TFLOPS) {
  const double memory_us = bytes / (hbm_GBps * 1e3);
  const double compute_us = peak_TFLOPS > 0 ? flops / (peak_TFLOPS * 1e6) : 0.0;
  return empty_launch_us + std::max(memory_us, compute_us);
}

void add_roofline(BenchCase& bc, double flops, double bytes, double hbm_GBps, double peak_TFLOPS,
                  double empty_launch_us) {
  if (hbm_GBps <= 0 || bytes <= 0) return;
  const double intensity = flops / bytes, ridge = peak_TFLOPS * 1e3 / hbm_GBps;  // FLOP per byte
  bc.numbers["flops_per_byte"] = intensity;
  bc.numbers["memory_bound"] = intensity < ridge ? 1.0 : 0.0;
  if (empty_launch_us > 0 && peak_TFLOPS > 0) {
    bc.numbers["floor_time_us"] = floor_time_us(empty_launch_us, bytes, hbm_GBps, flops, peak_TFLOPS);
    bc.numbers["hbm_frac_at_floor"] = bytes / (hbm_GBps * 1e3) / bc.numbers["floor_time_us"];
  }
}

CpuRoof measure_cpu_roof(BenchResult& r) {
  const CpuRoof roof = measure_cpu_roof();
  r.ceilings["read_GBps"] = roof.read_GBps;
  r.ceilings["fp32_TFLOPS"] = roof.fp32_GFLOPS / 1e3;
  r.notes["cpu_isa"] = roof.isa;
  std::printf("measured with every OpenMP thread: read %.1f GB/s, fp32 multiply-add %.1f GFLOPS (%s)\n",
              roof.read_GBps, roof.fp32_GFLOPS, roof.isa.c_str());
  return roof;
}

void add_cpu_roof(BenchCase& bc, double flops, double bytes, const CpuRoof& roof) {
  if (roof.read_GBps <= 0 || roof.fp32_GFLOPS <= 0 || bytes <= 0 || bc.time_us <= 0) return;
  bc.numbers["flops_per_byte"] = flops / bytes;
  bc.numbers["memory_bound"] = flops / bytes < roof.fp32_GFLOPS / roof.read_GBps ? 1.0 : 0.0;
  const double floor_us = std::max(bytes / (roof.read_GBps * 1e3), flops / (roof.fp32_GFLOPS * 1e3));
  bc.numbers["floor_time_us"] = floor_us;
  bc.numbers["frac_of_roof"] = floor_us / bc.time_us;
}

void summarise_cpu_roof(BenchResult& r) {
  std::vector<double> f;
  for (const BenchCase& c : r.cases)
    if (const auto it = c.numbers.find("frac_of_roof"); it != c.numbers.end()) f.push_back(it->second);
  if (f.empty()) return;
  r.summary["geomean_frac_of_roof"] = geomean(f);
  r.summary["min_frac_of_roof"] = *std::min_element(f.begin(), f.end());
}

void summarise_memory_bound(BenchResult& r) {
  int n = 0, nf = 0;
  double lowest = 0, lowest_floor = 0;
  for (const BenchCase& c : r.cases) {
    const auto mb = c.numbers.find("memory_bound"), frac = c.numbers.find("frac_of_ceiling");
    if (mb == c.numbers.end() || mb->second != 1.0 || frac == c.numbers.end()) continue;
    lowest = n == 0 ? frac->second : std::min(lowest, frac->second);
    ++n;
    const auto at_floor = c.numbers.find("hbm_frac_at_floor");
    if (at_floor == c.numbers.end()) continue;
    lowest_floor = nf == 0 ? at_floor->second : std::min(lowest_floor, at_floor->second);
    ++nf;
  }
  if (n == 0) return;
  r.summary["memory_bound_cases"] = n;
  r.summary["min_frac_of_hbm_memory_bound"] = lowest;
  if (nf > 0) r.summary["min_hbm_frac_at_floor"] = lowest_floor;
}

bool bench_wants_cuda(const std::string& device) {
  LKV_CHECK(device == "auto" || device == "cpu" || device == "cuda", "--device must be auto, cpu or cuda, got '",
            device, "'");
  if (device == "cpu") return false;
#ifdef LKV_WITH_CUDA
  const bool visible = bench_cuda::device_count() > 0;
  LKV_CHECK(visible || device == "auto", "--device cuda: no CUDA device is visible");
  return visible;
#else
  LKV_CHECK(device == "auto", "--device cuda: latentkv was built without CUDA");
  return false;
#endif
}

double geomean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double s = 0;
  for (double x : v) s += std::log(x);
  return std::exp(s / static_cast<double>(v.size()));
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::ostringstream os;
  os << std::put_time(&tm, "%Y-%m-%dT%H:%M:%SZ");
  return os.str();
}

namespace {
std::string quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}
std::string num(double x) {
  std::ostringstream os;
  os << std::setprecision(6) << x;
  return os.str();
}
template <typename M, typename F>
void write_map(std::ostream& os, const M& m, F fmt) {
  os << "{";
  bool first = true;
  for (const auto& [k, v] : m) {
    os << (first ? "" : ", ") << quote(k) << ": " << fmt(v);
    first = false;
  }
  os << "}";
}
}  // namespace

void write_json(const BenchResult& r, const std::string& path) {
  std::ofstream os(path);
  LKV_CHECK(os.good(), "cannot write ", path);
  os << "{\n  \"op\": " << quote(r.op) << ",\n  \"device\": " << quote(r.device)
     << ",\n  \"command\": " << quote(r.command) << ",\n  \"date\": " << quote(r.date)
     << ",\n  \"ceilings\": ";
  write_map(os, r.ceilings, num);
  os << ",\n  \"cases\": [\n";
  for (size_t i = 0; i < r.cases.size(); ++i) {
    const BenchCase& c = r.cases[i];
    os << "    {\"name\": " << quote(c.name) << ", \"time_us\": " << num(c.time_us);
    for (const auto& [k, v] : c.numbers) os << ", " << quote(k) << ": " << num(v);
    for (const auto& [k, v] : c.labels) os << ", " << quote(k) << ": " << quote(v);
    os << "}" << (i + 1 < r.cases.size() ? "," : "") << "\n";
  }
  os << "  ],\n  \"summary\": ";
  write_map(os, r.summary, num);
  os << ",\n  \"notes\": ";
  write_map(os, r.notes, quote);
  os << "\n}\n";
}

void write_svg(const BenchResult& r, const std::string& metric, const std::string& ceiling_name,
               const std::string& unit, const std::string& path) {
  std::ofstream os(path);
  LKV_CHECK(os.good(), "cannot write ", path);
  const double ceiling = r.ceilings.count(ceiling_name) ? r.ceilings.at(ceiling_name) : 0.0;
  double top = ceiling;
  for (const BenchCase& c : r.cases)
    if (c.numbers.count(metric)) top = std::max(top, c.numbers.at(metric));
  top = top > 0 ? top * 1.05 : 1.0;
  const int label_w = 330, bar_w = 520, row_h = 18, head = 48;
  const int height = head + row_h * static_cast<int>(r.cases.size()) + 40;
  auto x_of = [&](double v) { return label_w + bar_w * v / top; };
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << label_w + bar_w + 90
     << "\" height=\"" << height << "\" font-family=\"monospace\" font-size=\"11\">\n";
  os << "<text x=\"8\" y=\"18\" font-size=\"14\">" << r.op << " on " << r.device << ": " << metric
     << " per case" << (ceiling > 0 ? " against the measured ceiling" : "") << "</text>\n";
  os << "<text x=\"8\" y=\"34\">" << r.date << "</text>\n";
  int y = head;
  for (const BenchCase& c : r.cases) {
    const double v = c.numbers.count(metric) ? c.numbers.at(metric) : 0.0;
    os << "<text x=\"" << label_w - 6 << "\" y=\"" << y + 12 << "\" text-anchor=\"end\">" << c.name
       << "</text>\n<rect x=\"" << label_w << "\" y=\"" << y + 2 << "\" width=\"" << x_of(v) - label_w
       << "\" height=\"" << row_h - 4 << "\" fill=\"#4878a8\"/>\n<text x=\"" << x_of(v) + 4 << "\" y=\""
       << y + 12 << "\">" << num(v) << "</text>\n";
    y += row_h;
  }
  if (ceiling > 0)
    os << "<line x1=\"" << x_of(ceiling) << "\" y1=\"" << head - 4 << "\" x2=\"" << x_of(ceiling)
       << "\" y2=\"" << y << "\" stroke=\"#c03030\" stroke-dasharray=\"4 3\"/>\n<text x=\""
       << x_of(ceiling) << "\" y=\"" << y + 14 << "\" text-anchor=\"middle\" fill=\"#c03030\">"
       << ceiling_name << " " << num(ceiling) << " " << unit << "</text>\n";
  os << "<text x=\"" << label_w << "\" y=\"" << y + 30 << "\">" << metric << " (" << unit
     << "); bars: achieved per case</text>\n</svg>\n";
}

namespace {

// A deliberately small reader for the one shape the reference driver writes: calls
// found(name, s, at) for every case whose object holds `"key"` (at: the key's position in s).
template <class Found>
void for_each_reference_key(const std::string& path, const char* key, Found found) {
  std::ifstream is(path);
  LKV_CHECK(is.good(), "cannot read reference times from ", path);
  std::stringstream ss;
  ss << is.rdbuf();
  const std::string s = ss.str();
  const std::string quoted = std::string("\"") + key + "\"";
  size_t at = 0;
  while ((at = s.find("\"name\"", at)) != std::string::npos) {
    const size_t q1 = s.find('"', s.find(':', at) + 1);
    const size_t q2 = s.find('"', q1 + 1);
    const std::string name = s.substr(q1 + 1, q2 - q1 - 1);
    const size_t next = s.find("\"name\"", q2);
    const size_t t = s.find(quoted, q2);
    if (t != std::string::npos && (next == std::string::npos || t < next)) found(name, s, t);
    at = q2;
  }
}

}  // namespace

std::map<std::string, double> read_reference_times(const std::string& path, const std::string& key) {
  std::map<std::string, double> out;
  for_each_reference_key(path, key.c_str(), [&](const std::string& name, const std::string& s, size_t t) {
    out[name] = std::stod(s.substr(s.find(':', t) + 1));
  });
  return out;
}

std::map<std::string, std::vector<double>> read_reference_rounds(const std::string& path, const std::string& key) {
  std::map<std::string, std::vector<double>> out;
  for_each_reference_key(path, key.c_str(), [&](const std::string& name, const std::string& s, size_t t) {
    const size_t open = s.find('[', t), close = open == std::string::npos ? open : s.find(']', open);
    LKV_CHECK(open != std::string::npos && close != std::string::npos, "malformed ", key, " in ", path,
              " (case ", name, ")");
    std::stringstream list(s.substr(open + 1, close - open - 1));
    std::string item;
    std::vector<double>& rounds = out[name];
    while (std::getline(list, item, ',')) rounds.push_back(std::stod(item));
  });
  return out;
}

}  // namespace latentkv::cli
