// compress/cpu/pool.h: the window pooling of the CPU fast path (SPEC.md section 3, step 2), built
// once per x86 vector instruction set (pool_sse4.cpp, pool_avx2.cpp, pool_avx512.cpp, all from the
// body in pool_kernel.h) and chosen at run time.
//
// Each dimension is one vector lane, and every lane does the same fp32 operations in the same order
// whatever the vector width or the dims a call covers. The AVX2 and AVX-512 builds fuse the same
// multiply-adds and agree to the bit; the SSE4 build (x86-64-v2 has no FMA) rounds those products
// separately, so its bytes may differ in the last bit of a value (every build passes the oracle's
// judge; measured: 1 cache byte in 448512 differs).
#pragma once

#include <cstdint>

#include "compress/params.h"
#include "cpu_common/isa.h"

namespace latentkv::compress {

// The instruction sets and their run-time choice (LKV_CPU_ISA) are cpu_common's (isa.h), shared
// with the attention ops' head block.
using cpu_common::best_cpu_isa;
using cpu_common::cpu_isa_name;
using cpu_common::cpu_supports;
using cpu_common::CpuIsa;
using cpu_common::default_cpu_isa;

// Dimension ranges handed to a pooling kernel start and end on multiples of this (the widest
// vector, 16 fp32 lanes), so every build covers them with whole vectors.
inline constexpr int kPoolDimAlign = 16;
static_assert(kDim % kPoolDimAlign == 0, "the latent must split into whole 16-lane vectors");

// Pools dims [d_begin, d_end) of the window of C rows ending at position pos of request req:
// c[d] = sum_i softmax_i(score[t_i][d]) * value[t_i][d] (the result goes to c[d], d in the range).
// Inputs must already be validated.
using PoolFn = void (*)(const Params& p, int64_t req, int64_t pos, int d_begin, int d_end,
                        float* c);
void pool_window_sse4(const Params& p, int64_t req, int64_t pos, int d_begin, int d_end, float* c);
void pool_window_avx2(const Params& p, int64_t req, int64_t pos, int d_begin, int d_end, float* c);
void pool_window_avx512(const Params& p, int64_t req, int64_t pos, int d_begin, int d_end,
                        float* c);

// The kernel's exponential (exp(x) for x <= 0) applied to x[0..n), n a multiple of 16: exposed so
// the tests can check each build's accuracy.
using VexpFn = void (*)(const float* x, float* y, int64_t n);
void vexp_sse4(const float* x, float* y, int64_t n);
void vexp_avx2(const float* x, float* y, int64_t n);
void vexp_avx512(const float* x, float* y, int64_t n);

}  // namespace latentkv::compress
