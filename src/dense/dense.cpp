// dense_decode: validation of every argument (shapes, dtypes, devices, strides, and on the host the
// lengths and every block-table entry a request needs), then dispatch to the CPU oracle, the CPU
// fast path or the CUDA backend (the shared attention kernel, decode/cuda/kernel.cuh). Nothing is
// written before every check has passed.
#include <cmath>
#include <cstdint>
#include <utility>

#include "dense/cpu/dense_cpu.h"
#include "dense/params.h"
#include "latentkv/dense.h"
#include "latentkv/error.h"
#include "latentkv/formats.h"
#ifdef LKV_WITH_CUDA
#include "cuda_common/cuda_check.h"
#include "cuda_common/device_cache.h"
#include "dense/cuda/launch.h"
#endif

namespace latentkv {
namespace {

// Host-side checks of device data: every length fits the block table, and every block-table
// entry a request reads (logical blocks [0, ceil(len / P))) names a page of the cache. Entries
// beyond that may hold anything and are not looked at.
void check_lengths_and_block_table(const dense::Params& p) {
  // The table's capacity in tokens (INT64_MAX when max_pages * P does not fit: no length exceeds it).
  int64_t capacity = 0;
  if (__builtin_mul_overflow(p.max_pages, p.page_size, &capacity)) capacity = INT64_MAX;
  for (int64_t i = 0; i < p.b; ++i) {
    const int64_t len = p.cache_seqlens[i];
    LKV_CHECK(len >= 0 && len <= capacity, "dense_decode: cache_seqlens[", i, "]=", len,
              " is outside [0, max_pages * P] = [0, ", capacity, "]");
    const int64_t needed = (len + p.page_size - 1) / p.page_size;
    for (int64_t blk = 0; blk < needed; ++blk) {
      const int64_t page = p.block_table[i * p.stride_block_table_b + blk];
      LKV_CHECK(page >= 0 && page < p.num_pages, "dense_decode: request ", i, " logical block ",
                blk, ": block_table[", i, "][", blk, "]=", page, " is outside [0, num_pages=",
                p.num_pages, ") (cache_seqlens[", i, "]=", len, " needs ", needed, " blocks)");
    }
  }
}

#ifdef LKV_WITH_CUDA
// Lengths and block-table entries live on the device: the host does not read them (that would
// synchronise and break graph capture). The kernel clamps each length into [0, max_pages * P] and
// treats a block-table entry outside [0, num_pages) as unattended tokens, so bad values give wrong
// attention sets but never an out-of-bounds read.
void run_cuda(const dense::Params& p, const DenseDecodeArgs& a, Stream stream) {
  const int device = a.q.device.index;
  const cuda_common::DeviceGuard guard(device);
  LKV_CHECK(p.d_qk == 512 || p.d_qk == 576,
            "dense_decode on CUDA supports d_qk 512 and 576, got d_qk=", p.d_qk);
  LKV_CHECK(!p.fp8 || p.dtype == dense::Half::bf16,
            "dense_decode on CUDA with an fp8 (v32_fp8) cache needs bf16 q; got f16 (the "
            "dequantized keys are bf16 values, which f16 cannot hold exactly)");
  // The kernel moves q, out and key rows with 16-byte accesses.
  for (const auto& [t, name] : {std::pair{&a.q, "q"}, {&a.out, "out"}, {&a.k_cache, "k_cache"}})
    LKV_CHECK(t->rows_aligned(16), "dense_decode on CUDA needs ", name,
              " rows (and pages) aligned to 16 bytes, got ", t->alignment_str(16));
  // (By division: max_pages * P itself could wrap for a huge P.)
  LKV_CHECK(p.max_pages <= ((int64_t{1} << 31) - 1) / p.page_size,
            "dense_decode on CUDA supports max_pages * P < 2^31, got max_pages=", p.max_pages, " P=", p.page_size);
  LKV_CHECK(p.h_kv * ((p.h_q / p.h_kv + 63) / 64) <= 65535,
            "dense_decode on CUDA supports h_kv * ceil(h_q / h_kv / 64) <= 65535, got h_q=", p.h_q,
            " h_kv=", p.h_kv);
  const dense::cuda::SplitPlan plan = dense::cuda::plan_splits(p, cuda_common::sm_count(device));
  const size_t need = dense::cuda::workspace_bytes(p, plan);
  // Stream-ordered scratch shared with the other attention ops on this stream.
  void* ws = need ? cuda_common::cached_buffer(cuda_common::BufferPurpose::kDecodeScratch, need,
                                               device, stream)
                  : nullptr;
  dense::cuda::dense_decode(p, plan, ws, stream);
}
#endif

}  // namespace

void dense_decode(const DenseDecodeArgs& a, Stream stream, DenseImpl impl) {
  // The CPU backends run synchronously on the calling thread's OpenMP team; CUDA on `stream`.

  // ---- Shapes and dtypes.
  LKV_CHECK_TYPE(a.q.dtype == DType::bf16 || a.q.dtype == DType::f16,
                 "dense_decode: q must be bf16 or f16, got ", a.q.shape_str());
  const DType half = a.q.dtype;
  SizeEnv env;
  dense::Params p{};
  if (a.fp8) {
    check_tensor(a.q, "q", {"b", "s_q", "h_q", 576}, half, env);
    // Named here so the message says k_cache; cache_geometry then checks the page stride.
    check_tensor(a.k_cache, "k_cache", {"num_pages", "P", 1, format_info(CacheFormat::v32_fp8).bytes_per_token},
                 DType::u8, env);
    const CacheGeometry g = cache_geometry(a.k_cache, CacheFormat::v32_fp8);
    p.k_cache_fp8 = g.base;
    p.page_stride_fp8 = g.page_stride;
    p.page_size = g.page_size;
    p.num_pages = g.num_pages;
    p.h_kv = 1;
  } else {
    check_tensor(a.q, "q", {"b", "s_q", "h_q", "d_qk"}, half, env);
    check_tensor(a.k_cache, "k_cache", {"num_pages", "P", "h_kv", "d_qk"}, half, env);
    check_inner_contiguous(a.k_cache, "k_cache");
    p.k_cache = a.k_cache.ptr<const uint16_t>();
    p.stride_k_page = a.k_cache.stride(0);
    p.stride_k_token = a.k_cache.stride(1);
    p.stride_k_head = a.k_cache.stride(2);
    p.page_size = a.k_cache.size(1);
    p.num_pages = a.k_cache.size(0);
    p.h_kv = a.k_cache.size(2);
  }
  check_tensor(a.block_table, "block_table", {"b", "max_pages"}, DType::i32, env);
  check_tensor(a.cache_seqlens, "cache_seqlens", {"b"}, DType::i32, env);
  LKV_CHECK(a.d_v == dense::kDimV, "dense_decode supports d_v = 512, got d_v=", a.d_v);
  check_tensor(a.out, "out", {"b", "s_q", "h_q", dense::kDimV}, half, env);
  check_tensor(a.lse, "lse", {"b", "h_q", "s_q"}, DType::f32, env);
  const int64_t b = env.get("b"), s_q = env.get("s_q"), h_q = env.get("h_q");
  const int64_t d_qk = a.q.size(3);
  LKV_CHECK(b >= 1 && s_q >= 1 && h_q >= 1, "dense_decode: empty problem (b=", b, ", s_q=", s_q,
            ", h_q=", h_q, ")");
  LKV_CHECK(p.page_size >= 1 && p.h_kv >= 1, "dense_decode: k_cache needs P >= 1 and h_kv >= 1, got ",
            a.k_cache.shape_str());
  LKV_CHECK(h_q % p.h_kv == 0, "dense_decode: h_q=", h_q, " must be a multiple of h_kv=", p.h_kv);
  // V is the first d_v dims of K, so K must be at least that wide.
  LKV_CHECK(d_qk >= a.d_v && d_qk <= (int64_t{1} << 16),
            "dense_decode needs d_v <= d_qk <= 65536 (V is the first d_v dims of K), got d_qk=", d_qk);
  // lse may have any strides (FlashMLA's is a transposed [b, s_q, h_q] buffer).
  for (const auto& [t, name] : {std::pair{&a.q, "q"}, {&a.block_table, "block_table"}, {&a.out, "out"}})
    check_inner_contiguous(*t, name);
  check_distinct_elements(a.out, "out");
  check_distinct_elements(a.lse, "lse");
  LKV_CHECK(a.cache_seqlens.size(0) <= 1 || a.cache_seqlens.stride(0) == 1,
            "cache_seqlens must be contiguous, got stride ", a.cache_seqlens.stride(0));
  check_no_overlap({{&a.out, "out"}, {&a.lse, "lse"}},
                   {{&a.q, "q"}, {&a.k_cache, "k_cache"}, {&a.block_table, "block_table"},
                    {&a.cache_seqlens, "cache_seqlens"}},
                   "dense_decode");
  LKV_CHECK(std::isfinite(a.softmax_scale) && a.softmax_scale >= 0.0f,
            "dense_decode: softmax_scale must be finite and >= 0 (0 = d_qk^-0.5), got ",
            a.softmax_scale);

  // ---- Devices.
  const Device dev = a.q.device;
  for (const auto& [t, name] : {std::pair{&a.k_cache, "k_cache"}, {&a.block_table, "block_table"},
                                {&a.cache_seqlens, "cache_seqlens"}, {&a.out, "out"},
                                {&a.lse, "lse"}})
    if (t->data) check_device(*t, name, dev);
  if (impl == DenseImpl::kAuto) impl = dev.is_cuda() ? DenseImpl::kCuda : DenseImpl::kCpuFast;
  LKV_CHECK_TYPE((impl == DenseImpl::kCuda) == dev.is_cuda(), "dense_decode: implementation ",
                 impl == DenseImpl::kCuda ? "cuda" : "cpu", " cannot run on tensors on ",
                 dev.str());

  // ---- Parameters.
  p.q = a.q.ptr<const uint16_t>();
  p.stride_q_b = a.q.stride(0);
  p.stride_q_s = a.q.stride(1);
  p.stride_q_h = a.q.stride(2);
  p.dtype = half == DType::f16 ? dense::Half::f16 : dense::Half::bf16;
  p.fp8 = a.fp8;
  p.block_table = a.block_table.ptr<const int32_t>();
  p.stride_block_table_b = a.block_table.stride(0);
  p.cache_seqlens = a.cache_seqlens.ptr<const int32_t>();
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
  p.max_pages = env.get("max_pages");
  p.d_qk = static_cast<int>(d_qk);
  p.causal = a.causal;
  p.scale = a.softmax_scale > 0.0f ? a.softmax_scale
                                   : static_cast<float>(1.0 / std::sqrt(static_cast<double>(d_qk)));
  if (impl == DenseImpl::kCuda) {
#ifdef LKV_WITH_CUDA
    run_cuda(p, a, stream);
    return;
#else
    (void)stream;
    LKV_FAIL(ErrorKind::kNotBuilt, "dense_decode: latentkv was built without CUDA");
#endif
  }
  check_lengths_and_block_table(p);

  if (impl == DenseImpl::kCpuOracle) dense::dense_decode_oracle(p);
  else dense::dense_decode_cpu_fast(p);
}

}  // namespace latentkv
