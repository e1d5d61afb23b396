// decode/cuda/combine.cu: the combine kernel of split-KV attention, shared by every op that uses the
// attention kernel. One warp per (row, head), or four of 128 dims each for few rows, merges the
// splits' normalised outputs by their LSEs in split order (deterministic), applies the sink, and
// writes out, lse and (where asked) max_logits.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda_common/device_cache.h"
#include "cuda_common/pdl.cuh"
#include "decode/cuda/attend_launch.cuh"

namespace latentkv::decode::cuda {
namespace {

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// kParts warps per (row, head), each over kDimV / kParts of the row's dims (config.h,
// combine_quarter_rows: 4 for few rows, else 1).
template <bool kF16, int kParts>
__global__ void __launch_bounds__(256) combine_kernel(const Geometry g, const OutRef o) {
  constexpr int kDimsPerLane = kDimV / (32 * kParts);
  constexpr int kVecsPerLane = kDimsPerLane / 4;
  static_assert(kDimsPerLane == 16 || kDimsPerLane == 4, "a lane writes 16 or 4 dims");
  // Splits whose partial rows are loaded before any is summed: 16 float4 per lane in flight.
  constexpr int kBatch = 16 / kVecsPerLane;
  // Launched with PDL (pdl_launches): the attention launch ahead may still be running.
  cuda_common::pdl_wait();
  // The call's last kernel: the next call's first launch may be scheduled once every CTA of this
  // grid has got here, i.e. on SMs this grid leaves free (it waits for this grid to complete).
  if (g.pdl_first) cuda_common::pdl_launch_dependents();
  // The launch's (row, head) pairs, r1 from r1_begin; prow numbers them as the attention kernel
  // numbered its partials (from the absolute query row). prow is the same for a whole warp, so the
  // return below and the shuffles after it are warp-uniform.
  const int64_t first = g.r1_begin * g.n2 * g.h_q;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t prow = first + warp / kParts;
  const int part = static_cast<int>(warp % kParts);
  const int lane = threadIdx.x % 32;
  const int dim0 = part * (kDimV / kParts) + lane * kDimsPerLane;
  if (prow >= first + g.n1 * g.n2 * g.h_q) return;
  const int64_t h = prow % g.h_q, row = prow / g.h_q, r1 = row / g.n2, r2 = row % g.n2;
  const int64_t n = g.num_splits;
  const float* lses = g.partial_lse + prow * n;
  // The splits' LSEs read by the lanes side by side (one load each per 32 splits) and their
  // maximum reduced across the warp: fmaxf skips NaN, so each lane folds from -inf and never holds
  // NaN, and the reduction gives the split-order fold's value (a zero's sign aside, which changes
  // nothing below); a NaN split still poisons the row through the flag, as on the CPU.
  float m = -INFINITY;
  bool nan = false;
  for (int64_t s = lane; s < n; s += 32) {
    const float l = lses[s];
    m = fmaxf(m, l);
    nan |= l != l;
  }
  m = warp_max(m);
  if (__any_sync(0xffffffffu, nan)) m = NAN;
  float acc[kDimsPerLane];
#pragma unroll
  for (int k = 0; k < kDimsPerLane; ++k) acc[k] = 0.0f;
  float total = 0.0f;
  if (m != -INFINITY) {
    // kBatch splits' rows loaded before any is summed, so that their loads are in flight together
    // (summed one split at a time, each row waited for its own round trip to L2); the sums still
    // run in split order, so the result is the same bit for bit whatever kParts.
    for (int64_t s0 = 0; s0 < n; s0 += 32) {
      const int count = static_cast<int>(n - s0 < 32 ? n - s0 : 32);
      const float lane_lse = lane < count ? lses[s0 + lane] : -INFINITY;
      for (int j0 = 0; j0 < count; j0 += kBatch) {
        float4 v[kBatch][kVecsPerLane];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          if (j0 + u < count) {
            const float4* src = reinterpret_cast<const float4*>(
                g.partial_out + (prow * n + s0 + j0 + u) * kDimV + dim0);
#pragma unroll
            for (int q = 0; q < kVecsPerLane; ++q) v[u][q] = src[q];
          }
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          if (j0 + u >= count) break;
          const float l = __shfl_sync(0xffffffffu, lane_lse, j0 + u);
          if (l == -INFINITY) continue;  // a split with no key: its row is not used
          const float w = expf(l - m);
          total += w;
#pragma unroll
          for (int q = 0; q < kVecsPerLane; ++q) {
            acc[4 * q] += w * v[u][q].x;
            acc[4 * q + 1] += w * v[u][q].y;
            acc[4 * q + 2] += w * v[u][q].z;
            acc[4 * q + 3] += w * v[u][q].w;
          }
        }
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
  uint16_t* out = o.out + r1 * o.stride_out_r1 + r2 * o.stride_out_r2 + h * o.stride_out_h + dim0;
  uint32_t packed[kDimsPerLane / 2];
#pragma unroll
  for (int k = 0; k < kDimsPerLane / 2; ++k) packed[k] = pack2<kF16>(acc[2 * k] * factor, acc[2 * k + 1] * factor);
  if constexpr (kDimsPerLane == 16) {
    reinterpret_cast<uint4*>(out)[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    reinterpret_cast<uint4*>(out)[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
  } else {
    *reinterpret_cast<uint2*>(out) = make_uint2(packed[0], packed[1]);
  }
  if (part != 0) return;  // the row's first warp writes its lse and max_logits
  if (o.max_logits) {
    // The maximum of the splits' maxima (-inf for a split with no key), folded per lane from -inf
    // as above (the same value as a split-order fold; of two zeros either sign may come out).
    float mx = -INFINITY;
    for (int64_t s = lane; s < n; s += 32) mx = fmaxf(mx, g.partial_max[prow * n + s]);
    mx = warp_max(mx);
    if (lane == 0) o.max_logits[r1 * o.stride_max_r1 + r2 * o.stride_max_r2 + h * o.stride_max_h] = mx;
  }
  if (lane == 0) o.lse[r1 * o.stride_lse_r1 + r2 * o.stride_lse_r2 + h * o.stride_lse_h] = lse;
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
// LKV_IDLE_DEQUANT: 0 or 1 (anything else is an error when first read); unset: no override.
std::atomic<int>& idle_dequant_flag() {
  static std::atomic<int> flag{[] {
    const char* e = std::getenv("LKV_IDLE_DEQUANT");
    if (!e || !*e) return -1;
    const std::string v(e);
    LKV_CHECK(v == "0" || v == "1", "LKV_IDLE_DEQUANT must be 0 or 1, got '", v, "'");
    return std::stoi(v);
  }()};
  return flag;
}
// LKV_COPY_WARPS: 1, 2, 4 or 8, or 0 for no override as when unset (anything else is an error when
// first read).
int copy_warps_from_env() {
  const char* e = std::getenv("LKV_COPY_WARPS");
  if (!e || !*e) return 0;
  const std::string v(e);
  LKV_CHECK(v == "0" || v == "1" || v == "2" || v == "4" || v == "8",
            "LKV_COPY_WARPS must be 0, 1, 2, 4 or 8, got '", v, "'");
  return std::stoi(v);
}
// LKV_PDL: 0 off, 1 on (default), 2 the combine an ordinary launch (launch.h), for measuring them
// apart.
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
std::atomic<bool>& first_pdl_flag() {
  static std::atomic<bool> flag{[] {
    const char* e = std::getenv("LKV_PDL_FIRST");
    return !(e && std::strcmp(e, "0") == 0);
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

int idle_dequant_override() { return idle_dequant_flag().load(std::memory_order_relaxed); }
void set_idle_dequant_override(int mode) {
  LKV_CHECK(mode >= -1 && mode <= 1, "the idle-warp dequantization override must be -1 (none), 0 or 1, got ", mode);
  idle_dequant_flag().store(mode, std::memory_order_relaxed);
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

bool first_launch_pdl() { return first_pdl_flag().load(std::memory_order_relaxed); }
void set_first_launch_pdl(bool on) { first_pdl_flag().store(on, std::memory_order_relaxed); }

bool pdl_launches(int device) {
  // The sm_90 code's griddepcontrol instructions are compiled out of older targets, so the code the
  // device runs decides, not its compute capability.
  return pdl_mode() != 0 && cuda_common::ptx_version(device) >= 90;
}

void launch_combine(const Geometry& g, const OutRef& o, bool f16, Stream stream) {
  const int64_t rows = g.n1 * g.n2 * g.h_q;
  constexpr int kWarpsPerBlock = 8;
  int device = 0;
  LKV_CUDA_CHECK(cudaGetDevice(&device));
  const int parts = combine_quarter_rows(rows, cuda_common::sm_count(device)) ? 4 : 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>((rows * parts + kWarpsPerBlock - 1) / kWarpsPerBlock));
  config.blockDim = dim3(kWarpsPerBlock * 32);
  config.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[1];
  if (pdl_mode() == 1 && pdl_launches(device)) {
    attr[0] = cuda_common::pdl_attribute();
    config.attrs = attr;
    config.numAttrs = 1;
  }
  void (*kernel)(Geometry, OutRef) = f16 ? (parts == 4 ? combine_kernel<true, 4> : combine_kernel<true, 1>)
                                          : (parts == 4 ? combine_kernel<false, 4> : combine_kernel<false, 1>);
  LKV_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, g, o));
  LKV_CUDA_CHECK_LAUNCH();
}

}  // namespace latentkv::decode::cuda
