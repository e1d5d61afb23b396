// decode/sm90/kernel_ws.cuh: the warp-specialised variant of the Hopper attention kernel
// (kernel.cuh): a third warpgroup produces the key stages, so the two consumer warpgroups only
// multiply and run the softmax. Same Sources, parameters, outputs and split partials as kernel.cuh;
// chosen at run time (launch.cuh) so that the two can be compared on the same build.
//
// Why: in kernel.cuh both warpgroups dequantize half of the next block between their products, and
// a block takes about 4x its MMA time (bench/NOTES.md): the dequantization and the softmax sit on the
// same warps' critical path. Here warpgroup 2 resolves, gathers and dequantizes block n + 1 while the
// consumers work on block n, decoupled by mbarriers:
//   full[s]  (128 arrivals: every producer thread, after its stores and fence.proxy.async)
//   empty[s] (8 arrivals: lane 0 of every consumer warp, after its products of the block completed;
//             a CTA pair: 16, the peer's consumer warps as well)
// and the consumers meet at named barriers: 1 (P of the block is in shared memory), 2 (warpgroup 1 no
// longer reads P), 3 (row statistics for the epilogue). The attended-token mask of a stage is
// written by the producer before its full arrival and read by warpgroup 0 before its empty arrival.
// Registers (setmaxnreg; entry cap 168 = 65536 / 384, the three must sum to at most 504): warpgroup
// 0 224 (O half 128, S 32, P 16, the row's 64-bit indices), warpgroup 1 keeps 168 (O
// half 128), producer 112 (one token's raw record at a time, 44, and two blocks' record pointers:
// at 96 it spilled once it kept the next block's pointers for the L2 prefetch). CTA pairs: 216 /
// 160 / 128 (kWsPair*: the producer keeps the next block's records in registers across the loop).
//
// CTA pairs (kPair, quantized keys, opt-in with LKV_SM90_PAIR=1 beside LKV_SM90_WS=1): the two head
// blocks of a query row run as a cluster of two CTAs, and each producer loads and dequantizes only
// its half of every block's tokens (whole tokens: 32 rank ..), storing them into its own stage and,
// by st.async, into the peer's. The peer's bytes complete on this CTA's full[s] (the producer's thread
// 0 announces them with its arrival), and a stage is free when both CTAs' consumers have released
// it (empty[s] counts 8 local and 8 remote arrivals). This is the design FlashMLA's write-up
// describes for its Hopper kernel (a producer warpgroup and the cross-CTA exchange). Measured on the
// H200 (bench/NOTES.md): 281.0 TFLOPS on V3.2 b 128 against 317.9 for kernel.cuh in the same run,
// and level with it on the v4 h_q 128 peak (325.3 against 324.1).
#pragma once

#include "decode/sm90/kernel.cuh"

namespace latentkv::decode::sm90 {

inline constexpr int kWsThreads = 384;

template <int kDqk>
struct WsLayout {
  static constexpr int chunks = kDqk / 64;
  static constexpr int q_off = 0;
  static constexpr int k_stage = chunks * kChunkBytes;
  static constexpr int k_off = q_off + k_stage;
  static constexpr int p_off = k_off + 2 * k_stage;
  static constexpr int bar_off = p_off + kChunkBytes;      // u64 full[2], empty[2]
  static constexpr int valid_off = bar_off + 32;           // u32 [2 stages][2]
  static constexpr int alpha_off = valid_off + 16;         // f32 [64]
  static constexpr int stat_off = alpha_off + kHeads * 4;  // f32 [2][64] (alpha's array before it)
  static constexpr int used = stat_off + 2 * kHeads * 4;
  static constexpr int total = used + kAlignSlack;
};
static_assert(WsLayout<576>::stat_off == WsLayout<576>::alpha_off + kHeads * 4 &&
                  WsLayout<512>::stat_off == WsLayout<512>::alpha_off + kHeads * 4,
              "the row stats must follow the alpha array (publish_row_stats, row_end)");
static_assert(WsLayout<576>::total <= 227 * 1024, "v32 layout must fit an H100/H200 CTA");

// mbarrier init, arrival and wait: the portable kernel's (decode/cuda/kernel.cuh).
using cuda::mbar_arrive;
using cuda::mbar_init;
using cuda::mbar_wait;

// setmaxnreg budgets (see the header): the increase blocks until the pool has the registers, so the
// three must fit what the launch allocated (168 per thread at 384 threads).
inline constexpr int kWsRegsConsumer0 = 224, kWsRegsConsumer1 = 168, kWsRegsProducer = 112;
static_assert(kWsRegsConsumer0 + kWsRegsConsumer1 + kWsRegsProducer <= 3 * 168, "register pool");
// CTA pairs: the producer holds its token's whole record (44 registers) across the block loop (the
// next block's record is loaded an iteration ahead, after the block's arrive), the peer's
// addresses and two blocks' pointers: 128 (120 spilled when it held two half tokens); consumer 1
// gives 8 (160: its O half and addresses, 151 used) and consumer 0 8 (216: 192 used at 224).
inline constexpr int kWsPairRegsConsumer0 = 216, kWsPairRegsConsumer1 = 160, kWsPairRegsProducer = 128;
static_assert(kWsPairRegsConsumer0 + kWsPairRegsConsumer1 + kWsPairRegsProducer <= 3 * 168, "register pool");
// A pair's producer checks the fast path once per token (one check over all its chunks, then the
// conversions without a branch between them), as the two-warpgroup kernel does.
inline constexpr bool kWsPairWholeToken = true;

template <class Source, bool kPair = false>
__global__ void __launch_bounds__(kWsThreads, 1) attend_kernel_ws(const KernelParams<typename Source::Args> p) {
#if defined(LKV_SM90_WGMMA)
  // Programmatic dependent launch, as in the portable kernel (decode/cuda/kernel.cuh).
  if (cuda::waits_at_entry(p.g)) cuda_common::pdl_wait();
  if (p.g.early_dependents) cuda_common::pdl_launch_dependents();
  const cuda_common::PdlWaitAtExit pdl_wait_at_exit;
  static_assert(!Source::kF16, "the sm90 kernel multiplies bf16; f16 queries run the portable kernel");
  constexpr int kDqk = Source::kDqk;
  constexpr KeyStorage kStorage = Source::kStorage;
  constexpr bool kDirect = kStorage == KeyStorage::kDirect16;
  static_assert(!(kPair && kDirect), "CTA pairs share dequantized records; 16-bit keys are copied, not shared");
  constexpr KeyStorage kRawStorage = kDirect ? KeyStorage::kV32Fp8 : kStorage;
  using L = WsLayout<kDqk>;
  constexpr int kQkSteps = kDqk / 16;

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t base_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint8_t* smem = smem_raw + ((1024u - (base_addr & 1023u)) & 1023u);
  uint8_t* sQ = smem + L::q_off;
  uint8_t* sK = smem + L::k_off;
  uint8_t* sP = smem + L::p_off;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + L::bar_off);
  uint64_t* empty = full + 2;
  uint32_t* sValid = reinterpret_cast<uint32_t*>(smem + L::valid_off);  // [2 stages][2 words]
  float* sAlpha = reinterpret_cast<float*>(smem + L::alpha_off);
  float* sRowMax = reinterpret_cast<float*>(smem + L::stat_off);
  float* sRowSum = sRowMax + kHeads;
  // A pair: this CTA's rank, where its shared memory sits in the peer's, and the barriers'
  // shared::cta addresses (the peer's are these plus peer_delta).
  const uint32_t rank = kPair ? cluster_ctarank() : 0u;
  const uint32_t peer_delta = kPair ? map_shared_rank(base_addr, rank ^ 1u) - base_addr : 0u;
  const uint32_t full_addr = static_cast<uint32_t>(__cvta_generic_to_shared(full));
  const uint32_t empty_addr = static_cast<uint32_t>(__cvta_generic_to_shared(empty));
  // Waits on this CTA's barrier; a pair's phases also complete by the peer's operations (st.async
  // bytes, remote arrivals): pair_bar_wait (ptx.cuh) says why CTA scope suffices.
  auto bar_wait = [&](uint64_t* bar, uint32_t parity) {
    if constexpr (kPair) pair_bar_wait(static_cast<uint32_t>(__cvta_generic_to_shared(bar)), parity);
    else mbar_wait(bar, parity);
  };

  const cuda::Geometry& g = p.g;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), wq = warp % 4;
  const int gr = lane / 4, t4 = lane % 4;
  // Consumers: block n's stage is whole (this CTA's producer arrived; a pair: the peer's bytes
  // landed, made visible to wgmma by the proxy fence).
  auto wait_full = [&](int64_t n) {
    bar_wait(&full[n & 1], static_cast<uint32_t>((n >> 1) & 1));
    if constexpr (kPair) fence_proxy_async();
  };
  // Consumers: this warp's products of block n have completed; its stage may be refilled once
  // every consumer warp (a pair: both CTAs') has said so.
  auto release = [&](int64_t n) {
    if (lane == 0) {
      mbar_arrive(&empty[n & 1]);
      if constexpr (kPair) pair_bar_arrive_peer(empty_addr + 8u * static_cast<uint32_t>(n & 1) + peer_delta);
    }
  };
  const CtaWork<Source::kPacksRows> w(g);
  const int64_t kv_head = w.kv_head, r1 = w.r1, split = w.split;

  // ---- Q to shared memory (every thread), barriers initialised (thread 0).
  load_q<kDqk, kWsThreads>(sQ, g, w, tid);
  cuda::cp_async_wait<0>();  // Q's copies, before the fence and the barrier below
  if (tid == 0) {
    mbar_init(&full[0], 128);
    mbar_init(&full[1], 128);
    mbar_init(&empty[0], kPair ? 16 : 8);
    mbar_init(&empty[1], kPair ? 16 : 8);
    if constexpr (kPair) pair_bar_init_fence();
  }
  fence_proxy_async();
  // A pair: both CTAs' barriers exist (and the peer runs) before either sends to the other.
  if constexpr (kPair) cluster_sync();
  else __syncthreads();

  const Source src(p.src, r1, w.pr.r2_last(), kv_head);
  const int64_t k_begin = split * g.keys_per_split;
  const int64_t k_end = min(src.candidates(), k_begin + g.keys_per_split);
  const int64_t nb = k_end > k_begin ? (k_end - k_begin + kBlockTokens - 1) / kBlockTokens : 0;
  const float scale_log2 = g.scale * cuda::kLog2e;
  const int r0 = 16 * wq + gr;  // consumer rows r0 and r0 + 8

  if (wg == 2) {
    // ===================== producer =====================
    regs_decrease<kPair ? kWsPairRegsProducer : kWsRegsProducer>();
    // Lane l of producer warp q: tokens 8 q + l % 8 and 32 + 8 q + l % 8, chunk column l / 8.
    const int tok_l = 8 * wq + lane % 8, part = lane / 8;
    Raw<kRawStorage> raw;
    // A pair: lane l dequantizes token 32 rank + 8 q + l % 8 (its CTA's half of the block) whole.
    // Block n's pointers (data, scale) and block n + 1's (ndata, nscale): a block is resolved an
    // iteration before its records are loaded and its records are prefetched into L2 then, so that
    // the loads after the empty wait hit L2 instead of HBM; the CTA's index lines are prefetched
    // once at the start, so that the resolves hit L2 as well.
    const uint8_t* data[2] = {nullptr, nullptr};
    const uint8_t* scale[2] = {nullptr, nullptr};
    const uint8_t* ndata[2] = {nullptr, nullptr};
    const uint8_t* nscale[2] = {nullptr, nullptr};
    if constexpr (requires { src.prefetch_indices(p.src, k_begin, k_end, 0, 1); })
      src.prefetch_indices(p.src, k_begin, k_end, tid - 256, 128);
    // The eight part-0 lanes resolve their tokens (index loads, 32-bit divisions) and pass the
    // pointers to the other three lanes of the token; lane 0 stores the warp's attended bits as byte
    // q of the block's word h (every byte is rewritten each block, so no clearing is needed).
    // Sources that split locate() (all three) have their index loads issued a block earlier
    // still: `idx` holds block n + 3's raw indices (part-0 lanes) while block n is dequantized, so
    // that resolving block n + 2 waits on no memory.
    constexpr bool kSplitLocate = requires { src.raw_index(p.src, k_begin); };
    int32_t idx[2] = {-1, -1};
    auto load_indices = [&](int64_t blk) {
      if constexpr (kSplitLocate) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int64_t k = k_begin + blk * kBlockTokens + 32 * h + tok_l;
          idx[h] = (part == 0 && k < k_end) ? src.raw_index(p.src, k) : -1;
        }
      }
    };
    auto resolve = [&](int64_t blk, const uint8_t* (&d_out)[2], const uint8_t* (&s_out)[2]) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint8_t* d = nullptr;
        const uint8_t* sc = nullptr;
        if (part == 0) {
          const int64_t k = k_begin + blk * kBlockTokens + 32 * h + tok_l;
          if constexpr (kSplitLocate) {
            if (k < k_end) d = src.locate_index(p.src, k, idx[h], &sc);
          } else {
            if (k < k_end) d = src.locate(p.src, k, &sc);
          }
        }
        d_out[h] = reinterpret_cast<const uint8_t*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(d), lane % 8));
        // Only a v4 record's scale row lies elsewhere; a v32 record carries its scales (scale_of).
        if constexpr (kRawStorage == KeyStorage::kV4Fp8)
          s_out[h] = reinterpret_cast<const uint8_t*>(
              __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(sc), lane % 8));
        else
          s_out[h] = nullptr;
      }
    };
    // Token h's scale pointer (of block n, or of block n + 1 for nscale_of): a v32 record's scales
    // are its bytes 512.. (kept out of registers).
    auto scale_of = [&](int h) -> const uint8_t* {
      if constexpr (kRawStorage == KeyStorage::kV4Fp8) return scale[h];
      else return data[h] ? data[h] + 512 : nullptr;
    };
    auto nscale_of = [&](int h) -> const uint8_t* {
      if constexpr (kRawStorage == KeyStorage::kV4Fp8) return nscale[h];
      else return ndata[h] ? ndata[h] + 512 : nullptr;
    };
    // The 128-byte lines of the two tokens' records (the four lanes of a token share them out), and
    // a v4 record's scale row.
    constexpr int kRecBytes = kDirect ? kDqk * 2 : (kRawStorage == KeyStorage::kV32Fp8 ? 656 : 576);
    auto prefetch_records = [&](const uint8_t* const (&d)[2], const uint8_t* const (&sc)[2]) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!d[h] || (kPair && h != static_cast<int>(rank))) continue;  // a pair: its own half only
        for (int k = part; k * 128 < kRecBytes; k += 4)
          prefetch_l2(d[h] + 128 * k);
        if (part == 3) prefetch_l2(d[h] + kRecBytes - 1);
        if (!kDirect && kRawStorage == KeyStorage::kV4Fp8 && part == 2)
          prefetch_l2(sc[h]);
      }
    };
    auto store_valid = [&](int stage) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t bits = __ballot_sync(0xffffffffu, data[h] != nullptr) & 0xffu;  // lanes 0-7
        if (lane == 0) reinterpret_cast<uint8_t*>(sValid)[stage * 8 + 4 * h + wq] = static_cast<uint8_t>(bits);
      }
    };
    load_indices(0);
    resolve(0, data, scale);
    if (nb > 1) {
      load_indices(1);
      resolve(1, ndata, nscale);
      prefetch_records(ndata, nscale);
    }
    if (nb > 2) load_indices(2);
    // A pair's producer holds its token's record in registers an iteration ahead: block 0's now,
    // block n + 1's right after block n's arrive (the same registers). `next` picks ndata.
    // (Selects, not data[rank]: a register array indexed at run time would live in local memory.)
    auto load_own = [&](bool next) {
      if (next) load_raw<kRawStorage>(raw, rank ? ndata[1] : ndata[0], rank ? nscale_of(1) : nscale_of(0), part);
      else load_raw<kRawStorage>(raw, rank ? data[1] : data[0], rank ? scale_of(1) : scale_of(0), part);
    };
    if constexpr (kPair && !kDirect) load_own(false);
    for (int64_t n = 0; n < nb; ++n) {
      const int s = static_cast<int>(n & 1);
      const uint32_t phase = static_cast<uint32_t>((n >> 1) & 1);
      uint8_t* stage = sK + s * L::k_stage;
      // The stage is free once the consumers (a pair: both CTAs') finished block n - 2 (the first
      // use passes at once).
      bar_wait(&empty[s], phase ^ 1);
      store_valid(s);
      if constexpr (kDirect) {
        constexpr int kChunks = kDqk * 2 / 16;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // Chunk c = part + 4 i (dims 8 c..) sits in swizzled chunk i / 2 at column 8 part + 32 (i % 2):
          // two base addresses and constant offsets.
          const int tok = 32 * h + tok_l;
          uint8_t* base[2] = {stage + sw128_offset(tok, 8 * part), stage + sw128_offset(tok, 8 * part + 32)};
          const uint8_t* from = data[h] ? data[h] + 16 * part : nullptr;
#pragma unroll
          for (int i = 0; i < kChunks / 4; ++i) {
            uint8_t* dst = base[i % 2] + (i / 2) * kChunkBytes;
            if (from) cuda::cp_async_16(dst, from + 64 * i);
            else *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
          }
        }
        cuda::cp_async_commit();
        cuda::cp_async_wait<0>();
      } else if constexpr (kPair) {
        // Block n's record is in `raw` (loaded an iteration ago, after the previous arrive). The
        // token index is made opaque to the compiler each block: otherwise it hoists the store
        // offsets out of the block loop and spills them.
        int tok = 32 * static_cast<int>(rank) + tok_l;
        asm volatile("" : "+r"(tok));
        store_dequantized<kRawStorage, true, kWsPairWholeToken, true>(raw, stage, tok, part, peer_delta,
                                                                      full_addr + 8u * s + peer_delta);
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          load_raw<kRawStorage>(raw, data[h], scale_of(h), part);
          store_dequantized<kRawStorage, false, false>(raw, stage, 32 * h + tok_l, part);
        }
      }
      fence_proxy_async();
      // A pair: producer thread 0's arrival also announces the peer's bytes of this block. They
      // cannot belong to the previous phase: the peer writes block n only after this CTA's
      // consumers, who waited for that phase, released the stage.
      if (kPair && tid == 256) pair_bar_expect(full_addr + 8u * s, kPairPeerBytes<kDqk>);
      else mbar_arrive(&full[s]);
      // A pair: block n + 1's records into the registers just dequantized, after the arrive (whose
      // release could otherwise wait for these loads), in flight until the next iteration.
      if constexpr (kPair && !kDirect) {
        if (n + 1 < nb) load_own(true);
      }
      // Block n + 1 becomes current; block n + 2 is resolved and its records asked for.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        data[h] = ndata[h];
        scale[h] = nscale[h];
      }
      if (n + 2 < nb) {
        resolve(n + 2, ndata, nscale);  // split locate: from indices loaded an iteration ago
        prefetch_records(ndata, nscale);
      }
      if (n + 3 < nb) load_indices(n + 3);
    }
  } else if (wg == 0) {
    // ===================== consumer 0: scores, softmax, O[:, 0:256] =====================
    regs_increase<kPair ? kWsPairRegsConsumer0 : kWsRegsConsumer0>();
    int64_t row_lim[2];  // the candidates rows r0 and r0 + 8 see (packed causal rows)
    row_limits(g, w, r0, src.candidates(), k_begin, row_lim);
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY};
    float row_sum[2] = {0.0f, 0.0f};
    float row_top[2] = {-INFINITY, -INFINITY};
    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.0f;
    for (int64_t n = 0; n < nb; ++n) {
      const int st_i = static_cast<int>(n & 1);
      uint8_t* kcur = sK + st_i * L::k_stage;
      wait_full(n);
      issue_scores<kQkSteps>(s, sQ, kcur);
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands(s);
      const uint64_t valid = static_cast<uint64_t>(sValid[st_i * 2]) |
                             (static_cast<uint64_t>(sValid[st_i * 2 + 1]) << 32);
      // Packed causal rows mask their own later candidates (row_lim: all of them otherwise).
      const int64_t base = n * kBlockTokens;
      const uint64_t valid_rows[2] = {Source::kPacksRows ? row_mask(valid, row_lim[0], base) : valid,
                                      Source::kPacksRows ? row_mask(valid, row_lim[1], base) : valid};
      float alpha[2];
      online_softmax(s, valid_rows, scale_log2, t4, row_max, row_sum, row_top, alpha);
      uint32_t pa[4][4];
      // Warpgroup 1 must be done reading the previous block's P before it is overwritten.
      if (n > 0) named_barrier_sync<2>();
      store_p(s, pa, alpha, sP, sAlpha, r0, t4);
      fence_proxy_async();
      named_barrier_arrive<1>();  // P and alpha of block n are ready
      issue_values_from_registers(o, alpha, pa, kcur);
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands(o);
      fence_p(pa);
      release(n);
    }
    // The true row maxima go to alpha's array: consumer 1 must have read the last block's alpha.
    if (nb > 0) named_barrier_sync<2>();
    publish_row_stats(row_max, row_sum, row_top, sRowMax, sRowSum, r0, t4);
    named_barrier_sync<3>();
    write_rows(p, o, sRowMax, sRowSum, r0, t4, 0, w);
  } else {
    // ===================== consumer 1: O[:, 256:512] =====================
    // Keeps the entry cap of 168 registers (no setmaxnreg); a pair's gives 8 to the producer.
    if constexpr (kPair) regs_decrease<kWsPairRegsConsumer1>();
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.0f;
    for (int64_t n = 0; n < nb; ++n) {
      const int st_i = static_cast<int>(n & 1);
      uint8_t* kcur = sK + st_i * L::k_stage;
      wait_full(n);
      named_barrier_sync<1>();  // P and alpha of block n
      issue_values_from_smem(o, sAlpha[r0], sAlpha[r0 + 8], sP, kcur);
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands(o);
      named_barrier_arrive<2>();  // P may be overwritten (after the last block: alpha's array)
      release(n);
    }
    named_barrier_sync<3>();
    write_rows(p, o, sRowMax, sRowSum, r0, t4, 1, w);
  }
  // A pair leaves together: nothing may arrive at or be stored into a CTA that has exited.
  if constexpr (kPair) cluster_sync();
#else
  (void)p;
  __trap();
#endif
}

}  // namespace latentkv::decode::sm90
