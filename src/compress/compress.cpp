// compress_kv: validation of every argument, then dispatch to the CPU oracle, the CPU fast path or
// the CUDA backend. Nothing is written before every check has passed.
#include <algorithm>
#include <cstring>
#include <vector>

#include "compress/cpu/compress_cpu.h"
#include "compress/params.h"
#include "latentkv/compress.h"
#include "latentkv/error.h"
#ifdef LKV_WITH_CUDA
#include "compress/cuda/launch.h"
#include "cuda_common/cuda_check.h"
#include "cuda_common/device_cache.h"
#endif

namespace latentkv {
namespace {

using compress::Params;

// Bytes of each page that belong to the cache tensor (its elements, not the padding between pages).
int64_t page_extent(const TensorView& kv) {
  int64_t e = 1;
  for (int i = 1; i < kv.ndim; ++i) e *= kv.shape[i];
  return e;
}

[[noreturn]] void raise_output_error(const Params& p, int64_t i, int32_t code, int64_t value,
                                     int64_t extra) {
  std::string os = "compress_kv: output ";
  detail::append(os, i);
  switch (code) {
    case compress::kBoundaryOutOfRange:
      detail::append(os, ": boundary_token_indices[", i, "] = ", value,
                     " is outside [0, num_tokens = ", p.num_tokens, ")");
      break;
    case compress::kSlotOutOfRange:
      detail::append(os, ": kv_slot_mapping gives slot ", value, ", outside the cache's ",
                     p.num_slots, " slots");
      break;
    case compress::kReqOutOfRange:
      detail::append(os, ": token_to_req gives request ", value, ", outside [0, num_reqs = ",
                     p.num_reqs, ")");
      break;
    case compress::kWindowBeforeStart:
      detail::append(os, ": position ", value, " with compress_ratio ", p.compress_ratio,
                     " has a window starting before position 0");
      break;
    case compress::kWindowPastTable:
      detail::append(os, ": its window needs logical block ", value, " but block_table has ",
                     extra, " blocks per request");
      break;
    case compress::kBlockOutOfRange:
      detail::append(os, ": block_table maps logical block ", extra, " to block ", value,
                     ", outside the state cache's ", p.num_blocks, " blocks");
      break;
    case compress::kRopePosOutOfRange:
      detail::append(os, ": RoPE row ", value, " is outside cos_sin_cache's ", extra, " rows");
      break;
    case compress::kDuplicateSlot:
      detail::append(os, ": slot ", value, " is written by outputs ",
                     std::min<int64_t>(i, extra), " and ", std::max<int64_t>(i, extra));
      break;
    default:
      detail::append(os, ": invalid (code ", code, ")");
  }
  LKV_FAIL(ErrorKind::kValue, os);
}

// The counter region at the start of a caller-provided workspace (256-byte aligned).
[[maybe_unused]] size_t counter_bytes(const Params& p) {
  return (sizeof(int) * static_cast<size_t>(p.num_outputs) + 255) / 256 * 256;
}

// Host-side index checks, in output order, before anything is written.
void validate_host(const Params& p) {
  std::vector<std::pair<int64_t, int64_t>> slots;  // (slot, output)
  slots.reserve(static_cast<size_t>(p.num_outputs));
  for (int64_t i = 0; i < p.num_outputs; ++i) {
    int64_t value = 0, extra = 0, req = 0, lb0 = 0, lb1 = -1;
    int32_t code = compress::validate_header(p, i, &value, &extra, &req, &lb0, &lb1);
    for (int64_t lb = lb0; code == compress::kOk && lb <= lb1; ++lb)
      code = compress::validate_block(p, req, lb, &value, &extra);
    if (code != compress::kOk) raise_output_error(p, i, code, value, extra);
    const int64_t slot = p.slot_mapping[p.boundary[i]];
    if (slot >= 0) slots.emplace_back(slot, i);
  }
  std::sort(slots.begin(), slots.end());
  for (size_t k = 1; k < slots.size(); ++k)
    if (slots[k].first == slots[k - 1].first)
      raise_output_error(p, slots[k].second, compress::kDuplicateSlot, slots[k].first,
                         slots[k - 1].second);
}

Params make_params(const CompressArgs& a, const CacheGeometry& g) {
  Params p{};
  p.state = a.state_cache.ptr<const float>();
  p.stride_state_block = a.state_cache.stride(0);
  p.stride_state_row = a.state_cache.stride(1);
  p.token_to_req = a.token_to_req.ptr<const int32_t>();
  p.positions = a.positions.ptr<const int64_t>();
  p.boundary = a.boundary_token_indices.ptr<const int64_t>();
  p.block_table = a.block_table.ptr<const int32_t>();
  p.stride_table_req = a.block_table.stride(0);
  p.rms_weight = a.rms_norm_weight.ptr<const uint16_t>();
  p.cos_sin = a.cos_sin_cache.ptr<const float>();
  p.stride_cos_pos = a.cos_sin_cache.stride(0);
  p.slot_mapping = a.kv_slot_mapping.ptr<const int64_t>();
  p.kv = g.base;
  p.page_stride = g.page_stride;
  p.page_size = g.page_size;
  p.num_slots = g.num_slots();
  p.num_blocks = a.state_cache.size(0);
  p.block_size = a.block_size;
  p.num_tokens = a.positions.size(0);
  p.num_reqs = a.block_table.size(0);
  p.blocks_per_req = a.block_table.size(1);
  p.max_pos = a.cos_sin_cache.size(0);
  p.num_outputs = a.boundary_token_indices.size(0);
  p.compress_ratio = a.compress_ratio;
  p.eps = a.rms_norm_eps;
  p.fp8 = a.format == CacheFormat::v4_fp8;
  p.overlap_prologue = a.overlap_prologue;
  return p;
}

}  // namespace

namespace {
// Checks every argument that does not need the index data; returns the geometry of the cache.
CacheGeometry check_args(const CompressArgs& a) {
  // ---- Shapes, dtypes, layouts.
  SizeEnv env;
  check_tensor(a.state_cache, "state_cache", {"num_blocks", "block_size", 1024}, DType::f32, env);
  check_tensor(a.token_to_req, "token_to_req", {"num_tokens"}, DType::i32, env);
  check_tensor(a.positions, "positions", {"num_tokens"}, DType::i64, env);
  check_tensor(a.boundary_token_indices, "boundary_token_indices", {"num_outputs"}, DType::i64, env);
  check_tensor(a.block_table, "block_table", {"num_reqs", "blocks_per_req"}, DType::i32, env);
  check_tensor(a.rms_norm_weight, "rms_norm_weight", {512}, DType::bf16, env);
  check_tensor(a.cos_sin_cache, "cos_sin_cache", {"max_pos", 64}, DType::f32, env);
  check_tensor(a.kv_slot_mapping, "kv_slot_mapping", {"num_tokens"}, DType::i64, env);
  LKV_CHECK(a.format == CacheFormat::v4_int8 || a.format == CacheFormat::v4_fp8,
            "compress_kv writes v4_int8 or v4_fp8 records, got format ", format_info(a.format).name);
  LKV_CHECK(a.block_size >= 1, "compress_kv: block_size must be >= 1, got ", a.block_size);
  LKV_CHECK(a.block_size == a.state_cache.size(1), "compress_kv: block_size ", a.block_size,
            " differs from state_cache's dimension 1 (", a.state_cache.size(1), ")");
  LKV_CHECK(a.compress_ratio >= 1, "compress_kv: compress_ratio must be >= 1, got ",
            a.compress_ratio);
  LKV_CHECK(a.rms_norm_eps >= 0.0f, "compress_kv: rms_norm_eps must be >= 0, got ", a.rms_norm_eps);
  check_inner_contiguous(a.state_cache, "state_cache");
  check_inner_contiguous(a.block_table, "block_table");
  LKV_CHECK(a.mode == CompressMode::kInPlace || a.mode == CompressMode::kFunctional,
            "compress_kv: mode must be in-place or functional, got code ", static_cast<int>(a.mode));
  check_no_overlap({{&a.kv_cache, "kv_cache"}},
                   {{&a.state_cache, "state_cache"}, {&a.token_to_req, "token_to_req"}, {&a.positions, "positions"},
                    {&a.boundary_token_indices, "boundary_token_indices"}, {&a.block_table, "block_table"},
                    {&a.rms_norm_weight, "rms_norm_weight"}, {&a.cos_sin_cache, "cos_sin_cache"},
                    {&a.kv_slot_mapping, "kv_slot_mapping"}},
                   "compress_kv");
  check_inner_contiguous(a.cos_sin_cache, "cos_sin_cache");
  for (const auto& [t, name] : {std::pair{&a.token_to_req, "token_to_req"},
                                {&a.positions, "positions"},
                                {&a.boundary_token_indices, "boundary_token_indices"},
                                {&a.kv_slot_mapping, "kv_slot_mapping"},
                                {&a.rms_norm_weight, "rms_norm_weight"}})
    LKV_CHECK(t->ndim != 1 || t->size(0) <= 1 || t->stride(0) == 1, name,
              " must be contiguous, got stride ", t->stride(0));
  const CacheGeometry g =
      cache_geometry(a.kv_cache, a.format, a.page_size >= 0 || a.kv_cache.ndim != 2 ? a.page_size : 64);

  // ---- Devices.
  const Device dev = a.state_cache.device;
  for (const auto& [t, name] : {std::pair{&a.token_to_req, "token_to_req"},
                                {&a.positions, "positions"},
                                {&a.boundary_token_indices, "boundary_token_indices"},
                                {&a.block_table, "block_table"},
                                {&a.rms_norm_weight, "rms_norm_weight"},
                                {&a.cos_sin_cache, "cos_sin_cache"},
                                {&a.kv_slot_mapping, "kv_slot_mapping"},
                                {&a.kv_cache, "kv_cache"}})
    check_device(*t, name, dev);
  return g;
}
}  // namespace

size_t compress_workspace_bytes(const CompressArgs& a) {
  const CacheGeometry g = check_args(a);
  if (!a.state_cache.device.is_cuda()) return 0;
#ifdef LKV_WITH_CUDA
  const Params p = make_params(a, g);
  return counter_bytes(p) + compress::cuda::workspace_bytes(p, a.state_cache.device.index);
#else
  (void)g;
  LKV_FAIL(ErrorKind::kNotBuilt, "compress_kv: latentkv was built without CUDA");
#endif
}

void compress_kv(const CompressArgs& a, Stream stream, CompressImpl impl) {
  const CacheGeometry g = check_args(a);
  const Device dev = a.state_cache.device;
  if (impl == CompressImpl::kAuto) impl = dev.is_cuda() ? CompressImpl::kCuda : CompressImpl::kCpuFast;
  LKV_CHECK_TYPE((impl == CompressImpl::kCuda) == dev.is_cuda(), "compress_kv: implementation ",
                 impl == CompressImpl::kCuda ? "cuda" : "cpu", " cannot run on tensors on ",
                 dev.str());

  const Params p = make_params(a, g);

  if (impl != CompressImpl::kCuda) {
    validate_host(p);
    if (a.mode == CompressMode::kFunctional)
      for (int64_t page = 0; page < g.num_pages; ++page)
        std::memset(g.base + page * g.page_stride, 0, static_cast<size_t>(page_extent(a.kv_cache)));
    if (impl == CompressImpl::kCpuOracle) compress::compress_oracle(p);
    else compress::compress_cpu_fast(p);
    return;
  }

#ifdef LKV_WITH_CUDA
  const cuda_common::DeviceGuard guard(dev.index);
  // 16-byte loads of state rows and 16-byte-aligned records.
  LKV_CHECK(reinterpret_cast<uintptr_t>(p.state) % 16 == 0 && p.stride_state_block % 4 == 0 &&
                p.stride_state_row % 4 == 0,
            "compress_kv on CUDA needs state_cache rows aligned to 16 bytes, got ",
            a.state_cache.alignment_str(16));
  LKV_CHECK(reinterpret_cast<uintptr_t>(p.rms_weight) % 8 == 0,
            "compress_kv on CUDA needs rms_norm_weight aligned to 8 bytes, got ",
            a.rms_norm_weight.alignment_str(8));
  const size_t scratch = compress::cuda::workspace_bytes(p, dev.index);
  void* ws = nullptr;
  int* counters = nullptr;
  if (a.workspace) {
    const size_t need = counter_bytes(p) + scratch;
    LKV_CHECK(a.workspace_bytes >= need, "compress_kv: workspace of ", a.workspace_bytes,
              " bytes is too small, these arguments need ", need,
              " (compress_workspace_bytes)");
    LKV_CHECK(reinterpret_cast<uintptr_t>(a.workspace) % 256 == 0,
              "compress_kv: workspace must be 256-byte aligned, got address % 256 = ",
              reinterpret_cast<uintptr_t>(a.workspace) % 256);
    counters = static_cast<int*>(a.workspace);
    ws = static_cast<uint8_t*>(a.workspace) + counter_bytes(p);
  } else {
    // latentkv's own buffers: the counters are zero when allocated and every call leaves them
    // zero, so they need no clearing (scratch and counters are separate buffers, so reusing the
    // scratch for calls of other shapes can never leave garbage in the counters).
    ws = cuda_common::cached_buffer(cuda_common::BufferPurpose::kCompressScratch, scratch, dev.index,
                                    stream);
    counters = static_cast<int*>(cuda_common::cached_buffer(
        cuda_common::BufferPurpose::kCompressCounters, sizeof(int) * p.num_outputs, dev.index,
        stream));
  }
  if (a.check_indices) {
    const compress::cuda::ValidationFailure f = compress::cuda::validate(p, ws, stream);
    if (f.code != compress::kOk) raise_output_error(p, f.output, f.code, f.value, f.extra);
  }
  compress::cuda::compress(p, a.mode == CompressMode::kFunctional, page_extent(a.kv_cache), ws,
                           counters, a.workspace != nullptr, stream);
#else
  (void)stream;
  LKV_FAIL(ErrorKind::kNotBuilt, "compress_kv: latentkv was built without CUDA");
#endif
}

}  // namespace latentkv
