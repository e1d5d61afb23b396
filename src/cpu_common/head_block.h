// cpu_common/head_block.h: the fp32 inner step shared by the fast CPU paths of sparse_prefill and
// dense_decode: softmax attention of a block of up to kHeadBlock heads over n gathered fp32 keys.
//
// The caller gathers (and converts) each key once into a row-major [n, key_stride] buffer and then
// calls this for every block of heads that shares those keys, so a key row is loaded into L1 once
// per block rather than once per head. Softmax takes two passes over the scores (max, then
// exponentials) with fp32 sums and accumulators; inner loops run over the contiguous d dimension
// and vectorise. The order of operations is fixed by the code alone, so a result never depends on
// the thread that computed it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace latentkv::cpu_common {

// 4 accumulators of 512 floats (8 KiB) plus the current key row (2.3 KiB) stay in L1.
inline constexpr int kHeadBlock = 4;
inline constexpr int kMaxDimV = 512;

inline float dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// q: [nh, d_qk] queries with the softmax scale already folded in; k: n > 0 rows of key_stride
// floats, K = the first d_qk, V = the first d_v (<= kMaxDimV) of each. s: scratch of nh * n floats.
// Outputs per head hh: max[hh] = max score, sum[hh] = sum exp(s - max), acc[hh][0, d_v) =
// sum exp(s - max) * v (unnormalised).
inline void attend_head_block(const float* q, int nh, const float* k, int64_t n, int64_t key_stride,
                              int d_qk, int d_v, float* s, float (*acc)[kMaxDimV], float* max,
                              float* sum) {
  // Pass 1: scores, each key row read once for the whole block.
  std::fill(max, max + nh, -std::numeric_limits<float>::infinity());
  for (int64_t t = 0; t < n; ++t) {
    const float* kt = k + t * key_stride;
    for (int hh = 0; hh < nh; ++hh) {
      const float v = dot(q + hh * d_qk, kt, d_qk);
      s[hh * n + t] = v;
      max[hh] = std::fmax(max[hh], v);
    }
  }
  // Pass 2: unnormalised weights, their sum, and the weighted sum of V.
  for (int hh = 0; hh < nh; ++hh) {
    float* sh = s + hh * n;
    float total = 0.0f;
    for (int64_t t = 0; t < n; ++t) {
      sh[t] = std::exp(sh[t] - max[hh]);
      total += sh[t];
    }
    sum[hh] = total;
    std::fill(acc[hh], acc[hh] + d_v, 0.0f);
  }
  for (int64_t t = 0; t < n; ++t) {
    const float* vt = k + t * key_stride;
    for (int hh = 0; hh < nh; ++hh) {
      const float w = s[hh * n + t];
      float* a = acc[hh];
#pragma omp simd
      for (int d = 0; d < d_v; ++d) a[d] += w * vt[d];
    }
  }
}

// The sink factor 1 / (1 + exp(sink - lse)) in fp32; a +inf sink takes every weight (factor 0,
// computed as a special case rather than 1 / inf), -inf none (exp gives 0, factor exactly 1).
inline float sink_factor(float sink, float lse) {
  return sink == std::numeric_limits<float>::infinity() ? 0.0f : 1.0f / (1.0f + std::exp(sink - lse));
}

}  // namespace latentkv::cpu_common
