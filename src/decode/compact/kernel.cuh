// decode/compact/kernel.cuh: the compact attention kernel: what the portable kernel
// (decode/cuda/kernel.cuh) computes, for the same Sources (sparse decode, sparse prefill, dense
// decode), geometry and outputs, in 128 threads and at most 95 KB of shared memory, so that GPUs
// with 99 KB per block (sm_86, sm_89, sm_120, sm_121) run every attention op.
//
// Grid: (row groups, (kv_heads * head blocks per kv head) * slices, num_splits); 128 threads. The
// portable kernel's CTA of up to 64 rows (config.h there) is cut into `slices` CTAs of 16 rows
// (slice_count: enough for the largest head block), so rows, packing, splits and partials keep
// the portable kernel's meaning and its combine kernel merges this one's partials. Per CTA:
//   1. Q (16 rows, zero past the CTA's) to shared memory.
//   2. Per tile of 32 candidates: warp 0 resolves tile t + 1's keys (its index loads issued a
//      tile earlier) while tile t's bytes land by cp.async; quantized records are dequantized from
//      one staging tile into the key tile, and the next tile's records are copied into the staging
//      tile while this one is multiplied; 16-bit keys alternate between two key tiles.
//   3. S = Q K^T (m16n8k16, fp32): warp w takes tokens 8 w .. 8 w + 7 over all of d_qk.
//   4. Online softmax in the log2 domain: the warps' tile maxima meet in shared memory, every warp
//      computes the same new row maxima from them, and writes P (16-bit) for its 8 tokens.
//   5. O += P V: warp w accumulates dims 128 w .. 128 w + 127 over the tile's 32 tokens.
//   6. The end: the warps' row sums added, then the portable kernel's epilogue (normalise, sink,
//      out and lse, or the split's partials).
// Three barriers per tile (four with quantized keys). On the H200 the loop is paced by its own
// per-tile work, not by the copies in flight (a second staging tile measured level or slower,
// bench/NOTES.md v39); on 99 KB parts one CTA of 4 warps fills an SM's shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_common/pdl.cuh"
#include "decode/compact/config.h"
#include "decode/cuda/attend_params.h"
#include "decode/cuda/kernel.cuh"

namespace latentkv::decode::compact {

using cuda::Geometry;
using cuda::KernelParams;
using cuda::KeyStorage;
using cuda::OutRef;
using cuda::PackedRows;
using cuda::StorageTraits;

// Threads per token in the record copies and the dequantization: 128 threads, 32 tokens.
inline constexpr int kLanesPerToken = kThreads / kTileTokens;
static_assert(kLanesPerToken == 4, "four threads per token");

// The cp.async copies of a tile's quantized records into the staging tile (unattended tokens copy
// nothing; they are zeroed at dequantization). Thread t copies chunks t % 4, t % 4 + 4, .. of
// token t / 4: one pointer read per thread (a loop over every chunk of the tile, one pointer read
// and one division each, took 15% of the stall samples on the tensor-parallel case; bench/NOTES.md
// v39), and each copy instruction still reads 64 contiguous bytes per token.
template <KeyStorage S, int kRawRecord>
__device__ __forceinline__ void copy_records(const uint8_t* const* data, const uint8_t* const* scale, uint8_t* raw,
                                             int tid) {
  using T = StorageTraits<S>;
  const int tok = tid / kLanesPerToken, q = tid % kLanesPerToken;
  const uint8_t* src = data[tok];
  if (!src) return;
  uint8_t* dst = raw + tok * kRawRecord;
  // kV41Mixed: a v41_fp4 record ends after 18 chunks (its 288 bytes); copying a v41_fp8 record's 33
  // would read past the last one of its cache.
  int chunks = T::kDataChunks;
  if constexpr (S == KeyStorage::kV41Mixed)
    if (cuda::is_fp4_record(src, scale[tok])) chunks = T::kFp4Chunks;
#pragma unroll
  for (int part = q; part < T::kDataChunks; part += kLanesPerToken)
    if (part < chunks) cuda::cp_async_16(dst + part * 16, src + part * 16);
  if constexpr (T::kScaleRow) {
    if (q == 0) cuda::cp_async_8(dst + T::kScaleOffset, scale[tok]);  // v4: the scale row, staged at 576
  }
}

// The cp.async copies of a tile's 16-bit keys straight into a key tile; unattended tokens get zero
// rows (plain stores), so that P = 0 never meets garbage (0 x NaN is NaN) in P V. Thread t takes
// chunks t % 4, t % 4 + 4, .. of token t / 4, as copy_records does.
template <int kDqk, int kStride>
__device__ __forceinline__ void copy_keys16(const uint8_t* const* data, uint16_t* keys, int tid) {
  constexpr int kChunks = kDqk * 2 / 16;
  const int tok = tid / kLanesPerToken, q = tid % kLanesPerToken;
  const uint8_t* src = data[tok];
  uint16_t* row = keys + tok * kStride;
  if (src) {
#pragma unroll
    for (int part = q; part < kChunks; part += kLanesPerToken) cuda::cp_async_16(row + part * 8, src + part * 16);
  } else {
#pragma unroll
    for (int part = q; part < kChunks; part += kLanesPerToken)
      *reinterpret_cast<uint4*>(row + part * 8) = make_uint4(0, 0, 0, 0);
  }
}

// Staged records to bf16 keys, exactly as the portable kernel converts them (the same primitives,
// so both give the same key bytes); unattended tokens become zeros. Thread t converts chunks t % 4,
// t % 4 + 4, .. of token t / 4 (neighbouring threads on neighbouring chunks, so a quarter warp's
// 16-byte accesses spread over the banks), with one pointer read, and the loads of four chunks
// issued before their conversions. An unattended token's staging bytes (stale, never written for
// this tile, but inside the buffer) are converted like the others and the result replaced by zeros,
// so no branch separates the loads (the per-chunk branch and pointer read of the first form left
// the conversion waiting on each load in turn: 41% of the stall samples, bench/NOTES.md v39).
// kV41Mixed: each token by its record's kind (cuda::is_fp4_record), so `scale` (the tile's scale
// pointers) is read for it alone; its chunks are read and converted as the portable kernel does
// (cuda::load_mixed_chunk, cuda::dequant_mixed_chunk). The kind is uniform over a token's four
// threads, so a warp's eight tokens diverge only in the one block of a split where the main cache's
// candidates end and the extra cache's begin.
template <int kRawRecord, int kStride>
__device__ __forceinline__ void dequantize_mixed_records(const uint8_t* const* data, const uint8_t* const* scale,
                                                         const uint8_t* raw, uint16_t* keys, int tid) {
  using T = StorageTraits<KeyStorage::kV41Mixed>;
  constexpr int kPer = T::kNope / 16 / kLanesPerToken;  // 8 chunks per thread
  constexpr int kBatch = 4;
  static_assert(kPer % kBatch == 0, "whole batches");
  const int tok = tid / kLanesPerToken, q = tid % kLanesPerToken;
  const bool live = data[tok] != nullptr;
  const bool fp4 = live && cuda::is_fp4_record(data[tok], scale[tok]);
  const uint8_t* rec = raw + tok * kRawRecord;
  uint16_t* row = keys + tok * kStride;
#pragma unroll
  for (int j0 = 0; j0 < kPer; j0 += kBatch) {
    uint4 nope[kBatch];
    uint32_t code[kBatch];  // the chunk's scale byte: e4m3 (fp4 records) or ue8m0 (fp8 ones)
#pragma unroll
    for (int j = 0; j < kBatch; ++j) cuda::load_mixed_chunk(rec, q + kLanesPerToken * (j0 + j), fp4, nope[j], code[j]);
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int part = q + kLanesPerToken * (j0 + j);
      uint4 lo, hi;
      cuda::dequant_mixed_chunk(nope[j], code[j], fp4, lo, hi);
      if (!live) lo = hi = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(row + part * 16) = lo;
      *reinterpret_cast<uint4*>(row + part * 16 + 8) = hi;
    }
  }
}

template <KeyStorage S, int kDqk, int kRawRecord, int kStride>
__device__ __forceinline__ void dequantize_records(const uint8_t* const* data, const uint8_t* const* scale,
                                                   const uint8_t* raw, uint16_t* keys, int tid) {
  if constexpr (S == KeyStorage::kV41Mixed) {
    dequantize_mixed_records<kRawRecord, kStride>(data, scale, raw, keys, tid);
    return;
  }
  (void)scale;
  using T = StorageTraits<S>;
  constexpr int kChunksNope = T::kNope / 16;  // 16 e4m3 bytes per chunk
  constexpr int kPer = kChunksNope / kLanesPerToken;
  static_assert(kChunksNope % kLanesPerToken == 0, "whole chunks per thread");
  static_assert(T::kNope + T::kRopeDims == kDqk, "NoPE + RoPE dims");
  const int tok = tid / kLanesPerToken, q = tid % kLanesPerToken;
  const bool live = data[tok] != nullptr;
  const uint8_t* rec = raw + tok * kRawRecord;
  uint16_t* row = keys + tok * kStride;
  constexpr int kBatch = 4;
#pragma unroll
  for (int j0 = 0; j0 < kPer; j0 += kBatch) {
    uint4 nope[kBatch];
    float sc[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (j0 + j >= kPer) break;
      const int part = q + kLanesPerToken * (j0 + j), group = part * 16 / T::kGroup;
      if constexpr (S == KeyStorage::kV32Fp8) sc[j] = reinterpret_cast<const float*>(rec + T::kScaleOffset)[group];
      else sc[j] = num::ue8m0_to_f32(rec[T::kScaleOffset + group]);
      nope[j] = *reinterpret_cast<const uint4*>(rec + part * 16);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (j0 + j >= kPer) break;
      const int part = q + kLanesPerToken * (j0 + j);
      uint4 lo, hi;
      // The portable kernel's choice of form (decode/cuda/kernel.cuh, dequantize_tile): fp32 where
      // the hardware converts e4m3, the exact fast form where it does not.
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890) || (defined(LKV_PORTABLE_F32_DEQUANT) && LKV_PORTABLE_F32_DEQUANT)
      cuda::dequant16_f32(nope[j], sc[j], lo, hi);
#else
      cuda::dequant16(nope[j], sc[j], lo, hi);
#endif
      if (!live) lo = hi = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(row + part * 16) = lo;
      *reinterpret_cast<uint4*>(row + part * 16 + 8) = hi;
    }
  }
  if constexpr (T::kRopeDims > 0) {
    constexpr int kChunksRope = T::kRopeDims * 2 / 16;  // 8 bf16 per chunk
#pragma unroll
    for (int part = q; part < kChunksRope; part += kLanesPerToken) {
      uint4 v = *reinterpret_cast<const uint4*>(rec + T::kRopeOffset + part * 16);
      if (!live) v = make_uint4(0, 0, 0, 0);
      *reinterpret_cast<uint4*>(row + T::kNope + part * 8) = v;
    }
  }
}

// Source: as for the portable kernel (decode/cuda/kernel.cuh lists what it provides).
template <class Source>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm) attend_kernel(const KernelParams<typename Source::Args> p) {
  // Programmatic dependent launch exactly as the portable kernel does it (its comment says why).
  if (cuda::waits_at_entry(p.g)) cuda_common::pdl_wait();
  if (p.g.early_dependents) cuda_common::pdl_launch_dependents();
  const cuda_common::PdlWaitAtExit pdl_wait_at_exit;
  constexpr int kDqk = Source::kDqk;
  constexpr bool kF16 = Source::kF16;
  constexpr KeyStorage kStorage = Source::kStorage;
  constexpr bool kDirect = kStorage == KeyStorage::kDirect16;
  using L = Layout<kDqk, kDirect>;

  extern __shared__ __align__(16) uint8_t smem[];
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem + L::q_off);
  uint16_t* sK = reinterpret_cast<uint16_t*>(smem + L::k_off);
  uint16_t* sP = reinterpret_cast<uint16_t*>(smem + L::p_off);   // [16][p_stride]
  float* sRed = reinterpret_cast<float*>(smem + L::red_off);     // [warp][16]
  const uint8_t** sData = reinterpret_cast<const uint8_t**>(smem + L::slot_off);  // [2][32]
  const uint8_t** sScale = sData + L::ptr_bufs * kTileTokens;                      // [2][32]
  uint8_t* sRaw = smem + L::raw_off;

  const Geometry& g = p.g;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int gr = lane / 4, t4 = lane % 4;  // MMA fragment row group and column pair
  const int64_t split = blockIdx.z;
  const PackedRows<Source::kPacksRows> pr(g, blockIdx.x);
  const int64_t r1 = pr.r1;
  const int64_t slices = slice_count(g);
  const int64_t hblock = blockIdx.y / slices;  // the portable kernel's blockIdx.y
  const int slice = static_cast<int>(blockIdx.y % slices);
  const int64_t kv_head = hblock / g.head_blocks_per_kv;
  const int64_t hb0 = (hblock % g.head_blocks_per_kv) * 64;
  const int64_t heads_here = min(static_cast<int64_t>(64), g.heads_per_kv - hb0);
  const int64_t h0 = kv_head * g.heads_per_kv + hb0;
  const int64_t rows_here = pr.count * heads_here;  // rows of the portable kernel's CTA
  const int lr0 = slice * kRows;                    // this CTA's first row among them
  if (lr0 >= rows_here) return;                     // a slice of a smaller last head block

  // ---- 1. Q: rows lr0 .. lr0 + 15 of the portable CTA, zero past its rows.
  const uint16_t* q_row = g.q + r1 * g.stride_q_r1 + pr.r2_0 * g.stride_q_r2;
  for (int c = tid; c < kRows * (kDqk / 8); c += kThreads) {
    const int r = c / (kDqk / 8), col = (c % (kDqk / 8)) * 8, lr = lr0 + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (lr < rows_here)
      v = *reinterpret_cast<const uint4*>(q_row + pr.query(lr, heads_here) * g.stride_q_r2 +
                                          (h0 + pr.head(lr, heads_here)) * g.stride_q_h + col);
    *reinterpret_cast<uint4*>(sQ + r * L::q_stride + col) = v;
  }

  const Source src(p.src, r1, pr.r2_last(), kv_head);
  const int64_t k_begin = split * g.keys_per_split;
  const int64_t k_end = min(src.candidates(), k_begin + g.keys_per_split);
  const int num_tiles = k_end > k_begin ? static_cast<int>((k_end - k_begin + kTileTokens - 1) / kTileTokens) : 0;
  const float scale_log2 = g.scale * cuda::kLog2e;
  // Packed causal rows: this thread's rows gr and gr + 8 see the candidates below row_lim[r]
  // (relative to k_begin; 32-bit, as a split holds fewer than 2^31 candidates).
  int row_lim[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t lim = pr.row_limit(g, lr0 + gr + 8 * r, heads_here, rows_here, src.candidates(), k_begin);
    row_lim[r] = static_cast<int>(lim < 0 ? 0 : lim > INT32_MAX ? INT32_MAX : lim);
  }

  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};  // this thread's tokens only (added over the quad and the warps at the end)
  float acc[16][4];                 // O: 16 rows x dims 128 warp.. (16 n8 tiles)
#pragma unroll
  for (int n = 0; n < 16; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

  // Key lookup in two steps by warp 0, lane = token of the tile: fetch() issues the index load a
  // tile ahead, resolve() turns it into pointers (null: not attended, never read).
  int64_t pending_k = -1;
  int32_t pending_index = -1;
  auto fetch = [&](int tile) {
    const int64_t k = k_begin + static_cast<int64_t>(tile) * kTileTokens + tid;
    pending_k = tile < num_tiles && k < k_end ? k : -1;
    if (pending_k >= 0) pending_index = src.raw_index(p.src, pending_k);
  };
  auto resolve = [&](int buf) {
    const uint8_t* scale = nullptr;
    const uint8_t* data = pending_k >= 0 ? src.locate_index(p.src, pending_k, pending_index, &scale) : nullptr;
    sData[buf * kTileTokens + tid] = data;
    sScale[buf * kTileTokens + tid] = data ? scale : nullptr;
  };
  auto issue = [&](int tile) {  // tile's copies (its pointers in buffer tile % 2)
    const int pb = tile % L::ptr_bufs;
    if constexpr (kDirect)
      copy_keys16<kDqk, L::k_stride>(sData + pb * kTileTokens, sK + (tile % 2) * kTileTokens * L::k_stride, tid);
    else
      copy_records<kStorage, L::raw_record>(sData + pb * kTileTokens, sScale + pb * kTileTokens, sRaw, tid);
    cuda::cp_async_commit();
  };

  if (tid < kTileTokens) {
    fetch(0);
    resolve(0);
    fetch(1);
  }
  __syncthreads();
  if (num_tiles > 0) issue(0);

  for (int tile = 0; tile < num_tiles; ++tile) {
    const int pb = tile % L::ptr_bufs;
    const uint8_t* const* tile_data = sData + pb * kTileTokens;
    // ---- 2. Tile t + 1's pointers (into tile t - 1's buffer), tile t + 2's index loads; then
    // tile t's bytes, everyone's, and every warp past tile t - 1 (its keys, P and maxima).
    if (tid < kTileTokens) {
      resolve((tile + 1) % L::ptr_bufs);
      fetch(tile + 2);
    }
    cuda::cp_async_wait<0>();
    __syncthreads();
    const uint16_t* keys;
    if constexpr (kDirect) {
      if (tile + 1 < num_tiles) issue(tile + 1);  // into the key tile tile t - 1 used
      keys = sK + (tile % 2) * kTileTokens * L::k_stride;
    } else {
      dequantize_records<kStorage, kDqk, L::raw_record, L::k_stride>(tile_data, sScale + pb * kTileTokens, sRaw, sK, tid);
      __syncthreads();                            // keys written, staging free
      if (tile + 1 < num_tiles) issue(tile + 1);
      keys = sK;
    }

    // ---- 3. Scores of the 16 rows and tokens 8 warp .. 8 warp + 7.
    float sc[4] = {0.f, 0.f, 0.f, 0.f};
    cuda::score_tokens_n8<kF16, kDqk, L::q_stride, L::k_stride>(sc, sQ, keys, 0, warp * 8, lane);

    // ---- 4. Online softmax. Element e: row gr + 8 (e / 2), token 8 warp + 2 t4 + (e % 2).
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int tok = warp * 8 + 2 * t4 + (e % 2);
      const bool seen = tile_data[tok] && (!Source::kPacksRows || tile * kTileTokens + tok < row_lim[e / 2]);
      const float v = seen ? sc[e] * scale_log2 : -INFINITY;
      sc[e] = v;
      tile_max[e / 2] = fmaxf(tile_max[e / 2], v);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    }
    if (t4 == 0) {
      sRed[warp * kRows + gr] = tile_max[0];
      sRed[warp * kRows + gr + 8] = tile_max[1];
    }
    __syncthreads();
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int hr = gr + 8 * r;
      // Every warp reads the same four maxima in the same order: the same new maximum everywhere.
      const float m = fmaxf(fmaxf(sRed[hr], sRed[kRows + hr]), fmaxf(sRed[2 * kRows + hr], sRed[3 * kRows + hr]));
      const float new_max = fmaxf(row_max[r], m);
      alpha[r] = new_max == -INFINITY ? 1.0f : exp2f(row_max[r] - new_max);
      row_max[r] = new_max;
      row_sum[r] *= alpha[r];
    }
    float prob[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      prob[e] = sc[e] == -INFINITY ? 0.0f : exp2f(sc[e] - row_max[e / 2]);
      row_sum[e / 2] += prob[e];
    }
    const int col = warp * 8 + 2 * t4;
    *reinterpret_cast<uint32_t*>(sP + gr * L::p_stride + col) = cuda::pack2<kF16>(prob[0], prob[1]);
    *reinterpret_cast<uint32_t*>(sP + (gr + 8) * L::p_stride + col) = cuda::pack2<kF16>(prob[2], prob[3]);
    // O's rescale, skipped where no row of the warp moved its maximum (x * 1 is x; a NaN stays NaN).
    if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
      for (int n = 0; n < 16; ++n) {
        acc[n][0] *= alpha[0];
        acc[n][1] *= alpha[0];
        acc[n][2] *= alpha[1];
        acc[n][3] *= alpha[1];
      }
    }
    __syncthreads();  // P whole

    // ---- 5. O += P V for dims 128 warp .. (V: the first 512 dims of the same keys).
#pragma unroll
    for (int kk = 0; kk < kTileTokens; kk += 16) {
      uint32_t a[4];
      cuda::ldmatrix_x4(a, sP + (lane % 16) * L::p_stride + kk + (lane / 16) * 8);
      const uint16_t* vb = keys + (kk + (lane % 8) + ((lane / 8) % 2) * 8) * L::k_stride + warp * 128 + (lane / 16) * 8;
#pragma unroll
      for (int n = 0; n < 16; n += 2) {
        uint32_t b[4];
        cuda::ldmatrix_x4_trans(b, vb + n * 8);
        cuda::mma_16816<kF16>(acc[n], a, b[0], b[1]);
        cuda::mma_16816<kF16>(acc[n + 1], a, b[2], b[3]);
      }
    }
  }
  cuda::cp_async_wait<0>();  // no copy outlives the CTA (none is in flight after the last tile)

  // ---- 6. Row sums over the quad, then over the warps; the portable kernel's epilogue.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
  }
  __syncthreads();  // every warp is done reading the last tile's maxima
  if (t4 == 0) {
    sRed[warp * kRows + gr] = row_sum[0];
    sRed[warp * kRows + gr + 8] = row_sum[1];
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int hr = gr + 8 * r, lr = lr0 + hr;
    if (lr >= rows_here) continue;
    const float sum = (sRed[hr] + sRed[kRows + hr]) + (sRed[2 * kRows + hr] + sRed[3 * kRows + hr]);
    cuda::finish_row<kF16>(g, p.o, pr, lr, heads_here, h0, split, sum, row_max[r], acc, r, warp * 128, warp == 0 && t4 == 0, t4);
  }
}

}  // namespace latentkv::decode::compact
