// The attention ops' CPU head block (head_block.h, body in head_block_kernel.h) built for the
// library's baseline (-march=x86-64-v2, SSE4.2): 4 lanes, no FMA. Every x86-64-v2 CPU runs it.
#include "cpu_common/head_block_kernel.h"

namespace latentkv::cpu_common {

void attend_head_block_sse4(const float* q, int nh, const float* k, int64_t n, int64_t key_stride,
                            int d_qk, int d_v, float* s, float (*acc)[kMaxDimV], float* max, float* sum) {
  head_block_w<4>(q, nh, k, n, key_stride, d_qk, d_v, s, acc, max, sum);
}

void dequantize_payload_sse4(const uint8_t* payload, int n, float scale, PayloadCode code, float* out) {
  dequantize_payload<4>(payload, n, scale, code, out);
}

float multiply_add_chains_sse4(int64_t iters) { return multiply_add_chains<4>(iters); }

}  // namespace latentkv::cpu_common
