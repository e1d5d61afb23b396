// sparse_prefill: validation of every argument (shapes, dtypes, devices, strides, and for the
// batched form the sequence offsets), then dispatch to the CPU oracle, the CPU fast path or the CUDA
// backend (the shared attention kernel, decode/cuda/kernel.cuh). Nothing is written before every
// check has passed.
#include <cmath>
#include <tuple>
#include <utility>

#include "latentkv/error.h"
#include "latentkv/prefill.h"
#include "prefill/cpu/prefill_cpu.h"
#include "prefill/params.h"
#ifdef LKV_WITH_CUDA
#include "cuda_common/cuda_check.h"
#include "cuda_common/device_cache.h"
#include "prefill/cuda/launch.h"
#endif

namespace latentkv {
namespace {

// Checks shapes, dtypes, strides and the scale; returns the parameters (without offsets).
prefill::Params make_params(const SparsePrefillArgs& a) {
  SizeEnv env;
  check_tensor(a.q, "q", {"s_q", "h_q", "d_qk"}, DType::bf16, env);
  check_tensor(a.kv, "kv", {"s_kv", 1, "d_qk"}, DType::bf16, env);
  check_tensor(a.indices, "indices", {"s_q", 1, "topk"}, DType::i32, env);
  if (a.topk_length.data) check_tensor(a.topk_length, "topk_length", {"s_q"}, DType::i32, env);
  if (a.attn_sink.data) check_tensor(a.attn_sink, "attn_sink", {"h_q"}, DType::f32, env);
  LKV_CHECK(a.d_v == prefill::kDimV, "sparse_prefill supports d_v = 512, got d_v=", a.d_v);
  check_tensor(a.out, "out", {"s_q", "h_q", prefill::kDimV}, DType::bf16, env);
  check_tensor(a.max_logits, "max_logits", {"s_q", "h_q"}, DType::f32, env);
  check_tensor(a.lse, "lse", {"s_q", "h_q"}, DType::f32, env);
  const int64_t s_q = env.get("s_q"), h_q = env.get("h_q"), d_qk = env.get("d_qk");
  const int64_t s_kv = env.get("s_kv"), topk = env.get("topk");
  LKV_CHECK(s_q >= 1 && h_q >= 1 && topk >= 1, "sparse_prefill: empty problem (s_q=", s_q,
            ", h_q=", h_q, ", topk=", topk, ")");
  // V is the first d_v dims of K, so K must be at least that wide.
  LKV_CHECK(d_qk >= a.d_v && d_qk <= (int64_t{1} << 16),
            "sparse_prefill needs d_v <= d_qk <= 65536 (V is the first d_v dims of K), got d_qk=",
            d_qk);
  for (const auto& [t, name] : {std::pair{&a.q, "q"}, {&a.kv, "kv"}, {&a.indices, "indices"},
                                {&a.out, "out"}, {&a.max_logits, "max_logits"}, {&a.lse, "lse"}})
    check_inner_contiguous(*t, name);
  for (const auto& [t, name] : {std::pair{&a.out, "out"}, {&a.max_logits, "max_logits"}, {&a.lse, "lse"}})
    check_distinct_elements(*t, name);
  for (const auto& [t, name] :
       {std::pair{&a.topk_length, "topk_length"}, {&a.attn_sink, "attn_sink"}})
    LKV_CHECK(!t->data || t->size(0) <= 1 || t->stride(0) == 1, name, " must be contiguous, got stride ",
              t->data ? t->stride(0) : 0);
  LKV_CHECK(std::isfinite(a.sm_scale) && a.sm_scale > 0.0f,
            "sparse_prefill: sm_scale must be finite and > 0, got ", a.sm_scale);
  check_no_overlap({{&a.out, "out"}, {&a.max_logits, "max_logits"}, {&a.lse, "lse"}},
                   {{&a.q, "q"}, {&a.kv, "kv"}, {&a.indices, "indices"}, {&a.topk_length, "topk_length"},
                    {&a.attn_sink, "attn_sink"}},
                   "sparse_prefill");

  prefill::Params p{};
  p.q = a.q.ptr<const uint16_t>();
  p.stride_q_s = a.q.stride(0);
  p.stride_q_h = a.q.stride(1);
  p.kv = a.kv.ptr<const uint16_t>();
  p.stride_kv_s = a.kv.stride(0);
  p.indices = a.indices.ptr<const int32_t>();
  p.stride_indices_s = a.indices.stride(0);
  p.topk_length = a.topk_length.ptr<const int32_t>();
  p.sink = a.attn_sink.ptr<const float>();
  p.out = a.out.ptr<uint16_t>();
  p.stride_out_s = a.out.stride(0);
  p.stride_out_h = a.out.stride(1);
  p.max_logits = a.max_logits.ptr<float>();
  p.stride_max_logits_s = a.max_logits.stride(0);
  p.lse = a.lse.ptr<float>();
  p.stride_lse_s = a.lse.stride(0);
  p.s_q = s_q;
  p.s_kv = s_kv;
  p.h_q = h_q;
  p.topk = topk;
  p.d_qk = static_cast<int>(d_qk);
  p.sm_scale = a.sm_scale;
  return p;
}

// Every tensor on q's device; the implementation chosen and checked against that device.
PrefillImpl resolve_impl(const SparsePrefillArgs& a, const TensorView* offsets_q,
                         const TensorView* offsets_kv, PrefillImpl impl) {
  const Device dev = a.q.device;
  for (const auto& [t, name] :
       {std::pair{&a.kv, "kv"}, {&a.indices, "indices"}, {&a.topk_length, "topk_length"},
        {&a.attn_sink, "attn_sink"}, {&a.out, "out"}, {&a.max_logits, "max_logits"},
        {&a.lse, "lse"}, {offsets_q, "seq_offsets_q"}, {offsets_kv, "seq_offsets_kv"}})
    if (t && t->data) check_device(*t, name, dev);
  if (impl == PrefillImpl::kAuto) impl = dev.is_cuda() ? PrefillImpl::kCuda : PrefillImpl::kCpuFast;
  LKV_CHECK_TYPE((impl == PrefillImpl::kCuda) == dev.is_cuda(), "sparse_prefill: implementation ",
                 impl == PrefillImpl::kCuda ? "cuda" : "cpu", " cannot run on tensors on ",
                 dev.str());
  return impl;
}

#ifdef LKV_WITH_CUDA
void run_cuda(const prefill::Params& p, const SparsePrefillArgs& a, Stream stream) {
  const int device = a.q.device.index;
  const cuda_common::DeviceGuard guard(device);
  LKV_CHECK(p.d_qk == 512 || p.d_qk == 576,
            "sparse_prefill on CUDA supports d_qk 512 and 576, got d_qk=", p.d_qk);
  // The kernel moves q, kv and out rows with 16-byte accesses.
  for (const auto& [t, name] : {std::pair{&a.q, "q"}, {&a.kv, "kv"}, {&a.out, "out"}})
    LKV_CHECK(t->rows_aligned(16), "sparse_prefill on CUDA needs ", name,
              " rows aligned to 16 bytes, got ", t->alignment_str(16));
  LKV_CHECK(p.s_q <= 0x7fffffff && p.h_q <= int64_t{65535} * 64,
            "sparse_prefill on CUDA supports s_q < 2^31 and h_q <= 4194240, got s_q=", p.s_q,
            " h_q=", p.h_q);
  const prefill::cuda::SplitPlan plan = prefill::cuda::plan_splits(p, cuda_common::sm_count(device));
  const size_t need = prefill::cuda::workspace_bytes(p, plan);
  // Stream-ordered scratch shared with the other attention ops on this stream.
  void* ws = need ? cuda_common::cached_buffer(cuda_common::BufferPurpose::kDecodeScratch, need,
                                               device, stream)
                  : nullptr;
  prefill::cuda::sparse_prefill(p, plan, ws, stream);
}
#endif

void run(const prefill::Params& p, const SparsePrefillArgs& a, PrefillImpl impl, Stream stream) {
  if (impl == PrefillImpl::kCuda) {
#ifdef LKV_WITH_CUDA
    run_cuda(p, a, stream);
    return;
#else
    (void)a;
    (void)stream;
    LKV_FAIL(ErrorKind::kNotBuilt, "sparse_prefill: latentkv was built without CUDA");
#endif
  }
  if (impl == PrefillImpl::kCpuOracle) prefill::sparse_prefill_oracle(p);
  else prefill::sparse_prefill_cpu_fast(p);
}

}  // namespace

void sparse_prefill(const SparsePrefillArgs& a, Stream stream, PrefillImpl impl) {
  // The CPU backends run synchronously on the calling thread's OpenMP team; CUDA on `stream`.
  const prefill::Params p = make_params(a);
  run(p, a, resolve_impl(a, nullptr, nullptr, impl), stream);
}

void sparse_prefill_batched(const SparsePrefillArgs& a, const TensorView& seq_offsets_q,
                            const TensorView& seq_offsets_kv, Stream stream, PrefillImpl impl) {
  prefill::Params p = make_params(a);
  SizeEnv env;
  check_tensor(seq_offsets_q, "seq_offsets_q", {"num_seqs + 1"}, DType::i64, env);
  check_tensor(seq_offsets_kv, "seq_offsets_kv", {"num_seqs + 1"}, DType::i64, env);
  const int64_t num_seqs = env.get("num_seqs + 1") - 1;
  LKV_CHECK(num_seqs >= 1, "sparse_prefill_batched: needs at least one sequence (offsets of length >= 2), "
            "got offsets of length ", num_seqs + 1);
  for (const auto& [t, name] :
       {std::pair{&seq_offsets_q, "seq_offsets_q"}, {&seq_offsets_kv, "seq_offsets_kv"}})
    LKV_CHECK(t->stride(0) == 1, name, " must be contiguous, got stride ", t->stride(0));
  check_no_overlap({{&a.out, "out"}, {&a.max_logits, "max_logits"}, {&a.lse, "lse"}},
                   {{&seq_offsets_q, "seq_offsets_q"}, {&seq_offsets_kv, "seq_offsets_kv"}}, "sparse_prefill_batched");
  impl = resolve_impl(a, &seq_offsets_q, &seq_offsets_kv, impl);

  // The offsets' values are checked on the host only where they live there. On CUDA, reading them
  // would synchronise; the kernel clamps every sequence's kv segment into [0, s_kv) instead, so
  // bad device offsets give wrong attention sets but never an out-of-bounds read.
  if (impl != PrefillImpl::kCuda) {
    for (const auto& [t, name, total_name, total] :
         {std::tuple{&seq_offsets_q, "seq_offsets_q", "s_q", p.s_q},
          std::tuple{&seq_offsets_kv, "seq_offsets_kv", "s_kv", p.s_kv}}) {
      const int64_t* o = t->ptr<const int64_t>();
      LKV_CHECK(o[0] == 0, "sparse_prefill_batched: ", name, "[0] must be 0, got ", o[0]);
      for (int64_t n = 0; n < num_seqs; ++n)
        LKV_CHECK(o[n + 1] >= o[n], "sparse_prefill_batched: ", name,
                  " must be non-decreasing, got ", name, "[", n, "]=", o[n], " > ", name, "[",
                  n + 1, "]=", o[n + 1]);
      LKV_CHECK(o[num_seqs] == total, "sparse_prefill_batched: ", name, "[", num_seqs,
                "] must equal ", total_name, "=", total,
                ", got ", o[num_seqs]);
    }
  }
  p.seq_offsets_q = seq_offsets_q.ptr<const int64_t>();
  p.seq_offsets_kv = seq_offsets_kv.ptr<const int64_t>();
  p.num_seqs = num_seqs;
  run(p, a, impl, stream);
}

}  // namespace latentkv
