// Judging compressor records against the float64 oracle (see check.h for the rule).
#include "compress/check.h"

#include <cmath>
#include <sstream>

#include "compress/cpu/compress_cpu.h"

namespace latentkv::compress {
namespace {

// Decoded value of a payload byte, for ordering: encoding is monotonic (non-decreasing) in its
// input, so the bytes an input interval can produce are exactly those whose values lie between the
// values of the interval ends' bytes.
double payload_value(uint8_t b, bool fp8) {
  return fp8 ? static_cast<double>(num::e4m3_to_f32(b)) : static_cast<double>(static_cast<int8_t>(b));
}

double bf16_ulp(double x) {
  const double ax = std::fabs(x);
  if (ax < 1e-38) return std::ldexp(1.0, -133);
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(ax))) - 7);
}

}  // namespace

CheckReport check_records(const Params& p, const uint8_t* result) {
  CheckReport rep;
  auto fail = [&](int64_t i, const std::string& what) {
    if (rep.failures++ == 0) {
      std::ostringstream os;
      os << "output " << i << " (slot " << p.slot_mapping[p.boundary[i]] << "): " << what;
      rep.first_failure = os.str();
    }
  };
  for (int64_t i = 0; i < p.num_outputs; ++i) {
    const int64_t slot = p.slot_mapping[p.boundary[i]];
    if (slot < 0) continue;
    ++rep.records;
    const OracleRecord r = oracle_record(p, i);
    const uint8_t* data = result + data_offset(p, slot);
    const uint8_t* scales = result + scale_offset(p, slot);

    for (int g = 0; g < kNumGroups; ++g) {
      // The bf16 values an honest fp32 computation can produce for each dim: [zlo, zhi].
      float zlo[kGroup], zhi[kGroup];
      float amax_lo = 0, amax_hi = 0, amax = 0;
      for (int k = 0; k < kGroup; ++k) {
        const int d = g * kGroup + k;
        zlo[k] = num::round_bf16(static_cast<float>(r.y[d] - r.y_tol[d]));
        zhi[k] = num::round_bf16(static_cast<float>(r.y[d] + r.y_tol[d]));
        const bool straddles_zero = zlo[k] <= 0 && zhi[k] >= 0;
        amax_lo = std::fmax(amax_lo, straddles_zero ? 0.0f : std::fmin(std::fabs(zlo[k]), std::fabs(zhi[k])));
        amax_hi = std::fmax(amax_hi, std::fmax(std::fabs(zlo[k]), std::fabs(zhi[k])));
        amax = std::fmax(amax, std::fabs(num::round_bf16(static_cast<float>(r.y[d]))));
      }
      const int e_oracle = num::compressor_scale_exp(amax, inv_qmax(p.fp8));
      const int e_lo = num::compressor_scale_exp(amax_lo, inv_qmax(p.fp8));
      const int e_hi = num::compressor_scale_exp(amax_hi, inv_qmax(p.fp8));
      const int e_got = static_cast<int>(scales[g]) - 127;
      rep.bytes += kGroup + 1;
      if (e_got != e_oracle) {
        ++rep.differing_bytes;
        if (e_got < e_lo || e_got > e_hi) {
          std::ostringstream os;
          os << "scale byte of group " << g << " is " << int(scales[g]) << ", expected "
             << e_oracle + 127;
          fail(i, os.str());
          continue;
        }
        ++rep.ambiguous_accepted;
      }
      const float inv_scale = num::exp2i(-e_got);
      for (int k = 0; k < kGroup; ++k) {
        const int d = g * kGroup + k;
        const uint8_t got = data[d];
        const uint8_t want =
            encode_payload(num::round_bf16(static_cast<float>(r.y[d])) * num::exp2i(-e_oracle), p.fp8);
        if (got == want) continue;
        ++rep.differing_bytes;
        const double v = payload_value(got, p.fp8);
        const double lo = payload_value(encode_payload(zlo[k] * inv_scale, p.fp8), p.fp8);
        const double hi = payload_value(encode_payload(zhi[k] * inv_scale, p.fp8), p.fp8);
        if (v >= lo && v <= hi) {
          ++rep.ambiguous_accepted;
        } else {
          std::ostringstream os;
          os << "payload byte of dim " << d << " is " << int(got) << ", expected " << int(want)
             << " (y = " << r.y[d] << " +- " << r.y_tol[d] << ")";
          fail(i, os.str());
        }
      }
    }
    rep.bytes += 1;
    if (scales[kNumGroups] != 0) fail(i, "pad byte is not 0");

    for (int j = 0; j < kRope; ++j) {
      rep.bytes += 2;
      const uint16_t h = static_cast<uint16_t>(data[kNope + 2 * j] | (data[kNope + 2 * j + 1] << 8));
      const double got = num::bf16_to_f32(h);
      const uint16_t want = num::f32_to_bf16(static_cast<float>(r.rope[j]));
      if (h == want) continue;
      ++rep.differing_bytes;
      // The rotation of an honest fp32 y may land up to rope_tol from the float64 one (the pair's
      // own tolerances through cos/sin, and the fp32 products); then 1 bf16 ulp for the rounding.
      if (std::fabs(got - r.rope[j]) <= r.rope_tol[j] + bf16_ulp(r.rope[j])) {
        ++rep.rope_accepted;
      } else {
        std::ostringstream os;
        os << "RoPE dim " << kNope + j << " is " << got << ", expected " << r.rope[j];
        fail(i, os.str());
      }
    }
  }
  return rep;
}

}  // namespace latentkv::compress
