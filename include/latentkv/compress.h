// latentkv/compress.h: the KV compressor, compress_kv (SPEC.md section 3).
//
// For each boundary token b (request r = token_to_req[b], position p = positions[b]) the window of
// the C = compress_ratio states at positions p-C+1 .. p is read through the paged state cache, each
// of the 512 dimensions is pooled by its own softmax over the window, RMS-normalised, the 448 NoPE
// dimensions are quantized in groups of 64 with power-of-two scales (int8 for v4_int8, e4m3 for
// v4_fp8), the 64 RoPE dimensions are rotated (GPT-J interleaved pairs, cos/sin row (p / C) * C)
// and stored bf16, and the 584-byte record is written to slot kv_slot_mapping[b] of the page-split
// cache. A negative slot means "no output" and is skipped.
#pragma once

#include <cstdint>

#include "latentkv/formats.h"
#include "latentkv/tensor.h"

namespace latentkv {

enum class CompressMode : uint8_t {
  kInPlace,     // write exactly each target record's 584 bytes; every other byte unchanged
  kFunctional,  // the cache is first zeroed, then written: the contest reference's result
};

struct CompressArgs {
  TensorView state_cache;             // f32 [num_blocks, block_size, 1024]: 512 values, 512 scores
  TensorView token_to_req;            // i32 [num_tokens]
  TensorView positions;               // i64 [num_tokens]
  TensorView boundary_token_indices;  // i64 [num_outputs]
  TensorView block_table;             // i32 [num_reqs, blocks_per_req]
  TensorView rms_norm_weight;         // bf16 [512]
  TensorView cos_sin_cache;           // f32 [max_pos, 64]: 32 cos then 32 sin
  TensorView kv_slot_mapping;         // i64 [num_tokens]
  TensorView kv_cache;                // u8 [num_pages, P * 584 (+pad)] or [num_pages, P, 1, 584]
  int64_t block_size = 0;             // tokens per state-cache block (>= 1)
  int64_t compress_ratio = 0;         // C (>= 1)
  // P, tokens per kv-cache page. < 0 (the default): the 4-D form's shape[1], or 64 (the contest's
  // page) for the 2-D form. Given with a 4-D cache, it must equal shape[1].
  int64_t page_size = -1;
  float rms_norm_eps = 1.0e-6f;
  CacheFormat format = CacheFormat::v4_int8;  // v4_int8 or v4_fp8
  CompressMode mode = CompressMode::kInPlace;
  // GPU only: run the index checks (default). A caller that guarantees valid input may turn them
  // off; kernels still never access memory out of bounds (a bad index is skipped).
  bool check_indices = true;
  // GPU only (sm_90 and newer, which launch the kernel with programmatic dependent launch): let the
  // kernel read boundary_token_indices, kv_slot_mapping, token_to_req, positions, block_table,
  // rms_norm_weight and cos_sin_cache while the kernel queued ahead of it in the stream is still
  // running, and wait for that kernel only before reading state_cache and writing anything. Set it
  // only when the kernel launched immediately before this call writes none of those seven tensors
  // (in a model step they are written once per step, before the layers; the state is what the
  // layer's projection has just written). Off: every access waits, as after an ordinary launch.
  bool overlap_prologue = false;
  // GPU only: scratch memory for the split merge and the index checks. Null: latentkv uses memory
  // it allocates once per (device, stream) and grows only when a larger problem arrives. Given: at
  // least compress_workspace_bytes(args) bytes on the tensors' device, and latentkv allocates
  // nothing (a call then also clears the workspace's small counter region, one memset node).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// Bytes of caller-provided workspace compress_kv needs for these arguments (0 on the CPU).
size_t compress_workspace_bytes(const CompressArgs& args);

// Backends. kAuto picks the device of the tensors; on the CPU it is the fast path.
enum class CompressImpl : uint8_t { kAuto, kCpuOracle, kCpuFast, kCuda };

void compress_kv(const CompressArgs& args, Stream stream = nullptr,
                 CompressImpl impl = CompressImpl::kAuto);

}  // namespace latentkv
