// The fast fp32 CPU path of compress_kv.
//
// Work split: OpenMP threads take outputs (dynamic schedule: windows differ in cost only by C, but
// outputs may be skipped). Each output streams its window once, kChunk rows at a time: the chunk's
// per-dimension maximum is found first so that the running sums are rescaled once per chunk rather
// than once per row, and the inner loops run over the 512 contiguous dimensions so they vectorise.
#include <cmath>
#include <limits>

#include "compress/cpu/compress_cpu.h"

namespace latentkv::compress {
namespace {

constexpr int kChunk = 8;  // rows per rescale: 8 row pointers stay in registers, 1/8 of the rescales

struct Accum {
  alignas(64) float m[kDim];
  alignas(64) float s[kDim];
  alignas(64) float acc[kDim];
};

void pool_window(const Params& p, int64_t req, int64_t pos, Accum& a) {
  const int64_t C = p.compress_ratio;
  for (int d = 0; d < kDim; ++d) {
    a.m[d] = -std::numeric_limits<float>::infinity();
    a.s[d] = 0.0f;
    a.acc[d] = 0.0f;
  }
  const int64_t first = pos - C + 1;
  for (int64_t t0 = 0; t0 < C; t0 += kChunk) {
    const int n = static_cast<int>(std::min<int64_t>(kChunk, C - t0));
    const float* rows[kChunk];
    for (int r = 0; r < n; ++r) {
      const int64_t t = first + t0 + r;
      const int64_t phys = p.block_table[req * p.stride_table_req + t / p.block_size];
      rows[r] = p.state + phys * p.stride_state_block + (t % p.block_size) * p.stride_state_row;
    }
    for (int d = 0; d < kDim; ++d) {
      float cm = rows[0][kDim + d];
      for (int r = 1; r < n; ++r) cm = std::fmax(cm, rows[r][kDim + d]);
      const float nm = std::fmax(a.m[d], cm);
      const float rescale = std::exp(a.m[d] - nm);  // exp(-inf) = 0 on the first chunk
      float s = a.s[d] * rescale;
      float acc = a.acc[d] * rescale;
      for (int r = 0; r < n; ++r) {
        const float w = std::exp(rows[r][kDim + d] - nm);
        s += w;
        acc += w * rows[r][d];
      }
      a.m[d] = nm;
      a.s[d] = s;
      a.acc[d] = acc;
    }
  }
}

void write_record(const Params& p, int64_t pos, const float* c, uint8_t* data, uint8_t* scales) {
  // RMSNorm: y = c * rsqrt(mean(c^2) + eps) * w, multiplied in that order.
  float sum_sq = 0.0f;
  for (int d = 0; d < kDim; ++d) sum_sq += c[d] * c[d];
  const float rstd = 1.0f / std::sqrt(sum_sq / static_cast<float>(kDim) + p.eps);
  float y[kDim];
  for (int d = 0; d < kDim; ++d) y[d] = c[d] * rstd * num::bf16_to_f32(p.rms_weight[d]);

  for (int g = 0; g < kNumGroups; ++g) {
    float z[kGroup];
    float amax = 0.0f;
    for (int k = 0; k < kGroup; ++k) {
      z[k] = num::round_bf16(y[g * kGroup + k]);
      amax = std::fmax(amax, std::fabs(z[k]));
    }
    const int e = num::compressor_scale_exp(amax, inv_qmax(p.fp8));
    const float inv_scale = num::exp2i(-e);
    for (int k = 0; k < kGroup; ++k) data[g * kGroup + k] = encode_payload(z[k] * inv_scale, p.fp8);
    scales[g] = num::ue8m0_from_exp(e);
  }
  scales[kNumGroups] = 0;

  const int64_t C = p.compress_ratio;
  const float* cs = p.cos_sin + ((pos / C) * C) * p.stride_cos_pos;
  for (int j = 0; j < kRope / 2; ++j) {
    const float u = y[kNope + 2 * j], v = y[kNope + 2 * j + 1];
    const float co = cs[j], si = cs[kRope / 2 + j];
    const uint16_t hu = num::f32_to_bf16(u * co - v * si);
    const uint16_t hv = num::f32_to_bf16(v * co + u * si);
    data[kNope + 4 * j + 0] = static_cast<uint8_t>(hu & 0xff);
    data[kNope + 4 * j + 1] = static_cast<uint8_t>(hu >> 8);
    data[kNope + 4 * j + 2] = static_cast<uint8_t>(hv & 0xff);
    data[kNope + 4 * j + 3] = static_cast<uint8_t>(hv >> 8);
  }
}

}  // namespace

void compress_cpu_fast(const Params& p) {
#pragma omp parallel
  {
    Accum a;
    float c[kDim];
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < p.num_outputs; ++i) {
      const int64_t b = p.boundary[i];
      const int64_t slot = p.slot_mapping[b];
      if (slot < 0) continue;
      const int64_t pos = p.positions[b];
      pool_window(p, p.token_to_req[b], pos, a);
      for (int d = 0; d < kDim; ++d) c[d] = a.acc[d] / a.s[d];
      write_record(p, pos, c, p.kv + data_offset(p, slot), p.kv + scale_offset(p, slot));
    }
  }
}

}  // namespace latentkv::compress
