// The float64 oracle of sparse_decode: SPEC.md section 4, step by step, in double precision.
//
// It is deliberately plain: two passes over the scores (max, then the sum of exponentials), no online
// softmax, no reuse of the dequantized keys across heads. Every backend is judged against it. The
// only parallelism is over (request, query token) pairs, whose results never interact, so the output
// does not depend on the thread count.
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_common/attend_oracle.h"
#include "decode/cpu/decode_cpu.h"

namespace latentkv::decode {
namespace {

// One attended token: the cache it lives in and its slot there.
struct Attended {
  const CacheRef* cache;
  int64_t slot;
};

// The attended set of (i, j): the valid main candidates, then the valid extra ones.
std::vector<Attended> attended_set(const Params& p, int64_t i, int64_t j) {
  std::vector<Attended> set;
  for (const CacheRef* c : {&p.main, &p.extra}) {
    const int64_t count = valid_count(*c, i);
    for (int64_t k = 0; k < count; ++k) {
      const int64_t slot = candidate_slot(*c, i, j, k, count);
      if (slot != -1) set.push_back({c, slot});
    }
  }
  return set;
}

}  // namespace

void sparse_decode_oracle(const Params& p) {
  const int64_t pairs = p.b * p.s_q;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int64_t i = pair / p.s_q, j = pair % p.s_q;
    const std::vector<Attended> set = attended_set(p, i, j);
    const int64_t n = static_cast<int64_t>(set.size());

    // K of every attended token, dequantized exactly (bf16), widened to double.
    std::vector<double> k(static_cast<size_t>(n * p.d_qk));
    std::vector<uint16_t> row(static_cast<size_t>(p.d_qk));
    for (int64_t t = 0; t < n; ++t) {
      dequantize_token(*set[t].cache, set[t].slot, row.data());
      for (int d = 0; d < p.d_qk; ++d) k[t * p.d_qk + d] = num::bf16_to_f32(row[d]);
    }

    std::vector<double> s(static_cast<size_t>(n));
    for (int64_t h = 0; h < p.h_q; ++h) {
      const uint16_t* q = p.q + i * p.stride_q_b + j * p.stride_q_s + h * p.stride_q_h;
      uint16_t* out = p.out + i * p.stride_out_b + j * p.stride_out_s + h * p.stride_out_h;
      float* lse = p.lse + i * p.stride_lse_b + h * p.stride_lse_h + j * p.stride_lse_s;

      // A lonely query: no valid key, so no softmax; out 0 and lse +inf (with or without a sink).
      if (n == 0) {
        for (int d = 0; d < kDimV; ++d) out[d] = num::f32_to_bf16(0.0f);
        *lse = std::numeric_limits<float>::infinity();
        continue;
      }

      double qd[576];
      for (int d = 0; d < p.d_qk; ++d) qd[d] = num::bf16_to_f32(q[d]);
      double acc[kDimV];
      const cpu_common::AttendRow r =
          cpu_common::attend_row_f64(qd, k.data(), n, p.d_qk, static_cast<double>(p.scale), s.data(), acc);
      const double l = r.lse;
      const double factor = p.sink ? cpu_common::sink_factor(p.sink[h], l) : 1.0;
      for (int d = 0; d < kDimV; ++d)
        out[d] = num::f32_to_bf16(static_cast<float>(acc[d] * factor));
      *lse = static_cast<float>(l);
    }
  }
}

}  // namespace latentkv::decode
