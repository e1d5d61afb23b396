// dense/cpu: the CPU backends of dense_decode.
#pragma once

#include "dense/params.h"

namespace latentkv::dense {

// Float64 oracle: reads like SPEC.md section 6 (double scores, softmax and accumulation).
void dense_decode_oracle(const Params& p);

// Fast fp32 path: OpenMP over (request, query row); each visible key is converted once per kv head
// and used by every query head that reads that kv head.
void dense_decode_cpu_fast(const Params& p);

}  // namespace latentkv::dense
