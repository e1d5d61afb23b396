// `latentkv demo`: DeepSeek-V4 attention's KV pipeline end to end (src/demo/demo.h), on the CPU by
// default; --device cuda runs a production-like size on the GPU.
#include <cstdio>
#include <fstream>

#include "bench_util.h"
#include "commands.h"
#include "demo/demo.h"
#include "latentkv/error.h"
#ifdef LKV_WITH_CUDA
#include "cuda_common/bench.h"
#endif

namespace latentkv::cli {

int cmd_demo(const Args& args) {
  demo::DemoConfig c;
  const std::string device = args.get("device", "cpu");
  c.device = parse_device(device == "auto" ? "cpu" : device);
#ifdef LKV_WITH_CUDA
  if (device == "auto" && bench_cuda::device_count() > 0) c.device = Device::cuda(0);
#endif
  const bool tiny = args.flag("tiny");
  if (c.device.is_cuda()) {  // production-like: 64 requests at a 64k context, 64 heads
    c.requests = 64;
    c.heads = 64;
    c.steps = 512;
    c.prefill = 65536 - 512;
    c.check_every = 256;
  }
  if (tiny) {  // the CI configuration
    c.requests = 2;
    c.heads = 4;
    c.steps = 300;
    c.window = 64;
    c.ratio = 32;
    c.page_size = 16;
    c.check_every = 50;
  }
  c.requests = args.get_int("requests", static_cast<int>(c.requests));
  c.steps = args.get_int("steps", static_cast<int>(c.steps));
  c.prefill = args.get_int("prefill", static_cast<int>(c.prefill));
  c.heads = args.get_int("heads", static_cast<int>(c.heads));
  c.check_every = args.get_int("check-every", static_cast<int>(c.check_every));
  c.fault = args.get("fault", "");
  const std::string json = args.get("json", "");
  args.check_all_used();

  std::printf("latentkv demo: DeepSeek-V4 attention's KV pipeline on %s\n", c.device.str().c_str());
  std::printf("  %lld requests, %lld heads, context %lld -> %lld tokens, window %lld, C = %lld%s\n",
              static_cast<long long>(c.requests), static_cast<long long>(c.heads),
              static_cast<long long>(c.prefill), static_cast<long long>(c.prefill + c.steps),
              static_cast<long long>(c.window), static_cast<long long>(c.ratio),
              c.fault.empty() ? "" : ("  [fault injected: " + c.fault + "]").c_str());
  const demo::DemoReport r = demo::run_demo(c, stdout);

  const double total = r.state_s + r.window_s + r.compress_s + r.attention_s;
  auto pct = [&](double s) { return total > 0 ? 100.0 * s / total : 0.0; };
  std::printf("\n  %-34s %12s\n", "", "value");
  std::printf("  %-34s %12.0f\n", "tokens/s (pipeline stages)", r.tokens_per_s);
  std::printf("  %-34s %10.3f s (%4.1f%%)\n", "state write", r.state_s, pct(r.state_s));
  std::printf("  %-34s %10.3f s (%4.1f%%)\n", "window write (v4_fp8)", r.window_s, pct(r.window_s));
  std::printf("  %-34s %10.3f s (%4.1f%%)\n", "compress (C-th tokens)", r.compress_s, pct(r.compress_s));
  std::printf("  %-34s %10.3f s (%4.1f%%)\n", "sparse decode (window + extra)", r.attention_s, pct(r.attention_s));
  std::printf("  %-34s %12lld\n", "compressed entries", static_cast<long long>(r.compressed_entries));
  std::printf("  %-34s %9.1f B (bf16 latents: %.0f B, %.1fx smaller)\n", "latent cache bytes per context token",
              r.bytes_per_token, r.bf16_bytes_per_token, r.bf16_bytes_per_token / r.bytes_per_token);
  std::printf("  %-34s %6lld run, %lld failed (worst max_rel %.2e, cos %.7f, lse err %.1e)\n",
              "checks against the float64 oracles", static_cast<long long>(r.checks),
              static_cast<long long>(r.checks_failed), r.worst_max_rel, r.worst_cos, r.worst_lse_err);
  if (!r.ok()) std::printf("  FAILED: %s\n", r.first_failure.empty() ? "no check ran" : r.first_failure.c_str());
  if (!json.empty()) {
    BenchResult res;
    res.op = "demo";
    res.device = c.device.str();
    res.command = args.command_line();
    res.date = utc_now();
    BenchCase bc;
    bc.name = "pipeline";
    bc.time_us = total * 1e6;
    bc.numbers = {{"tokens", static_cast<double>(r.tokens)}, {"tokens_per_s", r.tokens_per_s},
                  {"state_s", r.state_s}, {"window_s", r.window_s}, {"compress_s", r.compress_s},
                  {"attention_s", r.attention_s}, {"bytes_per_token", r.bytes_per_token},
                  {"bf16_bytes_per_token", r.bf16_bytes_per_token},
                  {"checks", static_cast<double>(r.checks)},
                  {"checks_failed", static_cast<double>(r.checks_failed)},
                  {"worst_max_rel", r.worst_max_rel}, {"worst_cos", r.worst_cos}};
    res.cases.push_back(bc);
    res.summary["tokens_per_s"] = r.tokens_per_s;
    write_json(res, json);
  }
  std::printf("demo: %s\n", r.ok() ? "all checks passed" : "CHECKS FAILED");
  return r.ok() ? 0 : 1;
}

}  // namespace latentkv::cli
