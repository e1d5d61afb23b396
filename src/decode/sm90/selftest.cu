// decode/sm90/selftest.cu: the kernels behind selftest.h (one warpgroup each).
#include "cuda_common/cuda_check.h"
#include "decode/sm90/dequant.cuh"
#include "decode/sm90/records.cuh"
#include "decode/sm90/ptx.cuh"
#include "decode/sm90/selftest.h"

namespace latentkv::decode::sm90 {
namespace {

// Copies a row-major [64][cols] bf16 matrix into chunks of the swizzled layout (16 bytes a step).
__device__ void to_swizzled(const uint16_t* src, int cols, uint8_t* dst) {
  const int units = cols / 8;  // 16-byte units per row
  for (int i = threadIdx.x; i < 64 * units; i += blockDim.x) {
    const int r = i / units, u = i % units, c = u / 8, col = (u % 8) * 8;
    *reinterpret_cast<uint4*>(dst + c * kChunkBytes + sw128_offset(r, col)) =
        *reinterpret_cast<const uint4*>(src + r * cols + u * 8);
  }
}

// Writes a warpgroup's m64nN accumulator fragment to a row-major [64][n] fp32 matrix.
template <int N>
__device__ void store_accumulators(const float (&d)[N], int n, float* out) {
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  for (int j = 0; j < n / 8; ++j) {
    const int row = 16 * w + l / 4, col = 8 * j + 2 * (l % 4);
    out[row * n + col] = d[4 * j];
    out[row * n + col + 1] = d[4 * j + 1];
    out[(row + 8) * n + col] = d[4 * j + 2];
    out[(row + 8) * n + col + 1] = d[4 * j + 3];
  }
}

__device__ uint8_t* aligned_smem() {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // Swizzle atoms must start 1024-byte aligned; the launch adds 1 KB of slack for this.
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  return smem_raw + ((1024u - (a & 1023u)) & 1023u);
}

// S (m64n64 fragment in d) = Q K^T over 576 dims: 36 wgmma m64n64k16 with both operands in
// swizzled shared memory, issued, committed and waited for.
__device__ __forceinline__ void score_product(float (&d)[32], const uint8_t* sq, const uint8_t* sk) {
  wgmma_fence();
#pragma unroll
  for (int st = 0; st < 36; ++st) {
    const int off = (st / 4) * kChunkBytes + (st % 4) * 32;
    wgmma_m64n64k16_ss(d, smem_desc(sq + off, 16, 1024), smem_desc(sk + off, 16, 1024), st > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_operands(d);
}

// Q and K ([64][576] bf16, row-major) into swizzled shared memory: Q at sq, K 9 chunks after it.
__device__ __forceinline__ void stage_qk(const uint16_t* q, const uint16_t* k, uint8_t*& sq, uint8_t*& sk) {
  uint8_t* smem = aligned_smem();
  sq = smem;
  sk = smem + 9 * kChunkBytes;
  to_swizzled(q, 576, sq);
  to_swizzled(k, 576, sk);
  fence_proxy_async();
  __syncthreads();
}

__global__ void __launch_bounds__(128) qk_kernel(const uint16_t* q, const uint16_t* k, float* s) {
  uint8_t *sq, *sk;
  stage_qk(q, k, sq, sk);
  float d[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) d[i] = 0.0f;
  score_product(d, sq, sk);
  store_accumulators(d, 64, s);
}

__device__ __forceinline__ uint32_t pack_bits(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

__global__ void __launch_bounds__(128) pv_kernel(const uint16_t* p, const uint16_t* v, float* o,
                                                 bool p_in_registers) {
  uint8_t* smem = aligned_smem();
  uint8_t* sp = smem;                // [64 heads][64 tokens], one chunk
  uint8_t* sv = smem + kChunkBytes;  // [64 tokens][256 dims]: 4 chunks of 64 dims
  to_swizzled(p, 64, sp);
  to_swizzled(v, 256, sv);
  fence_proxy_async();
  __syncthreads();
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  const int r0 = 16 * w + l / 4, c0 = 2 * (l % 4);
  wgmma_fence();
#pragma unroll
  for (int st = 0; st < 4; ++st) {
    // V rows (tokens) 16 st..: 2048 bytes per step; 64-dim blocks along N are a chunk apart.
    const uint64_t desc_v = smem_desc(sv + st * 2048, kChunkBytes, 1024);
    if (p_in_registers) {
      const uint16_t* pr = p + r0 * 64 + 16 * st + c0;
      const uint32_t a[4] = {pack_bits(pr[0], pr[1]), pack_bits(pr[8 * 64], pr[8 * 64 + 1]),
                             pack_bits(pr[8], pr[9]), pack_bits(pr[8 * 64 + 8], pr[8 * 64 + 9])};
      wgmma_m64n256k16_rs_tb(d, a, desc_v, st > 0);
    } else {
      wgmma_m64n256k16_ss_tb(d, smem_desc(sp + st * 32, 16, 1024), desc_v, st > 0);
    }
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_operands(d);
  store_accumulators(d, 256, o);
}

// The score product of qk_kernel repeated `reps` times by warpgroup 0 (each repetition starts a new
// accumulation, so the result is one S) while warpgroup 1, by `mode`: 0 idles; 1 stores 16-byte
// units over a 72 KB shared-memory area as fast as it can (what the decode kernel's
// dequantization does beside this product); 2 runs the same score products into its own
// accumulator. Each warpgroup's thread 0 writes its clocks per repetition to clocks[wg]; warpgroup 0
// writes S.
__global__ void __launch_bounds__(256) qk_contention_kernel(const uint16_t* q, const uint16_t* k, float* s,
                                                            long long* clocks, int mode, int reps) {
  uint8_t* smem = aligned_smem();
  uint8_t* sq = smem;
  uint8_t* sk = smem + 9 * kChunkBytes;
  uint8_t* scratch = smem + 18 * kChunkBytes;  // 9 chunks, warpgroup 1's stores (mode 1)
  to_swizzled(q, 576, sq);
  to_swizzled(k, 576, sk);
  fence_proxy_async();
  __syncthreads();
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
  const int t = threadIdx.x % 128;
  const long long t0 = clock64();
  if (wg == 0 || mode == 2) {
    float d[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) d[i] = 0.0f;
    for (int rep = 0; rep < reps; ++rep) score_product(d, sq, sk);
    if (wg == 0) store_accumulators(d, 64, s);  // warpgroup 0: threadIdx.x is its thread index
  } else if (mode == 1) {
    // 36 16-byte stores per thread cover the 72 KB once; as many rounds as score products.
    uint4 v = make_uint4(t, t + 1, t + 2, t + 3);
    for (int rep = 0; rep < reps; ++rep)
#pragma unroll 4
      for (int i = 0; i < 36; ++i) {
        v.x += 1;
        *reinterpret_cast<uint4*>(scratch + (i * 128 + t) * 16) = v;
      }
  }
  const long long t1 = clock64();
  if (t == 0) clocks[wg] = (t1 - t0) / reps;
}

// Chunk i (16 e4m3 bytes) to out[2 i], out[2 i + 1] as the decode kernel does it: dequant16 with
// fp32 scale scales[i], or (e8 given) the v4 path with ue8m0 byte e8[i]: the fast form with
// ue8m0_multiplier where the chunk has no NaN and the byte is in the fast range, else dequant16.
// fast[i]: whether the fast form ran (dequant16 takes it exactly when dequant16_fast_ok holds).
// Built for every target (nothing in it needs sm_90a), so that the compute_80 PTX's form of the
// multiply (decode/cuda/kernel.cuh) is checked too when the driver is made to compile the PTX
// (CUDA_FORCE_PTX_JIT=1, bench/probes/ptx_jit_ab.sh).
__global__ void dequant_kernel(const uint4* bytes, const float* scales, const uint8_t* e8, int n, uint4* out,
                               uint8_t* fast) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint4 lo, hi;
  bool took_fast;
  if (e8) {
    const uint32_t e = e8[i];
    took_fast = no_nan16(bytes[i]) && ue8m0_fast(e);
    if (took_fast) dequant16_fast(bytes[i], ue8m0_multiplier(e), lo, hi);
    else dequant16(bytes[i], num::ue8m0_to_f32(static_cast<uint8_t>(e)), lo, hi);
  } else {
    took_fast = dequant16_fast_ok(bytes[i], scales[i]);
    dequant16(bytes[i], scales[i], lo, hi);
  }
  out[2 * i] = lo;
  out[2 * i + 1] = hi;
  fast[i] = took_fast ? 1 : 0;
}

// One block of 64 tokens' records dequantized into a key stage, which then goes to `out` whole
// (stage bytes, pre-filled with 0xa5). layout 0: every token by 4 lanes (lanes4 over the 8 warps);
// 1: every token by 8 lanes, two tokens per lane (lanes8 over the 8 warps from tokens 0 and 32: the
// kernel's kWide). Token t's record is at records + t * rec_bytes (v4: its scales at scales + 8 t;
// v32: inside the record), or absent when present[t] is 0.
template <KeyStorage F>
__global__ void __launch_bounds__(256) token_layout_kernel(const uint8_t* records, const uint8_t* scales,
                                                           int rec_bytes, const uint8_t* present, int layout,
                                                           uint8_t* out, int stage_bytes) {
#if defined(LKV_SM90_WGMMA)
  uint8_t* stage = aligned_smem();
  for (int i = threadIdx.x; i < stage_bytes / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(stage)[i] = 0xa5a5a5a5u;
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  auto data_of = [&](int t) { return present[t] ? records + static_cast<size_t>(t) * rec_bytes : nullptr; };
  auto scale_of = [&](int t) -> const uint8_t* {
    if (!present[t]) return nullptr;
    return F == KeyStorage::kV32Fp8 ? records + static_cast<size_t>(t) * rec_bytes + 512 : scales + 8 * t;
  };
  auto run4 = [&](TokenLane tl) {
    Raw<F> r;
    load_raw(r, data_of(tl.tok), scale_of(tl.tok), tl.part);
    store_dequantized<F>(r, stage, tl.tok, tl.part);
  };
  auto run8 = [&](TokenLane tl) {
    Raw<F, 8> r;
    load_raw(r, data_of(tl.tok), scale_of(tl.tok), tl.part);
    store_dequantized<F>(r, stage, tl.tok, tl.part);
  };
  if (layout == 0) {
    run4(lanes4(0, warp, lane));
  } else {
    run8(lanes8(0, warp, lane));
    run8(lanes8(32, warp, lane));
  }
  __syncthreads();
  for (int i = threadIdx.x; i < stage_bytes / 16; i += blockDim.x)
    reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(stage)[i];
#else
  (void)records, (void)scales, (void)rec_bytes, (void)present, (void)layout, (void)out, (void)stage_bytes;
#endif
}

template <typename T>
T* to_device(const T* host, size_t n) {
  T* d = nullptr;
  LKV_CUDA_CHECK(cudaMalloc(&d, n * sizeof(T)));
  if (host) LKV_CUDA_CHECK(cudaMemcpy(d, host, n * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

}  // namespace

bool device_has_wgmma(int device) {
  cudaDeviceProp prop{};
  LKV_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.major == 9 && prop.minor == 0;
}

namespace {
// One warpgroup of a Q K^T kernel (qk_kernel) on host arrays.
void run_qk(void (*kernel)(const uint16_t*, const uint16_t*, float*), const uint16_t* q, const uint16_t* k, float* s) {
  uint16_t* dq = to_device(q, 64 * 576);
  uint16_t* dk = to_device(k, 64 * 576);
  float* ds = to_device<float>(nullptr, 64 * 64);
  constexpr int kSmem = 18 * kChunkBytes + 1024;
  LKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  kernel<<<1, 128, kSmem>>>(dq, dk, ds);
  LKV_CUDA_CHECK_LAUNCH();
  LKV_CUDA_CHECK(cudaMemcpy(s, ds, 64 * 64 * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(dq);
  cudaFree(dk);
  cudaFree(ds);
}
}  // namespace

void selftest_qk(const uint16_t* q, const uint16_t* k, float* s) { run_qk(qk_kernel, q, k, s); }


void selftest_qk_contention(const uint16_t* q, const uint16_t* k, float* s, int mode, long long* clocks) {
  constexpr int kReps = 64;
  uint16_t* dq = to_device(q, 64 * 576);
  uint16_t* dk = to_device(k, 64 * 576);
  float* ds = to_device<float>(nullptr, 64 * 64);
  long long* dc = to_device<long long>(nullptr, 2);
  constexpr int kSmem = 27 * kChunkBytes + 1024;
  LKV_CUDA_CHECK(cudaFuncSetAttribute(qk_contention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  qk_contention_kernel<<<1, 256, kSmem>>>(dq, dk, ds, dc, mode, kReps);
  LKV_CUDA_CHECK_LAUNCH();
  LKV_CUDA_CHECK(cudaMemcpy(s, ds, 64 * 64 * sizeof(float), cudaMemcpyDeviceToHost));
  LKV_CUDA_CHECK(cudaMemcpy(clocks, dc, 2 * sizeof(long long), cudaMemcpyDeviceToHost));
  cudaFree(dq);
  cudaFree(dk);
  cudaFree(ds);
  cudaFree(dc);
}

void selftest_dequant(const uint8_t* bytes, const float* scales, const uint8_t* e8, int n, uint16_t* out,
                      uint8_t* fast) {
  uint8_t* db = to_device(bytes, 16 * static_cast<size_t>(n));
  float* ds = scales ? to_device(scales, n) : nullptr;
  uint8_t* de = e8 ? to_device(e8, n) : nullptr;
  uint16_t* dout = to_device<uint16_t>(nullptr, 16 * static_cast<size_t>(n));
  uint8_t* dfast = to_device<uint8_t>(nullptr, n);
  dequant_kernel<<<(n + 127) / 128, 128>>>(reinterpret_cast<const uint4*>(db), ds, de, n,
                                           reinterpret_cast<uint4*>(dout), dfast);
  LKV_CUDA_CHECK_LAUNCH();
  LKV_CUDA_CHECK(cudaMemcpy(out, dout, 16 * static_cast<size_t>(n) * sizeof(uint16_t), cudaMemcpyDeviceToHost));
  LKV_CUDA_CHECK(cudaMemcpy(fast, dfast, n, cudaMemcpyDeviceToHost));
  cudaFree(db);
  cudaFree(ds);
  cudaFree(de);
  cudaFree(dout);
  cudaFree(dfast);
}

void selftest_token_layout(bool v4, const uint8_t* records, const uint8_t* scales, const uint8_t* present,
                           int layout, uint8_t* stage_out) {
  const int rec_bytes = v4 ? 576 : 656, stage_bytes = (v4 ? 8 : 9) * kChunkBytes;
  uint8_t* dr = to_device(records, 64 * static_cast<size_t>(rec_bytes));
  uint8_t* ds = v4 ? to_device(scales, 64 * 8) : nullptr;
  uint8_t* dp = to_device(present, 64);
  uint8_t* dout = to_device<uint8_t>(nullptr, stage_bytes);
  // A different fill per layout, so that a kernel that wrote nothing (a build without sm_90a code)
  // cannot make the two results agree.
  LKV_CUDA_CHECK(cudaMemset(dout, layout == 0 ? 0x00 : 0xff, stage_bytes));
  auto kernel = v4 ? token_layout_kernel<KeyStorage::kV4Fp8> : token_layout_kernel<KeyStorage::kV32Fp8>;
  const int smem = stage_bytes + 1024;
  LKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<1, 256, smem>>>(dr, ds, rec_bytes, dp, layout, dout, stage_bytes);
  LKV_CUDA_CHECK_LAUNCH();
  LKV_CUDA_CHECK(cudaMemcpy(stage_out, dout, stage_bytes, cudaMemcpyDeviceToHost));
  cudaFree(dr);
  cudaFree(ds);
  cudaFree(dp);
  cudaFree(dout);
}

void selftest_pv(const uint16_t* p, const uint16_t* v, float* o, bool p_in_registers) {
  uint16_t* dp = to_device(p, 64 * 64);
  uint16_t* dv = to_device(v, 64 * 256);
  float* dout = to_device<float>(nullptr, 64 * 256);
  constexpr int kSmem = 5 * kChunkBytes + 1024;
  LKV_CUDA_CHECK(cudaFuncSetAttribute(pv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  pv_kernel<<<1, 128, kSmem>>>(dp, dv, dout, p_in_registers);
  LKV_CUDA_CHECK_LAUNCH();
  LKV_CUDA_CHECK(cudaMemcpy(o, dout, 64 * 256 * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(dp);
  cudaFree(dv);
  cudaFree(dout);
}

}  // namespace latentkv::decode::sm90
