// testing/compress_workload.h: seeded compress_kv inputs in host memory, shared by the tests, the
// benchmarks and the CLI. The contest workload is: equal-length requests at positions 0..L-1, an
// identity block table, a boundary at every token with (pos + 1) % C == 0, dense slots, a zeroed
// cache, randn state, rms weight 1 + 0.1 * randn, and the standard RoPE table (base 10000).
// Options bend it into the stress cases: shuffled or repeated blocks, random slots, scaled state,
// padded pages, a random initial cache.
#pragma once

#include <cstdint>
#include <vector>

#include "compress/params.h"
#include "latentkv/compress.h"

namespace latentkv::testing {

// Counter-based normal and uniform numbers: value k of stream `seed` does not depend on the order
// or the thread that draws it, so workloads are identical everywhere.
float normal_at(uint64_t seed, uint64_t k);
uint64_t bits_at(uint64_t seed, uint64_t k);

struct WorkloadOptions {
  int64_t num_reqs = 1;
  int64_t tokens_per_req = 1024;
  int64_t compress_ratio = 128;
  int64_t block_size = 8;
  int64_t page_size = 64;
  int64_t page_pad_bytes = 0;     // extra bytes at the end of every kv page
  bool shuffle_blocks = false;    // a random permutation of physical blocks
  bool repeat_blocks = false;     // several logical blocks share physical blocks
  bool random_slots = false;      // slots drawn at random (distinct), some -1
  bool random_initial_cache = false;
  float state_scale = 1.0f;
  CacheFormat format = CacheFormat::v4_int8;
  uint64_t seed = 1;
};

struct CompressWorkload {
  WorkloadOptions opt;
  int64_t num_tokens = 0, num_outputs = 0, num_blocks = 0, blocks_per_req = 0, max_pos = 0;
  int64_t num_pages = 0, page_stride = 0;
  std::vector<float> state;            // [num_blocks, block_size, 1024]
  std::vector<int32_t> token_to_req;   // [num_tokens]
  std::vector<int64_t> positions;      // [num_tokens]
  std::vector<int64_t> boundary;       // [num_outputs]
  std::vector<int32_t> block_table;    // [num_reqs, blocks_per_req]
  std::vector<uint16_t> weight;        // [512] bf16
  std::vector<float> cos_sin;          // [max_pos, 64]
  std::vector<int64_t> slot_mapping;   // [num_tokens]
  std::vector<uint8_t> kv;             // [num_pages, page_stride]

  // Views over the host vectors (kv as the 2-D contest form).
  CompressArgs args(CompressMode mode = CompressMode::kInPlace);
  int64_t state_bytes_read() const { return num_outputs * opt.compress_ratio * 4096; }
  // The kernel-level parameters over the host vectors (what compress_kv builds from args()), with
  // the cache bytes read from `kv` (default: this workload's own cache), for the record checker.
  compress::Params params(const uint8_t* kv = nullptr);
};

CompressWorkload make_workload(const WorkloadOptions& opt);

// The 12 contest workloads: (requests, tokens) in (1, 8192), (4, 32768), (8, 65536), (8, 131072)
// for C = 128, 256, 512, each of whose requests has tokens / requests tokens.
struct ContestCase {
  const char* name;
  int64_t num_reqs, total_tokens, compress_ratio;
};
const std::vector<ContestCase>& contest_cases();

}  // namespace latentkv::testing
