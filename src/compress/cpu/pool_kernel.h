// compress/cpu/pool_kernel.h: the body of the CPU pooling kernel (pool.h), included only by
// pool_sse4.cpp, pool_avx2.cpp and pool_avx512.cpp, each compiled with its instruction set's flags
// and instantiating it for its vector width W (4, 8, 16 fp32 lanes).
//
// Why the loop is shaped as it is (2 Zen 5 cores; numbers and commands in bench/NOTES.md, "CPU fast
// path"). The former scalar loop ran at 4 GB/s while the same pass over the windows with the
// arithmetic removed read 30-37 GB/s and glibc's expf alone, one per element, ran at the equivalent
// of 10.5 GB/s: the arithmetic set the pace, not memory. So this body cuts and widens it:
// - the window is taken kChunk = 8 rows at a time; for each vector of W dims the chunk's maximum is
//   found over its 8 rows, the running (max, sum, weighted sum) are rescaled once, and the 8 rows
//   are added with the sums in registers: 9 exponentials per 8 elements instead of the 16 of a
//   per-row online softmax, and no load or store of a sum inside a chunk;
// - the exponential is a polynomial on whole vectors (vexp), not a libm call per element, and the
//   8- and 16-lane builds fuse its multiply-adds (fmadd): with the rows of one chunk reused (no
//   memory traffic) 2 threads pool 85 GB/s with FMA, 53 without (AVX-512); 45 and 29 (AVX2).
// Dims outer and the chunk's rows inner means 16 interleaved read streams (8 rows x 2 halves).
// Tried: visiting each row whole, with the sums and the chunk maximum kept in L1 arrays (half the
// speed: the sums' loads and stores); 16-row chunks (32 streams, 20-40% slower); 4-row chunks and
// software prefetch of the next chunk (no consistent difference).
//
// Each dimension is one lane and every lane does the same fp32 operations in the same order, so a
// build's result does not depend on which dims a call covers, and the two FMA builds agree to the
// bit (pool.h; the tests check both).
//
// Everything here has internal linkage: an inline function with external linkage compiled with
// -mavx512f in one file could be the copy the linker keeps for every caller, the baseline path on a
// CPU without AVX-512 included.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <limits>

#include "compress/cpu/pool.h"
#include "compress/params.h"

namespace latentkv::compress {
namespace {

constexpr int kChunk = 8;  // rows per rescale: 8 row pointers in registers, 16 read streams

// GCC/Clang vector extensions: W lanes, lane-wise operators. (typedef, not `using`: GCC 12 drops
// the attribute from an alias declaration and would make these scalars.)
template <int W>
struct Vec {
  typedef float F __attribute__((vector_size(4 * W)));
  typedef uint32_t U __attribute__((vector_size(4 * W)));
  static_assert(sizeof(F) == 4 * W && sizeof(U) == 4 * W, "not a vector type");
};

template <int W>
typename Vec<W>::F load(const float* ptr) {
  typename Vec<W>::F v;
  std::memcpy(&v, ptr, sizeof v);  // an unaligned vector load: rows need only 4-byte alignment
  return v;
}

template <int W>
void store(float* ptr, typename Vec<W>::F v) {
  std::memcpy(ptr, &v, sizeof v);
}

template <int W>
typename Vec<W>::F splat(float x) {
  return typename Vec<W>::F{} + x;
}

template <int W>
typename Vec<W>::F vmax(typename Vec<W>::F a, typename Vec<W>::F b) {
  return a > b ? a : b;
}

// a * b + c. Fused (one rounding) in the 8- and 16-lane builds, which both have FMA and so agree to
// the bit; two roundings in the 4-lane build (x86-64-v2 has no FMA; its file is compiled with
// -ffp-contract=off, so the compiler cannot fuse it either).
template <int W>
typename Vec<W>::F fmadd(typename Vec<W>::F a, typename Vec<W>::F b, typename Vec<W>::F c) {
  if constexpr (W == 4) {
    return a * b + c;
  } else if constexpr (W == 8) {
#ifdef __FMA__
    return _mm256_fmadd_ps(a, b, c);
#else
    static_assert(W != 8, "the 8-lane build needs -mfma");
#endif
  } else {
#ifdef __AVX512F__
    return _mm512_fmadd_ps(a, b, c);
#else
    static_assert(W != 16, "the 16-lane build needs -mavx512f");
#endif
  }
}

// exp(x) for x <= 0 (every argument here is a score minus a running maximum). Measured over every
// float of [-87.33, 0]: worst error 0.98 ulp without FMA, 1.01 ulp with it. x = n ln2 + r with
// n = round(x log2(e)), |r| <= ln2 / 2; ln2 in two parts (Cody-Waite) keeps r accurate; e^r by the
// degree-6 polynomial of Cephes' expf; 2^n from exponent bits.
// Arguments below -88 (including -inf, the first chunk's rescale of empty sums) give 0: n is then
// -127 and 2^n's bit pattern is 0. The true value is below 2^-126, and the window's largest weight
// is 1, so dropping it cannot change a sum. NaN stays NaN.
template <int W>
typename Vec<W>::F vexp(typename Vec<W>::F x) {
  using F = typename Vec<W>::F;
  using U = typename Vec<W>::U;
  const F lo = splat<W>(-88.0f);
  x = x < lo ? lo : x;  // NaN compares false and stays
  // round(x log2(e)) by adding 1.5 * 2^23: the sum's low mantissa bits hold n + 2^22 (|n| < 2^22).
  const F magic = splat<W>(12582912.0f);
  const F t = fmadd<W>(x, splat<W>(1.44269504088896341f), magic);
  const F n = t - magic;
  F r = fmadd<W>(n, splat<W>(-0.693359375f), x);  // ln2's high part: 9 bits, n * it is exact
  r = fmadd<W>(n, splat<W>(2.12194440e-4f), r);   // and its low part
  F q = splat<W>(1.9875691500e-4f);
  q = fmadd<W>(q, r, splat<W>(1.3981999507e-3f));
  q = fmadd<W>(q, r, splat<W>(8.3334519073e-3f));
  q = fmadd<W>(q, r, splat<W>(4.1665795894e-2f));
  q = fmadd<W>(q, r, splat<W>(1.6666665459e-1f));
  q = fmadd<W>(q, r, splat<W>(5.0000001201e-1f));
  q = fmadd<W>(q, r * r, r) + splat<W>(1.0f);
  // 2^n = (n + 127) << 23. t's bits are 0x4b400000 + n, and 0x4b400000 << 23 wraps to 0.
  U bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = (bits + 127u) << 23;
  F two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return q * two_n;
}

const float* state_row(const Params& p, int64_t req, int64_t t) {
  const int64_t phys = p.block_table[req * p.stride_table_req + t / p.block_size];
  return p.state + phys * p.stride_state_block + (t % p.block_size) * p.stride_state_row;
}

// Adds one chunk of rows to the running (m, s, acc) of dims [d_begin, d_end). kRows > 0 fixes the
// row count at compile time (full chunks, unrolled); kRows == 0 takes n (the window's last rows).
template <int W, int kRows>
void add_chunk(const float* const* rows, int n, int d_begin, int d_end, float* m, float* s,
               float* acc) {
  using F = typename Vec<W>::F;
  const int num_rows = kRows > 0 ? kRows : n;
  for (int d = d_begin; d < d_end; d += W) {
    F chunk_max = load<W>(rows[0] + kDim + d);
    for (int r = 1; r < num_rows; ++r) chunk_max = vmax<W>(chunk_max, load<W>(rows[r] + kDim + d));
    const F old_max = load<W>(m + d);
    const F new_max = vmax<W>(old_max, chunk_max);
    const F rescale = vexp<W>(old_max - new_max);
    F sum = load<W>(s + d) * rescale;
    F weighted = load<W>(acc + d) * rescale;
    for (int r = 0; r < num_rows; ++r) {
      const F w = vexp<W>(load<W>(rows[r] + kDim + d) - new_max);
      sum = sum + w;
      weighted = fmadd<W>(w, load<W>(rows[r] + d), weighted);
    }
    store<W>(m + d, new_max);
    store<W>(s + d, sum);
    store<W>(acc + d, weighted);
  }
}

template <int W>
void pool_window(const Params& p, int64_t req, int64_t pos, int d_begin, int d_end, float* c) {
  static_assert(kPoolDimAlign % W == 0, "a dim range must be whole vectors of every build");
  using F = typename Vec<W>::F;
  alignas(64) float m[kDim], s[kDim], acc[kDim];
  for (int d = d_begin; d < d_end; d += W) {
    store<W>(m + d, splat<W>(-std::numeric_limits<float>::infinity()));
    store<W>(s + d, splat<W>(0.0f));
    store<W>(acc + d, splat<W>(0.0f));
  }
  const int64_t C = p.compress_ratio;
  const int64_t first = pos - C + 1;
  for (int64_t t0 = 0; t0 < C; t0 += kChunk) {
    const int n = C - t0 < kChunk ? static_cast<int>(C - t0) : kChunk;
    const float* rows[kChunk];
    for (int r = 0; r < n; ++r) rows[r] = state_row(p, req, first + t0 + r);
    if (n == kChunk) add_chunk<W, kChunk>(rows, n, d_begin, d_end, m, s, acc);
    else add_chunk<W, 0>(rows, n, d_begin, d_end, m, s, acc);
  }
  for (int d = d_begin; d < d_end; d += W) {
    const F quotient = load<W>(acc + d) / load<W>(s + d);
    store<W>(c + d, quotient);
  }
}

template <int W>
void vexp_array(const float* x, float* y, int64_t n) {
  for (int64_t k = 0; k < n; k += W) store<W>(y + k, vexp<W>(load<W>(x + k)));
}

}  // namespace
}  // namespace latentkv::compress
