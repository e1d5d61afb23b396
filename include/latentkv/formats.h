// latentkv/formats.h: the quantized paged KV-cache formats (SPEC.md section 2).
//
// A format fixes the bytes of one token's record and where records sit in a page:
//   v32_fp8  (DeepSeek V3.2)  576 dims, 656 B, token-major: 512 e4m3 | 4 fp32 scales (per 128) | 64 bf16 RoPE
//   v4_fp8   (DeepSeek V4)    512 dims, 584 B, page-split: P rows of 576 B (448 e4m3 | 64 bf16 RoPE),
//                                               then P rows of 8 B (7 ue8m0, one per 64 dims | 1 zero)
//   v4_int8  (contest)        512 dims, 584 B, as v4_fp8 with int8 payload, QMAX 127 (truncation)
//   v41_fp8  (DeepSeek V4.1)  512 dims, 528 B, token-major: 512 e4m3 | 16 ue8m0 (one per 32 dims)
//   v41_fp4  (DeepSeek V4.1)  512 dims, 288 B, token-major: 256 B e2m1 pairs | 32 e4m3 scales (per 16)
//
// A paged cache is seen by callers as u8 [num_pages, P, 1, bytes_per_token] whose page stride
// (stride(0), in bytes) is free but at least P * bytes_per_token; the contest's 2-D form
// u8 [num_pages, page_bytes] is accepted too, with P given explicitly. GPU paths need the page stride
// to be a multiple of 16 bytes. Slots are flat: slot = page * P + offset.
#pragma once

#include <cstdint>
#include <string>

#include "latentkv/tensor.h"

namespace latentkv {

enum class CacheFormat : uint8_t { v32_fp8, v4_fp8, v4_int8, v41_fp8, v41_fp4 };

struct FormatInfo {
  CacheFormat format;
  const char* name;
  int d_qk;             // latent width the record holds
  int bytes_per_token;  // record size
  bool page_split;      // data rows then scale rows inside a page (v4_*)
  int data_bytes;       // page-split: bytes of a data row (576); token-major: whole record
  int scale_bytes;      // page-split: bytes of a scale row (8); token-major: 0
};

const FormatInfo& format_info(CacheFormat f);
CacheFormat parse_format(const std::string& name);  // throws naming the bad name

// Byte geometry of one paged cache, resolved from its view.
struct CacheGeometry {
  uint8_t* base = nullptr;
  int64_t num_pages = 0;
  int64_t page_size = 0;    // P, tokens per page
  int64_t page_stride = 0;  // bytes between pages
  int64_t num_slots() const { return num_pages * page_size; }
};

// Validates a cache view against a format (u8, 4-D [num_pages, P, 1, bpt] or 2-D [num_pages,
// page_bytes]) and returns its geometry. page_size must be given (> 0) for the 2-D form and, when
// given for the 4-D form, must equal shape[1].
CacheGeometry cache_geometry(const TensorView& cache, CacheFormat f, int64_t page_size = -1);

// Byte offsets of slot `slot` inside its page for format f (data part and, for page-split formats,
// the scale row; token-major formats return scale_offset = data_offset + the payload size).
struct RecordOffsets {
  int64_t data;   // from the cache base
  int64_t scale;  // from the cache base
};
RecordOffsets record_offsets(const CacheGeometry& g, const FormatInfo& fi, int64_t slot);

// quantize: latents [n, d_qk] (bf16 or f32) -> records at slots [n] (i64 or i32) of cache.
// A slot < 0 is skipped; a slot >= num_slots, or two tokens with one slot, is an error. Only the
// target records' bytes are written (including the pad byte of page-split scale rows, written as 0).
//
// check_slots: the slot checks read the slots on the host, which for CUDA tensors means a copy
// and a stream synchronisation (no CUDA-graph capture). A caller who guarantees unique in-range
// slots may turn them off: then nothing synchronises, a slot outside [0, num_slots) is still
// skipped (never followed), and duplicate slots race (the record holds one of the writers' bytes).
void quantize(CacheFormat f, const TensorView& latents, const TensorView& slots,
              const TensorView& cache, int64_t page_size = -1, Stream stream = nullptr,
              bool check_slots = true);

// dequantize: records at slots [n] -> out [n, d_qk] bf16. A slot < 0 gives a row of zeros; a slot
// >= num_slots is an error (with check_slots; without, such a slot also gives zeros and nothing
// synchronises).
void dequantize(CacheFormat f, const TensorView& cache, const TensorView& slots,
                const TensorView& out, int64_t page_size = -1, Stream stream = nullptr,
                bool check_slots = true);

// positions_to_slots: flat slots of logical positions through a block table:
//   slots[i][j] = block_table[i][pos / P] * P + pos % P, pos = positions[i][j].
// block_table: i32 [b, max_blocks]; positions, slots: i32 [b, n]. A position of -1, any position
// outside [0, max_blocks * P), and a negative block-table entry give -1 (an invalid slot, which the
// attention ops skip) rather than an error, so the helper is safe on the GPU without a sync.
void positions_to_slots(const TensorView& block_table, const TensorView& positions,
                        int64_t page_size, const TensorView& slots, Stream stream = nullptr);

}  // namespace latentkv
