// cpu_common/dequant.h: one quantized record to fp32 for the fast CPU attention paths (sparse_decode,
// dense_decode on v32_fp8 pages).
//
// The value of each dim is num::bf16_to_f32 of the codec's bf16 (formats/record_codec.h
// decode_unit) bit for bit: the same payload value, the same product with the group's scale and
// the same bf16 rounding. Only the payload's decoding differs: by lanes, in the build of the
// instruction set the fast paths run (head_block.h PayloadFn: the e4m3 code's bits rearranged
// rather than num::e4m3_to_f32's branches per byte). Decoding to bf16 with the codec and widening
// took ~30% of a V3.2 h_q 128 sparse_decode call on the CPU; a 256-entry table per byte took ~27%
// of what was left (bench/NOTES.md, "CPU fast paths of the attention ops"). v41_fp4 records went
// through the codec until their e2m1 codes were decoded by lanes too: a V4.1 call with a 512-token
// fp4 extra cache took 2.9x the time of the same call with a v41_fp8 one.
#pragma once

#include <cstdint>

#include "cpu_common/head_block.h"
#include "formats/record_codec.h"
#include "latentkv/formats.h"
#include "latentkv/numerics.h"

namespace latentkv::cpu_common {

// The record at `data` (its scales at `scale`, formats::record_byte_offsets) as d_qk fp32 values,
// its groups by `payload` (default_payload(), resolved before a parallel region).
template <CacheFormat F>
void dequantize_record_f32(const uint8_t* data, const uint8_t* scale, float* out, PayloadFn payload) {
  constexpr formats::CodecLayout L = formats::codec_layout(F);
  static_assert(L.group % 16 == 0, "PayloadFn takes whole vectors of up to 16 codes");
  constexpr bool kFp4 = F == CacheFormat::v41_fp4;  // two codes per byte, e4m3 scales
  constexpr PayloadCode kCode = kFp4 ? PayloadCode::kE2m1 : F == CacheFormat::v4_int8 ? PayloadCode::kInt8
                                                                                      : PayloadCode::kE4m3;
  for (int g = 0; g < L.num_groups; ++g) {
    float sc;
    if constexpr (F == CacheFormat::v32_fp8) sc = num::bits_f32(formats::load_u32_le(scale + 4 * g));
    else if constexpr (kFp4) sc = num::e4m3_to_f32(scale[g]);
    else sc = num::ue8m0_to_f32(scale[g]);
    payload(data + g * L.group / (kFp4 ? 2 : 1), L.group, sc, kCode, out + g * L.group);
  }
  for (int k = 0; k < L.rope_dims; ++k)
    out[L.quant_dims + k] = num::bf16_to_f32(formats::load_u16_le(data + L.rope_offset + 2 * k));
}

}  // namespace latentkv::cpu_common
