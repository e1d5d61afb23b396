// The run-time choice of the CPU fast paths' instruction set (isa.h), and of the attention head
// block's build (head_block.h).
#include "cpu_common/isa.h"

#include <cstdlib>
#include <cstring>

#include "cpu_common/head_block.h"
#include "latentkv/error.h"

namespace latentkv::cpu_common {

bool cpu_supports(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kSse4: return true;  // the library is built for x86-64-v2
    // libgcc also checks that the OS saves the wider registers (XCR0) before it reports these.
    case CpuIsa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuIsa::kAvx512: return __builtin_cpu_supports("avx512f");
  }
  return false;
}

CpuIsa best_cpu_isa() {
  static const CpuIsa best = cpu_supports(CpuIsa::kAvx512) ? CpuIsa::kAvx512
                             : cpu_supports(CpuIsa::kAvx2) ? CpuIsa::kAvx2
                                                           : CpuIsa::kSse4;
  return best;
}

CpuIsa default_cpu_isa() {
  static const CpuIsa isa = [] {
    const char* env = std::getenv("LKV_CPU_ISA");
    if (!env || !*env || std::strcmp(env, "auto") == 0) return best_cpu_isa();
    CpuIsa want;
    if (std::strcmp(env, "sse4") == 0) want = CpuIsa::kSse4;
    else if (std::strcmp(env, "avx2") == 0) want = CpuIsa::kAvx2;
    else if (std::strcmp(env, "avx512") == 0) want = CpuIsa::kAvx512;
    else LKV_FAIL(ErrorKind::kValue, "LKV_CPU_ISA must be auto, sse4, avx2 or avx512, got '", env,
                  "'");
    LKV_CHECK(cpu_supports(want), "LKV_CPU_ISA=", env, ": this CPU cannot run the ",
              cpu_isa_name(want), " build");
    return want;
  }();
  return isa;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kSse4: return "sse4";
    case CpuIsa::kAvx2: return "avx2+fma";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "unknown";
}

namespace {
// The build of `isa` among the three (an error if this CPU cannot run it); `what` names the caller.
template <class Fn>
Fn pick_build(CpuIsa isa, const char* what, Fn sse4, Fn avx2, Fn avx512) {
  LKV_CHECK(cpu_supports(isa), what, ": this CPU cannot run the ", cpu_isa_name(isa), " build");
  switch (isa) {
    case CpuIsa::kSse4: return sse4;
    case CpuIsa::kAvx2: return avx2;
    case CpuIsa::kAvx512: return avx512;
  }
  LKV_FAIL(ErrorKind::kValue, what, ": unknown instruction set ", static_cast<int>(isa));
}
}  // namespace

HeadBlockFn head_block_fn(CpuIsa isa) {
  return pick_build<HeadBlockFn>(isa, "head_block_fn", attend_head_block_sse4, attend_head_block_avx2,
                                 attend_head_block_avx512);
}

PayloadFn payload_fn(CpuIsa isa) {
  return pick_build<PayloadFn>(isa, "payload_fn", dequantize_payload_sse4, dequantize_payload_avx2,
                               dequantize_payload_avx512);
}

MultiplyAddFn multiply_add_fn(CpuIsa isa) {
  return pick_build<MultiplyAddFn>(isa, "multiply_add_fn", multiply_add_chains_sse4, multiply_add_chains_avx2,
                                   multiply_add_chains_avx512);
}

int cpu_isa_lanes(CpuIsa isa) { return isa == CpuIsa::kAvx512 ? 16 : isa == CpuIsa::kAvx2 ? 8 : 4; }

}  // namespace latentkv::cpu_common
