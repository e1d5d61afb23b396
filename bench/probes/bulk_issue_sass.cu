// How does nvcc issue bulk copies (cp.async.bulk) whose addresses differ per lane? A compile-only
// probe: read its SASS, nothing runs.
//   nvcc -arch=sm_90a -cubin -O3 -o /tmp/bulk_issue.cubin bench/probes/bulk_issue_sass.cu
//   cuobjdump -sass /tmp/bulk_issue.cubin
// The instruction (UBLKCP) takes its shared and global addresses in uniform registers and makes one
// copy per execution. `per_lane` (the portable attention kernel's form: each lane copies its own
// row) compiles to a loop over the active lanes: ELECT, three R2UR, UBLKCP, BRA.U.ANY, one trip
// per copy, each waiting on its R2URs. `from_shuffle` and `from_shared` make each address
// warp-uniform first (a shuffle from lane i, or a shared-memory load at a uniform address) and let
// one elected thread issue: no lane loop, each copy a straight run of ~12 instructions (mostly
// on the uniform datapath). Whether that is faster than splitting the lane loop over warps
// (bench/NOTES.md, v14) is not measured.
#include <cstdint>

namespace {

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}
__device__ __forceinline__ bool elect_one() {
  unsigned pred = 0;
  asm volatile("{\n.reg .pred p;\nelect.sync _|p, 0xffffffff;\nselp.u32 %0, 1, 0, p;\n}\n" : "=r"(pred));
  return pred != 0;
}

constexpr unsigned kRowBytes = 1152;    // a 576-wide bf16 key row
constexpr unsigned kRowStride = 1168;  // its padded shared-memory row

}  // namespace

extern "C" __global__ void per_lane(const uint8_t* const* rows) {
  extern __shared__ __align__(128) uint8_t keys[];
  __shared__ uint64_t bar;
  const int lane = threadIdx.x % 32;
  const uint8_t* src = rows[lane];
  if (src) bulk_copy(keys + lane * kRowStride, src, kRowBytes, &bar);
}

extern "C" __global__ void from_shuffle(const uint8_t* const* rows) {
  extern __shared__ __align__(128) uint8_t keys[];
  __shared__ uint64_t bar;
  const uint8_t* src = rows[threadIdx.x % 32];
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const auto s = reinterpret_cast<const uint8_t*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(src), i));
    if (s && elect_one()) bulk_copy(keys + i * kRowStride, s, kRowBytes, &bar);
  }
}

extern "C" __global__ void from_shared(const uint8_t* const* rows) {
  extern __shared__ __align__(128) uint8_t keys[];
  __shared__ uint64_t bar;
  __shared__ const uint8_t* row_ptr[32];
  row_ptr[threadIdx.x % 32] = rows[threadIdx.x % 32];
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    const uint8_t* s = row_ptr[i];
    if (s && elect_one()) bulk_copy(keys + i * kRowStride, s, kRowBytes, &bar);
  }
}
