// cpu_common/attend_oracle.h: the float64 attention of one query row, shared by the oracles of
// sparse decode, sparse prefill and dense decode (SPEC.md sections 4-6), so the three ops are judged
// by one piece of math that reads like it.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace latentkv::cpu_common {

inline constexpr int kOracleDimV = 512;

struct AttendRow {
  double lse;        // ln(sum exp(s))
  double max_logit;  // max s
};

// For n >= 1 keys: s = scale * q . k; lse = ln(sum exp(s)) with the maximum taken out for range;
// acc = softmax(s) @ V, V being the first 512 dims of each key. q: [d_qk]; k: [n, d_qk];
// s: [n] scratch; acc: [512] output. (n == 0, a lonely query, is the caller's case.)
inline AttendRow attend_row_f64(const double* q, const double* k, int64_t n, int d_qk, double scale,
                                double* s, double* acc) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t t = 0; t < n; ++t) {
    double dot = 0;
    for (int d = 0; d < d_qk; ++d) dot += q[d] * k[t * d_qk + d];
    s[t] = scale * dot;
    m = std::fmax(m, s[t]);
  }
  double sum = 0;
  for (int64_t t = 0; t < n; ++t) sum += std::exp(s[t] - m);
  for (int d = 0; d < kOracleDimV; ++d) acc[d] = 0;
  for (int64_t t = 0; t < n; ++t) {
    const double w = std::exp(s[t] - m) / sum;
    for (int d = 0; d < kOracleDimV; ++d) acc[d] += w * k[t * d_qk + d];
  }
  return {m + std::log(sum), m};
}

// The sink scales the output by 1 / (1 + exp(sink - lse)); lse is unchanged. A +inf sink takes
// every weight (factor 0); -inf takes none (exp gives 0, factor 1).
inline double sink_factor(double sink, double lse) {
  return sink == std::numeric_limits<double>::infinity() ? 0.0 : 1.0 / (1.0 + std::exp(sink - lse));
}

}  // namespace latentkv::cpu_common
