// Seeded compress_kv workloads (see compress_workload.h).
#include "testing/compress_workload.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "compress/params.h"
#include "latentkv/error.h"
#include "latentkv/numerics.h"

namespace latentkv::testing {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t bits_at(uint64_t seed, uint64_t k) { return splitmix64(splitmix64(seed) ^ (k * 0xd1b54a32d192ed03ull)); }

float normal_at(uint64_t seed, uint64_t k) {
  // Box-Muller on two independent uniforms in (0, 1].
  const uint64_t r = bits_at(seed, k);
  const double u1 = (static_cast<double>(r >> 40) + 1.0) / 16777216.0;
  const double u2 = static_cast<double>(r & 0xffffffull) / 16777216.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

CompressWorkload make_workload(const WorkloadOptions& opt) {
  LKV_CHECK(opt.tokens_per_req >= opt.compress_ratio, "workload: tokens_per_req < compress_ratio");
  CompressWorkload w;
  w.opt = opt;
  const int64_t L = opt.tokens_per_req, C = opt.compress_ratio, bs = opt.block_size;
  w.num_tokens = opt.num_reqs * L;
  w.blocks_per_req = (L + bs - 1) / bs;
  w.num_blocks = opt.num_reqs * w.blocks_per_req;
  w.max_pos = L;

  // Block table: identity, shuffled, or with repeats (pairs of logical blocks sharing one block).
  w.block_table.resize(static_cast<size_t>(w.num_blocks));
  std::iota(w.block_table.begin(), w.block_table.end(), 0);
  if (opt.shuffle_blocks || opt.repeat_blocks) {
    for (int64_t i = w.num_blocks - 1; i > 0; --i)
      std::swap(w.block_table[i], w.block_table[bits_at(opt.seed + 7, i) % (i + 1)]);
  }
  if (opt.repeat_blocks)
    for (int64_t i = 1; i < w.num_blocks; i += 3) w.block_table[i] = w.block_table[i - 1];

  // State: randn values and scores, scaled.
  w.state.resize(static_cast<size_t>(w.num_blocks * bs * 1024));
  const int64_t n = static_cast<int64_t>(w.state.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) w.state[k] = opt.state_scale * normal_at(opt.seed, k);

  w.weight.resize(512);
  for (int d = 0; d < 512; ++d)
    w.weight[d] = num::f32_to_bf16(1.0f + 0.1f * normal_at(opt.seed + 1, d));

  // Standard RoPE table: angle pos * 10000^(-2j/64), 32 cos then 32 sin.
  w.cos_sin.resize(static_cast<size_t>(w.max_pos * 64));
  for (int64_t pos = 0; pos < w.max_pos; ++pos)
    for (int j = 0; j < 32; ++j) {
      const double inv_freq = std::pow(10000.0, -2.0 * j / 64.0);
      w.cos_sin[pos * 64 + j] = static_cast<float>(std::cos(pos * inv_freq));
      w.cos_sin[pos * 64 + 32 + j] = static_cast<float>(std::sin(pos * inv_freq));
    }

  w.token_to_req.resize(static_cast<size_t>(w.num_tokens));
  w.positions.resize(static_cast<size_t>(w.num_tokens));
  w.slot_mapping.assign(static_cast<size_t>(w.num_tokens), -1);
  for (int64_t r = 0; r < opt.num_reqs; ++r)
    for (int64_t t = 0; t < L; ++t) {
      w.token_to_req[r * L + t] = static_cast<int32_t>(r);
      w.positions[r * L + t] = t;
      if ((t + 1) % C == 0) w.boundary.push_back(r * L + t);
    }
  w.num_outputs = static_cast<int64_t>(w.boundary.size());
  // Block-table rows: request r owns logical blocks [r * blocks_per_req, ...) of the table.
  // (The table is stored [num_reqs, blocks_per_req], so the flat vector above is already that.)

  // Slots: dense 0..n-1, or a random injective map into a larger cache with some -1.
  int64_t num_slots = w.num_outputs;
  std::vector<int64_t> slots(static_cast<size_t>(w.num_outputs));
  std::iota(slots.begin(), slots.end(), 0);
  if (opt.random_slots) {
    num_slots = 2 * w.num_outputs + opt.page_size;
    std::vector<int64_t> all(static_cast<size_t>(num_slots));
    std::iota(all.begin(), all.end(), 0);
    for (int64_t i = num_slots - 1; i > 0; --i)
      std::swap(all[i], all[bits_at(opt.seed + 3, i) % (i + 1)]);
    for (int64_t i = 0; i < w.num_outputs; ++i)
      slots[i] = (bits_at(opt.seed + 4, i) % 5 == 0) ? -1 : all[i];
  }
  for (int64_t i = 0; i < w.num_outputs; ++i) w.slot_mapping[w.boundary[i]] = slots[i];

  w.num_pages = std::max<int64_t>(1, (num_slots + opt.page_size - 1) / opt.page_size);
  w.page_stride = opt.page_size * compress::kRecordBytes + opt.page_pad_bytes;
  w.kv.assign(static_cast<size_t>(w.num_pages * w.page_stride), 0);
  if (opt.random_initial_cache)
    for (size_t k = 0; k < w.kv.size(); ++k) w.kv[k] = static_cast<uint8_t>(bits_at(opt.seed + 5, k));
  return w;
}

compress::Params CompressWorkload::params(const uint8_t* kv_bytes) {
  compress::Params p{};
  p.state = state.data();
  p.stride_state_block = opt.block_size * 1024;
  p.stride_state_row = 1024;
  p.token_to_req = token_to_req.data();
  p.positions = positions.data();
  p.boundary = boundary.data();
  p.block_table = block_table.data();
  p.stride_table_req = blocks_per_req;
  p.rms_weight = weight.data();
  p.cos_sin = cos_sin.data();
  p.stride_cos_pos = 64;
  p.slot_mapping = slot_mapping.data();
  p.kv = const_cast<uint8_t*>(kv_bytes ? kv_bytes : kv.data());
  p.page_stride = page_stride;
  p.page_size = opt.page_size;
  p.num_slots = num_pages * opt.page_size;
  p.num_blocks = num_blocks;
  p.block_size = opt.block_size;
  p.num_tokens = num_tokens;
  p.num_reqs = opt.num_reqs;
  p.blocks_per_req = blocks_per_req;
  p.max_pos = max_pos;
  p.num_outputs = num_outputs;
  p.compress_ratio = opt.compress_ratio;
  p.eps = 1e-6f;
  p.fp8 = opt.format == CacheFormat::v4_fp8;
  return p;
}

CompressArgs CompressWorkload::args(CompressMode mode) {
  CompressArgs a;
  a.state_cache = TensorView(state.data(), DType::f32, {num_blocks, opt.block_size, 1024});
  a.token_to_req = TensorView(token_to_req.data(), DType::i32, {num_tokens});
  a.positions = TensorView(positions.data(), DType::i64, {num_tokens});
  a.boundary_token_indices = TensorView(boundary.data(), DType::i64, {num_outputs});
  a.block_table = TensorView(block_table.data(), DType::i32, {opt.num_reqs, blocks_per_req});
  a.rms_norm_weight = TensorView(weight.data(), DType::bf16, {512});
  a.cos_sin_cache = TensorView(cos_sin.data(), DType::f32, {max_pos, 64});
  a.kv_slot_mapping = TensorView(slot_mapping.data(), DType::i64, {num_tokens});
  a.kv_cache = TensorView(kv.data(), DType::u8, {num_pages, page_stride});
  a.block_size = opt.block_size;
  a.compress_ratio = opt.compress_ratio;
  a.page_size = opt.page_size;
  a.format = opt.format;
  a.mode = mode;
  return a;
}

const std::vector<ContestCase>& contest_cases() {
  static const std::vector<ContestCase> cases = [] {
    std::vector<ContestCase> v;
    static const char* names[] = {
        "r1_t8192_c128",  "r4_t32768_c128",  "r8_t65536_c128",  "r8_t131072_c128",
        "r1_t8192_c256",  "r4_t32768_c256",  "r8_t65536_c256",  "r8_t131072_c256",
        "r1_t8192_c512",  "r4_t32768_c512",  "r8_t65536_c512",  "r8_t131072_c512"};
    const int64_t shapes[4][2] = {{1, 8192}, {4, 32768}, {8, 65536}, {8, 131072}};
    int k = 0;
    for (int64_t c : {128, 256, 512})
      for (const auto& s : shapes) v.push_back({names[k++], s[0], s[1], c});
    return v;
  }();
  return cases;
}

}  // namespace latentkv::testing
