// The float64 oracle of sparse_prefill: SPEC.md section 5, step by step, in double precision.
//
// Deliberately plain: two passes over the scores (max, then the sum of exponentials), no online
// softmax, no reuse of the keys across heads. Every backend is judged against it. The only
// parallelism is over query rows, whose results never interact, so the output does not depend on
// the thread count.
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_common/attend_oracle.h"
#include "prefill/cpu/prefill_cpu.h"

namespace latentkv::prefill {
namespace {

// The attended kv rows of query row `row`, in candidate order (a repeated index counts twice).
std::vector<int64_t> attended_set(const Params& p, int64_t row) {
  std::vector<int64_t> set;
  const KvSegment seg = kv_segment(p, row);
  const int64_t count = valid_count(p, row);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t r = candidate_kv_row(p, row, k, count, seg);
    if (r != -1) set.push_back(r);
  }
  return set;
}

}  // namespace

void sparse_prefill_oracle(const Params& p) {
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t row = 0; row < p.s_q; ++row) {
    const std::vector<int64_t> set = attended_set(p, row);
    const int64_t n = static_cast<int64_t>(set.size());

    // K of every attended token (bf16, exact in double).
    std::vector<double> k(static_cast<size_t>(n * p.d_qk));
    for (int64_t t = 0; t < n; ++t) {
      const uint16_t* kv = p.kv + set[t] * p.stride_kv_s;
      for (int d = 0; d < p.d_qk; ++d) k[t * p.d_qk + d] = num::bf16_to_f32(kv[d]);
    }

    std::vector<double> s(static_cast<size_t>(n));
    for (int64_t h = 0; h < p.h_q; ++h) {
      const uint16_t* q = p.q + row * p.stride_q_s + h * p.stride_q_h;
      uint16_t* out = p.out + row * p.stride_out_s + h * p.stride_out_h;
      float* max_logits = p.max_logits + row * p.stride_max_logits_s + h;
      float* lse = p.lse + row * p.stride_lse_s + h;

      // A lonely query: no valid key, so no softmax; out 0, max_logits -inf, lse +inf.
      if (n == 0) {
        for (int d = 0; d < kDimV; ++d) out[d] = num::f32_to_bf16(0.0f);
        *max_logits = -std::numeric_limits<float>::infinity();
        *lse = std::numeric_limits<float>::infinity();
        continue;
      }

      std::vector<double> qd(static_cast<size_t>(p.d_qk));
      for (int d = 0; d < p.d_qk; ++d) qd[d] = num::bf16_to_f32(q[d]);
      double acc[kDimV];
      const cpu_common::AttendRow r = cpu_common::attend_row_f64(
          qd.data(), k.data(), n, p.d_qk, static_cast<double>(p.sm_scale), s.data(), acc);
      const double l = r.lse, m = r.max_logit;
      // The sink scales out only; lse and max_logits are unchanged.
      const double factor = p.sink ? cpu_common::sink_factor(p.sink[h], l) : 1.0;
      for (int d = 0; d < kDimV; ++d)
        out[d] = num::f32_to_bf16(static_cast<float>(acc[d] * factor));
      *max_logits = static_cast<float>(m);
      *lse = static_cast<float>(l);
    }
  }
}

}  // namespace latentkv::prefill
