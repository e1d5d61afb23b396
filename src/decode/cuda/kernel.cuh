// decode/cuda/kernel.cuh: the portable (sm_80+) sparse MLA decode kernel and its combine kernel.
//
// Grid: (b * s_q, ceil(h_q / 64), num_splits); 256 threads. A CTA takes one query token of one
// request, 64 heads, and one split of the attended candidates:
//   1. Q (64 heads x d_qk, zero rows past h_q) goes to shared memory once.
//   2. Per tile of 32 candidates: resolve the slots (invalid or beyond topk_length: -1, never
//      read), gather the records and dequantize them to bf16 in shared memory (exact: payload x
//      power-of-two scale). The pipeline keeps the memory latency off the critical path: the
//      indices of tile t + 2 and the raw records of tile t + 1 (cp.async into a staging buffer)
//      are in flight while tile t is dequantized and computed.
//   3. S = Q K^T with bf16 tensor-core MMAs (m16n8k16, fp32 accumulation); warp w computes heads
//      16 (w % 4).. for tokens 16 (w / 4)..; masked tokens get -inf.
//   4. Online softmax in the log2 domain: the two warps sharing a head block exchange their row
//      maxima through shared memory, rescale, and write P (bf16) to shared memory.
//   5. O += P V with V = the first 512 dims of the same tile; warp w accumulates half the dims.
//   6. The end: with one split, normalise, apply the sink and write out (bf16) and lse (natural
//      log); with several, write the split's normalised output and lse for the combine kernel
//      (decode.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#include <cuda_fp8.h>
#endif

#include <cstdint>

#include "decode/cuda/config.h"
#include "decode/params.h"

namespace latentkv::decode::cuda {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// ---- PTX building blocks ------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// D = A B + D, m16n8k16, bf16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return static_cast<uint32_t>(num::f32_to_bf16(lo)) |
         (static_cast<uint32_t>(num::f32_to_bf16(hi)) << 16);
}

// Two e4m3 codes (low byte first) to fp32, exactly. Hopper and Ada convert in hardware.
__device__ __forceinline__ float2 e4m3x2_to_f32(uint16_t two) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
#else
  return make_float2(num::e4m3_to_f32(static_cast<uint8_t>(two & 0xff)),
                     num::e4m3_to_f32(static_cast<uint8_t>(two >> 8)));
#endif
}

// ---- the main kernel ----------------------------------------------------------------------------
template <CacheFormat F>
struct FormatTraits;
template <>
struct FormatTraits<CacheFormat::v32_fp8> {
  static constexpr int kDqk = 576;
  static constexpr int kNope = 512;        // e4m3 dims
  static constexpr int kGroup = 128;       // dims per scale
  static constexpr int kRopeOffset = 528;  // bytes: after 512 e4m3 and 4 fp32 scales
};
template <>
struct FormatTraits<CacheFormat::v4_fp8> {
  static constexpr int kDqk = 512;
  static constexpr int kNope = 448;
  static constexpr int kGroup = 64;
  static constexpr int kRopeOffset = 448;  // bytes: right after the e4m3 payload
};

// Candidate position k (over main then extra) of request i, query j: its cache and slot, -1 if
// it is not attended.
__device__ __forceinline__ int64_t resolve(const Params& p, int64_t i, int64_t j, int64_t k,
                                           int64_t main_count, int64_t extra_count, bool* extra) {
  if (k < p.main.topk) {
    *extra = false;
    return candidate_slot(p.main, i, j, k, main_count);
  }
  *extra = true;
  return candidate_slot(p.extra, i, j, k - p.main.topk, extra_count);
}

// Where the record of `slot` lives. Slots come from int32 indices and the host checks that page
// sizes fit in 32 bits, so a 32-bit division suffices (a 64-bit one costs several times more).
template <CacheFormat F>
__device__ __forceinline__ void record_ptrs(const CacheRef& c, int64_t slot, const uint8_t** data,
                                            const uint8_t** scale) {
  const uint32_t s = static_cast<uint32_t>(slot), P = static_cast<uint32_t>(c.page_size);
  const uint32_t page = s / P, tok = s - page * P;
  const uint8_t* base = c.base + static_cast<int64_t>(page) * c.page_stride;
  if constexpr (F == CacheFormat::v4_fp8) {
    *data = base + tok * 576u;
    *scale = base + P * 576u + tok * 8u;
  } else {
    *data = base + tok * 656u;
    *scale = *data + 512;
  }
}

// Issues the cp.async copies of a tile's raw records into `raw` (unattended tokens copy nothing).
template <CacheFormat F, int kRawRecord>
__device__ __forceinline__ void issue_tile_copies(const uint8_t* const* data, const uint8_t* const* scale,
                                                  uint8_t* raw, int tid) {
  constexpr int kDataChunks = F == CacheFormat::v32_fp8 ? 41 : 36;  // 16-byte chunks of data bytes
  constexpr int kPerToken = kDataChunks + (F == CacheFormat::v4_fp8 ? 1 : 0);  // + the scale row
  for (int c = tid; c < kTileTokens * kPerToken; c += kThreads) {
    const int tok = c / kPerToken, part = c % kPerToken;
    if (!data[tok]) continue;
    uint8_t* dst = raw + tok * kRawRecord;
    if (part < kDataChunks) cp_async_16(dst + part * 16, data[tok] + part * 16);
    else cp_async_8(dst + 576, scale[tok]);
  }
}

template <CacheFormat F>
__global__ void __launch_bounds__(kThreads, 1) sparse_decode_kernel(const Params p) {
  using T = FormatTraits<F>;
  using L = SmemLayout<T::kDqk>;
  constexpr int kChunksNope = T::kNope / 16;       // 16 e4m3 bytes per chunk
  constexpr int kChunksRope = 64 * 2 / 16;         // 8 bf16 per chunk
  constexpr int kChunks = kChunksNope + kChunksRope;

  extern __shared__ __align__(16) uint8_t smem[];
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem);
  uint16_t* sK = reinterpret_cast<uint16_t*>(smem + L::q_bytes);
  uint16_t* sP = reinterpret_cast<uint16_t*>(smem + L::q_bytes + L::k_bytes);
  float* sMax = reinterpret_cast<float*>(smem + L::q_bytes + L::k_bytes + L::p_bytes);  // [2][64]
  float* sSum = sMax + 2 * kHeadsPerCta;                                               // [2][64]
  // [2][32] data pointers, then [2][32] scale pointers
  const uint8_t** sData = reinterpret_cast<const uint8_t**>(smem + L::q_bytes + L::k_bytes + L::p_bytes + L::red_bytes);
  const uint8_t** sScale = sData + 2 * kTileTokens;
  uint8_t* sRaw = smem + L::q_bytes + L::k_bytes + L::p_bytes + L::red_bytes + L::slot_bytes;     // [2][32][raw]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int mt = warp % 4, nh = warp / 4;  // head tile, token half / dim half
  const int g = lane / 4, t4 = lane % 4;   // MMA fragment row group and column pair
  const int64_t split = blockIdx.z;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * kHeadsPerCta;
  const int64_t i = blockIdx.x / p.s_q, j = blockIdx.x % p.s_q;

  // ---- 1. Q to shared memory (16-byte loads), zero rows past h_q.
  for (int c = tid; c < kHeadsPerCta * (T::kDqk / 8); c += kThreads) {
    const int row = c / (T::kDqk / 8), col = (c % (T::kDqk / 8)) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (h0 + row < p.h_q)
      v = *reinterpret_cast<const uint4*>(p.q + i * p.stride_q_b + j * p.stride_q_s +
                                          (h0 + row) * p.stride_q_h + col);
    *reinterpret_cast<uint4*>(sQ + row * L::q_stride + col) = v;
  }

  const int64_t main_count = valid_count(p.main, i);
  const int64_t extra_count = p.extra.topk > 0 ? valid_count(p.extra, i) : 0;
  const int64_t total = p.main.topk + p.extra.topk;
  const int64_t k_begin = split * p.keys_per_split;
  const int64_t k_end = min(total, k_begin + p.keys_per_split);
  const int64_t num_tiles = (k_end - k_begin + kTileTokens - 1) / kTileTokens;
  const float scale_log2 = p.scale * kLog2e;

  // Running state per fragment row: rows g and g + 8 of this warp's head tile.
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};  // this warp's token half only; halves are added at the end
  float acc[32][4];                 // O: 16 heads x 256 dims = 32 n8-tiles
#pragma unroll
  for (int n = 0; n < 32; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

  // ---- Pipeline prologue: records of tile 0 (now) and tile 1 (in flight), copies of tile 0.
  auto locate = [&](int64_t tile, const uint8_t** data, const uint8_t** scale) {
    *data = nullptr;
    *scale = nullptr;
    const int64_t k = k_begin + tile * kTileTokens + tid;
    if (tile >= num_tiles || k >= k_end) return;
    bool extra = false;
    const int64_t slot = resolve(p, i, j, k, main_count, extra_count, &extra);
    if (slot >= 0) record_ptrs<F>(extra ? p.extra : p.main, slot, data, scale);
  };
  const uint8_t* pending_data = nullptr;
  const uint8_t* pending_scale = nullptr;
  if (tid < kTileTokens) {
    locate(0, &sData[tid], &sScale[tid]);
    locate(1, &pending_data, &pending_scale);
  }
  __syncthreads();
  issue_tile_copies<F, L::raw_record>(sData, sScale, sRaw, tid);
  cp_async_commit();

  for (int64_t tile = 0; tile < num_tiles; ++tile) {
    const int cur = static_cast<int>(tile % 2), nxt = cur ^ 1;
    const uint8_t* const* tile_data = sData + cur * kTileTokens;
    // ---- 2a. Publish tile + 1's records (their index loads were issued a tile ago), start its
    // copies, and issue tile + 2's index loads.
    if (tid < kTileTokens) {
      sData[nxt * kTileTokens + tid] = pending_data;
      sScale[nxt * kTileTokens + tid] = pending_scale;
    }
    __syncthreads();  // also: every warp is done with the previous tile's sK, sP and raw buffer
    issue_tile_copies<F, L::raw_record>(sData + nxt * kTileTokens, sScale + nxt * kTileTokens,
                                        sRaw + nxt * kTileTokens * L::raw_record, tid);
    cp_async_commit();
    if (tid < kTileTokens) locate(tile + 2, &pending_data, &pending_scale);
    cp_async_wait<1>();  // this thread's copies of the current tile have landed
    __syncthreads();     // and everyone else's

    // ---- 2b. Dequantize the current tile's raw records into sK; invalid tokens become zeros.
    const uint8_t* raw_tile = sRaw + cur * kTileTokens * L::raw_record;
    for (int c = tid; c < kTileTokens * kChunks; c += kThreads) {
      const int tok = c / kChunks, part = c % kChunks;
      uint16_t* dst = sK + tok * L::k_stride;
      if (!tile_data[tok]) {
        if (part < kChunksNope) {
          *reinterpret_cast<uint4*>(dst + part * 16) = make_uint4(0, 0, 0, 0);
          *reinterpret_cast<uint4*>(dst + part * 16 + 8) = make_uint4(0, 0, 0, 0);
        } else {
          *reinterpret_cast<uint4*>(dst + T::kNope + (part - kChunksNope) * 8) = make_uint4(0, 0, 0, 0);
        }
        continue;
      }
      const uint8_t* data = raw_tile + tok * L::raw_record;
      if (part < kChunksNope) {
        const int group = part * 16 / T::kGroup;
        float s;
        if constexpr (F == CacheFormat::v32_fp8) s = reinterpret_cast<const float*>(data + 512)[group];
        else s = num::ue8m0_to_f32(data[576 + group]);
        const uint4 rawv = *reinterpret_cast<const uint4*>(data + part * 16);
        const uint32_t w[4] = {rawv.x, rawv.y, rawv.z, rawv.w};
        uint32_t packed[8];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 lo = e4m3x2_to_f32(static_cast<uint16_t>(w[q] & 0xffffu));
          const float2 hi = e4m3x2_to_f32(static_cast<uint16_t>(w[q] >> 16));
          packed[2 * q] = pack_bf16(lo.x * s, lo.y * s);
          packed[2 * q + 1] = pack_bf16(hi.x * s, hi.y * s);
        }
        *reinterpret_cast<uint4*>(dst + part * 16) = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        *reinterpret_cast<uint4*>(dst + part * 16 + 8) = make_uint4(packed[4], packed[5], packed[6], packed[7]);
      } else {
        const int r = part - kChunksNope;
        *reinterpret_cast<uint4*>(dst + T::kNope + r * 8) =
            *reinterpret_cast<const uint4*>(data + T::kRopeOffset + r * 16);
      }
    }
    __syncthreads();

    // ---- 3. S = Q K^T for heads 16 mt.. and tokens 16 nh.. (two n8 tiles).
    float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
    {
      const uint16_t* qa = sQ + (mt * 16 + (lane % 16)) * L::q_stride + (lane / 16) * 8;
      const uint16_t* kb = sK + (nh * 16 + (lane % 8) + (lane / 16) * 8) * L::k_stride + ((lane / 8) % 2) * 8;
      // Two accumulator pairs (even and odd k-steps) halve the dependent MMA chain.
      float sc2[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
      static_assert(T::kDqk % 32 == 0, "k-steps come in pairs");
#pragma unroll 2
      for (int kk = 0; kk < T::kDqk; kk += 32) {
        uint32_t a[4], bq[4], a2[4], bq2[4];
        ldmatrix_x4(a, qa + kk);
        ldmatrix_x4(bq, kb + kk);
        ldmatrix_x4(a2, qa + kk + 16);
        ldmatrix_x4(bq2, kb + kk + 16);
        mma_bf16(sc[0], a, bq[0], bq[1]);
        mma_bf16(sc[1], a, bq[2], bq[3]);
        mma_bf16(sc2[0], a2, bq2[0], bq2[1]);
        mma_bf16(sc2[1], a2, bq2[2], bq2[3]);
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[nt][e] += sc2[nt][e];
    }

    // ---- 4. Online softmax (log2 domain). Element e of tile nt: row g + 8 (e / 2), token
    // 16 nh + 8 nt + 2 t4 + (e % 2).
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tok = nh * 16 + nt * 8 + 2 * t4 + (e % 2);
        const float v = tile_data[tok] ? sc[nt][e] * scale_log2 : -INFINITY;
        sc[nt][e] = v;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], v);
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    }
    if (t4 == 0) {
      sMax[nh * kHeadsPerCta + mt * 16 + g] = tile_max[0];
      sMax[nh * kHeadsPerCta + mt * 16 + g + 8] = tile_max[1];
    }
    __syncthreads();
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = mt * 16 + g + 8 * r;
      const float new_max = fmaxf(row_max[r], fmaxf(sMax[row], sMax[kHeadsPerCta + row]));
      alpha[r] = new_max == -INFINITY ? 1.0f : exp2f(row_max[r] - new_max);
      row_max[r] = new_max;
      row_sum[r] *= alpha[r];
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      float pr[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float m = row_max[e / 2];
        pr[e] = (sc[nt][e] == -INFINITY) ? 0.0f : exp2f(sc[nt][e] - m);
        row_sum[e / 2] += pr[e];
      }
      const int col = nh * 16 + nt * 8 + 2 * t4;
      *reinterpret_cast<uint32_t*>(sP + (mt * 16 + g) * L::p_stride + col) = pack_bf16(pr[0], pr[1]);
      *reinterpret_cast<uint32_t*>(sP + (mt * 16 + g + 8) * L::p_stride + col) = pack_bf16(pr[2], pr[3]);
    }
#pragma unroll
    for (int n = 0; n < 32; ++n) {
      acc[n][0] *= alpha[0];
      acc[n][1] *= alpha[0];
      acc[n][2] *= alpha[1];
      acc[n][3] *= alpha[1];
    }
    __syncthreads();

    // ---- 5. O += P V for heads 16 mt.. and dims 256 nh.. (32 n8 tiles).
#pragma unroll
    for (int kk = 0; kk < kTileTokens; kk += 16) {
      uint32_t a[4];
      ldmatrix_x4(a, sP + (mt * 16 + (lane % 16)) * L::p_stride + kk + (lane / 16) * 8);
      const uint16_t* vb = sK + (kk + (lane % 8) + ((lane / 8) % 2) * 8) * L::k_stride + nh * 256 + (lane / 16) * 8;
#pragma unroll
      for (int n = 0; n < 32; n += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, vb + n * 8);
        mma_bf16(acc[n], a, b[0], b[1]);
        mma_bf16(acc[n + 1], a, b[2], b[3]);
      }
    }
  }

  cp_async_wait<0>();  // no copy may outlive the CTA's shared memory

  // ---- 6. The end: add the token halves' sums, normalise, write.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
  }
  __syncthreads();
  if (t4 == 0) {
    sSum[nh * kHeadsPerCta + mt * 16 + g] = row_sum[0];
    sSum[nh * kHeadsPerCta + mt * 16 + g + 8] = row_sum[1];
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = mt * 16 + g + 8 * r;
    const int64_t h = h0 + row;
    const float sum = sSum[row] + sSum[kHeadsPerCta + row];
    // Lonely means no valid key (sum exactly 0: the best key alone contributes exp2(0) = 1). A NaN
    // sum is not lonely: NaN then reaches out and lse, as on the CPU.
    const bool lonely = sum == 0.0f;
    // lse in natural log; +inf for a lonely query (a split with no valid key in the split case is
    // reported as -inf so that the combine gives it no weight).
    const float lse_split = lonely ? -INFINITY : (row_max[r] + __log2f(sum)) * kLn2;
    float factor = lonely ? 0.0f : 1.0f / sum;
    if (p.num_splits == 1 && !lonely && p.sink && h < p.h_q) {
      const float sink = p.sink[h];
      factor *= (sink == INFINITY) ? 0.0f : 1.0f / (1.0f + expf(sink - lse_split));
    }
    if (h >= p.h_q) continue;
    if (p.num_splits == 1) {
      uint16_t* o = p.out + i * p.stride_out_b + j * p.stride_out_s + h * p.stride_out_h + nh * 256;
#pragma unroll
      for (int n = 0; n < 32; ++n)
        *reinterpret_cast<uint32_t*>(o + n * 8 + 2 * t4) =
            pack_bf16(acc[n][2 * r] * factor, acc[n][2 * r + 1] * factor);
      if (nh == 0 && t4 == 0) p.lse[i * p.stride_lse_b + h * p.stride_lse_h + j] = lonely ? INFINITY : lse_split;
    } else {
      const int64_t prow = ((i * p.s_q + j) * p.h_q + h) * p.num_splits + split;
      float* o = p.partial_out + prow * kDimV + nh * 256;
#pragma unroll
      for (int n = 0; n < 32; ++n)
        *reinterpret_cast<float2*>(o + n * 8 + 2 * t4) =
            make_float2(acc[n][2 * r] * factor, acc[n][2 * r + 1] * factor);
      if (nh == 0 && t4 == 0) p.partial_lse[prow] = lse_split;
    }
  }
}

}  // namespace latentkv::decode::cuda
