// formats/cuda/formats.cu: quantize / dequantize / positions_to_slots kernels.
//
// Work split: one warp (one CTA of 32 threads) per token; lane u runs unit u of record_codec.h (a
// scale group or the RoPE tail), the same function the CPU runs, so the bytes match the CPU's by
// construction. Lanes past the format's unit count idle. Kernels are templated on the format (and
// the latent dtype for quantize) only. Performance is secondary here: the record writers that
// matter for speed (the compressor) have their own kernels.
//
// Safety: formats.cpp has already rejected out-of-range and duplicate slots; the kernels still skip
// (never follow) a slot outside [0, num_slots).
#include "cuda_common/cuda_check.h"
#include "formats/cuda/launch.h"
#include "formats/record_codec.h"

namespace latentkv::formats::cuda {
namespace {

// One warp per token: kMaxUnits lanes cover the largest unit count (v41_fp4's 32 groups).
constexpr int kThreadsPerToken = kMaxUnits;
// positions_to_slots: one thread per position.
constexpr int kSlotsThreads = 256;


__device__ __forceinline__ int64_t slot_at(const void* slots, bool i64, int64_t i) {
  return i64 ? static_cast<const int64_t*>(slots)[i] : static_cast<const int32_t*>(slots)[i];
}

template <CacheFormat F, typename In>
__global__ void __launch_bounds__(kThreadsPerToken) quantize_kernel(QuantizeParams p) {
  constexpr CodecLayout L = codec_layout(F);
  const int64_t token_idx = blockIdx.x;
  const int unit = threadIdx.x;
  if (unit >= L.num_units) return;

  // Target record; a skipped slot writes nothing.
  const int64_t slot = slot_at(p.slots, p.slots_i64, token_idx);
  if (slot < 0 || slot >= p.cache.num_slots) return;
  const RecordByteOffsets off = record_byte_offsets(F, p.cache.page_size, p.cache.page_stride, slot);

  // Encode this lane's unit.
  const In* x = static_cast<const In*>(p.latents) + token_idx * p.stride_latents_n;
  encode_unit<F>(unit, x, p.cache.base + off.data, p.cache.base + off.scale);
}

template <CacheFormat F>
__global__ void __launch_bounds__(kThreadsPerToken) dequantize_kernel(DequantizeParams p) {
  constexpr CodecLayout L = codec_layout(F);
  const int64_t token_idx = blockIdx.x;
  const int unit = threadIdx.x;
  uint16_t* out = p.out + token_idx * p.stride_out_n;

  // Invalid slot: the whole warp writes the row of zeros.
  const int64_t slot = slot_at(p.slots, p.slots_i64, token_idx);
  if (slot < 0 || slot >= p.cache.num_slots) {
    for (int i = unit; i < L.d_qk; i += kThreadsPerToken) out[i] = 0;
    return;
  }
  if (unit >= L.num_units) return;

  // Decode this lane's unit.
  const RecordByteOffsets off = record_byte_offsets(F, p.cache.page_size, p.cache.page_stride, slot);
  decode_unit<F>(unit, p.cache.base + off.data, p.cache.base + off.scale, out);
}

__global__ void positions_to_slots_kernel(PositionsToSlotsParams p) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= p.b * p.n) return;
  const int64_t b_idx = idx / p.n;
  const int64_t n_idx = idx % p.n;
  const int32_t pos = p.positions[b_idx * p.stride_positions_b + n_idx * p.stride_positions_n];
  p.slots[b_idx * p.stride_slots_b + n_idx * p.stride_slots_n] = position_to_slot(
      p.block_table + b_idx * p.stride_table_b, p.stride_table_block, p.max_blocks, p.page_size, pos);
}

template <CacheFormat F>
void launch_quantize(const QuantizeParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.n));
  if (p.latents_bf16) quantize_kernel<F, uint16_t><<<grid, kThreadsPerToken, 0, stream>>>(p);
  else quantize_kernel<F, float><<<grid, kThreadsPerToken, 0, stream>>>(p);
  LKV_CUDA_CHECK_LAUNCH();
}

template <CacheFormat F>
void launch_dequantize(const DequantizeParams& p, cudaStream_t stream) {
  dequantize_kernel<F><<<static_cast<unsigned>(p.n), kThreadsPerToken, 0, stream>>>(p);
  LKV_CUDA_CHECK_LAUNCH();
}

// grid.x is limited to 2^31 - 1 CTAs.
void check_grid(int64_t num_ctas, const char* what) {
  LKV_CHECK(num_ctas <= INT32_MAX, what, " needs ", num_ctas, " CTAs, more than one launch allows (",
            INT32_MAX, ")");
}

}  // namespace

void quantize(const QuantizeParams& p, int device, Stream stream) {
  if (p.n == 0) return;
  check_grid(p.n, "quantize");
  cuda_common::DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  switch (p.format) {
    case CacheFormat::v32_fp8: return launch_quantize<CacheFormat::v32_fp8>(p, s);
    case CacheFormat::v4_fp8: return launch_quantize<CacheFormat::v4_fp8>(p, s);
    case CacheFormat::v4_int8: return launch_quantize<CacheFormat::v4_int8>(p, s);
    case CacheFormat::v41_fp8: return launch_quantize<CacheFormat::v41_fp8>(p, s);
    case CacheFormat::v41_fp4: return launch_quantize<CacheFormat::v41_fp4>(p, s);
  }
}

void dequantize(const DequantizeParams& p, int device, Stream stream) {
  if (p.n == 0) return;
  check_grid(p.n, "dequantize");
  cuda_common::DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  switch (p.format) {
    case CacheFormat::v32_fp8: return launch_dequantize<CacheFormat::v32_fp8>(p, s);
    case CacheFormat::v4_fp8: return launch_dequantize<CacheFormat::v4_fp8>(p, s);
    case CacheFormat::v4_int8: return launch_dequantize<CacheFormat::v4_int8>(p, s);
    case CacheFormat::v41_fp8: return launch_dequantize<CacheFormat::v41_fp8>(p, s);
    case CacheFormat::v41_fp4: return launch_dequantize<CacheFormat::v41_fp4>(p, s);
  }
}

void positions_to_slots(const PositionsToSlotsParams& p, int device, Stream stream) {
  const int64_t total = p.b * p.n;
  if (total == 0) return;
  const int64_t blocks = (total + kSlotsThreads - 1) / kSlotsThreads;
  check_grid(blocks, "positions_to_slots");
  cuda_common::DeviceGuard guard(device);
  positions_to_slots_kernel<<<static_cast<unsigned>(blocks), kSlotsThreads, 0,
                              static_cast<cudaStream_t>(stream)>>>(p);
  LKV_CUDA_CHECK_LAUNCH();
}

void copy_to_host(void* dst, const void* src, size_t bytes, int device, Stream stream) {
  if (bytes == 0) return;
  cuda_common::DeviceGuard guard(device);
  const auto s = static_cast<cudaStream_t>(stream);
  LKV_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
  LKV_CUDA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace latentkv::formats::cuda
