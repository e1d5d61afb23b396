// decode/compact/config.h: tile constants and the shared-memory layout of the compact attention
// kernel (decode/compact/kernel.cuh), with reasons.
#pragma once

#include <cstdint>

#include "decode/cuda/attend_params.h"

namespace latentkv::decode::compact {

// The portable kernel (decode/cuda) keeps 64 query rows of Q in shared memory (75 KB at d_qk 576)
// beside one or two 32-token key tiles and a staging buffer: 141-161 KB, which sm_80 and sm_90
// (163 and 227 KB per block) have and sm_86, sm_89, sm_120 and sm_121 (99 KB per block, 100 KB
// per SM) do not. The compact kernel takes 16 rows per CTA (one m16 MMA tile), so that Q is 18 KB
// and the whole layout fits 99 KB with every format and both key widths.
inline constexpr int kRows = 16;
// 4 warps: in the score product warp w takes tokens 8 w .. 8 w + 7 of a tile (one n8 tile over
// all of d_qk), in the value product dims 128 w .. 128 w + 127 (16 n8 tiles: 64 fp32 accumulators
// per thread, where the portable kernel's 256 dims take 128). Every warp multiplies; none only
// copies.
inline constexpr int kWarps = 4;
inline constexpr int kThreads = kWarps * 32;
// Tokens per tile: 4 warps x 8 score columns, the portable kernel's tile.
inline constexpr int kTileTokens = 32;
// CTAs per SM the kernel is compiled for: 3 caps registers at 170 per thread (64 of them O; the
// kernels use 155-168, no spills). Shared memory decides the rest (Layout: 70 KB for 512-wide
// records, 78 KB for v32_fp8, 84-94 KB for 16-bit keys): a 228 KB H100/H200 SM holds three of the
// first and two of the others, a 164 KB A100 SM two or one, and a 100 KB sm_86/sm_89/sm_120 SM one.
inline constexpr int kMinCtasPerSm = 3;
// Rows padded by 8 16-bit values (16 bytes): odd multiples of 16 bytes per row, so that ldmatrix
// reads of 8 consecutive rows fall in 8 different bank groups (the portable kernel's reason).
inline constexpr int kRowPad = 8;

// Shared memory of one CTA. Quantized keys: records land in one staging tile by cp.async and are
// dequantized into one key tile; the next tile's records are copied while the current one is
// multiplied. 16-bit keys: two key tiles, the next tile copied straight into the other one.
template <int kDqk, bool kDirect>
struct Layout {
  static constexpr int q_stride = kDqk + kRowPad;            // 16-bit elements per Q row
  static constexpr int k_stride = kDqk + kRowPad;            // 16-bit elements per key row
  static constexpr int p_stride = kTileTokens + kRowPad;     // 16-bit elements per P row
  static constexpr int q_bytes = kRows * q_stride * 2;
  static constexpr int key_tiles = kDirect ? 2 : 1;
  static constexpr int k_bytes = key_tiles * kTileTokens * k_stride * 2;
  static constexpr int p_bytes = kRows * p_stride * 2;
  static constexpr int red_bytes = kWarps * kRows * 4;       // [warp][row] fp32: tile maxima, then sums
  // Key pointers (data, then scale) of two tiles: tile t + 1's are written (by warp 0) before the
  // barrier that opens iteration t, into the buffer of tile t - 1, whose readers (its mask, its
  // dequantization, its copies) are all before iteration t - 1's last barrier.
  static constexpr int ptr_bufs = 2;
  static constexpr int slot_bytes = ptr_bufs * 2 * kTileTokens * 8;
  // A staged record: v32 656 bytes; v4 576 data bytes and its 8 scale bytes at 576; v41 528.
  static constexpr int raw_record = kDqk == 576 ? 656 : 592;
  static constexpr int raw_bytes = kDirect ? 0 : kTileTokens * raw_record;
  static constexpr int q_off = 0;
  static constexpr int k_off = q_off + q_bytes;
  static constexpr int p_off = k_off + k_bytes;
  static constexpr int red_off = p_off + p_bytes;
  static constexpr int slot_off = red_off + red_bytes;
  static constexpr int raw_off = slot_off + slot_bytes;
  static constexpr int total = raw_off + raw_bytes;
  static_assert(k_off % 16 == 0 && p_off % 16 == 0 && red_off % 16 == 0 && slot_off % 16 == 0 &&
                    raw_off % 16 == 0,
                "16-byte aligned areas");
};
// 99 KB (101,376 bytes) is the per-block limit of sm_86, sm_89, sm_120 and sm_121.
inline constexpr int kSmallSmemLimit = 99 * 1024;
static_assert(Layout<576, false>::total <= kSmallSmemLimit, "v32_fp8 must fit 99 KB");
static_assert(Layout<512, false>::total <= kSmallSmemLimit, "v4_fp8 / v41_fp8 must fit 99 KB");
static_assert(Layout<576, true>::total <= kSmallSmemLimit, "576-wide 16-bit keys must fit 99 KB");

// Slices of 16 rows per head block (grid y = kv heads x head blocks x slices): enough for the
// largest CTA of the portable kernel's geometry (heads of one head block times the packed query
// tokens, at most 64). Host and device both use it.
LKV_HD int64_t slice_count(const cuda::Geometry& g) {
  const int64_t heads = g.heads_per_kv < 64 ? g.heads_per_kv : 64;
  return (heads * g.pack + kRows - 1) / kRows;
}

}  // namespace latentkv::decode::compact
