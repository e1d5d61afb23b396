// formats/record_codec.h: encode and decode of one token's record, for the host and the device.
//
// Both backends call exactly these functions, so the CPU and the GPU write identical bytes by
// construction; the backends differ only in how they spread the work. A record is cut into
// independent "units" (a scale group, or the bf16 RoPE tail): a backend runs encode_unit /
// decode_unit for every unit of every token, in any order, on any thread (the CPU loops over them,
// the GPU gives one thread of a warp to each unit). Units never share an output byte.
//
// Record layouts (docs/formats.md has the full description and the quantization rules):
//   v32_fp8  data = record: [0, 512) e4m3 | [512, 528) 4 fp32 scales 2^e | [528, 656) 64 bf16 RoPE
//   v4_fp8   data row: [0, 448) e4m3 | [448, 576) 64 bf16 RoPE;  scale row: 7 ue8m0 | 1 zero pad byte
//   v4_int8  as v4_fp8 with int8 payload (compressor rule, QMAX 127, truncation)
//   v41_fp8  data = record: [0, 512) e4m3 | [512, 528) 16 ue8m0
//   v41_fp4  data = record: [0, 256) e2m1 pairs (even dim in the low nibble) | [256, 288) 32 e4m3
// `scale` points at the scale bytes: the scale row for page-split formats, data + payload bytes for
// token-major ones. Multi-byte values are stored little-endian byte by byte, so no alignment is
// assumed anywhere (v32's fp32 scales and bf16 RoPE sit at 16- and 2-byte offsets only).
//
// Non-finite latents are outside the contract: the bytes are deterministic (identical on both
// backends) but meaningless.
#pragma once

#include <cstdint>

#include "latentkv/formats.h"
#include "latentkv/numerics.h"

namespace latentkv::formats {

// What the codec needs to know about a format; a constexpr function so that kernels templated on
// the format see compile-time constants.
struct CodecLayout {
  int d_qk;             // latent width
  int bytes_per_token;  // whole record
  int quant_dims;       // leading dims that are quantized in groups
  int group;            // dims per scale
  int num_groups;       // quant_dims / group
  int rope_dims;        // trailing dims stored bf16 (0 when everything is quantized)
  int payload_bytes;    // bytes of the quantized payload at the start of the data bytes
  int rope_offset;      // byte offset of the bf16 RoPE values from the data bytes
  int num_units;        // groups, plus one unit for the RoPE tail when there is one
};

LKV_HD constexpr CodecLayout codec_layout(CacheFormat f) {
  switch (f) {
    case CacheFormat::v32_fp8: return {576, 656, 512, 128, 4, 64, 512, 528, 5};
    case CacheFormat::v4_fp8:
    case CacheFormat::v4_int8: return {512, 584, 448, 64, 7, 64, 448, 448, 8};
    case CacheFormat::v41_fp8: return {512, 528, 512, 32, 16, 0, 512, 0, 16};
    case CacheFormat::v41_fp4: return {512, 288, 512, 16, 32, 0, 256, 0, 32};
  }
  return {0, 0, 0, 0, 0, 0, 0, 0, 0};
}

// The GPU backend gives each unit one lane of a warp.
inline constexpr int kMaxUnits = 32;
static_assert(codec_layout(CacheFormat::v32_fp8).num_units <= kMaxUnits &&
                  codec_layout(CacheFormat::v4_fp8).num_units <= kMaxUnits &&
                  codec_layout(CacheFormat::v41_fp8).num_units <= kMaxUnits &&
                  codec_layout(CacheFormat::v41_fp4).num_units <= kMaxUnits,
              "every record must split into at most one unit per lane of a warp");

LKV_HD constexpr bool is_page_split(CacheFormat f) {
  return f == CacheFormat::v4_fp8 || f == CacheFormat::v4_int8;
}

// Page-split geometry (SPEC.md section 2): P data rows of 576 bytes, then P scale rows of 8 bytes.
inline constexpr int kSplitDataBytes = 576;
inline constexpr int kSplitScaleBytes = 8;

// The v41_fp4 scale floor: the smallest positive e4m3 value (a subnormal), so no scale is zero.
inline constexpr float kFp4ScaleFloor = 0.001953125f;  // 2^-9
// fl32(1/127), the compressor rule's reciprocal for the int8 format.
inline constexpr float kInvQmaxI8 = 1.0f / 127.0f;

// ---- record addressing ---------------------------------------------------------------------------
// Byte offsets from the cache base of slot's data bytes and scale bytes; slot must be in range.
struct RecordByteOffsets {
  int64_t data;
  int64_t scale;
};

LKV_HD RecordByteOffsets record_byte_offsets(CacheFormat f, int64_t page_size, int64_t page_stride,
                                             int64_t slot) {
  const int64_t page_idx = slot / page_size;
  const int64_t token_idx = slot % page_size;
  const int64_t page = page_idx * page_stride;
  if (is_page_split(f)) {
    return {page + token_idx * kSplitDataBytes,
            page + page_size * kSplitDataBytes + token_idx * kSplitScaleBytes};
  }
  const CodecLayout l = codec_layout(f);
  const int64_t data = page + token_idx * l.bytes_per_token;
  return {data, data + l.payload_bytes};
}

// ---- little helpers ------------------------------------------------------------------------------
LKV_HD void store_u16_le(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xffu);
  p[1] = static_cast<uint8_t>(v >> 8);
}
LKV_HD uint16_t load_u16_le(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (static_cast<uint16_t>(p[1]) << 8));
}
LKV_HD void store_u32_le(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>((v >> (8 * i)) & 0xffu);
}
LKV_HD uint32_t load_u32_le(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Latent element i as fp32: bf16 inputs (raw bits) widen exactly, f32 inputs are used as given.
LKV_HD float latent_f32(const uint16_t* x, int i) { return num::bf16_to_f32(x[i]); }
LKV_HD float latent_f32(const float* x, int i) { return x[i]; }
// Latent element i as bf16 bits (the RoPE tail): bf16 inputs are copied, f32 inputs rounded (RNE).
LKV_HD uint16_t latent_bf16(const uint16_t* x, int i) { return x[i]; }
LKV_HD uint16_t latent_bf16(const float* x, int i) { return num::f32_to_bf16(x[i]); }

// max |x[begin, begin + count)|; NaN never wins a comparison, so it is ignored.
template <typename In>
LKV_HD float group_amax(const In* x, int begin, int count) {
  float amax = 0.0f;
  for (int i = 0; i < count; ++i) {
    const float a = num::bits_f32(num::f32_bits(latent_f32(x, begin + i)) & 0x7fffffffu);
    amax = a > amax ? a : amax;
  }
  return amax;
}

// The v41_fp4 scale code of a group: e4m3(max(amax / 6, 2^-9)), round to nearest even.
LKV_HD uint8_t fp4_scale_code(float amax) {
  const float s = amax / 6.0f;
  return num::f32_to_e4m3(s > kFp4ScaleFloor ? s : kFp4ScaleFloor);
}

// ---- encode --------------------------------------------------------------------------------------
// Writes unit `unit` of one token's record from its latent row x (d_qk values).
template <CacheFormat F, typename In>
LKV_HD void encode_unit(int unit, const In* x, uint8_t* data, uint8_t* scale) {
  constexpr CodecLayout L = codec_layout(F);
  if (unit >= L.num_groups) {
    // RoPE tail: bf16 (RNE from the input), plus the page-split scale row's pad byte.
    for (int i = 0; i < L.rope_dims; ++i)
      store_u16_le(data + L.rope_offset + 2 * i, latent_bf16(x, L.quant_dims + i));
    if constexpr (is_page_split(F)) scale[L.num_groups] = 0;
    return;
  }
  const int begin = unit * L.group;
  const float amax = group_amax(x, begin, L.group);
  if constexpr (F == CacheFormat::v41_fp4) {
    // e2m1 payload against an e4m3 scale: the division is IEEE (correctly rounded) on both backends.
    const uint8_t code = fp4_scale_code(amax);
    const float s = num::e4m3_to_f32(code);
    for (int i = 0; i < L.group; i += 2) {
      const uint8_t lo = num::f32_to_e2m1(latent_f32(x, begin + i) / s);
      const uint8_t hi = num::f32_to_e2m1(latent_f32(x, begin + i + 1) / s);
      data[(begin + i) / 2] = static_cast<uint8_t>(lo | (hi << 4));
    }
    scale[unit] = code;
  } else {
    // Power-of-two scale 2^e; the payload is x * 2^-e, an exact multiply.
    constexpr bool kInt8 = F == CacheFormat::v4_int8;
    const int e = kInt8 ? num::compressor_scale_exp(amax, kInvQmaxI8) : num::cache_scale_exp(amax);
    const float inv = num::exp2i(-e);
    for (int i = 0; i < L.group; ++i) {
      const float y = latent_f32(x, begin + i) * inv;
      data[begin + i] = kInt8 ? static_cast<uint8_t>(num::f32_to_i8_trunc(y)) : num::f32_to_e4m3(y);
    }
    if constexpr (F == CacheFormat::v32_fp8) {
      store_u32_le(scale + 4 * unit, num::f32_bits(num::exp2i(e)));
    } else {
      scale[unit] = num::ue8m0_from_exp(e);
    }
  }
}

// ---- decode --------------------------------------------------------------------------------------
// Writes unit `unit` of one token's dequantized row out (d_qk bf16 bits): bf16(float(payload) *
// scale), exact for every format (docs/formats.md says why), so the rounding never matters.
template <CacheFormat F>
LKV_HD void decode_unit(int unit, const uint8_t* data, const uint8_t* scale, uint16_t* out) {
  constexpr CodecLayout L = codec_layout(F);
  if (unit >= L.num_groups) {
    for (int i = 0; i < L.rope_dims; ++i)
      out[L.quant_dims + i] = load_u16_le(data + L.rope_offset + 2 * i);
    return;
  }
  const int begin = unit * L.group;
  if constexpr (F == CacheFormat::v41_fp4) {
    const float s = num::e4m3_to_f32(scale[unit]);
    for (int i = 0; i < L.group; i += 2) {
      const uint8_t pair = data[(begin + i) / 2];
      out[begin + i] = num::f32_to_bf16(num::e2m1_to_f32(pair & 0xfu) * s);
      out[begin + i + 1] = num::f32_to_bf16(num::e2m1_to_f32(pair >> 4) * s);
    }
  } else {
    float s;
    if constexpr (F == CacheFormat::v32_fp8) {
      s = num::bits_f32(load_u32_le(scale + 4 * unit));
    } else {
      s = num::ue8m0_to_f32(scale[unit]);
    }
    for (int i = 0; i < L.group; ++i) {
      const uint8_t b = data[begin + i];
      const float v = F == CacheFormat::v4_int8 ? static_cast<float>(static_cast<int8_t>(b))
                                                : num::e4m3_to_f32(b);
      out[begin + i] = num::f32_to_bf16(v * s);
    }
  }
}

// ---- positions to slots --------------------------------------------------------------------------
// block_table[pos / P] * P + pos % P for one position, or -1 when the position is -1 or outside
// [0, max_blocks * P), the table entry is negative, or the slot does not fit in i32.
LKV_HD int32_t position_to_slot(const int32_t* table_row, int64_t stride_block, int64_t max_blocks,
                                int64_t page_size, int32_t pos) {
  // Compared by division, not multiplication: max_blocks * P or block * P could wrap for a huge P.
  if (pos < 0 || pos / page_size >= max_blocks) return -1;
  const int64_t block = table_row[(pos / page_size) * stride_block];
  const int64_t within = pos % page_size;
  if (block < 0 || block > (INT32_MAX - within) / page_size) return -1;
  return static_cast<int32_t>(block * page_size + within);
}

}  // namespace latentkv::formats
