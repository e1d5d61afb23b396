// `latentkv bench decode`: FlashMLA's sparse-decode performance cases on the GPU (or, with
// --device cpu, a small subset on the CPU fast path).
//
// Caches are filled with random but finite records (random e4m3 payload bytes, power-of-two scales,
// small bf16 RoPE values) straight from a counter-based generator, because quantizing gigabytes of
// latents on the host would dominate the run; values do not change the kernel's work. Each request
// owns its own context of `ctx` = max(2 topk, 4096) tokens and its query tokens draw their top-k
// indices from it, with repetition; unique_count counts the tokens read. Figures use SPEC.md
// section 8's formulas.
// LKV_BENCH_SORTED_INDICES=1 (a probe, not a FlashMLA case; the JSON's notes say which order ran)
// puts each query token's indices in ascending slot order, the order that reads a token shared by
// two query tokens of a request close together in time (bench/NOTES.md v59).
#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "commands.h"
#include "latentkv/decode.h"
#include "latentkv/error.h"
#include "latentkv/numerics.h"
#include "testing/compress_workload.h"
#ifdef LKV_WITH_CUDA
#include "cuda_common/bench.h"
#include "decode/cuda/launch.h"
#include "decode/sm90/launch.h"
#endif

namespace latentkv::cli {
namespace {

struct DecodeCase {
  std::string name;
  CacheFormat format;
  int64_t b, s_q, h_q, topk, page;
  int64_t extra_topk = 0, extra_page = 64;
  std::optional<CacheFormat> extra_format = std::nullopt;  // absent: format
};

std::vector<DecodeCase> decode_cases(bool small) {
  std::vector<DecodeCase> v;
  if (small) {
    v.push_back({"v32_b2_h128_topk2048", CacheFormat::v32_fp8, 2, 2, 128, 2048, 64});
    v.push_back({"v4_b2_h64_topk128_extra512", CacheFormat::v4_fp8, 2, 2, 64, 128, 256, 512, 64});
    // One request, one query token: fewer pairs than cores, so the threads share its heads.
    v.push_back({"v32_b1_sq1_h128_topk2048", CacheFormat::v32_fp8, 1, 1, 128, 2048, 64});
    // DeepSeek V4.1 with its extra cache in v41_fp8 and in v41_fp4 in V4's shape.
    v.push_back({"v41_b2_h64_topk128_extra512", CacheFormat::v41_fp8, 2, 2, 64, 128, 256, 512, 64});
    v.push_back({"v41_b2_h64_topk128_extra512fp4", CacheFormat::v41_fp8, 2, 2, 64, 128, 256, 512, 64,
                 CacheFormat::v41_fp4});
    return v;
  }
  for (int64_t b : {2, 64, 74, 128})
    v.push_back({"v32_b" + std::to_string(b) + "_h128_topk2048", CacheFormat::v32_fp8, b, 2, 128, 2048, 64});
  for (int64_t h : {64, 128})
    for (int64_t et : {512, 1024})
      for (int64_t ep : {64, 2})
        for (int64_t b : {2, 64, 74, 128, 148, 256})
          v.push_back({"v4_b" + std::to_string(b) + "_h" + std::to_string(h) + "_topk128_extra" +
                           std::to_string(et) + "p" + std::to_string(ep),
                       CacheFormat::v4_fp8, b, 2, h, 128, 256, et, ep});
  // DeepSeek V4.1 records (v41_fp8, both caches) in V4's shapes, beyond FlashMLA's list.
  for (int64_t h : {64, 128})
    for (int64_t b : {2, 64, 128})
      v.push_back({"v41_b" + std::to_string(b) + "_h" + std::to_string(h) + "_topk128_extra512p64",
                   CacheFormat::v41_fp8, b, 2, h, 128, 256, 512, 64});
  // The same with V4.1's fp4 extra cache (the Hopper kernel on sm_90, else the portable one).
  for (int64_t b : {2, 64, 128})
    v.push_back({"v41_b" + std::to_string(b) + "_h64_topk128_extra512p64fp4", CacheFormat::v41_fp8, b, 2, 64, 128, 256,
                 512, 64, CacheFormat::v41_fp4});
  // Beyond FlashMLA's list: V3.2 sharded over 8 or 4 GPUs by heads (16 or 32 per GPU), where a
  // CTA's 64 rows are mostly padding.
  for (int64_t h : {16, 32})
    v.push_back({"tp_v32_b128_h" + std::to_string(h) + "_topk2048", CacheFormat::v32_fp8, 128, 2, h, 2048, 64});
  for (int64_t h : {64, 128}) {
    v.push_back({"peak_v32_b148_h" + std::to_string(h) + "_topk16384", CacheFormat::v32_fp8, 148, 2, h, 16384, 64});
    v.push_back({"peak_v4_b148_h" + std::to_string(h) + "_topk16384", CacheFormat::v4_fp8, 148, 2, h, 16384, 64});
    v.push_back({"peak_v41_b148_h" + std::to_string(h) + "_topk16384", CacheFormat::v41_fp8, 148, 2, h, 16384, 64});
  }
  return v;
}

}  // namespace

// A cache of num_pages pages of random, finite records of format f (also used by bench dense).
std::vector<uint8_t> random_cache(CacheFormat f, int64_t num_pages, int64_t P, uint64_t seed) {
  const FormatInfo& fi = format_info(f);
  const int64_t page_bytes = P * fi.bytes_per_token;
  std::vector<uint8_t> kv(static_cast<size_t>(num_pages * page_bytes));
#pragma omp parallel for schedule(static)
  for (int64_t page = 0; page < num_pages; ++page) {
    uint8_t* base = kv.data() + page * page_bytes;
    for (int64_t t = 0; t < P; ++t) {
      const uint64_t k = static_cast<uint64_t>(page * P + t);
      uint8_t* data = base + t * (fi.page_split ? 576 : fi.bytes_per_token);
      if (f == CacheFormat::v41_fp4) {  // any e2m1 pair; e4m3 scales of 2^-2: values up to 1.5
        for (int d = 0; d < 256; ++d) data[d] = static_cast<uint8_t>(testing::bits_at(seed, k * 1024 + d));
        for (int g = 0; g < 32; ++g) data[256 + g] = 0x28;
        continue;
      }
      const int nope = f == CacheFormat::v4_fp8 ? 448 : 512;  // v41_fp8: every dim e4m3
      for (int d = 0; d < nope; ++d) {
        uint8_t c = static_cast<uint8_t>(testing::bits_at(seed, k * 1024 + d));
        if ((c & 0x7f) == 0x7f) c ^= 0x01;  // no NaN codes
        data[d] = c;
      }
      const int rope_at = f == CacheFormat::v32_fp8 ? 528 : 448;
      for (int d = 0; d < (f == CacheFormat::v41_fp8 ? 0 : 64); ++d) {
        const uint16_t h = num::f32_to_bf16(testing::normal_at(seed + 1, k * 64 + d));
        data[rope_at + 2 * d] = static_cast<uint8_t>(h & 0xff);
        data[rope_at + 2 * d + 1] = static_cast<uint8_t>(h >> 8);
      }
      if (f == CacheFormat::v32_fp8) {
        const float s = 1.0f / 64.0f;  // payload up to 448 -> values up to 7
        for (int g = 0; g < 4; ++g) std::memcpy(data + 512 + 4 * g, &s, 4);
      } else if (f == CacheFormat::v41_fp8) {
        for (int g = 0; g < 16; ++g) data[512 + g] = 127 - 6;  // 2^-6, as the others
      } else {
        uint8_t* scales = base + P * 576 + t * 8;
        for (int g = 0; g < 7; ++g) scales[g] = 127 - 6;
        scales[7] = 0;
      }
    }
  }
  return kv;
}

namespace {

// Indices [b, s_q, topk]: request i's query tokens draw slots of its own ctx-token range
// uniformly. With overlap > 0 (--list-overlap), each candidate of tokens 1.. of a request is,
// with that probability, one of token 0's candidates, taken in a per-token random order (an
// indexer's top-k of neighbouring tokens shares most slots but not their order); the others are
// fresh draws. Every draw is counter-based, so the lists do not depend on the thread count.
std::vector<int32_t> random_indices(int64_t b, int64_t s_q, int64_t topk, int64_t ctx,
                                    uint64_t seed, bool sorted, double overlap = 0) {
  std::vector<int32_t> idx(static_cast<size_t>(b * s_q * topk));
  // Row r's own draw at position k (row r0 = r - r % s_q is its request's token 0).
  const auto draw = [&](int64_t r, int64_t k) {
    return static_cast<int32_t>((r / s_q) * ctx + testing::bits_at(seed, r * topk + k) % ctx);
  };
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < b * s_q; ++r) {
    int32_t* row = idx.data() + r * topk;
    for (int64_t k = 0; k < topk; ++k) row[k] = draw(r, k);
    if (overlap > 0 && r % s_q != 0) {
      // A Fisher-Yates permutation of token 0's positions, then each kept with probability overlap.
      std::vector<int64_t> perm(static_cast<size_t>(topk));
      for (int64_t k = 0; k < topk; ++k) perm[k] = k;
      for (int64_t k = topk - 1; k > 0; --k)
        std::swap(perm[k], perm[testing::bits_at(seed + 1, r * topk + k) % static_cast<uint64_t>(k + 1)]);
      const int64_t r0 = r - r % s_q;
      for (int64_t k = 0; k < topk; ++k) {
        const double u = static_cast<double>(testing::bits_at(seed + 2, r * topk + k) >> 11) * 0x1.0p-53;
        if (u < overlap) row[k] = draw(r0, perm[k]);
      }
    }
    if (sorted) std::sort(row, row + topk);
  }
  return idx;
}

int64_t unique_count(const std::vector<int32_t>& idx, int64_t num_slots) {
  std::vector<uint8_t> seen(static_cast<size_t>(num_slots), 0);
  int64_t n = 0;
  for (int32_t s : idx)
    if (s >= 0 && s < num_slots && !seen[s]) {
      seen[s] = 1;
      ++n;
    }
  return n;
}

#ifdef LKV_WITH_CUDA
// --trace: one more flushed call with the Hopper kernel's phase stamps (decode/sm90/launch.h,
// set_trace): for each phase the median and the latest CTA, in microseconds after the first CTA
// started; the gap from a one-thread kernel queued right before the call to that start (launch),
// from the first entry to the last exit (span), and from there to a one-thread kernel queued right
// after the call (tail: the combine, if any, and the launch gaps around it). With a two-launch plan
// both launches' CTAs count (launch: to the first launch's first CTA; span: to the last exit of
// either). Printed, and kept in the case's numbers. Modes: flushed (--trace); warm (--trace-warm):
// the traced call follows an untraced call of the same case instead of the flush, so the L2 holds
// what that call left (its records, indices and code); code (--trace-code): the flush, then a code
// warmer (below), so only the kernels' code is back in the L2. Set side by side, the three tell
// cold-code costs from cold-data ones and both from the kernel's own.
// The first traced call of a process is made twice and its first stamps dropped: that call's block
// 0 measured several microseconds longer than any later one's (bench/NOTES.md v23, v27 item 4).
enum class TraceMode { kFlushed, kWarm, kCode };

// --stream: the case's calls queued back to back as a model step's layers issue them
// (time_stream_forms), each on the next of R device copies of its caches, R x the bytes a call reads
// (`read_bytes`, SPEC section 8's count) >= 256 MiB (over 4x the L2), so that no call finds its
// records in the L2 from an earlier one (R at most what 16 GiB of copies allow); the query and the
// indices are shared (a layer's are written by the kernels just ahead of it, so they are in the L2
// then too). Per-call time with the first launch of each call programmatically dependent on the
// call ahead (decode::cuda::first_launch_pdl; the first call of a timed batch launches ordinarily,
// so that none of its work starts under the lead kernel, which also keeps its last kernel from
// letting the second call in early: the batch's first gap is an ordinary one), and with every first
// launch ordinary. The second launches and the combine use PDL as in the flushed time (LKV_PDL).
void stream_times(const SparseDecodeArgs& a, const std::vector<uint8_t>& kv_host,
                  const std::vector<uint8_t>& extra_host, double read_bytes, BenchCase& bc) {
  namespace dc = decode::cuda;
  const size_t kv_bytes = kv_host.size(), extra_bytes = extra_host.size();
  const size_t bytes = kv_bytes + extra_bytes;
  const size_t per_call = std::max<size_t>(1, static_cast<size_t>(read_bytes));
  const size_t fit = std::max<size_t>(2, (size_t{16} << 30) / bytes);
  const int copies = static_cast<int>(
      std::min(fit, std::max<size_t>(2, ((size_t{256} << 20) + per_call - 1) / per_call)));
  std::vector<void*> kv{a.k_cache.data}, ekv{a.extra_k_cache.data};
  for (int r = 1; r < copies; ++r) {
    kv.push_back(bench_cuda::alloc(kv_bytes));
    bench_cuda::to_device(kv.back(), kv_host.data(), kv_bytes);
    ekv.push_back(nullptr);
    if (extra_bytes) {
      ekv.back() = bench_cuda::alloc(extra_bytes);
      bench_cuda::to_device(ekv.back(), extra_host.data(), extra_bytes);
    }
  }
  const int calls = std::max(16, copies);
  SparseDecodeArgs b = a;
  bool first_pdl = true;
  auto call = [&](int i) {
    dc::set_first_launch_pdl(first_pdl && i > 0);
    b.k_cache.data = kv[static_cast<size_t>(i % copies)];
    if (extra_bytes) b.extra_k_cache.data = ekv[static_cast<size_t>(i % copies)];
    sparse_decode(b);
  };
  const bool was = dc::first_launch_pdl();
  time_stream_forms(call, calls, {"stream_time_us", "stream_ordinary_first_time_us"},
                    [&](int form) { first_pdl = form == 0; }, bc);
  dc::set_first_launch_pdl(was);
  bc.numbers["stream_pdl_first"] = dc::pdl_launches(0) ? 1.0 : 0.0;
  bc.numbers["stream_cache_copies"] = copies;
  std::printf("  %s back to back: %.1f us per call (first launch with PDL), %.1f (ordinary), host %.1f us per call\n",
              bc.name.c_str(), bc.numbers["stream_time_us"], bc.numbers["stream_ordinary_first_time_us"],
              bc.numbers["stream_host_us_per_call"]);
  for (int r = 1; r < copies; ++r) {
    bench_cuda::free(kv[static_cast<size_t>(r)]);
    if (extra_bytes) bench_cuda::free(ekv[static_cast<size_t>(r)]);
  }
}

void trace_case(const std::string& name, const SparseDecodeArgs& a, const SparseDecodeArgs& code_warmer,
                BenchCase& bc, TraceMode mode) {
  namespace s9 = decode::sm90;
  const auto traced_call = [&] {
    struct TraceOn {  // off again however the call ends
      TraceOn() { s9::set_trace(true); }
      ~TraceOn() { s9::set_trace(false); }
    } on;
    s9::mark_trace(0);
    sparse_decode(a);
    s9::mark_trace(1);
  };
  static bool first_traced_call = true;
  if (first_traced_call) {
    first_traced_call = false;
    bench_cuda::flush_l2();
    traced_call();
    bench_cuda::synchronize();
  }
  if (mode == TraceMode::kWarm) {
    sparse_decode(a);
  } else {
    bench_cuda::flush_l2();
    if (mode == TraceMode::kCode) sparse_decode(code_warmer);
  }
  traced_call();
  const s9::KernelTrace t = s9::last_trace();
  if (t.ctas == 0 || s9::warp_specialised()) {
    std::printf("  trace %s: no stamps (%s)\n", name.c_str(),
                s9::warp_specialised() ? "the warp-specialised variant has none" : "the Hopper kernel did not run");
    return;
  }
  if (t.before == 0 || t.after == 0) {
    std::printf("  trace %s: a stream mark is missing\n", name.c_str());
    return;
  }
  auto at = [&](int64_t c, int k) { return t.stamps[static_cast<size_t>(c * s9::kTracePhases + k)]; };
  unsigned long long t0 = ~0ull, t1 = 0;
  std::vector<double> per_cta;
  for (int64_t c = 0; c < t.ctas; ++c) {
    if (at(c, 0) != 0) t0 = std::min(t0, at(c, 0));
    if (at(c, s9::kTracePhases - 1) != 0) t1 = std::max(t1, at(c, s9::kTracePhases - 1));
    if (at(c, 0) != 0 && at(c, s9::kTracePhases - 1) != 0)
      per_cta.push_back(static_cast<double>(at(c, s9::kTracePhases - 1) - at(c, 0)) * 1e-3);
  }
  if (t0 == ~0ull || t1 < t0 || per_cta.empty()) {
    std::printf("  trace %s: incomplete stamps\n", name.c_str());
    return;
  }
  const double cta_median = median(per_cta);
  const double launch = (static_cast<double>(t0) - static_cast<double>(t.before)) * 1e-3;
  const double span = static_cast<double>(t1 - t0) * 1e-3;
  const double tail = (static_cast<double>(t.after) - static_cast<double>(t1)) * 1e-3;
  std::printf("  trace%s %s: %lld CTAs in %zu launch%s; launch %.2f, span %.2f, tail %.2f us; CTA median %.2f us; "
              "phase median/max us:",
              mode == TraceMode::kWarm ? " (warm)" : mode == TraceMode::kCode ? " (code warm)" : "", name.c_str(), static_cast<long long>(t.ctas), t.launches.size(),
              t.launches.size() == 1 ? "" : "es", launch, span, tail, cta_median);
  bc.numbers["trace_warm"] = mode == TraceMode::kWarm ? 1.0 : 0.0;
  bc.numbers["trace_code_warm"] = mode == TraceMode::kCode ? 1.0 : 0.0;
  bc.numbers["trace_launches"] = static_cast<double>(t.launches.size());
  bc.numbers["trace_launch_us"] = launch;
  bc.numbers["trace_span_us"] = span;
  bc.numbers["trace_tail_us"] = tail;
  bc.numbers["trace_cta_median_us"] = cta_median;
  static const char* const kNames[s9::kTracePhases] = {"entry",       "indices",     "block0", "q_wait", "prologue",
                                                       "block0_done", "block1_done", "loop",   "exit"};
  add_phase_stats(bc, t.stamps, t.ctas, s9::kTracePhases, kNames, t0);
  std::printf("\n");
}
#endif

}  // namespace

int cmd_bench_decode(const Args& args) {
  const std::string device = args.get("device", "auto");
  const std::string json = args.get("json", "");
  const std::string filter = args.get("filter", "");
  const std::string plot = args.get("plot", "");
  const bool reps_given = !args.get("reps", "").empty();
  const int reps = args.get_reps(20);
  const int cpu_reps = reps_given ? reps : 3;  // CPU calls are slow: 3 unless --reps says
  const std::string kernel = args.get("kernel", "auto");
  // --splits 1,2,4: each case also runs with each of these split counts (candidates divided into
  // that many equal whole blocks of 64) beside the planner's, to measure the planner's choice.
  const std::string splits_arg = args.get("splits", "");
  const bool trace_warm = args.flag("trace-warm");  // --trace after an unflushed call
  const bool trace_code = args.flag("trace-code");  // --trace after the flush and a code warmer
  const bool trace_flushed = args.flag("trace");
  const bool trace = trace_flushed || trace_warm || trace_code;
  // --code-warm: each case also timed with a code warmer between the flush and the call
  // (code_warm_time_us), and right after an untimed call of itself with no flush (warm_time_us:
  // its code and data in the L2 as that call left them; the untimed call keeps the GPU busy while
  // the timed one is queued, so neither time carries the host's launch latency). Flushed minus
  // code-warm is what fetching cold code costs; code-warm minus warm what cold data costs.
  const bool code_warm = args.flag("code-warm");
  const bool stream = args.flag("stream");  // --stream: also per-call times back to back (stream_times)
  // --lengths: every request passes topk_length (and extra_topk_length) equal to its topk, as
  // serving frameworks do: the per-request lengths path with every candidate attended, so the
  // times compare with the cases without it. Case names get "_len".
  const bool lengths = args.flag("lengths");
  // --list-overlap F: tokens 1.. of each request share a fraction F of token 0's candidates, in
  // another order (random_indices), as an indexer's lists for neighbouring tokens do; case names
  // get "_ov" and the percentage. The bytes count the unique records read, so GB/s falls with F.
  const std::string overlap_arg = args.get("list-overlap", "");
  args.check_all_used();
  double overlap = 0;
  if (!overlap_arg.empty()) {
    char* stop = nullptr;
    overlap = std::strtod(overlap_arg.c_str(), &stop);
    LKV_CHECK(stop && *stop == '\0' && overlap >= 0 && overlap <= 1,
              "--list-overlap takes a fraction in [0, 1], got '", overlap_arg, "'");
  }
  const std::string overlap_tag =
      overlap_arg.empty() ? "" : "_ov" + std::to_string(static_cast<int>(std::lround(overlap * 100)));
  std::vector<int64_t> forced_splits;
  for (size_t at = 0; at < splits_arg.size();) {
    const size_t end = std::min(splits_arg.find(',', at), splits_arg.size());
    const std::string item = splits_arg.substr(at, end - at);
    char* stop = nullptr;
    const long long v = std::strtoll(item.c_str(), &stop, 10);
    LKV_CHECK(!item.empty() && stop && *stop == '\0' && v >= 1 && v <= 65535,
              "--splits takes a comma-separated list of split counts in [1, 65535], got '", item, "'");
    forced_splits.push_back(v);
    at = end + 1;
  }
  LKV_CHECK(kernel == "auto" || kernel == "portable" || kernel == "sm90" || kernel == "compact",
            "--kernel must be auto, portable, sm90 or compact, got '", kernel, "'");
  const bool cuda = bench_wants_cuda(device);
  LKV_CHECK(forced_splits.empty() || cuda, "--splits needs --device cuda (the CPU paths do not split)");
  const char* trace_flag = trace_warm ? "--trace-warm" : trace_code ? "--trace-code" : "--trace";
  LKV_CHECK(!trace || cuda, trace_flag, " needs --device cuda");
  LKV_CHECK(!code_warm || cuda, "--code-warm needs --device cuda");
  LKV_CHECK(!stream || cuda, "--stream needs --device cuda");
  LKV_CHECK(int(trace_flushed) + int(trace_warm) + int(trace_code) <= 1,
            "--trace, --trace-warm and --trace-code exclude each other");
#ifdef LKV_WITH_CUDA
  LKV_CHECK(!trace || decode::sm90::trace_built(), trace_flag,
            " needs a build with the CMake option LKV_SM90_TRACE=ON (the Hopper kernel's phase stamps)");
#endif
  BenchResult res;
  res.op = "sparse_decode";
  res.command = args.command_line();
  res.date = utc_now();
  res.device = "cpu";
  res.notes["timing"] = cuda ? "median of " + std::to_string(reps) +
                                   " event-timed calls (main kernel through combine), L2 flushed before each"
                             : "median wall time of " + std::to_string(cpu_reps) + " calls after one warm-up call";
  res.notes["flops"] = "2 * h_q * attended * (d_qk + d_v), attended = b * s_q * (topk + extra_topk)";
  res.notes["bytes"] = "2*b*s_q*h_q*d_qk + unique_tokens_read * bytes_per_token + 2*b*s_q*h_q*d_v";
  if (lengths) res.notes["lengths"] = "--lengths: topk_length and extra_topk_length equal to each request's topk";
  if (!overlap_arg.empty())
    res.notes["list_overlap"] = "--list-overlap " + overlap_arg +
                                ": each candidate of a request's query tokens 1.. is one of token 0's (in another "
                                "order) with this probability, else a fresh draw";
  const char* sorted_env = std::getenv("LKV_BENCH_SORTED_INDICES");
  const bool sorted = sorted_env && std::strcmp(sorted_env, "1") == 0;  // "=1", as the other switches
  res.notes["index_order"] = sorted ? "each query token's indices sorted by slot (LKV_BENCH_SORTED_INDICES)"
                                    : "random";
  double hbm = 0, empty_launch = 0;
#ifdef LKV_WITH_CUDA
  if (cuda) {
    res.device = bench_cuda::device_name(0);
    hbm = bench_cuda::measure_hbm_read_GBps();
    empty_launch = bench_cuda::measure_empty_launch_us(1);  // for each case's floor_time_us
    res.ceilings["empty_launch_us"] = empty_launch;
    using decode::cuda::KernelChoice;
    if (kernel != "auto")
      decode::cuda::set_kernel_choice(kernel == "sm90"      ? KernelChoice::kSm90
                                        : kernel == "compact" ? KernelChoice::kCompact
                                                              : KernelChoice::kPortable);
    res.notes["kernel"] = decode::cuda::kernel_for_device(0) + decode::sm90::switch_notes();
    res.ceilings["hbm_read_GBps"] = hbm;
    res.ceilings["bf16_dense_TFLOPS_datasheet"] = kDatasheetTFLOPS;
  }
#endif
  // On the CPU the fraction column is of the roofline measured here (measure_cpu_roof).
  CpuRoof roof;
  if (!cuda) roof = measure_cpu_roof(res);
  // splits: the plan's split count; unsplit: its requests run unsplit in a first launch
  // (DecodePlan::unsplit_b; the splits apply to the others).
  std::printf("sparse_decode on %s%s%s\n%-44s %10s %9s %9s %8s %7s %8s\n", res.device.c_str(),
              cuda ? ", kernel " : "", cuda ? res.notes["kernel"].c_str() : "", "case", "us",
              "TFLOPS", "GB/s", cuda ? "of HBM" : "of roof", "splits", "unsplit");
  for (const DecodeCase& c : decode_cases(!cuda)) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
#ifdef LKV_WITH_CUDA
#endif
    const FormatInfo& fi = format_info(c.format);
    const int64_t ctx = std::max<int64_t>(2 * c.topk, 4096);
    const int64_t num_pages = (c.b * ctx + c.page - 1) / c.page;
    std::vector<uint8_t> kv = random_cache(c.format, num_pages, c.page, 7);
    std::vector<int32_t> idx = random_indices(c.b, c.s_q, c.topk, ctx, 11, sorted, overlap);
    const int64_t extra_ctx = std::max<int64_t>(2 * c.extra_topk, 4096);
    const int64_t extra_pages = c.extra_topk ? (c.b * extra_ctx + c.extra_page - 1) / c.extra_page : 0;
    const FormatInfo& efi = format_info(c.extra_format.value_or(c.format));
    std::vector<uint8_t> ekv = c.extra_topk ? random_cache(efi.format, extra_pages, c.extra_page, 13)
                                            : std::vector<uint8_t>();
    std::vector<int32_t> eidx = c.extra_topk ? random_indices(c.b, c.s_q, c.extra_topk, extra_ctx, 17, sorted, overlap)
                                             : std::vector<int32_t>();
    std::vector<uint16_t> q(static_cast<size_t>(c.b * c.s_q * c.h_q * fi.d_qk));
    for (size_t k = 0; k < q.size(); ++k) q[k] = num::f32_to_bf16(testing::normal_at(19, k));
    std::vector<uint16_t> out(static_cast<size_t>(c.b * c.s_q * c.h_q * 512));
    std::vector<float> lse(static_cast<size_t>(c.b * c.h_q * c.s_q));

    const double attended = static_cast<double>(c.b * c.s_q * (c.topk + c.extra_topk));
    const double flops = 2.0 * c.h_q * attended * (fi.d_qk + 512);
    const int64_t unique_main = unique_count(idx, num_pages * c.page);
    const double unique_bytes =
        static_cast<double>(unique_main) * fi.bytes_per_token +
        (c.extra_topk ? static_cast<double>(unique_count(eidx, extra_pages * c.extra_page)) * efi.bytes_per_token : 0.0);
    const double bytes = 2.0 * c.b * c.s_q * c.h_q * fi.d_qk + unique_bytes + 2.0 * c.b * c.s_q * c.h_q * 512;

    SparseDecodeArgs a;
    a.format = c.format;
    std::vector<void*> dev;
    auto place = [&](void* host, size_t n) -> void* {
#ifdef LKV_WITH_CUDA
      if (cuda) {
        void* d = bench_cuda::alloc(n);
        bench_cuda::to_device(d, host, n);
        dev.push_back(d);
        return d;
      }
#endif
      (void)n;
      return host;
    };
    const Device where = cuda ? Device::cuda(0) : Device::cpu();
    a.q = TensorView(place(q.data(), q.size() * 2), DType::bf16, {c.b, c.s_q, c.h_q, fi.d_qk}, where);
    a.k_cache = TensorView(place(kv.data(), kv.size()), DType::u8, {num_pages, c.page, 1, fi.bytes_per_token}, where);
    a.indices = TensorView(place(idx.data(), idx.size() * 4), DType::i32, {c.b, c.s_q, c.topk}, where);
    if (c.extra_topk) {
      a.extra_k_cache = TensorView(place(ekv.data(), ekv.size()), DType::u8,
                                   {extra_pages, c.extra_page, 1, efi.bytes_per_token}, where);
      a.extra_format = c.extra_format;
      a.extra_indices = TensorView(place(eidx.data(), eidx.size() * 4), DType::i32, {c.b, c.s_q, c.extra_topk}, where);
    }
    std::vector<int32_t> len(static_cast<size_t>(c.b), static_cast<int32_t>(c.topk)),
        elen(static_cast<size_t>(c.b), static_cast<int32_t>(c.extra_topk));
    if (lengths) {
      a.topk_length = TensorView(place(len.data(), len.size() * 4), DType::i32, {c.b}, where);
      if (c.extra_topk) a.extra_topk_length = TensorView(place(elen.data(), elen.size() * 4), DType::i32, {c.b}, where);
    }
    a.out = TensorView(place(out.data(), out.size() * 2), DType::bf16, {c.b, c.s_q, c.h_q, 512}, where);
    a.lse = TensorView(place(lse.data(), lse.size() * 4), DType::f32, {c.b, c.h_q, c.s_q}, where);
    // The code warmer: the same call (same kernels, plan and code paths) on its own zero query and
    // zero indices, so it brings the kernels' code into the L2 but of the case's data only slot 0's
    // record(s) and the small per-request arrays it shares (topk_length: none in these cases).
#ifdef LKV_WITH_CUDA
    SparseDecodeArgs warmer = a;
    if (cuda && (code_warm || trace_code)) {
      std::vector<uint16_t> zq(q.size(), 0);
      std::vector<int32_t> zi(idx.size(), 0), zei(eidx.size(), 0);
      warmer.q.data = place(zq.data(), zq.size() * 2);
      warmer.indices.data = place(zi.data(), zi.size() * 4);
      if (c.extra_topk) warmer.extra_indices.data = place(zei.data(), zei.size() * 4);
    }
#endif
    // The planner's split count, then any forced ones (--splits).
    std::vector<int64_t> variants{0};
    variants.insert(variants.end(), forced_splits.begin(), forced_splits.end());
    for (const int64_t forced : variants) {
      BenchCase bc;
      bc.name = (forced ? c.name + "_splits" + std::to_string(forced) : c.name) + (lengths ? "_len" : "") +
                (c.s_q > 1 ? overlap_tag : "");
      DecodePlan plan{};
      if (cuda) {
#ifdef LKV_WITH_CUDA
        plan = plan_decode(c.b, c.s_q, c.h_q, c.topk, c.extra_topk, bench_cuda::sm_count(0), DecodePlanKernel::kAuto);
        if (forced) {
          const int64_t total = c.topk + c.extra_topk;
          plan.keys_per_split = ((total + forced - 1) / forced + 63) / 64 * 64;
          plan.num_splits = (total + plan.keys_per_split - 1) / plan.keys_per_split;
          plan.unsplit_b = 0;  // every request split so
        }
        a.plan = &plan;
        warmer.plan = &plan;
        bc.time_us = bench_cuda::time_us([&] { sparse_decode(a); }, reps);
        if (code_warm) {
          bc.numbers["code_warm_time_us"] =
              bench_cuda::time_us([&] { sparse_decode(a); }, reps, 3, true, [&] { sparse_decode(warmer); });
          bc.numbers["warm_time_us"] =
              bench_cuda::time_us([&] { sparse_decode(a); }, reps, 3, false, [&] { sparse_decode(a); });
        }
#endif
      } else {
        bc.time_us = cpu_time_us([&] { sparse_decode(a); }, cpu_reps);
      }
      bc.numbers["TFLOPS"] = flops / (bc.time_us * 1e-6) / 1e12;
      bc.numbers["GBps"] = bytes / (bc.time_us * 1e-6) / 1e9;
      if (hbm > 0) bc.numbers["frac_of_ceiling"] = bc.numbers["GBps"] / hbm;
      add_roofline(bc, flops, bytes, hbm, kDatasheetTFLOPS, empty_launch);
      if (!cuda) add_cpu_roof(bc, flops, bytes, roof);
      bc.numbers["num_splits"] = static_cast<double>(plan.num_splits);
      bc.numbers["unsplit_b"] = static_cast<double>(plan.unsplit_b);
      // Distinct main-cache records over the candidates (below 1 by repeats, and by --list-overlap).
      bc.numbers["unique_fraction"] = static_cast<double>(unique_main) / static_cast<double>(c.b * c.s_q * c.topk);
      std::printf("%-44s %10.1f %9.2f %9.1f %7.1f%% %7lld %8lld\n", bc.name.c_str(), bc.time_us,
                  bc.numbers["TFLOPS"], bc.numbers["GBps"],
                  100.0 * (hbm > 0 ? bc.numbers["frac_of_ceiling"] : bc.numbers["frac_of_roof"]),
                  static_cast<long long>(plan.num_splits), static_cast<long long>(plan.unsplit_b));
#ifdef LKV_WITH_CUDA
      if (code_warm)
        std::printf("  %s: %.1f us with its code in the L2, %.1f us with code and data\n", bc.name.c_str(),
                    bc.numbers["code_warm_time_us"], bc.numbers["warm_time_us"]);
      if (stream) stream_times(a, kv, ekv, bytes, bc);
      if (trace)
        trace_case(bc.name, a, warmer, bc,
                   trace_warm ? TraceMode::kWarm : trace_code ? TraceMode::kCode : TraceMode::kFlushed);
#endif
      std::fflush(stdout);
      res.cases.push_back(bc);
    }
#ifdef LKV_WITH_CUDA
    for (void* d : dev) bench_cuda::free(d);
#endif
  }
  std::vector<double> tf;
  for (const auto& c : res.cases) tf.push_back(c.numbers.at("TFLOPS"));
  res.summary["geomean_TFLOPS"] = geomean(tf);
  for (const auto& c : res.cases)
    if (c.name == "v32_b128_h128_topk2048") res.summary["v32_b128_TFLOPS"] = c.numbers.at("TFLOPS");
  summarise_memory_bound(res);
  summarise_cpu_roof(res);
  if (!json.empty()) write_json(res, json);
  if (!plot.empty()) write_svg(res, "TFLOPS", cuda ? "bf16_dense_TFLOPS_datasheet" : "fp32_TFLOPS", "TFLOPS", plot);
  return 0;
}

}  // namespace latentkv::cli
