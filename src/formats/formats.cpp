// formats/formats.cpp: format metadata, cache geometry, and the validation + backend dispatch of
// quantize / dequantize / positions_to_slots.
//
// Every check runs before anything is written: shapes and dtypes (check_tensor), one device for all
// tensors, the cache geometry, and, for quantize and dequantize, every slot against the cache's
// range (and, for quantize, against the other slots: two tokens may not write one record).
//
// Slot validation on the GPU: the slots are copied to the host (a small cudaMemcpyAsync on the
// caller's stream followed by a stream synchronisation) and checked there before the kernel is
// launched. This synchronises, so it is the validation mode, not the fast path; the kernels also skip
// any slot outside the cache on their own, so they never write out of bounds whatever the input.
#include "latentkv/formats.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "formats/cpu/formats_cpu.h"
#include "formats/params.h"
#include "formats/record_codec.h"
#include "latentkv/error.h"

#ifdef LKV_WITH_CUDA
#include "formats/cuda/launch.h"
#endif

namespace latentkv {
namespace {

constexpr FormatInfo kFormats[] = {
    {CacheFormat::v32_fp8, "v32_fp8", 576, 656, false, 656, 0},
    {CacheFormat::v4_fp8, "v4_fp8", 512, 584, true, formats::kSplitDataBytes,
     formats::kSplitScaleBytes},
    {CacheFormat::v4_int8, "v4_int8", 512, 584, true, formats::kSplitDataBytes,
     formats::kSplitScaleBytes},
    {CacheFormat::v41_fp8, "v41_fp8", 512, 528, false, 528, 0},
    {CacheFormat::v41_fp4, "v41_fp4", 512, 288, false, 288, 0},
};

// The table above and the codec's layouts describe the same records.
constexpr bool formats_agree() {
  for (const FormatInfo& fi : kFormats) {
    const formats::CodecLayout l = formats::codec_layout(fi.format);
    if (l.d_qk != fi.d_qk || l.bytes_per_token != fi.bytes_per_token) return false;
    if (formats::is_page_split(fi.format) != fi.page_split) return false;
    if (fi.page_split && fi.data_bytes + fi.scale_bytes != fi.bytes_per_token) return false;
  }
  return true;
}
static_assert(formats_agree(), "FormatInfo table disagrees with record_codec.h");

// GPU paths read records with 16-byte vector loads (the attention kernels), so pages must start on
// 16-byte boundaries.
constexpr int64_t kCudaAlign = 16;

#ifndef LKV_WITH_CUDA
[[noreturn]] void fail_not_built() {
  LKV_FAIL(ErrorKind::kNotBuilt, "latentkv was built without CUDA");
}
#endif

// Rejects CUDA tensors in a CPU-only build before anything else looks at them.
void require_backend(const Device& device) {
#ifndef LKV_WITH_CUDA
  if (device.is_cuda()) fail_not_built();
#else
  (void)device;
#endif
}

// Checks a 1-D slot tensor: i64 or i32 [n], contiguous.
void check_slots_tensor(const TensorView& slots, SizeEnv& env) {
  LKV_CHECK_TYPE(slots.dtype == DType::i64 || slots.dtype == DType::i32,
                 "expected slots of shape [n] i64 or i32, got ", slots.shape_str());
  check_tensor(slots, "slots", {"n"}, slots.dtype, env);
  check_inner_contiguous(slots, "slots");
}

// The slots as int64 on the host; a copy (synchronising) for CUDA tensors.
std::vector<int64_t> host_slots(const TensorView& slots, Stream stream) {
  const int64_t n = slots.size(0);
  const size_t elem = dtype_size(slots.dtype);
  std::vector<uint8_t> raw(static_cast<size_t>(n) * elem);
  if (slots.device.is_cpu()) {
    if (n > 0) std::memcpy(raw.data(), slots.data, raw.size());
  } else {
#ifdef LKV_WITH_CUDA
    formats::cuda::copy_to_host(raw.data(), slots.data, raw.size(), slots.device.index, stream);
#else
    (void)stream;
    fail_not_built();
#endif
  }
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (slots.dtype == DType::i64) {
      std::memcpy(&out[i], raw.data() + i * 8, 8);
    } else {
      int32_t v;
      std::memcpy(&v, raw.data() + i * 4, 4);
      out[i] = v;
    }
  }
  return out;
}

// Every slot must be < num_slots (negative ones are skipped); with `unique`, no two non-negative
// slots may be equal. The error names the slot, its index and the cache's size.
void validate_slots(const std::vector<int64_t>& slots, int64_t num_slots, bool unique) {
  for (size_t i = 0; i < slots.size(); ++i) {
    LKV_CHECK(slots[i] < num_slots, "slot ", slots[i], " (slots[", i,
              "]) is outside the cache, which has ", num_slots, " slots");
  }
  if (!unique) return;
  std::vector<std::pair<int64_t, size_t>> sorted;
  sorted.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i] >= 0) sorted.emplace_back(slots[i], i);
  std::sort(sorted.begin(), sorted.end());
  for (size_t k = 1; k < sorted.size(); ++k) {
    LKV_CHECK(sorted[k].first != sorted[k - 1].first, "slot ", sorted[k].first,
              " is written twice (slots[", sorted[k - 1].second, "] and slots[", sorted[k].second,
              "])");
  }
}

formats::CacheParams cache_params(const CacheGeometry& g) {
  return {.base = g.base,
          .page_size = g.page_size,
          .page_stride = g.page_stride,
          .num_slots = g.num_slots()};
}

}  // namespace

const FormatInfo& format_info(CacheFormat f) {
  for (const FormatInfo& fi : kFormats)
    if (fi.format == f) return fi;
  LKV_FAIL(ErrorKind::kValue, "unknown cache format code ", static_cast<int>(f));
}

CacheFormat parse_format(const std::string& name) {
  for (const FormatInfo& fi : kFormats)
    if (name == fi.name) return fi.format;
  std::string valid;
  for (const FormatInfo& fi : kFormats) valid += std::string(valid.empty() ? "" : ", ") + fi.name;
  LKV_FAIL(ErrorKind::kValue, "unknown cache format '", name, "'; valid formats: ", valid);
}

CacheGeometry cache_geometry(const TensorView& cache, CacheFormat f, int64_t page_size) {
  const FormatInfo& fi = format_info(f);
  const int64_t bpt = fi.bytes_per_token;
  LKV_CHECK(cache.ndim == 4 || cache.ndim == 2, "expected cache of shape [num_pages, page_size, 1, ",
            bpt, "] u8 or [num_pages, page_bytes] u8 (with page_size given) for format ", fi.name,
            ", got ", cache.shape_str());
  SizeEnv env;
  CacheGeometry g;
  g.base = static_cast<uint8_t*>(cache.data);
  if (cache.ndim == 4) {
    check_tensor(cache, "cache", {"num_pages", "page_size", 1, bpt}, DType::u8, env);
    LKV_CHECK(page_size < 0 || page_size == cache.size(1), "page_size=", page_size,
              " disagrees with the cache's shape[1]=", cache.size(1));
    LKV_CHECK(cache.size(1) > 0, "cache page_size (shape[1]) must be > 0, got ", cache.size(1));
    LKV_CHECK(cache.stride(3) == 1, "cache must be contiguous within a record: stride(3)=",
              cache.stride(3), ", expected 1");
    LKV_CHECK(cache.stride(1) == bpt, "cache stride(1)=", cache.stride(1),
              " must equal bytes_per_token=", bpt, " for format ", fi.name);
    g.page_size = cache.size(1);
  } else {
    check_tensor(cache, "cache", {"num_pages", "page_bytes"}, DType::u8, env);
    LKV_CHECK(page_size > 0, "page_size must be given (> 0) for a 2-D cache, got ", page_size);
    LKV_CHECK(cache.stride(1) == 1 || cache.size(1) <= 1,
              "cache must be contiguous within a page: stride(1)=", cache.stride(1));
    // (Divided rather than multiplied: page_size * bpt could wrap past INT64_MAX and pass.)
    LKV_CHECK(page_size <= cache.size(1) / bpt, "cache page_bytes=", cache.size(1),
              " is smaller than page_size * bytes_per_token = ", page_size, " * ", bpt,
              " for format ", fi.name);
    g.page_size = page_size;
  }
  g.num_pages = cache.size(0);
  g.page_stride = cache.stride(0);
  // Slot numbers and record offsets are int64: num_slots and a page's bytes must not wrap.
  LKV_CHECK(g.page_size <= INT64_MAX / bpt, "cache page_size ", g.page_size,
            " is too large: page_size * bytes_per_token overflows int64 for format ", fi.name);
  LKV_CHECK(g.num_pages <= 1 || g.page_size <= INT64_MAX / g.num_pages, "cache of ", g.num_pages,
            " pages of ", g.page_size, " slots: the slot count overflows int64");
  // Pages may not overlap; with a single page the stride is never used.
  LKV_CHECK(g.num_pages <= 1 || g.page_stride >= g.page_size * bpt, "cache page stride ",
            g.page_stride, " is smaller than page_size * bytes_per_token = ", g.page_size * bpt);
#ifdef LKV_WITH_CUDA  // (a build without CUDA refuses CUDA tensors in each op's device checks)
  if (cache.device.is_cuda()) {
    LKV_CHECK(g.num_pages <= 1 || g.page_stride % kCudaAlign == 0, "cache page stride ",
              g.page_stride, " must be a multiple of ", kCudaAlign, " bytes on the GPU");
    LKV_CHECK(reinterpret_cast<uintptr_t>(g.base) % kCudaAlign == 0,
              "cache base pointer must be ", kCudaAlign, "-byte aligned on the GPU, got ",
              static_cast<const void*>(g.base));
  }
#endif
  return g;
}

RecordOffsets record_offsets(const CacheGeometry& g, const FormatInfo& fi, int64_t slot) {
  LKV_CHECK(slot >= 0 && slot < g.num_slots(), "slot ", slot, " is outside the cache, which has ",
            g.num_slots(), " slots");
  const formats::RecordByteOffsets off =
      formats::record_byte_offsets(fi.format, g.page_size, g.page_stride, slot);
  return {off.data, off.scale};
}

void quantize(CacheFormat f, const TensorView& latents, const TensorView& slots,
              const TensorView& cache, int64_t page_size, Stream stream, bool check_slots) {
  const FormatInfo& fi = format_info(f);
  const Device device = cache.device;
  require_backend(device);
  const CacheGeometry g = cache_geometry(cache, f, page_size);

  SizeEnv env;
  LKV_CHECK_TYPE(latents.dtype == DType::bf16 || latents.dtype == DType::f32,
                 "expected latents of shape [n, ", fi.d_qk, "] bf16 or f32, got ",
                 latents.shape_str());
  check_tensor(latents, "latents", {"n", fi.d_qk}, latents.dtype, env);
  check_inner_contiguous(latents, "latents");
  check_slots_tensor(slots, env);
  check_device(latents, "latents", device);
  check_device(slots, "slots", device);
  check_no_overlap({{&cache, "cache"}}, {{&latents, "latents"}, {&slots, "slots"}}, "quantize");

  if (check_slots) validate_slots(host_slots(slots, stream), g.num_slots(), /*unique=*/true);

  const formats::QuantizeParams p{.format = f,
                                  .latents = latents.data,
                                  .latents_bf16 = latents.dtype == DType::bf16,
                                  .stride_latents_n = latents.stride(0),
                                  .slots = slots.data,
                                  .slots_i64 = slots.dtype == DType::i64,
                                  .n = slots.size(0),
                                  .cache = cache_params(g)};
  if (device.is_cpu()) return formats::cpu::quantize(p);
#ifdef LKV_WITH_CUDA
  formats::cuda::quantize(p, device.index, stream);
#endif
}

void dequantize(CacheFormat f, const TensorView& cache, const TensorView& slots,
                const TensorView& out, int64_t page_size, Stream stream, bool check_slots) {
  const FormatInfo& fi = format_info(f);
  const Device device = cache.device;
  require_backend(device);
  const CacheGeometry g = cache_geometry(cache, f, page_size);

  SizeEnv env;
  check_slots_tensor(slots, env);
  check_tensor(out, "out", {"n", fi.d_qk}, DType::bf16, env);
  check_inner_contiguous(out, "out");
  check_distinct_elements(out, "out");
  check_device(slots, "slots", device);
  check_device(out, "out", device);
  check_no_overlap({{&out, "out"}}, {{&cache, "cache"}, {&slots, "slots"}}, "dequantize");

  if (check_slots) validate_slots(host_slots(slots, stream), g.num_slots(), /*unique=*/false);

  const formats::DequantizeParams p{.format = f,
                                    .slots = slots.data,
                                    .slots_i64 = slots.dtype == DType::i64,
                                    .n = slots.size(0),
                                    .cache = cache_params(g),
                                    .out = out.ptr<uint16_t>(),
                                    .stride_out_n = out.stride(0)};
  if (device.is_cpu()) return formats::cpu::dequantize(p);
#ifdef LKV_WITH_CUDA
  formats::cuda::dequantize(p, device.index, stream);
#endif
}

void positions_to_slots(const TensorView& block_table, const TensorView& positions,
                        int64_t page_size, const TensorView& slots, Stream stream) {
  const Device device = block_table.device;
  require_backend(device);
  LKV_CHECK(page_size > 0, "page_size must be > 0, got ", page_size);
  SizeEnv env;
  check_tensor(block_table, "block_table", {"b", "max_blocks"}, DType::i32, env);
  check_tensor(positions, "positions", {"b", "n"}, DType::i32, env);
  check_tensor(slots, "slots", {"b", "n"}, DType::i32, env);
  check_device(positions, "positions", device);
  check_device(slots, "slots", device);
  check_no_overlap({{&slots, "slots"}}, {{&block_table, "block_table"}, {&positions, "positions"}},
                   "positions_to_slots");

  const formats::PositionsToSlotsParams p{.block_table = block_table.ptr<int32_t>(),
                                          .stride_table_b = block_table.stride(0),
                                          .stride_table_block = block_table.stride(1),
                                          .positions = positions.ptr<int32_t>(),
                                          .stride_positions_b = positions.stride(0),
                                          .stride_positions_n = positions.stride(1),
                                          .slots = slots.ptr<int32_t>(),
                                          .stride_slots_b = slots.stride(0),
                                          .stride_slots_n = slots.stride(1),
                                          .b = positions.size(0),
                                          .n = positions.size(1),
                                          .max_blocks = block_table.size(1),
                                          .page_size = page_size};
  if (device.is_cpu()) return formats::cpu::positions_to_slots(p);
#ifdef LKV_WITH_CUDA
  formats::cuda::positions_to_slots(p, device.index, stream);
#else
  (void)stream;
#endif
}

}  // namespace latentkv
