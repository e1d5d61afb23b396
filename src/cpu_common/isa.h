// cpu_common/isa.h: which x86 vector instruction set the CPU fast paths run. The kernels that set
// the pace (the compressor's window pooling, compress/cpu/pool.h, and the attention ops' head block,
// cpu_common/head_block.h) are each built once per set, from one body, and chosen at run time, so
// the library itself still runs on any x86-64-v2 CPU.
#pragma once

#include <cstdint>

namespace latentkv::cpu_common {

// kSse4: the library's baseline, x86-64-v2 (4 fp32 lanes, no FMA). kAvx2: AVX2 and FMA (8 lanes).
// kAvx512: AVX-512F (16 lanes).
enum class CpuIsa : uint8_t { kSse4, kAvx2, kAvx512 };

// Whether this CPU (and its OS) can run a build; kSse4 is the library's baseline (x86-64-v2).
bool cpu_supports(CpuIsa isa);
// The widest build this CPU runs.
CpuIsa best_cpu_isa();
// The build the fast paths run unless told otherwise: LKV_CPU_ISA=sse4|avx2|avx512 forces one (to
// time it, or to reproduce another machine's results), unset or auto takes best_cpu_isa(). Read
// once; a build this CPU cannot run is an error.
CpuIsa default_cpu_isa();
const char* cpu_isa_name(CpuIsa isa);

}  // namespace latentkv::cpu_common
