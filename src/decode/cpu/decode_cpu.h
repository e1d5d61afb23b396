// decode/cpu: the CPU backends of sparse_decode.
#pragma once

#include "decode/params.h"

namespace latentkv::decode {

// Float64 oracle: reads like SPEC.md section 4 (double accumulation, exact dequantization).
void sparse_decode_oracle(const Params& p);

// Fast fp32 path: OpenMP over (request, query token); each attended token is dequantized once and
// used by every head.
void sparse_decode_cpu_fast(const Params& p);

}  // namespace latentkv::decode
