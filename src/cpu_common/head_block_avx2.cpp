// The attention ops' CPU head block (head_block.h, body in head_block_kernel.h) built for
// AVX2 and FMA (-mavx2 -mfma): 8 lanes. CMakeLists.txt gives this file its flags; head_block_fn hands it out only
// where cpu_supports(CpuIsa::kAvx2) holds.
#include "cpu_common/head_block_kernel.h"

namespace latentkv::cpu_common {

void attend_head_block_avx2(const float* q, int nh, const float* k, int64_t n, int64_t key_stride,
                            int d_qk, int d_v, float* s, float (*acc)[kMaxDimV], float* max, float* sum) {
  head_block_w<8>(q, nh, k, n, key_stride, d_qk, d_v, s, acc, max, sum);
}

void dequantize_payload_avx2(const uint8_t* payload, int n, float scale, PayloadCode code, float* out) {
  dequantize_payload<8>(payload, n, scale, code, out);
}

float multiply_add_chains_avx2(int64_t iters) { return multiply_add_chains<8>(iters); }

}  // namespace latentkv::cpu_common
