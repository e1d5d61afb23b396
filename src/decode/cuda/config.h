// decode/cuda/config.h: tile constants of the portable (sm_80+) sparse decode kernel, with reasons.
#pragma once

#include <cstdlib>
#include <cstring>

#include "decode/params.h"

namespace latentkv::decode::cuda {

// 64 heads per CTA: four 16-row MMA tiles, so every dequantized token in shared memory serves 64
// query rows (MLA decode is MQA: one latent KV head for all query heads). Fewer heads are padded
// with zero rows inside the kernel.
inline constexpr int kHeadsPerCta = 64;
// 8 warps: warp w owns heads 16 * (w / 2) .. +15 and half (w % 2) of the score product (of the
// tokens, or of d_qk: kernel.cuh, Source::kSplitDqk) and of the softmax's tokens, and half (w % 2)
// of the 512 output dims in the value product, which keeps its
// accumulator at 16 x 256 fp32 = 128 registers per thread. The two warps of a head tile are
// neighbours, so when h_q < 64 leaves head tiles idle the working warps sit on different SM
// sub-partitions (warp w issues on sub-partition w % 4). (With token groups, CTAs of at most 16
// rows, the pairs split each tile's tokens instead: kernel.cuh, kGroups; with quantized keys in
// the overlapped layout warps 4-7 then take half of each value product, a tile late: kShareV.
// With score and value warps, CTAs of at most 32 rows with 16-bit keys on sm_90, warps 4-7
// compute the scores of rows 16 ((w - 4) / 2).. and warps 0-3 the softmax and value product:
// kernel.cuh, kRoles.)
inline constexpr int kWarps = 8;
inline constexpr int kThreads = kWarps * 32;
// Tokens per tile: 32 = 2 warps x 16 score columns. A tile of dequantized bf16 keys is 32 x 576 x 2
// = 36 KB of shared memory.
inline constexpr int kTileTokens = 32;
// Shared-memory rows are padded by 8 bf16 (16 bytes) so that row strides are odd multiples of 16
// bytes and ldmatrix reads of 8 consecutive rows hit 8 different bank groups.
inline constexpr int kRowPad = 8;
// Splits hold whole blocks of this many candidates (the planner's unit).
inline constexpr int kSplitUnit = 64;
// The split combine (combine.cu) gives each (row, head) one warp, or four warps of 128 dims each
// when there are at most this many rows per SM: with one warp per row a few hundred rows (b 2)
// leave most SMs idle and each warp waits on its splits' loads alone; with four, each lane has one
// 16-byte load per split and 16 splits' loads in flight. Above it the four-warp form is slower
// (its 8-warp blocks no longer fit in one round: 2 per SM at 123 registers per thread), hence 4:
// 4 x 4 warps x 132 SMs fill the two blocks per SM once. Measured on the H200 (bench/NOTES.md v28),
// at the same plans: V4 b 2 (256-512 rows) 3-10% less time, V3.2 b 2 level, V4.1 h_q 128 at 5
// splits 2.5% more; b 74 (1024-2048 rows) 2-4.5% more with four warps, so there one warp per row
// stays. Where this form runs, the Hopper plan takes one block per split when that fits one
// wave and the request has an extra cache (decode.cpp, plan_decode).
inline constexpr int kCombineQuarterMaxRowsPerSm = 4;
// LKV_SMALL_COMBINE=0 (read once per process) turns the four-warp form off, and with it the
// planner's one-block rule, so that benchmarks can time both in one run.
inline bool small_combine_allowed() {
  static const bool allowed = [] {
    const char* e = std::getenv("LKV_SMALL_COMBINE");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return allowed;
}
inline bool combine_quarter_rows(int64_t rows, int num_sms) {
  return small_combine_allowed() && rows <= static_cast<int64_t>(kCombineQuarterMaxRowsPerSm) * num_sms;
}
// Chunks whose loads the idle warps' dequantization (kernel.cuh, idle_dequant) issues before
// converting any of them: 4, against 2 in every other dequantization, where O's accumulators leave
// no more registers (in the token-group kernels 4 fit without spilling; measured on an H100, 4-4.5%
// less time than 2 on the 16-row cases, bench/NOTES.md v50, when those kernels still held 128
// accumulators per thread; with kShareV they hold 64).
inline constexpr int kIdleBatch = 4;
// CTAs resident per SM. One: the O accumulator alone is 128 registers per thread and the kernel
// uses 240-255 (x 256 threads: up to 65,280 of 65,536; the 16-row kernels with kShareV, 64
// accumulators, 197-239), and v32_fp8 needs 161 KB of shared memory (206 KB wide) of an SM's
// 228 KB. The kernel's __launch_bounds__ and the split planner (plan_decode:
// CTAs run in waves of num_sms * kCtasPerSm) both read it.
inline constexpr int kCtasPerSm = 1;

// Shared memory of one CTA. Quantized keys are staged as raw records and dequantized into one key
// tile (kOverlap false) or, where the device has the room, into two key tiles so that the next
// tile is dequantized while the current one is multiplied (kOverlap true). 16-bit keys (kDirect)
// are copied straight into two key tiles, or with kOverlap (the wide layout; sm_90, where bulk
// copies bring them) into three, so that two tiles' copies are in flight.
//
// kRoles (16-bit keys on sm_90, CTAs of at most 32 rows; kernel.cuh): Q holds 32 rows, four key
// tiles (tile t's values, tile t + 1's scores, tiles t + 2 and t + 3 in flight), and the scores of
// two tiles pass from the score warps to the value warps through `s` ([2][32][s_stride] fp32)
// with their per-half row maxima (`pm`, [2][2][32] fp32).
template <int kDqk, bool kDirect, bool kOverlap = false, bool kRoles = false>
struct SmemLayout {
  static_assert(!kRoles || (kDirect && kOverlap), "the role layout is a wide 16-bit-key layout");
  static constexpr int q_stride = kDqk + kRowPad;            // 16-bit elements per Q row
  static constexpr int k_stride = kDqk + kRowPad;            // 16-bit elements per K row
  static constexpr int p_stride = kTileTokens + kRowPad;     // 16-bit elements per P row
  static constexpr int q_rows = kRoles ? 32 : kHeadsPerCta;
  static constexpr int q_bytes = q_rows * q_stride * 2;
  static constexpr int key_tiles = kRoles ? 4 : kDirect ? (kOverlap ? 3 : 2) : (kOverlap ? 2 : 1);
  static constexpr int k_bytes = key_tiles * kTileTokens * k_stride * 2;
  // Per head tile (warp pair): its 16 rows of P. A Source with the d_qk split (Source::kSplitDqk,
  // quantized storage only) first keeps the pair's exchange of partial scores there (kernel.cuh,
  // score_dqk_half: each warp's sums over its half of d_qk for the other warp's 16 tokens, 16 x 16
  // fp32 each); the area is reserved for every quantized layout (dense v32_fp8 pages do not use
  // it: 3 KB, within the A100's limit below).
  static constexpr int p_rows_bytes = 16 * p_stride * 2;
  // (Overlapped: [2 writers][4 n8 tiles][32 lanes] float4, the folded exchange of kernel.cuh's kFold,
  // 8 KB more in all; the one-key-tile layout keeps the 2 KB form within an A100's 163 KB.)
  static constexpr int xchg_bytes = kDirect ? 0 : kOverlap ? 2 * 4 * 32 * 16 : 2 * 16 * 16 * 4;
  static constexpr int pair_bytes = p_rows_bytes > xchg_bytes ? p_rows_bytes : xchg_bytes;
  static constexpr int p_bytes = (kHeadsPerCta / 16) * pair_bytes;
  static constexpr int red_bytes = 2 * 2 * kHeadsPerCta * 4;  // [max|sum][n-half][head] fp32
  // Key pointers of a tile: data and scale bytes, null when not attended. Buffers for tiles t - 1
  // .. t + 1 (t - 1 .. t + 2 overlapped). A tile's pointers are read by the softmax of every head
  // tile's warp pair, and within a tile the pairs wait only for each other (pair_sync), so a
  // buffer is reused only once every pair is past the CTA-wide barrier that follows its tile's
  // softmax: overlapped, tile t + 3's pointers are written late in iteration t, while other pairs
  // may still read tile t's; 16-bit keys three tiles deep (kOverlap with kDirect) write tile
  // t + 2's before iteration t's barrier, while other pairs may still read tile t - 1's (the role
  // layout likewise, while score warps may still read tile t - 1's for their masks); otherwise
  // tile t + 1's are written before iteration t's first barrier, while other pairs may still read
  // tile t - 1's.
  static constexpr int ptr_bufs = kOverlap ? 4 : 3;
  static constexpr int slot_bytes = ptr_bufs * 2 * kTileTokens * 8;
  // Raw records of the next tile land here by cp.async (sm_90: bulk copies) while the current tile
  // is computed; a
  // v32 record is 656 bytes, a v4 one 576 data bytes plus its 8 scale bytes (padded to 16).
  static constexpr int raw_record = kDqk == 576 ? 656 : 592;
  static constexpr int raw_bytes = kDirect ? 0 : 2 * kTileTokens * raw_record;
  static constexpr int q_off = 0;
  static constexpr int k_off = q_off + q_bytes;
  static constexpr int p_off = k_off + k_bytes;
  static constexpr int red_off = p_off + p_bytes;
  static constexpr int slot_off = red_off + red_bytes;
  static constexpr int raw_off = slot_off + slot_bytes;
  // One mbarrier per key tile or staging buffer (sm_90: keys and records arrive by bulk copies,
  // kernel.cuh), room for 4.
  static constexpr int bar_off = raw_off + raw_bytes;
  // kRoles: 40 floats per score row, so that the float2 accesses of a half-warp (4 rows x 4
  // column pairs in MMA fragment order) fall in 32 different banks.
  static constexpr int s_stride = kTileTokens + 8;
  static constexpr int s_off = bar_off + 4 * 8;
  static constexpr int s_bytes = kRoles ? 2 * 32 * s_stride * 4 : 0;
  static constexpr int pm_off = s_off + s_bytes;
  static constexpr int pm_bytes = kRoles ? 2 * 2 * 32 * 4 : 0;
  static constexpr int total = pm_off + pm_bytes;
};
// 163 KB is an A100's per-CTA maximum; the H100/H200 allow 227 KB.
static_assert(SmemLayout<576, false>::total <= 163 * 1024, "v32_fp8 must fit an A100");
static_assert(SmemLayout<576, true>::total <= 163 * 1024, "576-wide 16-bit keys must fit an A100");
static_assert(SmemLayout<576, false, true>::total <= 227 * 1024, "overlapped v32_fp8 must fit an H100");
static_assert(SmemLayout<576, true, true>::total <= 227 * 1024, "three 576-wide 16-bit key tiles must fit an H100");
static_assert(SmemLayout<576, true, true, true>::total <= 227 * 1024, "the 576-wide role layout must fit an H100");

}  // namespace latentkv::decode::cuda
