// cpu_common/head_block.h: the fp32 inner step shared by the fast CPU paths of sparse_decode,
// sparse_prefill and dense_decode: softmax attention of a block of up to kHeadBlock heads over n
// gathered fp32 keys.
//
// The caller gathers (and converts) each key once into a row-major [n, key_stride] buffer and then
// calls this for every block of heads that shares those keys, so a key row is loaded into L1 once
// per block rather than once per head. Softmax takes two passes over the scores (max, then
// exponentials) with fp32 sums and accumulators. The step is built once per x86 instruction set
// (cpu_common/isa.h; body and the reasons for its shape in head_block_kernel.h) and chosen at run
// time, as the compressor's pooling is. The order of operations is fixed by the code and the
// instruction set alone, so a result never depends on the thread that computed it.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "cpu_common/isa.h"

namespace latentkv::cpu_common {

// 16 accumulator rows of 512 floats (32 KiB, the caller's) and the value rows of a token group
// (head_block_kernel.h) stay in L1 and L2.
inline constexpr int kHeadBlock = 16;
inline constexpr int kMaxDimV = 512;

// q: [nh, d_qk] queries with the softmax scale already folded in, 1 <= nh <= kHeadBlock; k: n > 0
// rows of key_stride floats, K = the first d_qk, V = the first d_v (<= kMaxDimV) of each. s:
// scratch of nh * n floats. Outputs per head hh: max[hh] = max score, sum[hh] = sum exp(s - max),
// acc[hh][0, d_v) = sum exp(s - max) * v (unnormalised).
using HeadBlockFn = void (*)(const float* q, int nh, const float* k, int64_t n, int64_t key_stride,
                             int d_qk, int d_v, float* s, float (*acc)[kMaxDimV], float* max,
                             float* sum);
void attend_head_block_sse4(const float* q, int nh, const float* k, int64_t n, int64_t key_stride,
                            int d_qk, int d_v, float* s, float (*acc)[kMaxDimV], float* max, float* sum);
void attend_head_block_avx2(const float* q, int nh, const float* k, int64_t n, int64_t key_stride,
                            int d_qk, int d_v, float* s, float (*acc)[kMaxDimV], float* max, float* sum);
void attend_head_block_avx512(const float* q, int nh, const float* k, int64_t n, int64_t key_stride,
                              int d_qk, int d_v, float* s, float (*acc)[kMaxDimV], float* max,
                              float* sum);
// The build for `isa` (an error if this CPU cannot run it).
HeadBlockFn head_block_fn(CpuIsa isa);

// A quantized group's payload as fp32, built per instruction set as the head block is (the body and
// its contract: head_block_kernel.h dequantize_payload): n codes (a multiple of 16), e4m3, int8 or
// e2m1 (two per byte, the even dim in the low nibble: n / 2 bytes), times `scale`, rounded to bf16.
// cpu_common/dequant.h takes it for the records' groups.
enum class PayloadCode : uint8_t { kE4m3, kInt8, kE2m1 };
using PayloadFn = void (*)(const uint8_t* payload, int n, float scale, PayloadCode code, float* out);
void dequantize_payload_sse4(const uint8_t* payload, int n, float scale, PayloadCode code, float* out);
void dequantize_payload_avx2(const uint8_t* payload, int n, float scale, PayloadCode code, float* out);
void dequantize_payload_avx512(const uint8_t* payload, int n, float scale, PayloadCode code, float* out);
PayloadFn payload_fn(CpuIsa isa);
inline PayloadFn default_payload() { return payload_fn(default_cpu_isa()); }

// The multiply-add rate of a build, the compute ceiling of the CPU benches' roofline: iters passes
// over kMultiplyAddChains(lanes) independent accumulators of `lanes` fp32 lanes, each pass one
// multiply-add (fused in the AVX2 and AVX-512 builds, a multiply then an add in the SSE4 one) per
// accumulator, 2 FLOPs per lane. Returns a value that depends on every accumulator.
constexpr int kMultiplyAddChains(int lanes) { return lanes == 16 ? 16 : 12; }
using MultiplyAddFn = float (*)(int64_t iters);
float multiply_add_chains_sse4(int64_t iters);
float multiply_add_chains_avx2(int64_t iters);
float multiply_add_chains_avx512(int64_t iters);
// The build for `isa` (an error if this CPU cannot run it), and its fp32 lanes.
MultiplyAddFn multiply_add_fn(CpuIsa isa);
int cpu_isa_lanes(CpuIsa isa);

// default_cpu_isa()'s build. Resolved by each fast path before its parallel region: a bad
// LKV_CPU_ISA is an error there, where it can still reach the caller (thrown inside an OpenMP
// region it would end the process).
inline HeadBlockFn default_head_block() { return head_block_fn(default_cpu_isa()); }

// The sink factor 1 / (1 + exp(sink - lse)) in fp32; a +inf sink takes every weight (factor 0,
// computed as a special case rather than 1 / inf), -inf none (exp gives 0, factor exactly 1).
inline float sink_factor(float sink, float lse) {
  return sink == std::numeric_limits<float>::infinity() ? 0.0f : 1.0f / (1.0f + std::exp(sink - lse));
}

}  // namespace latentkv::cpu_common
