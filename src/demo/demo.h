// demo/demo.h: the KV side of DeepSeek-V4 attention decoding, end to end, with synthetic data.
//
// Every decode step, for every request: the new token's state (512 values, 512 scores) goes into a
// paged fp32 state cache (a ring of blocks, reached through a block table that repeats physical
// blocks), its latent into a sliding window of the last `window` tokens (v4_fp8 records); at every
// C-th token compress_kv writes a compressed entry (v4_fp8) into the compressed cache; then sparse
// decode attends to the window (main cache) plus every compressed entry so far (extra cache), with
// an attention sink, through one split-KV plan made for the whole run.
//
// Checks rebuild the expected caches from the ground truth (the states and latents as generated,
// not the paged caches), with the float64 compressor and decode oracles, and compare the pipeline's
// attention output with them: a wrong slot, block or index anywhere makes a check fail.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "latentkv/tensor.h"

namespace latentkv::demo {

struct DemoConfig {
  Device device = Device::cpu();
  int64_t requests = 8;
  int64_t prefill = 0;       // context tokens before the first decode step
  int64_t steps = 2048;      // decode steps (tokens generated per request)
  int64_t heads = 16;        // h_q
  int64_t window = 128;      // sliding-window tokens (main cache)
  int64_t ratio = 128;       // C, tokens per compressed entry
  int64_t block_size = 16;   // state-cache block
  int64_t page_size = 64;    // kv-cache pages
  int64_t check_every = 256; // steps between checks (the last step is always checked)
  uint64_t seed = 1;
  std::string fault;         // "" or "wrong-slot": break the compressed-entry slot mapping
};

struct DemoReport {
  int64_t tokens = 0;  // requests x steps
  double seconds = 0, state_s = 0, window_s = 0, compress_s = 0, attention_s = 0;
  double tokens_per_s = 0;
  int64_t compressed_entries = 0;
  double bytes_per_token = 0;       // window record amortised + compressed records, per token
  double bf16_bytes_per_token = 0;  // the same context kept as bf16 latents
  int64_t checks = 0, checks_failed = 0;
  double worst_max_rel = 0, worst_cos = 1, worst_lse_err = 0;
  std::string first_failure;
  bool ok() const { return checks > 0 && checks_failed == 0; }
};

// Runs the pipeline; progress (a bar) goes to `progress` when it is not null.
DemoReport run_demo(const DemoConfig& config, std::FILE* progress);

}  // namespace latentkv::demo
