// tests/formats_reference.h: a naive reference of the five cache formats and small cache helpers,
// shared by the CPU format tests and the CPU-vs-CUDA tests.
//
// The reference is written to read like docs/formats.md, one whole record at a time, independent
// of src/formats/record_codec.h: exponents come from ceil(log2()) in double, the payload scaling
// from ldexp in double, addresses from SPEC.md's formulas. It uses only the numerics.h converters
// (f32_to_e4m3 and friends), which have their own tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "latentkv/formats.h"
#include "latentkv/numerics.h"
#include "latentkv/tensor.h"

namespace lkv_test {

using latentkv::CacheFormat;
namespace num = latentkv::num;

inline constexpr CacheFormat kAllFormats[] = {CacheFormat::v32_fp8, CacheFormat::v4_fp8,
                                              CacheFormat::v4_int8, CacheFormat::v41_fp8,
                                              CacheFormat::v41_fp4};

// Per-format facts the reference needs, restated from the SPEC's table.
struct RefLayout {
  int d_qk, bpt, quant_dims, group, payload_bytes;
  bool split;
};
inline RefLayout ref_layout(CacheFormat f) {
  switch (f) {
    case CacheFormat::v32_fp8: return {576, 656, 512, 128, 512, false};
    case CacheFormat::v4_fp8: return {512, 584, 448, 64, 448, true};
    case CacheFormat::v4_int8: return {512, 584, 448, 64, 448, true};
    case CacheFormat::v41_fp8: return {512, 528, 512, 32, 512, false};
    case CacheFormat::v41_fp4: return {512, 288, 512, 16, 256, false};
  }
  return {};
}

inline float group_amax(const std::vector<float>& x, int begin, int count) {
  float amax = 0.0f;
  for (int i = begin; i < begin + count; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

// e of the generic cache rule: ceil(log2(max(amax / 448, 1e-4))).
inline int ref_cache_exp(float amax) {
  return static_cast<int>(std::ceil(std::log2(static_cast<double>(std::max(amax / 448.0f, 1e-4f)))));
}
// e of the compressor rule with QMAX 127: ceil(log2(max(amax, 1e-4) * fl32(1/127))).
inline int ref_int8_exp(float amax) {
  const float a = std::max(amax, 1e-4f) * (1.0f / 127.0f);
  return static_cast<int>(std::ceil(std::log2(static_cast<double>(a))));
}
// The v41_fp4 scale code: e4m3(max(amax / 6, 2^-9)).
inline uint8_t ref_fp4_scale_code(float amax) {
  return num::f32_to_e4m3(std::max(amax / 6.0f, 0.001953125f));
}
inline float scaled(float x, int e) { return static_cast<float>(std::ldexp(static_cast<double>(x), -e)); }

// The logical record of one token: for token-major formats the record itself; for page-split formats
// the 576 data bytes followed by the 8 scale bytes. x holds the d_qk values as the quantizer sees
// them (bf16 inputs widened to f32).
inline std::vector<uint8_t> ref_encode(CacheFormat f, const std::vector<float>& x) {
  const RefLayout l = ref_layout(f);
  std::vector<uint8_t> r(l.bpt, 0);
  const int num_groups = l.quant_dims / l.group;
  for (int g = 0; g < num_groups; ++g) {
    const float amax = group_amax(x, g * l.group, l.group);
    for (int i = g * l.group; i < (g + 1) * l.group; ++i) {
      switch (f) {
        case CacheFormat::v4_int8:
          r[i] = static_cast<uint8_t>(num::f32_to_i8_trunc(scaled(x[i], ref_int8_exp(amax))));
          break;
        case CacheFormat::v41_fp4: {
          const float s = num::e4m3_to_f32(ref_fp4_scale_code(amax));
          const uint8_t c = num::f32_to_e2m1(x[i] / s);
          r[i / 2] |= static_cast<uint8_t>(i % 2 == 0 ? c : c << 4);
          break;
        }
        default: r[i] = num::f32_to_e4m3(scaled(x[i], ref_cache_exp(amax))); break;
      }
    }
    switch (f) {
      case CacheFormat::v32_fp8: {
        const float s = static_cast<float>(std::ldexp(1.0, ref_cache_exp(amax)));
        std::memcpy(&r[512 + 4 * g], &s, 4);  // the host is little-endian
        break;
      }
      case CacheFormat::v4_fp8: r[576 + g] = static_cast<uint8_t>(ref_cache_exp(amax) + 127); break;
      case CacheFormat::v4_int8: r[576 + g] = static_cast<uint8_t>(ref_int8_exp(amax) + 127); break;
      case CacheFormat::v41_fp8: r[512 + g] = static_cast<uint8_t>(ref_cache_exp(amax) + 127); break;
      case CacheFormat::v41_fp4: r[256 + g] = ref_fp4_scale_code(amax); break;
    }
  }
  // RoPE tail, bf16 little-endian: v32 after its 16 scale bytes, v4 right after the payload.
  const int rope_at = f == CacheFormat::v32_fp8 ? 528 : 448;
  for (int i = l.quant_dims; i < l.d_qk; ++i) {
    const uint16_t h = num::f32_to_bf16(x[i]);
    r[rope_at + 2 * (i - l.quant_dims)] = static_cast<uint8_t>(h & 0xff);
    r[rope_at + 2 * (i - l.quant_dims) + 1] = static_cast<uint8_t>(h >> 8);
  }
  return r;  // the v4 pad byte r[583] stays 0
}

// bf16 bits of the dequantized row of a logical record: bf16(payload * scale).
inline std::vector<uint16_t> ref_decode(CacheFormat f, const std::vector<uint8_t>& r) {
  const RefLayout l = ref_layout(f);
  std::vector<uint16_t> out(l.d_qk);
  for (int i = 0; i < l.quant_dims; ++i) {
    const int g = i / l.group;
    double v = 0.0, s = 0.0;
    switch (f) {
      case CacheFormat::v32_fp8: {
        float sf;
        std::memcpy(&sf, &r[512 + 4 * g], 4);
        s = sf;
        v = num::e4m3_to_f32(r[i]);
        break;
      }
      case CacheFormat::v4_fp8: s = std::ldexp(1.0, r[576 + g] - 127); v = num::e4m3_to_f32(r[i]); break;
      case CacheFormat::v4_int8: s = std::ldexp(1.0, r[576 + g] - 127); v = static_cast<int8_t>(r[i]); break;
      case CacheFormat::v41_fp8: s = std::ldexp(1.0, r[512 + g] - 127); v = num::e4m3_to_f32(r[i]); break;
      case CacheFormat::v41_fp4:
        s = num::e4m3_to_f32(r[256 + g]);
        v = num::e2m1_to_f32(static_cast<uint8_t>(i % 2 == 0 ? r[i / 2] & 0xf : r[i / 2] >> 4));
        break;
    }
    out[i] = num::f32_to_bf16(static_cast<float>(v * s));
  }
  const int rope_at = f == CacheFormat::v32_fp8 ? 528 : 448;
  for (int i = l.quant_dims; i < l.d_qk; ++i) {
    const int b = rope_at + 2 * (i - l.quant_dims);
    out[i] = static_cast<uint16_t>(r[b] | (r[b + 1] << 8));
  }
  return out;
}

// A host-side paged cache: bytes filled with a poison value, viewed as [num_pages, P, 1, bpt] with
// a free page stride, or as the 2-D [num_pages, page_bytes] form.
struct HostCache {
  CacheFormat f;
  int64_t num_pages, page_size, page_stride;
  std::vector<uint8_t> bytes;

  HostCache(CacheFormat fmt, int64_t pages, int64_t p, int64_t stride, uint8_t fill = 0xAB)
      : f(fmt), num_pages(pages), page_size(p), page_stride(stride),
        bytes(static_cast<size_t>(std::max<int64_t>(pages * stride, 1)), fill) {}

  latentkv::TensorView view4(void* data = nullptr, latentkv::Device d = {}) {
    const int64_t bpt = ref_layout(f).bpt;
    return {data ? data : bytes.data(), latentkv::DType::u8, {num_pages, page_size, 1, bpt},
            {page_stride, bpt, bpt, 1}, d};
  }
  latentkv::TensorView view2(void* data = nullptr, latentkv::Device d = {}) {
    return {data ? data : bytes.data(), latentkv::DType::u8, {num_pages, page_stride},
            {page_stride, 1}, d};
  }
  int64_t num_slots() const { return num_pages * page_size; }

  // Byte positions of slot's logical record, from SPEC.md's addressing formulas.
  std::vector<int64_t> record_positions(int64_t slot) const {
    const RefLayout l = ref_layout(f);
    const int64_t page = slot / page_size, t = slot % page_size;
    std::vector<int64_t> pos;
    if (l.split) {
      for (int i = 0; i < 576; ++i) pos.push_back(page * page_stride + t * 576 + i);
      for (int i = 0; i < 8; ++i) pos.push_back(page * page_stride + page_size * 576 + t * 8 + i);
    } else {
      for (int i = 0; i < l.bpt; ++i) pos.push_back(page * page_stride + t * l.bpt + i);
    }
    return pos;
  }
  std::vector<uint8_t> record(int64_t slot) const {
    std::vector<uint8_t> r;
    for (int64_t p : record_positions(slot)) r.push_back(bytes[p]);
    return r;
  }
};

// Latents whose groups span many binades (each group scaled by 2^k, k in [-14, 12]), with a few
// exact zeros and all-zero groups, so every scale rule is exercised. Values are f32; round_to_bf16
// makes them bf16-exact.
inline std::vector<float> random_latents(int64_t n, int d_qk, int group, uint32_t seed,
                                         bool round_to_bf16 = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-14, 12);
  std::vector<float> x(static_cast<size_t>(n) * d_qk);
  for (int64_t t = 0; t < n; ++t) {
    float s = 1.0f;
    for (int i = 0; i < d_qk; ++i) {
      if (i % group == 0) s = rng() % 16 == 0 ? 0.0f : std::ldexp(1.0f, binade(rng));
      float v = normal(rng) * s;
      if (rng() % 61 == 0) v = 0.0f;
      x[t * d_qk + i] = round_to_bf16 ? num::round_bf16(v) : v;
    }
  }
  return x;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = num::f32_to_bf16(x[i]);
  return h;
}

// Page stride rounded up to a multiple of 16 bytes (what the GPU paths need).
inline int64_t padded_stride(CacheFormat f, int64_t page_size) {
  return (page_size * ref_layout(f).bpt + 15) / 16 * 16;
}

}  // namespace lkv_test
