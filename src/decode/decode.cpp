// sparse_decode: validation of every argument, the split-KV planner, and dispatch to the CPU
// oracle, the CPU fast path or the CUDA backend. Nothing is written before every check has passed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "decode/cpu/decode_cpu.h"
#include "decode/cuda/config.h"  // tile constants only; no CUDA headers
#include "decode/sm90/config.h"  // the narrow kernel's rows and CTAs per SM; no CUDA headers
#include "decode/sm90/launch.h"  // narrow_rows, narrow_ws_under; declarations only
#include "decode/params.h"
#include "decode/plan.h"
#include "latentkv/decode.h"
#include "latentkv/error.h"
#ifdef LKV_WITH_CUDA
#include "cuda_common/cuda_check.h"
#include "cuda_common/device_cache.h"
#include "decode/cuda/launch.h"
#endif

namespace latentkv {

namespace {

// The attention kernel's constants (decode/cuda/config.h).
using decode::cuda::kCtasPerSm;
using decode::cuda::kHeadsPerCta;
using decode::cuda::kSplitUnit;

// ---- The split-KV planner's cost model ----------------------------------------------------------
// A work item is one (request, query token, block of 64 heads); with s splits the attention kernel
// (decode/cuda/kernel.cuh) runs items * s CTAs, each over at most keys_per_split candidates. The
// GPU holds num_sms * kCtasPerSm of them at once (one per SM; two for the narrow Hopper kernel,
// plan_ctas_per_sm), so they run in waves, and a launch
// takes about waves(s) * keys_per_split(s) key steps (a key step: the time a CTA takes to attend
// one candidate for its 64 heads). Splitting helps only as far as it fills the waves: on 132 SMs,
// V3.2's b 74 (296 items) runs unsplit in 3 waves, the last one 24% full, so 25% of the launched
// SM time idles; 4 splits give 1184 CTAs in 9 waves, 99.7% full.
//
// Every split past the first costs the combine: the attention kernel writes, and combine_kernel
// reads, one fp32 partial of 512 dims per head row per split (2 x 4 B x 512 = 4 KB). Measured on
// the H200 (bench/results/decode-h200.json): b 64 with 2 splits took 740.7 us against 691.7 for
// half of b 128 unsplit (the same 4 waves of half the keys each), 49 us for 128 x 128 x 2 head-row
// splits, 1.5 ns each; a key step took 1383.5 us / (4 waves x 2048) = 0.169 us. So one head row's
// split costs ~1.5 ns x 132 / 169 ns ~= 1.2 key steps of one SM; the combine streams through the
// whole GPU, whose bandwidth grows with its SM count, hence the division by num_sms below.
inline constexpr double kCombineKeyStepsPerHeadSplit = 1.2;
// The Hopper kernel (decode/sm90, version s6) takes 0.060 us per key step on V3.2 b 128 (491.9 us /
// (4 waves x 2048)), 2.8x less than the portable kernel, while the combine and each CTA's prologue
// stay as long. Fitted on V3.2 b 74 with 4 splits (bench/results/decode-h200.json): 416 us, of which
// 9 waves x 512 key steps x 0.060 us = 277 us are key steps and the other 139 us come to 1.84 ns per
// head row and split, ~4.0 key steps of one SM (1.84 ns x 132 / 60 ns).
inline constexpr double kCombineKeyStepsPerHeadSplitSm90 = 4.0;
// One exception, for the Hopper kernel where the combine runs four warps per row (at most
// kCombineQuarterMaxRowsPerSm head rows per SM: b 2 on the benches) and the request has an extra
// cache: if one block of kSplitUnit candidates per split keeps every CTA in one wave, that plan is
// taken. Measured on the H200 (bench/NOTES.md v28, b 2, both with the four-warp combine): V4 / V4.1
// h_q 128 with a 512-token extra cache at 10 one-block splits took 10-18% less time than at the
// model's 5 (forced split counts), and against the model's plans with one warp per row V4 / V4.1
// b 2 took 5-19% less (10 splits at h_q 64 too, as before; 18 instead of 9 with a 1024-token extra
// cache at h_q 64). No setting of the constant above yields that and V3.2's plan: charged 2.0
// instead of 4.0, V3.2 b 2 went from 11 splits of three blocks to 16 of two and took 4.4% more
// time. The model has no term for what a CTA's second block costs at b 2 against its partial
// rows. The rule is kept to what was measured: without an extra cache (V3.2, and dense decode and
// prefill, which plan through this function with none) no one-block plan has been timed.
// The model leaves out costs that also grow with the split count: each CTA loads its Q (73 KB for
// 64 heads of v32_fp8) and fills its copy pipeline before its first product, and the combine is a
// second launch. So the fewest splits whose estimate is within this fraction of the best one win.
inline constexpr double kFewerSplitsMargin = 0.02;
// The attention kernel's grid.z, one per split, is at most 65535.
inline constexpr int64_t kMaxGridSplits = 65535;
// A plan with unsplit requests (DecodePlan::unsplit_b) runs two attention launches; the second
// starts only when the first has drained, and launching it costs ~2-3 us, ~20-30 key steps at the
// 0.1-0.12 us per step the portable kernel takes with 64-row CTAs on the H200 (V3.2 b 64: 420 us
// for 2 waves x 2048 steps; V4 h_q 64 b 64: 79 us for 1 wave x 640). The Hopper kernel's steps are
// ~2.8x shorter, so there the same gap is ~35-50 steps; the constant is not scaled per kernel
// because every two-launch plan it picked on the H200 measured faster than the one-launch plan
// (bench/NOTES.md v15), the closest (V4 h_q 128 b 148, extra 1024) by 3%.
inline constexpr double kSecondLaunchKeySteps = 32.0;
// Two launches are taken only when the model says they beat the best single launch by this much:
// the model leaves out each CTA's prologue, which the short split CTAs of the second launch pay
// in full.
inline constexpr double kTwoLaunchMargin = 0.05;

// Whole blocks of kSplitUnit candidates per split, so kernels never see a partial block except at
// the end; the count is then what those blocks need (no empty split).
struct SplitShape {
  int64_t num_splits, keys_per_split;
};
SplitShape split_shape(int64_t total, int64_t splits) {
  const int64_t keys = ((total + splits - 1) / splits + kSplitUnit - 1) / kSplitUnit * kSplitUnit;
  return {(total + keys - 1) / keys, keys};
}

// LKV_SINGLE_LAUNCH_PLANS=1 (read once per process) keeps every plan to one launch (unsplit_b 0),
// so that benchmarks can time the planner with and without two-launch plans in one run.
bool two_launch_plans_allowed() {
  static const bool allowed = [] {
    const char* e = std::getenv("LKV_SINGLE_LAUNCH_PLANS");
    return !(e && std::strcmp(e, "1") == 0);
  }();
  return allowed;
}

// kAuto: the kernel a launch on the current device would use (the portable one without a device).
DecodePlanKernel resolve_plan_kernel(DecodePlanKernel kernel) {
  if (kernel != DecodePlanKernel::kAuto) return kernel;
#ifdef LKV_WITH_CUDA
  int count = 0, device = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0 && cudaGetDevice(&device) == cudaSuccess)
    return decode::cuda::use_sm90(device) ? DecodePlanKernel::kSm90 : DecodePlanKernel::kPortable;
  (void)cudaGetLastError();  // no device: not an error for planning
#endif
  return DecodePlanKernel::kPortable;
}

}  // namespace

int plan_ctas_per_sm(DecodePlanKernel kernel, int64_t cta_rows, bool quantized, bool dense_pages) {
  // The narrow Hopper kernel (decode/sm90/narrow.cuh) holds two CTAs per SM: CTAs of at most 16
  // rows over quantized keys, while its switch (LKV_SM90_NARROW, decode/sm90/launch.h) is on; one
  // in its warp-specialised form (narrow_ws: by default for dense pages). A build without CUDA
  // plans as with both switches at their defaults.
  if (resolve_plan_kernel(kernel) != DecodePlanKernel::kSm90 || !quantized || cta_rows > decode::sm90::kNarrowRows)
    return kCtasPerSm;
#ifdef LKV_WITH_CUDA
  if (!decode::sm90::narrow_rows()) return kCtasPerSm;
  if (decode::sm90::narrow_ws(dense_pages)) return 1;  // its warp-specialised form: one CTA of 512 threads per SM
#else
  // A build without CUDA plans as a CUDA build would under the switch's default (kAuto).
  if (decode::sm90::narrow_ws_under(decode::sm90::NarrowForm::kAuto, dense_pages)) return 1;
#endif
  return decode::sm90::kNarrowCtasPerSm;
}

DecodePlan plan_decode(int64_t b, int64_t s_q, int64_t h_q, int64_t topk, int64_t extra_topk,
                       int num_sms, DecodePlanKernel kernel) {
  // Sparse decode: one kv head, a CTA per query token and 64-head block, quantized records.
  return plan_decode_slots(b, s_q, h_q, topk, extra_topk, num_sms, kernel,
                           plan_ctas_per_sm(kernel, std::min<int64_t>(h_q, kHeadsPerCta), true, false));
}

DecodePlan plan_decode_slots(int64_t b, int64_t s_q, int64_t h_q, int64_t topk, int64_t extra_topk,
                             int num_sms, DecodePlanKernel kernel, int ctas_per_sm) {
  LKV_CHECK(b >= 1 && s_q >= 1 && h_q >= 1 && topk >= 1 && extra_topk >= 0 && num_sms >= 1 && ctas_per_sm >= 1,
            "plan_decode: bad shape b=", b, " s_q=", s_q, " h_q=", h_q, " topk=", topk,
            " extra_topk=", extra_topk, " num_sms=", num_sms, " ctas_per_sm=", ctas_per_sm);
  // The CUDA launch's limits (rows on grid x, 64-head blocks on grid y, candidates counted in 32
  // bits), which also keep every product below in int64.
  LKV_CHECK(b <= INT32_MAX / s_q && h_q <= 65535 * kHeadsPerCta && topk <= INT32_MAX && extra_topk <= INT32_MAX - topk,
            "plan_decode: b * s_q must be < 2^31, h_q <= ", 65535 * kHeadsPerCta,
            " and topk + extra_topk < 2^31, got b=", b, " s_q=", s_q, " h_q=", h_q, " topk=", topk,
            " extra_topk=", extra_topk);
  DecodePlan plan;
  plan.b = b;
  plan.s_q = s_q;
  plan.h_q = h_q;
  plan.topk = topk;
  plan.extra_topk = extra_topk;
  // Rule (cost model above): among the split counts allowed (at least kSplitUnit candidates per
  // split: below that the combine costs more than the parallelism gains), estimate
  //   time(s) = waves(s) * keys_per_split(s) + [s > 1] * s * combine_per_split
  // in key steps and take the fewest splits within kFewerSplitsMargin of the fastest. This is
  // the split count of the best wave efficiency items * total / (slots * time(s)), which for equal
  // splits and no combine is the familiar items * s / (slots * ceil(items * s / slots)).
  const int64_t total = topk + extra_topk;
  const int64_t items = b * s_q * ((h_q + kHeadsPerCta - 1) / kHeadsPerCta);
  const int64_t slots = static_cast<int64_t>(num_sms) * ctas_per_sm;
  const int64_t max_splits = std::min(kMaxGridSplits, std::max<int64_t>(1, total / kSplitUnit));
  // The combine's cost per split: b * s_q * h_q head rows, spread over the GPU.
  const bool sm90 = resolve_plan_kernel(kernel) == DecodePlanKernel::kSm90;
  const double combine_steps = sm90 ? kCombineKeyStepsPerHeadSplitSm90 : kCombineKeyStepsPerHeadSplit;
  const double combine_per_split = static_cast<double>(b * s_q * h_q) * combine_steps / num_sms;
  // The exception above: one block per split (the last one possibly partial), all in one wave.
  const int64_t one_block_splits = (total + kSplitUnit - 1) / kSplitUnit;
  if (sm90 && extra_topk > 0 && one_block_splits >= 2 && one_block_splits <= slots / items &&
      decode::cuda::combine_quarter_rows(b * s_q * h_q, num_sms)) {
    plan.num_splits = one_block_splits;
    plan.keys_per_split = kSplitUnit;
    return plan;
  }
  const auto time = [&](const SplitShape& s) {
    const int64_t waves = (items * s.num_splits + slots - 1) / slots;
    return static_cast<double>(waves * s.keys_per_split) +
           (s.num_splits > 1 ? combine_per_split * static_cast<double>(s.num_splits) : 0.0);
  };
  // No launch beats full waves of the candidates, ideal = items * total / slots key steps, and the
  // combine grows with the split count: once ideal plus the combine reaches the best time found, no
  // larger count can be faster.
  const double ideal = static_cast<double>(items) * static_cast<double>(total) / slots;
  double best = time(split_shape(total, 1));
  int64_t searched = 1;
  for (int64_t s = 2; s <= max_splits; ++s) {
    const SplitShape shape = split_shape(total, s);
    if (ideal + combine_per_split * static_cast<double>(shape.num_splits) >= best) break;
    best = std::min(best, time(shape));
    searched = s;
  }
  SplitShape chosen = split_shape(total, 1);
  for (int64_t s = 1; s <= searched; ++s) {
    chosen = split_shape(total, s);
    if (time(chosen) <= best * (1.0 + kFewerSplitsMargin)) break;
  }
  plan.num_splits = chosen.num_splits;
  plan.keys_per_split = chosen.keys_per_split;

  // Two launches: the first unsplit_b requests unsplit, in whole waves (their CTAs fill
  // floor(items / slots) waves, rounded down to whole requests), then the remaining requests split
  // s ways, so that their short CTAs fill what would have been a last, partly empty wave. Worth it
  // when that remainder is small against a wave: V4 h_q 64 b 74 (148 items on 132 SMs) runs one
  // wave of 132 whole CTAs and one of 8 x 16 short ones, ~22.5 waves-of-keys / 20 instead of 2
  // splits' 3 waves x 10 = 30.
  const int64_t per_request = items / b;
  const int64_t whole_waves = items / slots;
  const int64_t unsplit = whole_waves * slots / per_request;
  if (two_launch_plans_allowed() && whole_waves >= 1 && unsplit >= 1 && unsplit < b) {
    const int64_t rest_items = (b - unsplit) * per_request;
    const double first = static_cast<double>((unsplit * per_request + slots - 1) / slots * total);
    const double rest_combine_per_split = static_cast<double>((b - unsplit) * s_q * h_q) * combine_steps / num_sms;
    double best_two = 0.0;
    SplitShape best_rest{0, 0};
    for (int64_t s = 2; s <= max_splits; ++s) {
      const SplitShape shape = split_shape(total, s);
      if (shape.num_splits < 2) continue;
      const double t = first + kSecondLaunchKeySteps +
                       static_cast<double>((rest_items * shape.num_splits + slots - 1) / slots * shape.keys_per_split) +
                       rest_combine_per_split * static_cast<double>(shape.num_splits);
      if (best_rest.num_splits == 0 || t < best_two) {
        best_two = t;
        best_rest = shape;
      }
      // More splits only shorten the second launch's CTAs once they fit one wave; past that the
      // combine grows.
      if (rest_items * shape.num_splits >= slots) break;
    }
    if (best_rest.num_splits >= 2 && best_two < time(chosen) * (1.0 - kTwoLaunchMargin)) {
      plan.num_splits = best_rest.num_splits;
      plan.keys_per_split = best_rest.keys_per_split;
      plan.unsplit_b = unsplit;
    }
  }
  return plan;
}

size_t sparse_decode_workspace_bytes(const DecodePlan& plan) {
  if (plan.num_splits <= 1) return 0;
  LKV_CHECK(plan.b >= 1 && plan.s_q >= 1 && plan.h_q >= 1 && plan.num_splits <= 65535,
            "sparse_decode_workspace_bytes: the plan's b=", plan.b, " s_q=", plan.s_q, " h_q=", plan.h_q,
            " num_splits=", plan.num_splits, " are not a plan's (b, s_q, h_q >= 1, num_splits <= 65535)");
  LKV_CHECK(plan.unsplit_b >= 0 && plan.unsplit_b < plan.b,
            "sparse_decode_workspace_bytes: the plan's unsplit_b must be in [0, b) = [0, ", plan.b, "), got ",
            plan.unsplit_b);
  // Only the split requests' rows have partials. (Products checked: an edited plan's fields could
  // wrap them.)
  int64_t rows64 = plan.b - plan.unsplit_b;
  for (const int64_t f : {plan.s_q, plan.h_q, plan.num_splits, int64_t{decode::kDimV} * 4 + 4})
    LKV_CHECK(!__builtin_mul_overflow(rows64, f, &rows64), "sparse_decode_workspace_bytes: the plan's b=", plan.b,
              " s_q=", plan.s_q, " h_q=", plan.h_q, " num_splits=", plan.num_splits, " need more bytes than int64 holds");
  const size_t rows = static_cast<size_t>((plan.b - plan.unsplit_b) * plan.s_q * plan.h_q * plan.num_splits);
  return (rows * decode::kDimV * sizeof(float) + 255) / 256 * 256 + rows * sizeof(float);
}

namespace {

decode::CacheRef cache_ref(const TensorView& cache, CacheFormat f, int64_t page_size,
                           const TensorView& indices) {
  const CacheGeometry g = cache_geometry(cache, f, page_size);
  decode::CacheRef c{};
  c.format = f;
  c.base = g.base;
  c.page_size = g.page_size;
  c.page_stride = g.page_stride;
  c.num_slots = g.num_slots();
  c.indices = indices.ptr<const int32_t>();
  c.stride_idx_b = indices.stride(0);
  c.stride_idx_s = indices.stride(1);
  c.topk = indices.size(2);
  return c;
}

}  // namespace

void sparse_decode(const SparseDecodeArgs& a, Stream stream, DecodeImpl impl) {
  // ---- Shapes and dtypes.
  LKV_CHECK(a.format == CacheFormat::v32_fp8 || a.format == CacheFormat::v4_fp8 || a.format == CacheFormat::v41_fp8,
            "sparse_decode supports v32_fp8, v4_fp8 and v41_fp8 caches (v41_fp4 only as the extra cache of a "
            "v41_fp8 one), got ", format_info(a.format).name);
  const int64_t d_qk = format_info(a.format).d_qk;
  SizeEnv env;
  check_tensor(a.q, "q", {"b", "s_q", "h_q", d_qk}, DType::bf16, env);
  check_tensor(a.indices, "indices", {"b", "s_q", "topk"}, DType::i32, env);
  const bool has_extra = a.extra_k_cache.data != nullptr;
  LKV_CHECK(has_extra == (a.extra_indices.data != nullptr),
            "sparse_decode: extra_k_cache and extra_indices must be given together, got ",
            has_extra ? "extra_k_cache without extra_indices" : "extra_indices without extra_k_cache");
  if (has_extra) check_tensor(a.extra_indices, "extra_indices", {"b", "s_q", "extra_topk"}, DType::i32, env);
  // The extra cache's format: the main one's, or DeepSeek V4.1's pairing of a v41_fp8 k_cache with
  // a v41_fp4 extra cache (FlashMLA accepts v41_fp4 only there). Other pairings of equal d_qk would
  // be well defined, but no model writes them, so they are refused as a likely caller mistake.
  LKV_CHECK(!a.extra_format || has_extra, "sparse_decode: extra_format (",
            format_info(*a.extra_format).name, ") given without extra_k_cache");
  const CacheFormat extra_format = a.extra_format.value_or(a.format);
  LKV_CHECK(extra_format == a.format || (a.format == CacheFormat::v41_fp8 && extra_format == CacheFormat::v41_fp4),
            "sparse_decode: the extra cache's format must be k_cache's (", format_info(a.format).name,
            ") or, with a v41_fp8 k_cache, v41_fp4; got extra_format ", format_info(extra_format).name);
  if (a.topk_length.data) check_tensor(a.topk_length, "topk_length", {"b"}, DType::i32, env);
  if (a.extra_topk_length.data) {
    LKV_CHECK(has_extra, "sparse_decode: extra_topk_length given without extra_k_cache");
    check_tensor(a.extra_topk_length, "extra_topk_length", {"b"}, DType::i32, env);
  }
  if (a.attn_sink.data) check_tensor(a.attn_sink, "attn_sink", {"h_q"}, DType::f32, env);
  check_tensor(a.out, "out", {"b", "s_q", "h_q", decode::kDimV}, DType::bf16, env);
  check_tensor(a.lse, "lse", {"b", "h_q", "s_q"}, DType::f32, env);
  const int64_t b = env.get("b"), s_q = env.get("s_q"), h_q = env.get("h_q");
  LKV_CHECK(b >= 1 && s_q >= 1 && h_q >= 1 && env.get("topk") >= 1,
            "sparse_decode: empty problem (b=", b, ", s_q=", s_q, ", h_q=", h_q, ", topk=",
            env.get("topk"), ")");
  // lse may have any strides (FlashMLA's is a transposed [b, s_q, h_q] buffer).
  for (const auto& [t, name] : {std::pair{&a.q, "q"}, {&a.indices, "indices"}, {&a.out, "out"}})
    check_inner_contiguous(*t, name);
  check_distinct_elements(a.out, "out");
  check_distinct_elements(a.lse, "lse");
  if (has_extra) check_inner_contiguous(a.extra_indices, "extra_indices");
  for (const auto& [t, name] : {std::pair{&a.topk_length, "topk_length"},
                                {&a.extra_topk_length, "extra_topk_length"},
                                {&a.attn_sink, "attn_sink"}})
    LKV_CHECK(!t->data || t->size(0) <= 1 || t->stride(0) == 1, name, " must be contiguous, got stride ",
              t->data ? t->stride(0) : 0);
  check_no_overlap({{&a.out, "out"}, {&a.lse, "lse"}},
                   {{&a.q, "q"}, {&a.k_cache, "k_cache"}, {&a.indices, "indices"}, {&a.topk_length, "topk_length"},
                    {&a.attn_sink, "attn_sink"}, {&a.extra_k_cache, "extra_k_cache"},
                    {&a.extra_indices, "extra_indices"}, {&a.extra_topk_length, "extra_topk_length"}},
                   "sparse_decode");
  LKV_CHECK(std::isfinite(a.softmax_scale) && a.softmax_scale >= 0.0f,
            "sparse_decode: softmax_scale must be finite and >= 0 (0 = d_qk^-0.5), got ",
            a.softmax_scale);

  // ---- Devices.
  const Device dev = a.q.device;
  for (const auto& [t, name] : {std::pair{&a.k_cache, "k_cache"}, {&a.indices, "indices"},
                                {&a.topk_length, "topk_length"}, {&a.attn_sink, "attn_sink"},
                                {&a.extra_k_cache, "extra_k_cache"},
                                {&a.extra_indices, "extra_indices"},
                                {&a.extra_topk_length, "extra_topk_length"}, {&a.out, "out"},
                                {&a.lse, "lse"}})
    if (t->data) check_device(*t, name, dev);
  if (impl == DecodeImpl::kAuto) impl = dev.is_cuda() ? DecodeImpl::kCuda : DecodeImpl::kCpuFast;
  LKV_CHECK_TYPE((impl == DecodeImpl::kCuda) == dev.is_cuda(), "sparse_decode: implementation ",
                 impl == DecodeImpl::kCuda ? "cuda" : "cpu", " cannot run on tensors on ",
                 dev.str());

  // ---- Parameters.
  decode::Params p{};
  p.q = a.q.ptr<const uint16_t>();
  p.stride_q_b = a.q.stride(0);
  p.stride_q_s = a.q.stride(1);
  p.stride_q_h = a.q.stride(2);
  p.main = cache_ref(a.k_cache, a.format, a.page_size, a.indices);
  p.main.topk_length = a.topk_length.ptr<const int32_t>();
  if (has_extra) {
    p.extra = cache_ref(a.extra_k_cache, extra_format, a.extra_page_size, a.extra_indices);
    p.extra.topk_length = a.extra_topk_length.ptr<const int32_t>();
  }
  p.sink = a.attn_sink.ptr<const float>();
  p.out = a.out.ptr<uint16_t>();
  p.stride_out_b = a.out.stride(0);
  p.stride_out_s = a.out.stride(1);
  p.stride_out_h = a.out.stride(2);
  p.lse = a.lse.ptr<float>();
  p.stride_lse_b = a.lse.stride(0);
  p.stride_lse_h = a.lse.stride(1);
  p.stride_lse_s = a.lse.stride(2);
  p.b = b;
  p.s_q = s_q;
  p.h_q = h_q;
  p.d_qk = static_cast<int>(d_qk);
  p.format = a.format;
  p.scale = a.softmax_scale > 0.0f ? a.softmax_scale
                                   : static_cast<float>(1.0 / std::sqrt(static_cast<double>(d_qk)));
  p.num_splits = 1;
  p.unsplit_b = 0;
  p.keys_per_split = p.main.topk + p.extra.topk;

  // A plan is checked wherever it is given (the CPU paths do not need one, but a plan for other
  // shapes is a caller bug either way).
  if (const DecodePlan* plan = a.plan) {
    LKV_CHECK(plan->b == b && plan->s_q == s_q && plan->h_q == h_q && plan->topk == p.main.topk &&
                  plan->extra_topk == p.extra.topk,
              "sparse_decode: the plan was made for b=", plan->b, " s_q=", plan->s_q, " h_q=",
              plan->h_q, " topk=", plan->topk, " extra_topk=", plan->extra_topk, ", not for b=", b,
              " s_q=", s_q, " h_q=", h_q, " topk=", p.main.topk, " extra_topk=", p.extra.topk);
    // A plan is a plain struct a caller can edit: it must still cover every candidate once.
    // (Products with an overflow test: an edited keys_per_split near 2^62 would otherwise wrap and
    // pass, and a split's first candidate wrap back to 0.)
    const int64_t candidates = p.main.topk + p.extra.topk;
    LKV_CHECK(plan->num_splits >= 1 && plan->num_splits <= 65535,
              "sparse_decode: the plan's num_splits must be in [1, 65535], got ", plan->num_splits);
    LKV_CHECK(plan->keys_per_split >= 1, "sparse_decode: the plan's keys_per_split must be >= 1, got ",
              plan->keys_per_split);
    int64_t all = 0, before_last = 0;
    const bool all_wraps = __builtin_mul_overflow(plan->num_splits, plan->keys_per_split, &all);
    const bool before_last_wraps = __builtin_mul_overflow(plan->num_splits - 1, plan->keys_per_split, &before_last);
    LKV_CHECK((all_wraps || all >= candidates) && !before_last_wraps && before_last < candidates,
              "sparse_decode: the plan's ", plan->num_splits, " splits of ", plan->keys_per_split,
              " candidates do not cover topk + extra_topk = ", p.main.topk + p.extra.topk,
              " exactly once");
    LKV_CHECK(plan->unsplit_b >= 0 && plan->unsplit_b < b,
              "sparse_decode: the plan's unsplit_b must be in [0, b) = [0, ", b, "), got ", plan->unsplit_b);
  }

  if (impl != DecodeImpl::kCuda) {
    if (impl == DecodeImpl::kCpuOracle) decode::sparse_decode_oracle(p);
    else decode::sparse_decode_cpu_fast(p);
    return;
  }
#ifdef LKV_WITH_CUDA
  const cuda_common::DeviceGuard guard(dev.index);
  // The kernel reads q rows and writes out rows with 16-byte accesses.
  LKV_CHECK(a.q.rows_aligned(16), "sparse_decode on CUDA needs q rows aligned to 16 bytes, got ",
            a.q.alignment_str(16));
  LKV_CHECK(a.out.rows_aligned(16), "sparse_decode on CUDA needs out rows aligned to 16 bytes, got ",
            a.out.alignment_str(16));
  // 64-head blocks on grid y; the compact kernel (GPUs with 99 KB of shared memory per block) runs
  // four 16-row slices of each there.
  const char* kernel = decode::cuda::kernel_for_device(dev.index);
  const int64_t max_h_q = (std::strcmp(kernel, "compact") == 0 ? 65535 / 4 : 65535) * int64_t{64};
  LKV_CHECK(p.h_q <= max_h_q, "sparse_decode on CUDA (", kernel, " kernel) supports h_q <= ", max_h_q, ", got h_q=",
            p.h_q);
  // A split's block count is a 32-bit int in the kernels (candidates come from int32 lengths).
  LKV_CHECK(p.main.topk + p.extra.topk <= INT32_MAX, "sparse_decode on CUDA supports topk + extra_topk < 2^31, got ",
            p.main.topk + p.extra.topk);
  // The kernel locates records with 32-bit arithmetic (page index and in-page byte offset).
  for (const decode::CacheRef* c : {&p.main, &p.extra})
    LKV_CHECK(c->topk == 0 || c->page_size <= (int64_t{1} << 22),
              "sparse_decode on CUDA supports page sizes up to 4194304 tokens, got ", c->page_size);
  DecodePlan local;
  const DecodePlan* plan = a.plan;
  if (!plan) {
    local = plan_decode(b, s_q, h_q, p.main.topk, p.extra.topk, cuda_common::sm_count(dev.index),
                        decode::cuda::use_sm90(dev.index) ? DecodePlanKernel::kSm90 : DecodePlanKernel::kPortable);
    plan = &local;
  }
  p.num_splits = plan->num_splits;
  p.keys_per_split = plan->keys_per_split;
  p.unsplit_b = p.num_splits > 1 ? plan->unsplit_b : 0;
  const size_t need = sparse_decode_workspace_bytes(*plan);
  void* ws = a.workspace;
  if (ws) {
    LKV_CHECK(a.workspace_bytes >= need, "sparse_decode: workspace of ", a.workspace_bytes,
              " bytes is too small, the plan needs ", need, " (sparse_decode_workspace_bytes)");
    LKV_CHECK(reinterpret_cast<uintptr_t>(ws) % 256 == 0,
              "sparse_decode: workspace must be 256-byte aligned, got address % 256 = ",
              reinterpret_cast<uintptr_t>(ws) % 256);
  } else if (need > 0) {
    ws = cuda_common::cached_buffer(cuda_common::BufferPurpose::kDecodeScratch, need, dev.index,
                                    stream);
  }
  if (p.num_splits > 1) {
    const size_t rows = static_cast<size_t>((b - p.unsplit_b) * s_q * h_q * p.num_splits);
    p.partial_out = static_cast<float*>(ws);
    p.partial_lse = reinterpret_cast<float*>(static_cast<uint8_t*>(ws) +
                                             (rows * decode::kDimV * sizeof(float) + 255) / 256 * 256);
  }
  decode::cuda::sparse_decode(p, stream);
#else
  (void)stream;
  LKV_FAIL(ErrorKind::kNotBuilt, "sparse_decode: latentkv was built without CUDA");
#endif
}

}  // namespace latentkv
