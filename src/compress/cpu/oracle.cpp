// The float64 oracle of compress_kv: SPEC.md section 3, step by step, in double precision.
//
// It is deliberately plain: no online softmax, no vectorisation, no reuse across outputs. Its job is
// to be obviously right, and to say for each value how far an honest fp32 computation may land from
// it (y_tol), so that check.h can tell a rounding ambiguity from a bug.
#include <cmath>
#include <limits>

#include "compress/cpu/compress_cpu.h"

namespace latentkv::compress {
namespace {

// fp32 unit roundoff.
constexpr double kU32 = 1.0 / 16777216.0;  // 2^-24

// How many units of roundoff an fp32 implementation may accumulate. A softmax-weighted sum of C terms
// in fp32 errs by at most about (C + a few) u relative to sum_i w_i |v_i| (a bound, usually far from
// reached); the normalisation, weight and division add a few u relative to |y|. The bound is scaled
// by the window length so that C = 1000 is judged as fairly as C = 4.
double sum_error_units(int64_t c) { return 8.0 + 2.0 * std::sqrt(static_cast<double>(c)) * 4.0; }

const float* state_row(const Params& p, int64_t req, int64_t pos) {
  const int64_t lb = pos / p.block_size;
  const int64_t phys = p.block_table[req * p.stride_table_req + lb];
  return p.state + phys * p.stride_state_block + (pos % p.block_size) * p.stride_state_row;
}

}  // namespace

OracleRecord oracle_record(const Params& p, int64_t i) {
  OracleRecord out{};
  const int64_t b = p.boundary[i];
  const int64_t req = p.token_to_req[b];
  const int64_t pos = p.positions[b];
  const int64_t C = p.compress_ratio;

  // 1-2. Per-dimension softmax over the window, then the weighted sum of values.
  double c[kDim], mag[kDim];
  for (int d = 0; d < kDim; ++d) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t t = 0; t < C; ++t) m = std::fmax(m, state_row(p, req, pos - C + 1 + t)[kDim + d]);
    double den = 0, num = 0, abs_num = 0;
    for (int64_t t = 0; t < C; ++t) {
      const float* row = state_row(p, req, pos - C + 1 + t);
      const double w = std::exp(static_cast<double>(row[kDim + d]) - m);
      den += w;
      num += w * row[d];
      abs_num += w * std::fabs(static_cast<double>(row[d]));
    }
    c[d] = num / den;
    mag[d] = abs_num / den;
  }

  // 3. RMSNorm with the bf16 weight.
  double sum_sq = 0;
  for (int d = 0; d < kDim; ++d) sum_sq += c[d] * c[d];
  const double rstd = 1.0 / std::sqrt(sum_sq / kDim + static_cast<double>(p.eps));
  const double units = sum_error_units(C);
  for (int d = 0; d < kDim; ++d) {
    const double w = num::bf16_to_f32(p.rms_weight[d]);
    out.y[d] = c[d] * rstd * w;
    // Error of c (absolute, from the sum) carried through rstd * w, plus a few roundings of y itself
    // and the relative error of rstd (itself a 512-term sum of squares).
    out.y_tol[d] = (units * kU32 * mag[d]) * rstd * std::fabs(w) + 24.0 * kU32 * std::fabs(out.y[d]);
  }

  // 5. RoPE on the fp32 value of y, GPT-J interleaved pairs, cos/sin row (p / C) * C.
  const float* cs = p.cos_sin + ((pos / C) * C) * p.stride_cos_pos;
  for (int j = 0; j < kRope / 2; ++j) {
    const double u = static_cast<float>(out.y[kNope + 2 * j]);
    const double v = static_cast<float>(out.y[kNope + 2 * j + 1]);
    const double co = cs[j], si = cs[kRope / 2 + j];
    out.rope[2 * j] = u * co - v * si;
    out.rope[2 * j + 1] = v * co + u * si;
    const double du = out.y_tol[kNope + 2 * j], dv = out.y_tol[kNope + 2 * j + 1];
    const double mag = std::fabs(u * co) + std::fabs(v * si) + std::fabs(v * co) + std::fabs(u * si);
    out.rope_tol[2 * j] = du * std::fabs(co) + dv * std::fabs(si) + 4.0 * kU32 * mag;
    out.rope_tol[2 * j + 1] = dv * std::fabs(co) + du * std::fabs(si) + 4.0 * kU32 * mag;
  }
  return out;
}

void compress_oracle(const Params& p) {
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < p.num_outputs; ++i) {
    const int64_t b = p.boundary[i];
    const int64_t slot = p.slot_mapping[b];
    if (slot < 0) continue;
    const OracleRecord r = oracle_record(p, i);
    uint8_t* data = p.kv + data_offset(p, slot);
    uint8_t* scales = p.kv + scale_offset(p, slot);

    // 4. NoPE: the bf16 round trip, then per group of 64 a power-of-two scale and the payload.
    for (int g = 0; g < kNumGroups; ++g) {
      float z[kGroup];
      float amax = 0;
      for (int k = 0; k < kGroup; ++k) {
        z[k] = num::round_bf16(static_cast<float>(r.y[g * kGroup + k]));
        amax = std::fmax(amax, std::fabs(z[k]));
      }
      const int e = num::compressor_scale_exp(amax, inv_qmax(p.fp8));
      const float inv_scale = num::exp2i(-e);
      for (int k = 0; k < kGroup; ++k) data[g * kGroup + k] = encode_payload(z[k] * inv_scale, p.fp8);
      scales[g] = num::ue8m0_from_exp(e);
    }
    scales[kNumGroups] = 0;

    // 5. RoPE dims stored as bf16 (little-endian).
    for (int j = 0; j < kRope; ++j) {
      const uint16_t h = num::f32_to_bf16(static_cast<float>(r.rope[j]));
      data[kNope + 2 * j] = static_cast<uint8_t>(h & 0xff);
      data[kNope + 2 * j + 1] = static_cast<uint8_t>(h >> 8);
    }
  }
}

}  // namespace latentkv::compress
