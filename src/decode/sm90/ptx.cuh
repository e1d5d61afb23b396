// decode/sm90/ptx.cuh: the Hopper (sm_90a) building blocks of the planned sparse decode kernel
// (docs/design/hopper-sparse-decode.md, step 1): wgmma fences and groups, shared-memory matrix
// descriptors for the 128-byte-swizzled layout, and the wgmma shapes the kernels need.
// Work in progress: checked by tests/cuda/test_sm90_primitives.cpp against CPU products before any
// kernel uses them.
//
// Layout (K-major operand, 128-byte swizzle): a [rows][64] bf16 chunk has 128-byte rows; 8 rows form
// a 1024-byte atom, which must start 1024-byte aligned; inside an atom, 16-byte unit u of row r sits
// at unit u ^ (r % 8). A [rows][576] tile is 9 such chunks side by side (chunk c: dims 64c..64c+63).
// Descriptor fields (PTX "matrix descriptor"): bits 0-13 start address >> 4, 16-29 leading byte
// offset >> 4, 32-45 stride byte offset >> 4, 62-63 swizzle mode (1 = 128 B).
//  - K-major A or B: stride byte offset = 1024 (next 8 rows), leading byte offset unused (1);
//    the k16 step s of a chunk starts 32 * (s % 4) bytes into it.
//  - MN-major B (the V half of a key tile read for P V, dims contiguous): leading byte offset = the
//    distance between 64-element blocks along N (the chunk stride), stride byte offset = 1024 (next
//    8 rows along K, i.e. tokens); a k16 step advances 16 rows = 2048 bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LKV_SM90_WGMMA 1
#endif

namespace latentkv::decode::sm90 {

// Byte offset of element (row, col) of a [rows][64] bf16 chunk in the 128-byte-swizzled layout.
__host__ __device__ constexpr uint32_t sw128_offset(uint32_t row, uint32_t col) {
  const uint32_t byte = row * 128u + col * 2u;
  return byte ^ (((byte >> 7) & 7u) << 4);
}

// Brings the 128-byte line holding p into L2 (no register written, so no scoreboard to wait on).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

__device__ __forceinline__ uint64_t smem_desc(const void* p, uint32_t leading_bytes, uint32_t stride_bytes) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return static_cast<uint64_t>((addr >> 4) & 0x3fffu) |
         (static_cast<uint64_t>((leading_bytes >> 4) & 0x3fffu) << 16) |
         (static_cast<uint64_t>((stride_bytes >> 4) & 0x3fffu) << 32) | (uint64_t{1} << 62);
}

__device__ __forceinline__ void wgmma_fence() {
#if defined(LKV_SM90_WGMMA)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(LKV_SM90_WGMMA)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if defined(LKV_SM90_WGMMA)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Generic-proxy shared-memory writes (st.shared) become visible to wgmma (the async proxy).
__device__ __forceinline__ void fence_proxy_async() {
#if defined(LKV_SM90_WGMMA)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// The same for generic writes to any shared memory of the cluster (st.shared::cluster to a peer
// CTA): the peer's wgmma reads them after a cluster barrier.
__device__ __forceinline__ void fence_proxy_async_cluster() {
#if defined(LKV_SM90_WGMMA)
  asm volatile("fence.proxy.async.shared::cluster;\n" ::: "memory");
#endif
}

// ---- Thread-block clusters (sm_90): the CTA's rank, peer addresses and the cluster barrier.
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r = 0;
#if defined(LKV_SM90_WGMMA)
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
#endif
  return r;
}
// The shared::cluster address of shared::cta address `addr` in the cluster's CTA `rank`.
__device__ __forceinline__ uint32_t map_shared_rank(uint32_t addr, uint32_t rank) {
  uint32_t r = addr;
#if defined(LKV_SM90_WGMMA)
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
#endif
  return r;
}
__device__ __forceinline__ void st_shared_cluster(uint32_t addr, uint4 v) {
#if defined(LKV_SM90_WGMMA)
  asm volatile("st.shared::cluster.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
#endif
}
// stmatrix .x4: four 8x8 b16 matrices, r[i] this lane's fragment of matrix i (row lane / 4,
// columns 2 (lane % 4) and + 1, as mma fragments hold them); this lane gives the shared::cta
// address of row lane % 8 of matrix lane / 8.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, const uint32_t (&r)[4]) {
#if defined(LKV_SM90_WGMMA)
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
#endif
}
// ---- mbarriers of a CTA pair (shared::cta addresses unless named `peer`). A pair exchanges
// dequantized halves with st.async, whose bytes complete on the receiver's mbarrier, so neither CTA
// waits for the other at a cluster barrier per block.
// Makes the initialised mbarriers visible to the peer's operations on them (before a cluster
// barrier).
__device__ __forceinline__ void pair_bar_init_fence() {
#if defined(LKV_SM90_WGMMA)
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// This CTA's arrival on its own mbarrier, announcing `bytes` of st.async to come in this phase.
__device__ __forceinline__ void pair_bar_expect(uint32_t bar, uint32_t bytes) {
#if defined(LKV_SM90_WGMMA)
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.release.cta.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
#endif
}
// An arrival on the peer's mbarrier (shared::cluster address), ordered after this thread's earlier
// reads and waits. Release at CTA scope (the default, as CUTLASS's cluster pipelines release a
// peer's buffer): what it orders are the wgmma reads of the stage, which wgmma.wait_group has
// already completed. The cluster-scope release compiled to a GPU-scope memory barrier and an
// error barrier per arrival, ~11 % of consumer 0's stall samples (bench/NOTES.md).
__device__ __forceinline__ void pair_bar_arrive_peer(uint32_t peer_bar) {
#if defined(LKV_SM90_WGMMA)
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(peer_bar) : "memory");
#endif
}
// Waits until the phase of parity `parity` of this CTA's mbarrier has completed; the peer's st.async
// bytes of the phase have then landed in this CTA's shared memory (they complete on this barrier),
// and the peer's arrivals came after its reads. Acquire at CTA scope (the default, as CUTLASS's
// cluster pipelines wait): the cluster-scope acquire added an L1 invalidation per wait, and nothing
// after the wait reads global memory another CTA wrote.
__device__ __forceinline__ void pair_bar_wait(uint32_t bar, uint32_t parity) {
#if defined(LKV_SM90_WGMMA)
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
#endif
}
// 16 bytes to the peer's shared memory (shared::cluster address), completing on the peer's
// mbarrier `peer_bar` (shared::cluster address).
__device__ __forceinline__ void st_async_peer(uint32_t addr, uint4 v, uint32_t peer_bar) {
#if defined(LKV_SM90_WGMMA)
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];\n" ::"r"(addr),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(peer_bar)
               : "memory");
#endif
}

// Every thread of every CTA of the cluster: writes before arrive are visible after wait.
__device__ __forceinline__ void cluster_sync() {
#if defined(LKV_SM90_WGMMA)
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

// A warpgroup's registers per thread raised or lowered to kRegs (setmaxnreg; every thread of the
// warpgroup runs it). An increase waits until the CTA's pool has the registers, so a kernel's
// budgets must sum to what its launch allocated.
template <int kRegs>
__device__ __forceinline__ void regs_increase() {
#if defined(LKV_SM90_WGMMA)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void regs_decrease() {
#if defined(LKV_SM90_WGMMA)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// Barrier kId (1-15; 0 is __syncthreads') over 256 threads, in two forms:
// - named_barrier_sync_aligned / named_barrier_arrive_aligned: `bar.sync` / `bar.arrive` (=
//   `barrier.sync.aligned` / `barrier.arrive.aligned`): every thread that waits at the barrier
//   executes this very instruction (threads that only arrive may do so elsewhere: PTX's producer /
//   consumer pattern). narrow.cuh (whose LKV_RACECHECK_BARRIERS build waits at barrier 1 in both
//   warpgroups, in the plain form).
// - named_barrier_sync / named_barrier_arrive: the plain `barrier.sync` / `barrier.arrive`, for
//   threads that wait at one barrier from different instructions: kernel.cuh's and kernel_ws.cuh's
//   two warpgroups, each in its own loop. The aligned form
//   there broke its promise, and compute-sanitizer's synccheck stopped the kernel with "Divergent
//   thread(s) in block" (bench/probes/synccheck_named.cu shows the pattern alone).
// In kernel.cuh the plain form leaves the instruction mix as it was (ptxas orders one softmax
// stretch differently) and measured level; in the narrow kernel's 16-row warp-specialised instance
// it cost ~220 SASS instructions (uniform 64-bit additions moved to ordinary registers) and 1.02x
// the time on dense v32_fp8 pages of 16 rows (bench/NOTES.md v69), so that kernel's
// warpgroup 1 arrives at barrier 1 instead of waiting there, and the aligned form stays.
template <int kId>
__device__ __forceinline__ void named_barrier_sync() {
  asm volatile("barrier.sync %0, 256;\n" ::"n"(kId) : "memory");
}
template <int kId>
__device__ __forceinline__ void named_barrier_arrive() {
  asm volatile("barrier.arrive %0, 256;\n" ::"n"(kId) : "memory");
}
template <int kId>
__device__ __forceinline__ void named_barrier_sync_aligned() {
  asm volatile("bar.sync %0, 256;\n" ::"n"(kId) : "memory");
}
template <int kId>
__device__ __forceinline__ void named_barrier_arrive_aligned() {
  asm volatile("bar.arrive %0, 256;\n" ::"n"(kId) : "memory");
}
// Keeps the compiler from moving accumulator reads across a wgmma wait.
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D[64 x 16] (+)= A[64 x 16] B[16 x 16], bf16 in, fp32 accumulators, both operands in shared memory,
// B K-major; kTransA: A is MN-major (its M contiguous), else K-major. The narrow kernel's two
// products (narrow.cuh): S^T = K Q^T (A the key stage, K-major) and O^T = V^T P^T (A the same stage
// read MN-major). Accumulator element e: row (M) 16 warp + lane / 4 + 8 ((e / 2) % 2), column (N)
// 8 (e / 4) + 2 (lane % 4) + e % 2.
template <int kTransA>
__device__ __forceinline__ void wgmma_m64n16k16_ss(float (&d)[8], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
#if defined(LKV_SM90_WGMMA)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, %11, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTransA));
#else
  (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
  __trap();
#endif
}

// As above with N = 32 (the narrow kernel's 17-32-row CTAs): accumulator element e at row (M)
// 16 warp + lane / 4 + 8 ((e / 2) % 2), column (N) 8 (e / 4) + 2 (lane % 4) + e % 2.
template <int kTransA>
__device__ __forceinline__ void wgmma_m64n32k16_ss(float (&d)[16], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
#if defined(LKV_SM90_WGMMA)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
      "%13, %14, %15}, %16, %17, p, 1, 1, %19, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)), "n"(kTransA));
#else
  (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
  __trap();
#endif
}
// The narrow kernel's product of kRows (16 or 32) columns.
template <int kTransA, int kRows>
__device__ __forceinline__ void wgmma_m64nr_ss(float (&d)[kRows / 2], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
  if constexpr (kRows == 16) wgmma_m64n16k16_ss<kTransA>(d, desc_a, desc_b, accumulate);
  else wgmma_m64n32k16_ss<kTransA>(d, desc_a, desc_b, accumulate);
}

// D[64 x 64] (+)= A[64 x 16] B[16 x 64], bf16 in, fp32 accumulators; A and B in shared memory.
// B is K-major.
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
#if defined(LKV_SM90_WGMMA)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
  __trap();
#endif
}

// The 128 accumulator operands of an m64n256 wgmma, as inline-asm read-write operands.
#define LKV_WGMMA_N256_ACC(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

// D[64 x 256] (+)= A[64 x 16] B[16 x 256], bf16 in, fp32 accumulators; A and B in shared memory.
// B is MN-major (transposed: N contiguous).
__device__ __forceinline__ void wgmma_m64n256k16_ss_tb(float (&d)[128], uint64_t desc_a, uint64_t desc_b, bool accumulate) {
#if defined(LKV_SM90_WGMMA)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 1;\n}\n"
      : LKV_WGMMA_N256_ACC(d)
      : "l"(desc_a), "l"(desc_b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
  __trap();
#endif
}

// D[64 x 256] (+)= A[64 x 16] B[16 x 256], bf16 in, fp32 accumulators; A in registers (each warp
// of the warpgroup holds its 16 rows as an mma.sync m16n8k16 A fragment), B in shared memory,
// MN-major (transposed: N contiguous).
__device__ __forceinline__ void wgmma_m64n256k16_rs_tb(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b, bool accumulate) {
#if defined(LKV_SM90_WGMMA)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
      : LKV_WGMMA_N256_ACC(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(static_cast<int>(accumulate)));
#else
  (void)d, (void)a, (void)desc_b, (void)accumulate;
  __trap();
#endif
}

}  // namespace latentkv::decode::sm90
