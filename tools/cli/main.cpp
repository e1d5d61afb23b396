// latentkv: the command-line tool. Errors from the library arrive as latentkv::Error and end the
// program with status 2 and the message; a failed verification ends it with status 1.
#include <cstdio>
#include <string>

#include "commands.h"
#include "latentkv/error.h"
#ifdef LKV_WITH_CUDA
#include "cuda_common/bench.h"
#endif

namespace {

const char* kUsage =
    "usage: latentkv <command> [options]\n"
    "  demo [--device auto|cpu|cuda] [--requests N] [--steps N] [--prefill N] [--heads N]\n"
    "       [--check-every N] [--tiny] [--fault wrong-slot] [--json FILE]\n"
    "                                         DeepSeek-V4's KV pipeline end to end, checked\n"
    "  info                                   what this build contains and which devices it sees\n"
    "  verify [--device auto|cpu|cuda]        judge every backend against the float64 oracle\n"
    "  bench compress [--device auto|cpu|cuda] [--format v4_int8|v4_fp8] [--cases contest|quick]\n"
    "                 [--shuffled] [--trace [--trace-dir DIR]] [--trace-stream] [--reps N] [--reference FILE] [--json FILE] [--plot FILE.svg]\n"
    "  bench decode [--device auto|cpu|cuda] [--kernel auto|portable|sm90|compact] [--filter TEXT] [--reps N]\n"
    "               [--splits N,...] [--trace | --trace-warm | --trace-code] [--code-warm] [--stream] [--lengths] [--list-overlap F] [--json FILE] [--plot FILE.svg]\n"
    "  bench prefill [--device auto|cpu|cuda] [--kernel auto|portable|sm90|compact] [--filter TEXT] [--reps N]\n"
    "               [--json FILE] [--plot FILE.svg]\n"
    "  bench dense [--device auto|cpu|cuda] [--kernel auto|portable|sm90|compact] [--filter TEXT] [--reps N]\n"
    "               [--json FILE] [--plot FILE.svg]\n"
    "  run compress --inputs DIR --out FILE [--format v4_int8|v4_fp8] [--device auto|cpu|cuda]\n"
    "  help, --help                           this text (also `latentkv <command> --help`)\n"
    "Defaults: --device auto (demo: cpu), --format v4_int8, --kernel auto. --splits, --trace*,\n"
    "--code-warm and --stream need --device cuda. docs/benchmarks.md describes every bench option.\n";

int info() {
  std::printf("latentkv 0.1.0\n");
#ifdef LKV_WITH_CUDA
  const int n = latentkv::bench_cuda::device_count();
  std::printf("backends: cpu, cuda (built for %s); CUDA devices visible: %d\n", LKV_CUDA_TARGETS, n);
  for (int i = 0; i < n; ++i)
    std::printf("  cuda:%d %s, %d SMs\n", i, latentkv::bench_cuda::device_name(i).c_str(),
                latentkv::bench_cuda::sm_count(i));
#else
  std::printf("backends: cpu (built without CUDA)\n");
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace latentkv::cli;
  try {
    const std::string a1 = argc > 1 ? argv[1] : "";
    const std::string a2 = argc > 2 ? argv[2] : "";
    for (int i = 2; i < argc; ++i)
      if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") return std::fputs(kUsage, stdout), 0;
    if (a1 == "info") return info();
    if (a1 == "demo") return cmd_demo(Args(argc, argv, 2));
    if (a1 == "verify") return cmd_verify(Args(argc, argv, 2));
    if (a1 == "bench" && a2 == "compress") return cmd_bench_compress(Args(argc, argv, 3));
    if (a1 == "bench" && a2 == "decode") return cmd_bench_decode(Args(argc, argv, 3));
    if (a1 == "bench" && a2 == "prefill") return cmd_bench_prefill(Args(argc, argv, 3));
    if (a1 == "bench" && a2 == "dense") return cmd_bench_dense(Args(argc, argv, 3));
    if (a1 == "run" && a2 == "compress") return cmd_run_compress(Args(argc, argv, 3));
    std::fputs(kUsage, a1 == "--help" || a1 == "help" ? stdout : stderr);
    return a1 == "--help" || a1 == "help" ? 0 : 2;
  } catch (const latentkv::Error& e) {
    std::fprintf(stderr, "latentkv: %s\n", e.what());
    return 2;
  }
}
