// The CPU pooling kernel (pool.h, body in pool_kernel.h) built for AVX2 with FMA (-mavx2 -mfma):
// 8 lanes.
// CMakeLists.txt gives this file its flags; fast.cpp calls it only where
// cpu_supports(CpuIsa::kAvx2) holds.
#include "compress/cpu/pool_kernel.h"

namespace latentkv::compress {

void pool_window_avx2(const Params& p, int64_t req, int64_t pos, int d_begin, int d_end,
                      float* c) {
  pool_window<8>(p, req, pos, d_begin, d_end, c);
}

void vexp_avx2(const float* x, float* y, int64_t n) { vexp_array<8>(x, y, n); }

}  // namespace latentkv::compress
