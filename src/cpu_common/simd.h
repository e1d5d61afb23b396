// cpu_common/simd.h: the lane-wise vector helpers of the CPU kernels that are built once per x86
// instruction set (cpu_common/isa.h): compress/cpu/pool_kernel.h and cpu_common/head_block_kernel.h.
// W is the build's fp32 lane count (4 SSE4, 8 AVX2, 16 AVX-512); a file includes this only when it
// is compiled with that set's flags.
//
// Everything here has internal linkage: an inline function with external linkage compiled with
// -mavx512f in one file could be the copy the linker keeps for every caller, the baseline path on a
// CPU without AVX-512 included. For the same reason the kernels that include this call no
// standard-library templates (std::min, std::fill, numeric_limits): an unoptimised build emits
// those as weak symbols.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace latentkv::cpu_common::simd {
namespace {

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

// W / 2 bytes at ptr, each zero-extended into two neighbouring uint32 lanes (lanes 2i and 2i + 1
// hold byte i): the two e2m1 codes of a byte, before their nibbles are taken apart.
template <int W>
typename Vec<W>::U widen_pairs(const uint8_t* ptr) {
  typename Vec<W>::U u;
  if constexpr (W == 4) {
    uint16_t pair;
    std::memcpy(&pair, ptr, 2);
    const __m128i v = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(pair));
    std::memcpy(&u, &v, sizeof u);
    return __builtin_shufflevector(u, u, 0, 0, 1, 1);
  } else if constexpr (W == 8) {
#ifdef __AVX2__
    int32_t word;
    std::memcpy(&word, ptr, 4);
    const __m256i v = _mm256_cvtepu8_epi32(_mm_cvtsi32_si128(word));
    std::memcpy(&u, &v, sizeof u);
    return __builtin_shufflevector(u, u, 0, 0, 1, 1, 2, 2, 3, 3);
#else
    static_assert(W != 8, "the 8-lane build needs -mavx2");
#endif
  } else {
#ifdef __AVX512F__
    const __m512i v = _mm512_maskz_cvtepu8_epi32(0xffff, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(ptr)));
    std::memcpy(&u, &v, sizeof u);
    return __builtin_shufflevector(u, u, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
#else
    static_assert(W != 16, "the 16-lane build needs -mavx512f");
#endif
  }
  return u;
}

// W bytes at ptr, zero-extended to W uint32 lanes (one pmovzxbd; the vector extension's
// __builtin_convertvector of a byte vector compiles to a byte-by-byte insert sequence).
template <int W>
typename Vec<W>::U widen_bytes(const uint8_t* ptr) {
  typename Vec<W>::U u;
  if constexpr (W == 4) {
    int32_t word;
    std::memcpy(&word, ptr, 4);
    const __m128i v = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(word));
    std::memcpy(&u, &v, sizeof u);
  } else if constexpr (W == 8) {
#ifdef __AVX2__
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ptr)));
    std::memcpy(&u, &v, sizeof u);
#else
    static_assert(W != 8, "the 8-lane build needs -mavx2");
#endif
  } else {
#ifdef __AVX512F__
    // (The zero-masked form with every lane on: GCC 12 warns that the unmasked form's undefined
    // pass-through register "may be used uninitialized".)
    const __m512i v = _mm512_maskz_cvtepu8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(ptr)));
    std::memcpy(&u, &v, sizeof u);
#else
    static_assert(W != 16, "the 16-lane build needs -mavx512f");
#endif
  }
  return u;
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

}  // namespace
}  // namespace latentkv::cpu_common::simd
