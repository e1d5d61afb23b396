// compress/params.h: the compressor's parameters as every backend sees them, and the per-output
// index validation that the CPU and the GPU share (so both reject exactly the same inputs).
//
// Work split (all backends): one output per boundary token; its window is C state rows, each row
// 512 values then 512 scores (4096 bytes). The record written is 576 data bytes (448 NoPE payload
// bytes, 64 bf16 RoPE values) plus 8 scale bytes (7 ue8m0 exponents, 1 zero pad byte).
#pragma once

#include <cstdint>

#include "latentkv/numerics.h"

namespace latentkv::compress {

inline constexpr int kDim = 512;          // latent width
inline constexpr int kNope = 448;         // quantized dims
inline constexpr int kRope = 64;          // rotated dims, stored bf16
inline constexpr int kGroup = 64;         // dims per scale
inline constexpr int kNumGroups = kNope / kGroup;
inline constexpr int kStateWidth = 2 * kDim;  // values then scores
inline constexpr int kDataBytes = kNope + 2 * kRope;  // 576
inline constexpr int kScaleBytes = 8;                 // 7 scales + 1 pad
inline constexpr int kRecordBytes = kDataBytes + kScaleBytes;  // 584
static_assert(kNope % kGroup == 0, "NoPE dims must split into whole scale groups");

// Everything a backend needs, as raw pointers; strides are in elements.
struct Params {
  const float* state;            // [num_blocks, block_size, 1024]; inner dim contiguous
  int64_t stride_state_block;    // elements between blocks
  int64_t stride_state_row;      // elements between rows of a block
  const int32_t* token_to_req;   // [num_tokens]
  const int64_t* positions;      // [num_tokens]
  const int64_t* boundary;       // [num_outputs]
  const int32_t* block_table;    // [num_reqs, blocks_per_req]
  int64_t stride_table_req;      // elements between requests' rows
  const uint16_t* rms_weight;    // [512] bf16 bits
  const float* cos_sin;          // [max_pos, 64]: 32 cos then 32 sin
  int64_t stride_cos_pos;        // elements between positions
  const int64_t* slot_mapping;   // [num_tokens]
  uint8_t* kv;                   // page-split cache base
  int64_t page_stride;           // bytes between pages
  int64_t page_size;             // P
  int64_t num_slots;             // num_pages * P
  int64_t num_blocks, block_size, num_tokens, num_reqs, blocks_per_req, max_pos;
  int64_t num_outputs;
  int64_t compress_ratio;        // C
  float eps;
  bool fp8;                      // e4m3 payload (v4_fp8) instead of int8 (v4_int8)
  // CUDA, launched with PDL: the index, weight and cos/sin reads may precede the wait for the kernel
  // ahead (CompressArgs::overlap_prologue); otherwise every global access follows it.
  bool overlap_prologue = false;
  // CUDA: the grid asks L2 for every line of the index arrays (slots, requests, positions, block
  // table) at entry, while each CTA's first load (its boundary index) is in flight, so that the
  // dependent loads after it hit L2 instead of HBM: the grid's threads t < warm_lines each take
  // line t (and t + grid threads, ...) of every array that long. 0: no prefetch. Set by the CUDA
  // backend (the largest array's line count, below 2^31) where those arrays are small beside the
  // state bytes the call streams (warms_indices in cuda/launch.h).
  uint32_t warm_lines = 0;
};

// Why an output is invalid; 0 means valid. The order is the order of the checks.
enum ErrorCode : int32_t {
  kOk = 0,
  kBoundaryOutOfRange,   // value = boundary token index
  kReqOutOfRange,        // value = request
  kWindowBeforeStart,    // value = position
  kWindowPastTable,      // value = last logical block needed, extra = blocks_per_req
  kBlockOutOfRange,      // value = physical block, extra = logical block
  kRopePosOutOfRange,    // value = (p / C) * C, extra = max_pos
  kSlotOutOfRange,       // value = slot
  kDuplicateSlot,        // value = slot, extra = the other output
};

// Checks output i's own indices: boundary, slot, request, window start and width, RoPE row. A slot
// < 0 is valid (the output is skipped) and ends the checks: nothing is read for an output that
// writes nothing. On success *lb_first / *lb_last are the logical blocks its window spans, each of
// which validate_block() must accept too.
LKV_HD int32_t validate_header(const Params& p, int64_t i, int64_t* value, int64_t* extra,
                               int64_t* req_out, int64_t* lb_first, int64_t* lb_last) {
  *lb_first = 0;
  *lb_last = -1;
  const int64_t b = p.boundary[i];
  if (b < 0 || b >= p.num_tokens) { *value = b; return kBoundaryOutOfRange; }
  const int64_t slot = p.slot_mapping[b];
  if (slot < 0) return kOk;
  if (slot >= p.num_slots) { *value = slot; return kSlotOutOfRange; }
  const int64_t req = p.token_to_req[b];
  if (req < 0 || req >= p.num_reqs) { *value = req; return kReqOutOfRange; }
  const int64_t pos = p.positions[b];
  // pos < C - 1 rather than pos - C + 1 < 0: the subtraction would overflow for pos near INT64_MIN.
  if (pos < p.compress_ratio - 1) { *value = pos; return kWindowBeforeStart; }
  const int64_t first = pos - p.compress_ratio + 1;
  const int64_t last_block = pos / p.block_size;
  if (last_block >= p.blocks_per_req) {
    *value = last_block;
    *extra = p.blocks_per_req;
    return kWindowPastTable;
  }
  const int64_t rope_pos = (pos / p.compress_ratio) * p.compress_ratio;
  if (rope_pos >= p.max_pos) {
    *value = rope_pos;
    *extra = p.max_pos;
    return kRopePosOutOfRange;
  }
  *req_out = req;
  *lb_first = first / p.block_size;
  *lb_last = last_block;
  return kOk;
}

// Checks that logical block lb of request req maps to a physical block inside the state cache.
LKV_HD int32_t validate_block(const Params& p, int64_t req, int64_t lb, int64_t* value,
                              int64_t* extra) {
  const int64_t phys = p.block_table[req * p.stride_table_req + lb];
  if (phys < 0 || phys >= p.num_blocks) {
    *value = phys;
    *extra = lb;
    return kBlockOutOfRange;
  }
  return kOk;
}

// Byte offsets of a slot's data row and scale row in the page-split layout.
LKV_HD int64_t data_offset(const Params& p, int64_t slot) {
  return (slot / p.page_size) * p.page_stride + (slot % p.page_size) * kDataBytes;
}
LKV_HD int64_t scale_offset(const Params& p, int64_t slot) {
  return (slot / p.page_size) * p.page_stride + p.page_size * kDataBytes +
         (slot % p.page_size) * kScaleBytes;
}

// Encodes one NoPE payload value already multiplied by 2^-e.
LKV_HD uint8_t encode_payload(float scaled, bool fp8) {
  return fp8 ? num::f32_to_e4m3(scaled) : static_cast<uint8_t>(num::f32_to_i8_trunc(scaled));
}

LKV_HD float inv_qmax(bool fp8) { return fp8 ? 1.0f / 448.0f : 1.0f / 127.0f; }

}  // namespace latentkv::compress
