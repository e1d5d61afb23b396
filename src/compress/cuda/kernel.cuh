// compress/cuda/kernel.cuh: the single-launch compress_kv kernel.
//
// Grid: (num_outputs, num_splits x dim_slices); 256 threads. While streaming, a CTA covers one
// slice of 512 / S dims (S = dim_slices): 128 / S lanes per row, lane l owning 4 dims (one float4 of
// values, one of scores per row), and 2S row groups. A CTA:
//   1. resolves its output (skips it when its indices are invalid or its slot is < 0),
//   2. resolves the addresses of its window rows once, one block-table read per logical block,
//   3. streams its rows with a per-dimension online softmax (max, sum, weighted sum),
//   4. merges its row groups through shared memory in a fixed tree (group g takes group g + step,
//      step halving from S down to 1),
//   5. when its output has several CTAs (splits or slices), publishes its triple and lets the last
//      CTA of the output merge all triples in a fixed order, now with all 512 dims on 128 lanes
//      (row group 0 takes splits 0, 2, 4, ..., row group 1 takes 1, 3, 5, ..., then group 1's
//      result is merged into group 0's), so results are bitwise deterministic whichever CTA
//      finishes last,
//   6. normalises, quantizes, rotates and writes the 584-byte record (128 lanes x 4 dims).
// Launched with programmatic dependent launch (on sm_90 code, launch_compress), every CTA lets the
// next kernel of the stream in at once, so that the next grid takes SMs as this one's CTAs finish,
// and waits for the kernel ahead before its first global access, or, with p.overlap_prologue, after
// steps 1 and 2 (reads of inputs the caller vouches the kernel ahead does not write) and before the
// first state row; every CTA waits before it exits, whichever return ends it, so that this grid's
// completion implies that kernel's (stream order for whatever follows).
// Invalid indices are never followed: a bad block skips its rows (a window whose blocks are all bad
// still writes a record, of NaN or zero payload: only possible with the index checks off), and an
// output whose own indices are bad writes nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "compress/cuda/config.h"
#include "cuda_common/async_copy.cuh"
#include "cuda_common/cuda_check.h"
#include "cuda_common/pdl.cuh"
#include "compress/params.h"

namespace latentkv::compress::cuda {

struct Triple {
  float m[4], s[4], acc[4];
};

// Merges (m2, s2, acc2) into (m, s, acc) for one dim; -inf maxima (nothing seen, and then s = acc =
// 0) contribute nothing: exp(-inf - nm) is exactly 0, and when both are -inf the base 0 keeps the
// difference -inf rather than NaN, so both weights are 0 and the triple stays (-inf, 0, 0). No
// branch: a CTA's 4 dims per lane then interleave (with a branch per dim each merge step was a
// ~0.2 us serial chain on the H200, bench/NOTES.md v36); the values are those of the branchy form.
__device__ __forceinline__ void merge_one(float& m, float& s, float& acc, float m2, float s2,
                                          float acc2) {
  const float nm = fmaxf(m, m2);
  const float base = nm == -INFINITY ? 0.0f : nm;
  const float a = __expf(m - base);
  const float b = __expf(m2 - base);
  s = s * a + s2 * b;
  acc = acc * a + acc2 * b;
  m = nm;
}

template <int N>
__device__ __forceinline__ void store_triple(float (*sm)[N], int dim0, const Triple& t) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    sm[0][dim0 + k] = t.m[k];
    sm[1][dim0 + k] = t.s[k];
    sm[2][dim0 + k] = t.acc[k];
  }
}

template <int N>
__device__ __forceinline__ void merge_triple(Triple& t, const float (*sm)[N], int dim0) {
#pragma unroll
  for (int k = 0; k < 4; ++k) merge_one(t.m[k], t.s[k], t.acc[k], sm[0][dim0 + k], sm[1][dim0 + k], sm[2][dim0 + k]);
}

// ---- Thread-block clusters (sm_90): one output's CTAs in one cluster exchange through distributed
// shared memory instead of global partials, a fence and a ticket.
// The cluster barrier in halves (every thread of every CTA of the cluster takes part in each phase).
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait_acquire() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_sync_all() {
  cluster_arrive_release();
  cluster_wait_acquire();
}
// Stores v at shared::cta address `addr` of the cluster's CTA `rank`.
__device__ __forceinline__ void st_peer(uint32_t addr, uint32_t rank, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(remote), "f"(v) : "memory");
#else
  (void)addr;
  (void)rank;
  (void)v;
#endif
}
// 16 bytes at shared::cta address `addr` of the cluster's CTA `rank`.
__device__ __forceinline__ float4 ld_peer(uint32_t addr, uint32_t rank) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
#else
  (void)addr;
  (void)rank;
#endif
  return v;
}

// Streams 16-byte loads that are read exactly once: keep them out of L1.
__device__ __forceinline__ float4 load_stream(const float* p) {
  return __ldcs(reinterpret_cast<const float4*>(p));
}

// The pooled values acc / s of a lane's 4 dims, and their sum of squares (RMSNorm's per-lane part;
// every path adds it in this order, so they give the same bytes).
__device__ __forceinline__ float pooled(const Triple& t, float (&c)[4]) {
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    c[k] = t.acc[k] / t.s[k];
    sq = fmaf(c[k], c[k], sq);
  }
  return sq;
}

// The sum over the 32 lanes of a warp by a butterfly (a fixed order; every lane gets the total).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The record's bytes for the 4 dims [fd0, fd0 + 4) of one output: the RMSNorm'd values (rstd over
// all 512 dims), NoPE quantization with one power-of-two scale per 64 dims, RoPE on the last 64, the
// stores. Called by whole warps in which the lanes of each 64-dim group are 16 aligned lanes (the
// amax reduction shuffles inside them); a lane with `store` false computes, within its own group,
// and writes nothing.
template <bool kFp8>
__device__ __forceinline__ void write_record(const Params& p, int64_t slot, const float (&c)[4], float rstd, int fd0,
                                             uint2 w_bits, float2 cs_cos, float2 cs_sin, bool store) {
  const uint16_t w16[4] = {static_cast<uint16_t>(w_bits.x & 0xffffu), static_cast<uint16_t>(w_bits.x >> 16),
                           static_cast<uint16_t>(w_bits.y & 0xffffu), static_cast<uint16_t>(w_bits.y >> 16)};
  float y[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) y[k] = c[k] * rstd * num::bf16_to_f32(w16[k]);

  uint8_t* data = p.kv + data_offset(p, slot);
  uint8_t* scales = p.kv + scale_offset(p, slot);
  // Every lane takes part in the shuffles (the RoPE lanes' maxima are unused) so the full-mask
  // shuffles never diverge.
  float z[4], amax = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    z[k] = num::round_bf16(y[k]);
    amax = fmaxf(amax, fabsf(z[k]));
  }
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o, 16));
  if (!store) return;
  if (fd0 < kNope) {
    const int e = num::compressor_scale_exp(amax, kFp8 ? 1.0f / 448.0f : 1.0f / 127.0f);
    const float inv_scale = num::exp2i(-e);
    uint32_t word = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      word |= static_cast<uint32_t>(encode_payload(z[k] * inv_scale, kFp8)) << (8 * k);
    *reinterpret_cast<uint32_t*>(data + fd0) = word;
    if ((fd0 & 63) == 0) scales[fd0 / 64] = num::ue8m0_from_exp(e);
  } else {
    if (fd0 == kNope) scales[kNumGroups] = 0;
    // This lane's two pairs are j and j + 1, j = (fd0 - 448) / 2; their cos/sin were prefetched.
    uint32_t h[4];
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const float u = y[2 * q], w = y[2 * q + 1];
      const float co = q ? cs_cos.y : cs_cos.x, si = q ? cs_sin.y : cs_sin.x;
      h[2 * q] = num::f32_to_bf16(u * co - w * si);
      h[2 * q + 1] = num::f32_to_bf16(w * co + u * si);
    }
    *reinterpret_cast<uint2*>(data + kNope + 2 * (fd0 - kNope)) =
        make_uint2(h[0] | (h[1] << 16), h[2] | (h[3] << 16));
  }
}

// kCluster: launched with cluster dims (1, ctas_per_output), so that the CTAs of an output are one
// cluster. On sm_90 code:
//  - window splits (num_splits > 1, one slice) merge their triples through distributed shared
//    memory;
//  - dimension slices of an unsplit window (one split, S > 1 slices) need no merge at all: each CTA
//    finalises its own 512 / S dims, after one exchange of RMSNorm's per-lane partial sums (each
//    CTA stores its lanes' sums into every peer's shared memory, then one cluster barrier). No
//    partials, ticket or finishing CTA: the output's tail is that barrier.
// Both give the same bytes as the global path with the same plan (the same merge order and
// arithmetic; the slices' sums of squares are added in the full-width finisher's order). Code
// compiled for older targets (the compute_80 PTX run by a newer GPU) takes the global path inside the
// cluster, which is also correct.
template <bool kFp8, bool kCluster = false>
__global__ void __launch_bounds__(kThreads, kCtasPerSm)
compress_kernel(const Params p, const SplitPlan plan, float* __restrict__ partials,
                int* __restrict__ counters, unsigned long long* __restrict__ trace) {
  __shared__ int64_t s_row[kMaxRowsPerSplit];  // element offset of each row, -1 when invalid
  __shared__ int64_t s_phys[kMaxRowsPerSplit];  // physical block of each logical block of the rows
  __shared__ float s_merge[3][kDim];           // (m, s, acc) of the row groups being merged in
  __shared__ float s_red[kLanesPerRow / 32];
  __shared__ int s_last;

  const int tid = threadIdx.x;
  // Streaming mapping: this CTA's slice of dims, 128 / S lanes per row, 2S row groups.
  const int log_slices = __ffs(static_cast<int>(plan.dim_slices)) - 1;  // S is a power of two
  const int lanes = kLanesPerRow >> log_slices;
  const int groups = kThreads / lanes;
  const int group = tid / lanes;
  const int lane = tid % lanes;
  const int64_t out = blockIdx.x;  // x: up to 2^31 - 1 outputs (y and z stop at 65535)
  const int64_t split = blockIdx.y >> log_slices;
  const int slice = static_cast<int>(blockIdx.y) & ((1 << log_slices) - 1);
  const int dim0 = (slice << (9 - log_slices)) + lane * 4;  // 9: log2(kDim)
  // Merge and finalisation mapping: all 512 dims on 128 lanes, 2 row groups.
  const int fgroup = tid / kLanesPerRow;
  const int flane = tid % kLanesPerRow;
  const int fdim0 = flane * 4;
  static_assert(kDim == 1 << 9, "dim0 above shifts by log2(kDim)");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const bool slice_finish = kCluster && plan.num_splits == 1 && plan.dim_slices > 1;
#else
  constexpr bool slice_finish = false;
#endif
  // Phase timestamps for `bench compress --trace` (trace is null otherwise).
  auto stamp = [&](int phase) {
    if (trace != nullptr && tid == 0) {
      unsigned long long t;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
      trace[(static_cast<uint64_t>(blockIdx.x) * gridDim.y + blockIdx.y) * kTracePhases + phase] = t;
    }
  };
  stamp(0);
  cuda_common::pdl_launch_dependents();
  const cuda_common::PdlWaitAtExit wait_at_exit;
  if (!p.overlap_prologue) cuda_common::pdl_wait();

  // ---- 1. The output. Every CTA of an output reaches the same verdict, so none waits in vain.
  const int64_t b = p.boundary[out];
  // While b is in flight: the grid's first threads ask L2 for every line of the arrays read next,
  // so that the loads which depend on b, and the block-table loads after them, hit L2 instead of
  // paying HBM's latency again; every other thread pays one compare (bench/NOTES.md v37).
  // (32-bit: in a grid of more than 2^32 threads the index wraps, and a wrapped thread below
  // warm_lines only fetches a line that another thread fetches too.)
  if (const uint32_t t = (blockIdx.y * gridDim.x + blockIdx.x) * kThreads + tid; t < p.warm_lines) {
    const int64_t n = static_cast<int64_t>(gridDim.x) * gridDim.y * kThreads;
    cuda_common::prefetch_l2_range(p.slot_mapping, p.num_tokens * 8, t, n);
    cuda_common::prefetch_l2_range(p.token_to_req, p.num_tokens * 4, t, n);
    cuda_common::prefetch_l2_range(p.positions, p.num_tokens * 8, t, n);
    if (p.num_reqs > 0)
      cuda_common::prefetch_l2_range(p.block_table, ((p.num_reqs - 1) * p.stride_table_req + p.blocks_per_req) * 4,
                                     t, n);
  }
  if (b < 0 || b >= p.num_tokens) return;
  stamp(10);
  const int64_t slot = p.slot_mapping[b];
  const int64_t req = p.token_to_req[b];
  const int64_t pos = p.positions[b];
  const int64_t C = p.compress_ratio;
  // pos < C - 1 first: pos - C + 1 would overflow for pos near INT64_MIN (params.h says the same).
  if (slot < 0 || slot >= p.num_slots || req < 0 || req >= p.num_reqs || pos < C - 1 ||
      pos / p.block_size >= p.blocks_per_req || (pos / C) * C >= p.max_pos)
    return;
  const int64_t first = pos - C + 1;
  stamp(1);
  // Slices finishing in their cluster: the first phase of the cluster barrier says every peer has
  // started (its shared memory exists) before any CTA stores into it; waited for at the exchange.
  if (slice_finish) cluster_arrive_relaxed();

  // The finishing CTA needs its lanes' RMSNorm weights and RoPE cos/sin (all 512 dims, for either
  // finishing mapping); copied into shared memory now by cp.async, which nothing waits for until
  // the streaming is done (cp_async_wait_all below), so they stay off both the path to the first
  // state byte and the end of the kernel. (Plain loads would hold registers across the streaming,
  // which spill at its 64-register budget, or make a store wait for them before the block table's
  // loads issue.)
  __shared__ uint2 s_w[kLanesPerRow];
  __shared__ float4 s_cs[kRope / 4];  // (cos j, cos j + 1, sin j, sin j + 1) per RoPE lane
  if (tid < kLanesPerRow) {
    cuda_common::cp_async_8(&s_w[tid], p.rms_weight + 4 * tid);
    if (4 * tid >= kNope) {
      const float* cs = p.cos_sin + ((pos / C) * C) * p.stride_cos_pos;
      const int j = (4 * tid - kNope) / 2;
      float* to = &s_cs[(4 * tid - kNope) / 4].x;
      cuda_common::cp_async_4(to, cs + j);
      cuda_common::cp_async_4(to + 1, cs + j + 1);
      cuda_common::cp_async_4(to + 2, cs + kRope / 2 + j);
      cuda_common::cp_async_4(to + 3, cs + kRope / 2 + j + 1);
    }
  }
  // This thread's weights and cos/sin for the record of dims [d0, d0 + 4).
  auto record_inputs = [&](int d0, uint2& w, float2& co, float2& si) {
    w = s_w[d0 / 4];
    const float4 v = d0 >= kNope ? s_cs[(d0 - kNope) / 4] : make_float4(0.f, 0.f, 0.f, 0.f);
    co = make_float2(v.x, v.y);
    si = make_float2(v.z, v.w);
  };

  // ---- 2. Row addresses, one block-table read per logical block of this split's rows (into
  // s_phys), then one row per thread (a thread per block walking its rows took ~1 us for 128 rows
  // of 64-row blocks, on the path to the first state byte).
  const int64_t r0 = split * plan.rows_per_split;
  const int64_t r1 = min(C, r0 + plan.rows_per_split);
  {
    static_assert(kMaxRowsPerSplit <= kThreads, "one row (and at most one block) per thread");
    const int64_t bs = p.block_size;
    const int64_t lb0 = (first + r0) / bs;
    const int n_blocks = static_cast<int>((first + r1 - 1) / bs - lb0 + 1);  // <= rows
    if (tid < n_blocks) s_phys[tid] = p.block_table[req * p.stride_table_req + lb0 + tid];
    __syncthreads();
    stamp(11);
    if (tid < r1 - r0) {
      // Row tid lies `o` rows after the start of block lb0: block lb0 + o / bs, row o % bs of it.
      const int64_t o = first + r0 - lb0 * bs + tid;  // < bs + kMaxRowsPerSplit
      int64_t k, in_block;
      if (bs <= 0x7fffffff) {  // 32-bit division (o < 2^31 + 256 fits)
        const uint32_t q = static_cast<uint32_t>(o) / static_cast<uint32_t>(bs);
        k = q;
        in_block = o - static_cast<int64_t>(q) * bs;
      } else {
        k = o / bs;
        in_block = o - k * bs;
      }
      const int64_t phys = s_phys[k];
      s_row[tid] = phys >= 0 && phys < p.num_blocks ? phys * p.stride_state_block + in_block * p.stride_state_row : -1;
    }
  }
  __syncthreads();
  if (p.overlap_prologue) cuda_common::pdl_wait();  // before the first state byte
  stamp(2);

  // ---- 3. Stream the rows: group g takes rows g, g + 2S, ... in steps of kUnroll.
  Triple t;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    t.m[k] = -INFINITY;
    t.s[k] = 0.0f;
    t.acc[k] = 0.0f;
  }
  const int n_rows = static_cast<int>(r1 - r0);
  for (int base = group; base < n_rows; base += groups * kUnroll) {
    float4 v[kUnroll], sc[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int r = base + u * groups;
      const int64_t off = r < n_rows ? s_row[r] : -1;
      if (off >= 0) {
        v[u] = load_stream(p.state + off + dim0);
        sc[u] = load_stream(p.state + off + kDim + dim0);
      } else {
        v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        sc[u] = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float cm = t.m[k];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) cm = fmaxf(cm, (&sc[u].x)[k]);
      // No valid row yet: the triple stays as it is. (A branch-free form, its 4 dims free to
      // interleave, measured level on the H200: bench/NOTES.md v37.)
      if (cm == -INFINITY) continue;
      const float rescale = __expf(t.m[k] - cm);
      float s = t.s[k] * rescale, acc = t.acc[k] * rescale;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const float w = __expf((&sc[u].x)[k] - cm);
        s += w;
        acc = fmaf(w, (&v[u].x)[k], acc);
      }
      t.m[k] = cm;
      t.s[k] = s;
      t.acc[k] = acc;
    }
  }

  // This thread's copies of the weights and cos/sin have landed; the barriers of step 4 (there is
  // at least one: 2S >= 2 row groups) publish them to the CTA.
  cuda_common::cp_async_wait_all();
  stamp(3);

  // ---- 4. Merge the row groups into group 0 by halves: groups [step, 2 step) store, groups
  // [0, step) merge the one `step` above them (s_merge holds step x 512 / S <= 512 dims per array).
  // (A flat form, one barrier and group 0 merging the 2S - 1 others in order, measured slower
  // while merge_one still branched per dim, ~0.2 us per step; not measured since, bench/NOTES.md
  // v36.)
  for (int step = groups / 2; step >= 1; step >>= 1) {
    const int at = ((group & (step - 1)) << (9 - log_slices)) + lane * 4;
    if (group >= step && group < 2 * step) store_triple(s_merge, at, t);
    __syncthreads();
    if (group < step) merge_triple(t, s_merge, at);
    if (step > 1) __syncthreads();  // before the next step's stores
  }
  stamp(4);

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (slice_finish) {
    // Row group 0 holds this slice's 512 / S dims. Each of its lanes' 4-dim sum of squares goes to
    // slot dim0 / 4 (the full-width lane of those dims) of every CTA's s_sq.
    __shared__ float s_sq[kLanesPerRow];
    float c[4];
    const float sq = pooled(t, c);
    cluster_wait_acquire();  // the phase arrived at after step 1: every peer has started
    if (group == 0) {
      const uint32_t at = static_cast<uint32_t>(__cvta_generic_to_shared(&s_sq[dim0 / 4]));
      for (uint32_t r = 0; r < static_cast<uint32_t>(plan.dim_slices); ++r) st_peer(at, r, sq);
    }
    cluster_arrive_release();
    cluster_wait_acquire();  // every CTA's sums are in every s_sq; no peer access follows
    stamp(6);
    // The total in the full-width finisher's order (step 6 below): a butterfly per 32 lanes, then the
    // 4 warps in order, so the bytes equal the global path's with this plan.
    if (tid < kLanesPerRow) {
      const float v = warp_sum(s_sq[tid]);
      if ((tid & 31) == 0) s_red[tid / 32] = v;
    }
    __syncthreads();
    const float total = ((s_red[0] + s_red[1]) + s_red[2]) + s_red[3];
    const float rstd = 1.0f / sqrtf(total / static_cast<float>(kDim) + p.eps);
    stamp(8);
    // Whole warps (with 16 lanes per row, warp 0 holds row groups 0 and 1; group 1's lanes compute
    // inside their own 16-lane halves and store nothing).
    if (tid < max(lanes, 32)) {
      uint2 w;
      float2 co, si;
      record_inputs(dim0, w, co, si);
      write_record<kFp8>(p, slot, c, rstd, dim0, w, co, si, group == 0);
    }
    stamp(9);
    return;
  }
#endif

  // ---- 5. Across splits, merged in a fixed order: row group g merges splits g, g + 2, g + 4, ...
  // (loads of kMergeBatch splits issued before any is merged, so a latency is paid once per batch,
  // and the two groups' chains run side by side), then group 1's result is merged into group 0's.
  // The order keeps the result bitwise deterministic whichever CTA merges. `fetch(j, q)` loads split
  // j's triple (m, s, acc) for this lane's 4 dims.
  auto merge_all = [&](auto fetch) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      t.m[k] = -INFINITY;
      t.s[k] = 0.0f;
      t.acc[k] = 0.0f;
    }
    constexpr int kMergeBatch = 2;
    static_assert(kRowGroups * kMergeBatch == kMergeSplitsPerRound, "the planner's merge round");
    for (int64_t j0 = fgroup; j0 < plan.num_splits; j0 += kRowGroups * kMergeBatch) {
      float4 m[kMergeBatch], s[kMergeBatch], a[kMergeBatch];
#pragma unroll
      for (int q = 0; q < kMergeBatch; ++q) {
        const int64_t j = j0 + q * kRowGroups;
        if (j < plan.num_splits) {
          fetch(j, m[q], s[q], a[q]);
        } else {
          m[q] = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
          s[q] = a[q] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
      }
#pragma unroll
      for (int q = 0; q < kMergeBatch; ++q) {
        merge_one(t.m[0], t.s[0], t.acc[0], m[q].x, s[q].x, a[q].x);
        merge_one(t.m[1], t.s[1], t.acc[1], m[q].y, s[q].y, a[q].y);
        merge_one(t.m[2], t.s[2], t.acc[2], m[q].z, s[q].z, a[q].z);
        merge_one(t.m[3], t.s[3], t.acc[3], m[q].w, s[q].w, a[q].w);
      }
    }
    stamp(6);
    if (fgroup == 1) store_triple(s_merge, fdim0, t);
    __syncthreads();
    if (fgroup == 0) merge_triple(t, s_merge, fdim0);
  };
  bool merged_in_cluster = false;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kCluster) {
    if (plan.num_splits > 1 && plan.dim_slices == 1) {  // the launch makes one cluster per output's splits
      __shared__ __align__(16) float s_part[3][kDim];  // this split's triple, read by split 0
      // Publish in shared memory; split 0 (cluster rank 0) reads every split's triple from its
      // CTA's shared memory; the second barrier keeps the peers' shared memory alive until then.
      if (fgroup == 0) {
        reinterpret_cast<float4*>(s_part[0])[flane] = make_float4(t.m[0], t.m[1], t.m[2], t.m[3]);
        reinterpret_cast<float4*>(s_part[1])[flane] = make_float4(t.s[0], t.s[1], t.s[2], t.s[3]);
        reinterpret_cast<float4*>(s_part[2])[flane] = make_float4(t.acc[0], t.acc[1], t.acc[2], t.acc[3]);
      }
      cluster_sync_all();
      if (split == 0) {
        const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(&s_part[0][0])) + 16u * flane;
        merge_all([&](int64_t j, float4& m, float4& s, float4& a) {
          const uint32_t r = static_cast<uint32_t>(j);
          m = ld_peer(base, r);
          s = ld_peer(base + kDim * 4, r);
          a = ld_peer(base + 2 * kDim * 4, r);
        });
      }
      cluster_sync_all();
      if (split != 0) return;
      merged_in_cluster = true;
    }
  }
#endif
  // Global path: publish (each slice its own dims of the split's triple), count, and let the last
  // CTA of the output merge.
  if (plan.merged() && !merged_in_cluster) {
    // The handshake: the CTA's stores, a CTA barrier, then one thread's gpu-scope acquire-release
    // ticket; the last CTA's threads read the partials after the barrier that follows it (from L2:
    // __ldcg never sees a stale L1 line).
    if (group == 0) {
      float* mine = partials + (out * plan.num_splits + split) * 3 * kDim + dim0;
      *reinterpret_cast<float4*>(mine) = make_float4(t.m[0], t.m[1], t.m[2], t.m[3]);
      *reinterpret_cast<float4*>(mine + kDim) = make_float4(t.s[0], t.s[1], t.s[2], t.s[3]);
      *reinterpret_cast<float4*>(mine + 2 * kDim) = make_float4(t.acc[0], t.acc[1], t.acc[2], t.acc[3]);
    }
    __syncthreads();
    if (tid == 0) {
      // One acquire-release atomic: its release half publishes what the CTA barrier ordered before
      // it (cumulativity), and its acquire half (the counter's additions form a release sequence)
      // makes every other CTA's partials visible to this CTA's threads after the barrier below.
      // Against a sequentially consistent fence before the add and another after it: 0.2-0.4 µs
      // less on the 8192-token calls (bench/NOTES.md v30). The reset needs no ordering: the next
      // call's CTAs read the counter only after this grid has completed (stream order, or their
      // PDL wait).
      int ticket;
      asm volatile("atom.add.acq_rel.gpu.s32 %0, [%1], 1;" : "=r"(ticket) : "l"(counters + out) : "memory");
      s_last = ticket == plan.ctas_per_output() - 1;
      if (s_last) counters[out] = 0;  // every CTA has arrived: ready for the next call
    }
    __syncthreads();
    stamp(5);
    if (!s_last) return;
    merge_all([&](int64_t j, float4& m, float4& s, float4& a) {
      const float* src = partials + (out * plan.num_splits + j) * 3 * kDim;
      m = __ldcg(reinterpret_cast<const float4*>(src) + flane);
      s = __ldcg(reinterpret_cast<const float4*>(src + kDim) + flane);
      a = __ldcg(reinterpret_cast<const float4*>(src + 2 * kDim) + flane);
    });
    stamp(7);
  }
  if (fgroup == 1) return;  // no barrier below involves row group 1

  // ---- 6. Finalise: RMSNorm's sum of squares over all 512 dims (each lane's 4, then a butterfly
  // per warp, then the 4 warps in order), then the record's bytes.
  float c[4];
  const float sq = warp_sum(pooled(t, c));
  if ((flane & 31) == 0) s_red[flane / 32] = sq;
  asm volatile("bar.sync 1, %0;" ::"n"(kLanesPerRow));
  const float total = ((s_red[0] + s_red[1]) + s_red[2]) + s_red[3];
  const float rstd = 1.0f / sqrtf(total / static_cast<float>(kDim) + p.eps);
  stamp(8);
  uint2 w;
  float2 co, si;
  record_inputs(fdim0, w, co, si);
  write_record<kFp8>(p, slot, c, rstd, fdim0, w, co, si, true);
  stamp(9);
}

// A launch of (num_outputs, ctas) CTAs in which each output's CTAs form one cluster; `attr` is
// the storage the returned config points to (its first entry; the second is free for PDL).
inline cudaLaunchConfig_t cluster_config(cudaLaunchAttribute (&attr)[2], int64_t num_outputs, int64_t ctas,
                                         cudaStream_t stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(num_outputs), static_cast<unsigned>(ctas));
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = static_cast<unsigned>(ctas);
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  return config;
}

// Whether clusters of `ctas` CTAs of `kernel` (one compress_kernel<kFp8, true> instantiation) fit
// on `device`: sizes above 8 are non-portable, asked for once, and a device may still refuse them (a
// small MIG slice). Answered once per (device, kernel, size); a refusal is cached as no.
template <class Kernel>
inline bool cluster_fits(Kernel kernel, int device, int64_t num_outputs, int64_t ctas) {
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, int64_t>, bool> known;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(device, reinterpret_cast<const void*>(kernel), ctas);
  if (auto it = known.find(key); it != known.end()) return it->second;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  int clusters = 0;
  if (err == cudaSuccess) {
    cudaLaunchAttribute attr[2];
    const cudaLaunchConfig_t config = cluster_config(attr, num_outputs, ctas, nullptr);
    err = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
  }
  if (err != cudaSuccess) (void)cudaGetLastError();  // a refusal is an answer, not an error to report later
  const bool ok = err == cudaSuccess && clusters > 0;
  known[key] = ok;
  return ok;
}

// The body of launch_compress_kernel<kFp8> (launch.h) and of cluster_launch_fits<kFp8>, which each
// instantiation file specialises with its payload kind. pdl: launched with programmatic dependent
// launch (only where the device runs the sm_90 code, whose waits are not compiled out).
template <bool kFp8>
inline void launch_compress(const Params& p, const SplitPlan& plan, float* partials, int* counters,
                            bool cluster, bool pdl, unsigned long long* trace, cudaStream_t stream) {
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t config = {};
  if (cluster) {
    config = cluster_config(attr, p.num_outputs, plan.ctas_per_output(), stream);
  } else {
    config.gridDim = dim3(static_cast<unsigned>(p.num_outputs), static_cast<unsigned>(plan.ctas_per_output()));
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    config.attrs = attr;
  }
  if (pdl) attr[config.numAttrs++] = cuda_common::pdl_attribute();
  LKV_CUDA_CHECK(cudaLaunchKernelEx(&config, cluster ? compress_kernel<kFp8, true> : compress_kernel<kFp8, false>,
                                    p, plan, partials, counters, trace));
  LKV_CUDA_CHECK_LAUNCH();
}

template <bool kFp8>
inline bool cluster_fits_for(const Params& p, const SplitPlan& plan, int device) {
  return cluster_fits(compress_kernel<kFp8, true>, device, p.num_outputs, plan.ctas_per_output());
}

}  // namespace latentkv::compress::cuda
