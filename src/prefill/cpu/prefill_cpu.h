// prefill/cpu: the CPU backends of sparse_prefill.
#pragma once

#include "prefill/params.h"

namespace latentkv::prefill {

// Float64 oracle: reads like SPEC.md section 5 (double scores, softmax and accumulation).
void sparse_prefill_oracle(const Params& p);

// Fast fp32 path: OpenMP over query rows; each attended kv row is converted once and used by every
// head.
void sparse_prefill_cpu_fast(const Params& p);

}  // namespace latentkv::prefill
