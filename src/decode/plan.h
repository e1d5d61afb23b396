// decode/plan.h: the split planner's internal entry points (decode.cpp), for the ops that plan with
// the decode planner's rule but launch other CTA shapes (dense decode's packed query tokens).
#pragma once

#include <cstdint>

#include "latentkv/decode.h"

namespace latentkv {

// How many CTAs of the given rows per CTA an SM holds at once in the kernel a plan is for: 2 for
// the narrow Hopper kernel (decode/sm90/narrow.cuh: at most 16 rows, quantized keys, its switch
// on) in its two-CTA form, 1 in its warp-specialised form (which dense_pages, dense decode's pages,
// take by default: decode/sm90/launch.h narrow_ws) and for every other kernel.
int plan_ctas_per_sm(DecodePlanKernel kernel, int64_t cta_rows, bool quantized, bool dense_pages);

// plan_decode with the GPU's CTA slots given as num_sms x ctas_per_sm (plan_decode passes sparse
// decode's own). h_q counts the rows the CTAs hold, in 64-row blocks for the waves.
DecodePlan plan_decode_slots(int64_t b, int64_t s_q, int64_t h_q, int64_t topk, int64_t extra_topk, int num_sms,
                             DecodePlanKernel kernel, int ctas_per_sm);

}  // namespace latentkv
