// The CPU pooling kernel (pool.h, body in pool_kernel.h) built for AVX-512F (-mavx512f): 16 lanes.
// CMakeLists.txt gives this file its flags; fast.cpp calls it only where
// cpu_supports(CpuIsa::kAvx512) holds.
#include "compress/cpu/pool_kernel.h"

namespace latentkv::compress {

void pool_window_avx512(const Params& p, int64_t req, int64_t pos, int d_begin, int d_end,
                        float* c) {
  pool_window<16>(p, req, pos, d_begin, d_end, c);
}

void vexp_avx512(const float* x, float* y, int64_t n) { vexp_array<16>(x, y, n); }

}  // namespace latentkv::compress
