// decode/sm90/dequant.cuh: e4m3 payload times a power-of-two scale to bf16 for the Hopper kernel
// (kernel.cuh, records.cuh). The fast form and its exactness checks live beside the portable
// kernel (decode/cuda/kernel.cuh), which uses them too; this file adds the ue8m0 scale bytes'
// shortcut and the per-token NaN bits.
#pragma once

#include <cstdint>

#include "decode/cuda/kernel.cuh"
#include "decode/sm90/nan_bits.h"

namespace latentkv::decode::sm90 {

// The fast form's checks and conversion (shared with the portable kernel, decode/cuda/kernel.cuh).
using cuda::dequant16;
using cuda::dequant16_fast;
using cuda::dequant16_fast_ok;
using cuda::fast_multiplier;
using cuda::fast_scale;
using cuda::no_nan16;

// nan_bits16 (nan_bits.h): the per-token NaN check in two instructions per word.
__device__ __forceinline__ uint32_t nan_bits16(const uint4 raw) { return nan_bits_words(raw.x, raw.y, raw.z, raw.w); }

// fast_multiplier for a ue8m0 scale byte e (s = 2^(e - 127)), without going through fp32: s is a
// fast_scale iff e is in [10, 134], and 2^120 x s = 2^(e - 7) is the bf16 with exponent field
// e + 120 and a zero mantissa.
__device__ __forceinline__ bool ue8m0_fast(uint32_t e) { return e - 10u <= 124u; }
__device__ __forceinline__ uint32_t ue8m0_multiplier(uint32_t e) {
  const uint32_t h = (e + 120u) << 7;
  return h | (h << 16);
}

// v41_fp4 chunks: the portable kernel's conversion (cuda::dequant16_e2m1_bf16: the codes times an
// e4m3 scale given in both bf16 halves, by two exact bf16x2 multiplies per pair, no fp32
// temporaries, which spilled in the narrow kernel at its 128-register bound).
using cuda::dequant16_e2m1_bf16;

}  // namespace latentkv::decode::sm90
