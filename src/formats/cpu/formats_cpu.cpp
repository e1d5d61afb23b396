// formats/cpu/formats_cpu.cpp: quantize / dequantize / positions_to_slots on the CPU.
//
// Work split: OpenMP over tokens; each token runs every unit of record_codec.h in order. Tokens
// write disjoint records (formats.cpp rejects duplicate slots before this runs), so the loop has no
// races. Templated on the format and the latent dtype only, resolved by one flat switch.
#include "formats/cpu/formats_cpu.h"

#include "formats/record_codec.h"

namespace latentkv::formats::cpu {
namespace {

int64_t slot_at(const void* slots, bool i64, int64_t i) {
  return i64 ? static_cast<const int64_t*>(slots)[i] : static_cast<const int32_t*>(slots)[i];
}

template <CacheFormat F, typename In>
void quantize_impl(const QuantizeParams& p) {
  constexpr CodecLayout L = codec_layout(F);
  const In* latents = static_cast<const In*>(p.latents);
#pragma omp parallel for schedule(static)
  for (int64_t token_idx = 0; token_idx < p.n; ++token_idx) {
    const int64_t slot = slot_at(p.slots, p.slots_i64, token_idx);
    if (slot < 0 || slot >= p.cache.num_slots) continue;
    const RecordByteOffsets off =
        record_byte_offsets(F, p.cache.page_size, p.cache.page_stride, slot);
    const In* x = latents + token_idx * p.stride_latents_n;
    for (int unit = 0; unit < L.num_units; ++unit)
      encode_unit<F>(unit, x, p.cache.base + off.data, p.cache.base + off.scale);
  }
}

template <CacheFormat F>
void dequantize_impl(const DequantizeParams& p) {
  constexpr CodecLayout L = codec_layout(F);
#pragma omp parallel for schedule(static)
  for (int64_t token_idx = 0; token_idx < p.n; ++token_idx) {
    const int64_t slot = slot_at(p.slots, p.slots_i64, token_idx);
    uint16_t* out = p.out + token_idx * p.stride_out_n;
    if (slot < 0 || slot >= p.cache.num_slots) {
      for (int i = 0; i < L.d_qk; ++i) out[i] = 0;
      continue;
    }
    const RecordByteOffsets off =
        record_byte_offsets(F, p.cache.page_size, p.cache.page_stride, slot);
    for (int unit = 0; unit < L.num_units; ++unit)
      decode_unit<F>(unit, p.cache.base + off.data, p.cache.base + off.scale, out);
  }
}

template <CacheFormat F>
void quantize_typed(const QuantizeParams& p) {
  if (p.latents_bf16) quantize_impl<F, uint16_t>(p);
  else quantize_impl<F, float>(p);
}

}  // namespace

void quantize(const QuantizeParams& p) {
  switch (p.format) {
    case CacheFormat::v32_fp8: return quantize_typed<CacheFormat::v32_fp8>(p);
    case CacheFormat::v4_fp8: return quantize_typed<CacheFormat::v4_fp8>(p);
    case CacheFormat::v4_int8: return quantize_typed<CacheFormat::v4_int8>(p);
    case CacheFormat::v41_fp8: return quantize_typed<CacheFormat::v41_fp8>(p);
    case CacheFormat::v41_fp4: return quantize_typed<CacheFormat::v41_fp4>(p);
  }
}

void dequantize(const DequantizeParams& p) {
  switch (p.format) {
    case CacheFormat::v32_fp8: return dequantize_impl<CacheFormat::v32_fp8>(p);
    case CacheFormat::v4_fp8: return dequantize_impl<CacheFormat::v4_fp8>(p);
    case CacheFormat::v4_int8: return dequantize_impl<CacheFormat::v4_int8>(p);
    case CacheFormat::v41_fp8: return dequantize_impl<CacheFormat::v41_fp8>(p);
    case CacheFormat::v41_fp4: return dequantize_impl<CacheFormat::v41_fp4>(p);
  }
}

void positions_to_slots(const PositionsToSlotsParams& p) {
#pragma omp parallel for schedule(static)
  for (int64_t b_idx = 0; b_idx < p.b; ++b_idx) {
    const int32_t* table_row = p.block_table + b_idx * p.stride_table_b;
    for (int64_t n_idx = 0; n_idx < p.n; ++n_idx) {
      const int32_t pos = p.positions[b_idx * p.stride_positions_b + n_idx * p.stride_positions_n];
      p.slots[b_idx * p.stride_slots_b + n_idx * p.stride_slots_n] =
          position_to_slot(table_row, p.stride_table_block, p.max_blocks, p.page_size, pos);
    }
  }
}

}  // namespace latentkv::formats::cpu
