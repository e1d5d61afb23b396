// latentkv/decode.h: sparse MLA decode over quantized paged caches (SPEC.md section 4), its split-KV
// planner and its combine step.
//
// Per request i, query token j, head h: the attended set is the valid entries among
// indices[i][j][:topk_length[i]] (flat slots of k_cache) plus the valid entries among
// extra_indices[i][j][:extra_topk_length[i]] (flat slots of extra_k_cache). K of a token is its
// dequantized d_qk-wide record and V its first 512 dims. s = softmax_scale * q . k;
// lse = ln(sum exp(s)); out = softmax(s) @ V. With a sink: out *= 1 / (1 + exp(sink[h] - lse)),
// lse unchanged. A query with no valid key gets out = 0 and lse = +inf. An index outside
// [0, num_pages * P) is invalid: never read, skipped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "latentkv/formats.h"
#include "latentkv/tensor.h"

namespace latentkv {

// How the attended candidates of one (request, query token) are divided among CTAs. Candidate
// positions run over the main indices then the extra ones: [0, topk + extra_topk); split s covers
// [s * keys_per_split, (s + 1) * keys_per_split). It depends only on shapes, so one plan serves every
// layer of a decode step (and every step with the same shapes), and making it needs no device data.
//
// unsplit_b > 0 (with num_splits > 1): requests [0, unsplit_b) run unsplit in a launch of their own,
// and only requests [unsplit_b, b) are split num_splits ways, in a second launch. The planner
// chooses this where whole waves of unsplit CTAs leave a remainder that would otherwise take a
// last wave of its own (e.g. V4's h_q 64 at b 74: 148 CTAs on 132 SMs); splitting just the
// remainder fills that wave with short CTAs instead of lengthening every CTA's wave.
struct DecodePlan {
  int64_t num_splits = 1;
  int64_t keys_per_split = 1;
  int64_t unsplit_b = 0;
  // The shapes the plan was made for; sparse_decode checks them on use.
  int64_t b = 0, s_q = 0, h_q = 0, topk = 0, extra_topk = 0;
};

// The attention kernel a plan is tuned for: the planner weighs a split's combine against the
// kernel's time per candidate, which differs between the two CUDA kernels. Any plan is correct with
// either kernel. kAuto: the kernel sparse_decode picks on the current CUDA device (the portable one
// in a build without CUDA or on a machine without a device).
enum class DecodePlanKernel : uint8_t { kAuto, kPortable, kSm90 };

// Plans for num_sms multiprocessors (a pure function of its arguments once kAuto is resolved, and
// of two switches read once per process for benchmarks: LKV_SINGLE_LAUNCH_PLANS=1 and
// LKV_SMALL_COMBINE=0; CPU-testable).
DecodePlan plan_decode(int64_t b, int64_t s_q, int64_t h_q, int64_t topk, int64_t extra_topk,
                       int num_sms, DecodePlanKernel kernel = DecodePlanKernel::kAuto);

struct SparseDecodeArgs {
  TensorView q;                  // bf16 [b, s_q, h_q, d_qk]; d_qk = 576 (v32_fp8) or 512 (v4_fp8, v41_fp8)
  TensorView k_cache;            // u8 paged cache of `format` ([num_pages, P, 1, bpt] or 2-D)
  CacheFormat format = CacheFormat::v32_fp8;
  int64_t page_size = -1;        // needed for the 2-D cache form
  TensorView indices;            // i32 [b, s_q, topk]
  TensorView topk_length;        // i32 [b]; may be absent (data == nullptr)
  TensorView attn_sink;          // f32 [h_q]; may be absent
  TensorView extra_k_cache;      // u8 paged cache of extra_format; may be absent
  // The extra cache's format; absent: `format`. The one other pairing is DeepSeek V4.1's:
  // a v41_fp8 k_cache with a v41_fp4 extra cache (on CUDA every kernel attends it).
  std::optional<CacheFormat> extra_format;
  int64_t extra_page_size = -1;
  TensorView extra_indices;      // i32 [b, s_q, extra_topk]; present iff extra_k_cache is
  TensorView extra_topk_length;  // i32 [b]; may be absent
  float softmax_scale = 0.0f;    // 0: d_qk^-0.5
  TensorView out;                // bf16 [b, s_q, h_q, 512]
  TensorView lse;                // f32 [b, h_q, s_q], any strides with distinct elements (FlashMLA's:
                                 // a [b, s_q, h_q] buffer seen transposed)
  const DecodePlan* plan = nullptr;  // GPU: null plans per call
  void* workspace = nullptr;         // GPU: null uses latentkv's cached workspace
  size_t workspace_bytes = 0;
};

enum class DecodeImpl : uint8_t { kAuto, kCpuOracle, kCpuFast, kCuda };

void sparse_decode(const SparseDecodeArgs& args, Stream stream = nullptr,
                   DecodeImpl impl = DecodeImpl::kAuto);

// Bytes of caller-provided workspace sparse_decode needs with this plan (partial outputs and LSEs).
size_t sparse_decode_workspace_bytes(const DecodePlan& plan);

}  // namespace latentkv
