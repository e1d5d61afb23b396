// Host side of the narrow-kernel probes (narrow_rs.cu; before it tokens_as_m.cu, bench/NOTES.md v40):
// the workload (V3.2-style records, index lists, Q), the float64 check of a few CTAs and the
// flushed timing, so that a probe's file holds only its kernels and their forms.
// Records: 512 finite e4m3 bytes (no 0x7f / 0xff), 4 power-of-two fp32 scales, 64 bf16 RoPE dims.
// Workload: kCtas CTAs of kRows query rows over kTopk candidates each, random from a 1M-token
// cache (688 MB, past the L2), or (consecutive()) each CTA's candidates one run of records.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

constexpr int kRows = 16, kTok = 64, kDqk = 576, kDv = 512, kRec = 656, kThreads = 256;
constexpr int kTopk = 2048, kCtas = 256;
constexpr int64_t kCacheTokens = 1 << 20;

// A probe kernel: (cache, idx [kCtas][kTopk], q [kCtas][kRows][kDqk] bf16, out [kCtas][kRows][kDv]
// fp32, softmax scale x log2 e); kCtas CTAs of kThreads threads.
using ProbeKernel = void (*)(const uint8_t*, const int32_t*, const uint16_t*, float*, float);

inline float bf16_to_f(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float e4m3_to_f(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return s ? -v : v;
}

struct ProbeWorkload {
  std::vector<uint8_t> cache;
  std::vector<int32_t> idx;
  std::vector<uint16_t> q;
  std::vector<float> out;
  uint8_t* d_cache = nullptr;
  int32_t* d_idx = nullptr;
  uint16_t* d_q = nullptr;
  float* d_out = nullptr;
  float* d_flush = nullptr;
  static constexpr size_t kFlushFloats = 64u << 20;  // 256 MB, written before each timed call
  float scale = 1.0f / std::sqrt(static_cast<float>(kDqk));
  float scale_log2 = scale * 1.4426950408889634f;
  cudaEvent_t e0{}, e1{};

  ProbeWorkload() {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> byte(0, 255);
    std::normal_distribution<float> nd(0.f, 1.f);
    cache.resize(static_cast<size_t>(kCacheTokens) * kRec);
    for (int64_t k = 0; k < kCacheTokens; ++k) {
      uint8_t* r = cache.data() + k * kRec;
      for (int i = 0; i < 512; ++i) r[i] = static_cast<uint8_t>(byte(rng) & 0xf7);  // exponent <= 14: |v| <= 240
      for (int g = 0; g < 4; ++g) {
        const float s = std::ldexp(1.0f, -6 + (static_cast<int>(k + g) % 3));
        std::memcpy(r + 512 + 4 * g, &s, 4);
      }
      for (int i = 0; i < 64; ++i) {
        const uint16_t h = f_to_bf16(nd(rng));
        std::memcpy(r + 528 + 2 * i, &h, 2);
      }
    }
    std::uniform_int_distribution<int> tok(0, static_cast<int>(kCacheTokens - 1));
    idx.resize(static_cast<size_t>(kCtas) * kTopk);
    for (auto& v : idx) v = tok(rng);
    q.resize(static_cast<size_t>(kCtas) * kRows * kDqk);
    for (auto& v : q) v = f_to_bf16(nd(rng) * 0.5f);
    out.resize(static_cast<size_t>(kCtas) * kRows * kDv);
    CK(cudaMalloc(&d_cache, cache.size()));
    CK(cudaMalloc(&d_idx, idx.size() * 4));
    CK(cudaMalloc(&d_q, q.size() * 2));
    CK(cudaMalloc(&d_out, out.size() * 4));
    CK(cudaMalloc(&d_flush, kFlushFloats * 4));
    CK(cudaMemcpy(d_cache, cache.data(), cache.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_idx, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_q, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(d_flush, 0, kFlushFloats * 4));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
  }
  // Each CTA's candidates become one run of consecutive records (the token count of dense pages:
  // a request's cache split in two, as dense decode's plan splits b 128).
  void consecutive() {
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i % kCacheTokens);
    CK(cudaMemcpy(d_idx, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
  }
  void launch(ProbeKernel kern, int smem) { kern<<<kCtas, kThreads, smem>>>(d_cache, d_idx, d_q, d_out, scale_log2); }
  // One call, then rows 0, 5, 10, 15 of CTAs 0, 137 and the last against a float64 computation
  // from the same bytes: max |out - ref| / max |ref|.
  void check(ProbeKernel kern, int smem, const char* label) {
    launch(kern, smem);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(out.data(), d_out, out.size() * 4, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int cta : {0, 137, kCtas - 1}) {
      std::vector<float> keys(static_cast<size_t>(kTopk) * kDqk);
      for (int k = 0; k < kTopk; ++k) {
        const uint8_t* r = cache.data() + static_cast<int64_t>(idx[static_cast<size_t>(cta) * kTopk + k]) * kRec;
        for (int d = 0; d < 512; ++d) {
          float sc;
          std::memcpy(&sc, r + 512 + 4 * (d / 128), 4);
          keys[static_cast<size_t>(k) * kDqk + d] = e4m3_to_f(r[d]) * sc;
        }
        for (int d = 0; d < 64; ++d) {
          uint16_t h;
          std::memcpy(&h, r + 528 + 2 * d, 2);
          keys[static_cast<size_t>(k) * kDqk + 512 + d] = bf16_to_f(h);
        }
      }
      for (int row = 0; row < kRows; row += 5) {
        std::vector<double> sc(kTopk);
        double mx = -1e300;
        for (int k = 0; k < kTopk; ++k) {
          double a = 0;
          for (int d = 0; d < kDqk; ++d)
            a += static_cast<double>(bf16_to_f(q[(static_cast<size_t>(cta) * kRows + row) * kDqk + d])) *
                 keys[static_cast<size_t>(k) * kDqk + d];
          sc[k] = a * scale;
          mx = std::max(mx, sc[k]);
        }
        double sum = 0;
        for (auto& v : sc) sum += (v = std::exp(v - mx));
        double amax = 0, emax = 0;
        for (int d = 0; d < kDv; ++d) {
          double ref = 0;
          for (int k = 0; k < kTopk; ++k) ref += sc[k] * keys[static_cast<size_t>(k) * kDqk + d];
          ref /= sum;
          amax = std::max(amax, std::fabs(ref));
          emax = std::max(emax, std::fabs(ref - out[(static_cast<size_t>(cta) * kRows + row) * kDv + d]));
        }
        worst = std::max(worst, emax / amax);
      }
    }
    std::printf("check %-28s max |out - ref| / max |ref| over 3 CTAs x 4 rows = %.3e (%s)\n", label, worst,
                worst < 2e-2 ? "ok" : "MISMATCH");
  }
  // Flushed calls (the 256 MB buffer written before each), the median of 15 after 2 warm-ups.
  void time_it(ProbeKernel kern, int smem, const char* label) {
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, kThreads, smem));
    std::vector<float> ts;
    for (int rep = 0; rep < 17; ++rep) {
      CK(cudaMemsetAsync(d_flush, rep, kFlushFloats * 4));
      CK(cudaEventRecord(e0));
      launch(kern, smem);
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (rep >= 2) ts.push_back(ms * 1000.f);
    }
    std::sort(ts.begin(), ts.end());
    const double us = ts[ts.size() / 2];
    const double bytes = static_cast<double>(kCtas) * kTopk * kRec;
    std::printf("%-28s %d CTA(s) per SM: %.1f us median (min %.1f), %.0f GB/s of records\n", label, per_sm, us,
                ts.front(), bytes / (us * 1e-6) / 1e9);
  }
};
