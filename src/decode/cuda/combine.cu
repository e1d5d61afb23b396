// decode/cuda/combine.cu: the combine kernel of split-KV attention, shared by every op that uses the
// attention kernel. One warp per (row, head) merges the splits' normalised outputs by their LSEs in
// split order (deterministic), applies the sink, and writes out, lse and (where asked) max_logits.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda_common/pdl.cuh"
#include "decode/cuda/attend_launch.cuh"
#include "decode/sm90/launch.h"

namespace latentkv::decode::cuda {
namespace {

template <bool kF16>
__global__ void __launch_bounds__(256) combine_kernel(const Geometry g, const OutRef o) {
  // Launched with PDL (pdl_launches): the attention launch ahead may still be running.
  cuda_common::pdl_wait();
  // The launch's (row, head) pairs, r1 from r1_begin; prow numbers them as the attention kernel
  // numbered its partials (from the absolute query row).
  const int64_t first = g.r1_begin * g.n2 * g.h_q;
  const int64_t prow = first + (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (prow >= first + g.n1 * g.n2 * g.h_q) return;
  const int64_t h = prow % g.h_q, row = prow / g.h_q, r1 = row / g.n2, r2 = row % g.n2;
  const float* lses = g.partial_lse + prow * g.num_splits;
  float m = -INFINITY;
  bool nan = false;  // fmaxf skips NaN: a NaN split must still poison the row, as on the CPU
  for (int64_t s = 0; s < g.num_splits; ++s) {
    m = fmaxf(m, lses[s]);
    nan |= lses[s] != lses[s];
  }
  if (nan) m = NAN;
  float acc[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) acc[k] = 0.0f;
  float total = 0.0f;
  if (m != -INFINITY) {
    for (int64_t s = 0; s < g.num_splits; ++s) {
      if (lses[s] == -INFINITY) continue;
      const float w = expf(lses[s] - m);
      total += w;
      const float4* src = reinterpret_cast<const float4*>(g.partial_out + (prow * g.num_splits + s) * kDimV + lane * 16);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float4 v = src[q];
        acc[4 * q] += w * v.x;
        acc[4 * q + 1] += w * v.y;
        acc[4 * q + 2] += w * v.z;
        acc[4 * q + 3] += w * v.w;
      }
    }
  }
  const bool lonely = m == -INFINITY;
  const float lse = lonely ? INFINITY : m + logf(total);
  float factor = lonely ? 0.0f : 1.0f / total;
  if (!lonely && o.sink) {
    const float sink = o.sink[h];
    factor *= (sink == INFINITY) ? 0.0f : 1.0f / (1.0f + expf(sink - lse));
  }
  uint16_t* out = o.out + r1 * o.stride_out_r1 + r2 * o.stride_out_r2 + h * o.stride_out_h + lane * 16;
  uint32_t packed[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) packed[k] = pack2<kF16>(acc[2 * k] * factor, acc[2 * k + 1] * factor);
  reinterpret_cast<uint4*>(out)[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  reinterpret_cast<uint4*>(out)[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
  if (lane == 0) {
    o.lse[r1 * o.stride_lse_r1 + r2 * o.stride_lse_r2 + h * o.stride_lse_h] = lse;
    if (o.max_logits) {
      float mx = -INFINITY;  // the maximum of the splits' maxima (-inf for a split with no key)
      for (int64_t s = 0; s < g.num_splits; ++s) mx = fmaxf(mx, g.partial_max[prow * g.num_splits + s]);
      o.max_logits[r1 * o.stride_max_r1 + r2 * o.stride_max_r2 + h * o.stride_max_h] = mx;
    }
  }
}

}  // namespace

namespace {
// The kernel's switches start on unless their variable is "0" (read once per process;
// benchmarks time both): LKV_WIDE_LAYOUT, LKV_TOKEN_GROUPS, LKV_ROLES.
bool env_on(const char* name) {
  const char* e = std::getenv(name);
  return !(e && std::strcmp(e, "0") == 0);
}
std::atomic<bool>& wide_flag() {
  static std::atomic<bool> flag{env_on("LKV_WIDE_LAYOUT")};
  return flag;
}
std::atomic<bool>& token_groups_flag() {
  static std::atomic<bool> flag{env_on("LKV_TOKEN_GROUPS")};
  return flag;
}
std::atomic<bool>& roles_flag() {
  static std::atomic<bool> flag{env_on("LKV_ROLES")};
  return flag;
}
// LKV_COPY_WARPS: 1, 2, 4 or 8 (anything else is an error when first read); unset: no override.
int copy_warps_from_env() {
  const char* e = std::getenv("LKV_COPY_WARPS");
  if (!e || !*e) return 0;
  const std::string v(e);
  LKV_CHECK(v == "0" || v == "1" || v == "2" || v == "4" || v == "8",
            "LKV_COPY_WARPS must be 0, 1, 2, 4 or 8, got '", v, "'");
  return std::stoi(v);
}
// LKV_PDL: 0 off, 1 on (default), 2 only for second launches (the combine an ordinary launch), for
// measuring the two apart.
std::atomic<int>& pdl_flag() {
  static std::atomic<int> flag{[] {
    const char* e = std::getenv("LKV_PDL");
    if (!e || !*e) return 1;
    const std::string v(e);
    LKV_CHECK(v == "0" || v == "1" || v == "2", "LKV_PDL must be 0, 1 or 2, got '", v, "'");
    return std::stoi(v);
  }()};
  return flag;
}
std::atomic<int>& copy_warps_flag() {
  static std::atomic<int> n{copy_warps_from_env()};
  return n;
}
}  // namespace

int copy_warps_override() { return copy_warps_flag().load(std::memory_order_relaxed); }
void set_copy_warps_override(int n) {
  LKV_CHECK(n == 0 || n == 1 || n == 2 || n == 4 || n == 8, "copy warps must be 0 (no override), 1, 2, 4 or 8, got ", n);
  copy_warps_flag().store(n, std::memory_order_relaxed);
}

void set_wide_layout_allowed(bool allowed) { wide_flag().store(allowed, std::memory_order_relaxed); }
bool wide_layout_allowed() { return wide_flag().load(std::memory_order_relaxed); }
bool token_groups_allowed() { return token_groups_flag().load(std::memory_order_relaxed); }
void set_token_groups_allowed(bool allowed) { token_groups_flag().store(allowed, std::memory_order_relaxed); }
bool roles_allowed() { return roles_flag().load(std::memory_order_relaxed); }
void set_roles_allowed(bool allowed) { roles_flag().store(allowed, std::memory_order_relaxed); }

int pdl_mode() { return pdl_flag().load(std::memory_order_relaxed); }
void set_pdl_mode(int mode) {
  LKV_CHECK(mode >= 0 && mode <= 2, "the PDL mode must be 0, 1 or 2, got ", mode);
  pdl_flag().store(mode, std::memory_order_relaxed);
}

bool pdl_launches(int device) {
  // The sm_90 code's griddepcontrol instructions are compiled out of older targets, so the code the
  // device runs decides, not its compute capability.
  return pdl_mode() != 0 && sm90::ptx_version(device) >= 90;
}

void launch_combine(const Geometry& g, const OutRef& o, bool f16, Stream stream) {
  const int64_t rows = g.n1 * g.n2 * g.h_q;
  constexpr int kWarpsPerBlock = 8;
  int device = 0;
  LKV_CUDA_CHECK(cudaGetDevice(&device));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock));
  config.blockDim = dim3(kWarpsPerBlock * 32);
  config.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[1];
  if (pdl_mode() == 1 && pdl_launches(device)) {
    attr[0] = cuda_common::pdl_attribute();
    config.attrs = attr;
    config.numAttrs = 1;
  }
  if (f16) LKV_CUDA_CHECK(cudaLaunchKernelEx(&config, combine_kernel<true>, g, o));
  else LKV_CUDA_CHECK(cudaLaunchKernelEx(&config, combine_kernel<false>, g, o));
  LKV_CUDA_CHECK_LAUNCH();
}

}  // namespace latentkv::decode::cuda
