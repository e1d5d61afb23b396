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

#include "compress/cpu/pool.h"
#include "compress/params.h"
#include "cpu_common/simd.h"

namespace latentkv::compress {
namespace {

using cpu_common::simd::fmadd;
using cpu_common::simd::load;
using cpu_common::simd::splat;
using cpu_common::simd::store;
using cpu_common::simd::Vec;
using cpu_common::simd::vexp;
using cpu_common::simd::vmax;

constexpr int kChunk = 8;  // rows per rescale: 8 row pointers in registers, 16 read streams

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
    store<W>(m + d, splat<W>(-__builtin_inff()));  // (not numeric_limits: see simd.h on linkage)
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
