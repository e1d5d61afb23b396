// The CPU pooling kernel (pool.h, body in pool_kernel.h) built for the library's baseline
// instruction set (-march=x86-64-v2, SSE4.2): 4 lanes. Every x86-64-v2 CPU runs it.
#include "compress/cpu/pool_kernel.h"

namespace latentkv::compress {

void pool_window_sse4(const Params& p, int64_t req, int64_t pos, int d_begin, int d_end,
                      float* c) {
  pool_window<4>(p, req, pos, d_begin, d_end, c);
}

void vexp_sse4(const float* x, float* y, int64_t n) { vexp_array<4>(x, y, n); }

}  // namespace latentkv::compress
