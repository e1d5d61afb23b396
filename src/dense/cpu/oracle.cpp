// The float64 oracle of dense_decode: SPEC.md section 6, step by step, in double precision.
//
// Deliberately plain: for every (request, query row, head) it loads the visible keys of the head's
// kv head, takes two passes over the scores (max, then the sum of exponentials) and sums the
// weighted values. Every backend is judged against it. The only parallelism is over
// (request, query row) pairs, whose results never interact, so the output does not depend on the
// thread count.
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_common/attend_oracle.h"
#include "dense/cpu/dense_cpu.h"

namespace latentkv::dense {

void dense_decode_oracle(const Params& p) {
  const int64_t pairs = p.b * p.s_q;
  const int64_t heads_per_kv = p.h_q / p.h_kv;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int64_t i = pair / p.s_q, j = pair % p.s_q;
    const int64_t n = visible_keys(p, i, j);
    std::vector<float> row(static_cast<size_t>(p.d_qk));
    std::vector<double> k(static_cast<size_t>(n * p.d_qk)), s(static_cast<size_t>(n));
    int64_t loaded_kv_head = -1;

    for (int64_t h = 0; h < p.h_q; ++h) {
      const uint16_t* q = p.q + i * p.stride_q_b + j * p.stride_q_s + h * p.stride_q_h;
      uint16_t* out = p.out + i * p.stride_out_b + j * p.stride_out_s + h * p.stride_out_h;
      float* lse = p.lse + i * p.stride_lse_b + h * p.stride_lse_h + j * p.stride_lse_s;

      // A row that sees no key: out 0 and lse +inf.
      if (n == 0) {
        for (int d = 0; d < kDimV; ++d) out[d] = f32_to_half(p.dtype, 0.0f);
        *lse = std::numeric_limits<float>::infinity();
        continue;
      }

      // K of the visible tokens [0, n) of this head's kv head, widened to double.
      const int64_t kv_head = h / heads_per_kv;
      if (kv_head != loaded_kv_head) {
        for (int64_t t = 0; t < n; ++t) {
          load_key(p, i, t, kv_head, row.data());
          for (int d = 0; d < p.d_qk; ++d) k[t * p.d_qk + d] = row[d];
        }
        loaded_kv_head = kv_head;
      }

      std::vector<double> qd(static_cast<size_t>(p.d_qk));
      for (int d = 0; d < p.d_qk; ++d) qd[d] = half_to_f32(p.dtype, q[d]);
      double acc[kDimV];
      const double l = cpu_common::attend_row_f64(qd.data(), k.data(), n, p.d_qk,
                                                  static_cast<double>(p.scale), s.data(), acc)
                           .lse;
      for (int d = 0; d < kDimV; ++d) out[d] = f32_to_half(p.dtype, static_cast<float>(acc[d]));
      *lse = static_cast<float>(l);
    }
  }
}

}  // namespace latentkv::dense
