// formats/params.h: the format ops' parameters as every backend sees them (plain C++, no CUDA).
//
// The dispatch layer (formats.cpp) validates the views and fills these structs with designated
// initializers; the CPU backend (cpu/formats_cpu.cpp) and the CUDA backend (cuda/formats.cu) read
// nothing else. Strides are in elements; byte offsets inside the cache follow record_codec.h.
#pragma once

#include <cstdint>

#include "latentkv/formats.h"

namespace latentkv::formats {

// Where the records of one paged cache live.
struct CacheParams {
  uint8_t* base;        // page 0, byte 0
  int64_t page_size;    // P, tokens per page
  int64_t page_stride;  // bytes between pages
  int64_t num_slots;    // num_pages * P; a slot outside [0, num_slots) is never followed
};

struct QuantizeParams {
  CacheFormat format;
  const void* latents;        // [n, d_qk] bf16 (as uint16_t bits) or f32; inner stride 1
  bool latents_bf16;          // false: f32
  int64_t stride_latents_n;   // elements between tokens
  const void* slots;          // [n] i64 or i32, contiguous; < 0 skips the token
  bool slots_i64;             // false: i32
  int64_t n;                  // tokens
  CacheParams cache;
};

struct DequantizeParams {
  CacheFormat format;
  const void* slots;          // [n] i64 or i32, contiguous; < 0 gives a row of zeros
  bool slots_i64;
  int64_t n;
  CacheParams cache;          // read only
  uint16_t* out;              // [n, d_qk] bf16 bits; inner stride 1
  int64_t stride_out_n;       // elements between tokens
};

struct PositionsToSlotsParams {
  const int32_t* block_table;   // [b, max_blocks]
  int64_t stride_table_b;       // elements between requests
  int64_t stride_table_block;   // elements between blocks of a request
  const int32_t* positions;     // [b, n]
  int64_t stride_positions_b;
  int64_t stride_positions_n;
  int32_t* slots;               // [b, n]
  int64_t stride_slots_b;
  int64_t stride_slots_n;
  int64_t b, n, max_blocks;
  int64_t page_size;            // P
};

}  // namespace latentkv::formats
