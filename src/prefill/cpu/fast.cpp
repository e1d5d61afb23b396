// The fast fp32 CPU path of sparse_prefill.
//
// Work split: OpenMP threads take query rows (dynamic schedule in chunks: lengths differ per row,
// and with s_q in the tens of thousands a chunk keeps the scheduling cost small). A row's attended
// kv rows are converted from bf16 once into an fp32 buffer shared by all of its heads; heads then go
// cpu_common::kHeadBlock at a time through cpu_common's head block (fp32 scores, two-pass
// softmax, fp32 accumulators).
//
// The result of a row depends only on its inputs and the compiled order of operations, never on
// the thread that ran it, so the output is bitwise identical from run to run and across thread
// counts.
#include <algorithm>
#include <limits>
#include <vector>

#include "cpu_common/head_block.h"
#include "prefill/cpu/prefill_cpu.h"

namespace latentkv::prefill {
namespace {

using cpu_common::kHeadBlock;

struct Scratch {
  cpu_common::HeadBlockFn head_block;  // this CPU's build (cpu_common::default_head_block)
  std::vector<int64_t> rows;  // [n] attended kv rows
  std::vector<float> k;       // [n, d_qk] their keys
  std::vector<float> q;       // [kHeadBlock, d_qk] scaled queries of the block
  std::vector<float> s;       // [kHeadBlock, n] scores, then exp(s - max)
  alignas(64) float acc[kHeadBlock][cpu_common::kMaxDimV];
};

// Gathers the attended kv rows of `row` and converts each once to fp32.
int64_t gather(const Params& p, int64_t row, Scratch& w) {
  w.rows.clear();
  const KvSegment seg = kv_segment(p, row);
  const int64_t count = valid_count(p, row);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t r = candidate_kv_row(p, row, k, count, seg);
    if (r != -1) w.rows.push_back(r);
  }
  const int64_t n = static_cast<int64_t>(w.rows.size());
  if (static_cast<int64_t>(w.k.size()) < n * p.d_qk) w.k.resize(static_cast<size_t>(n * p.d_qk));
  if (static_cast<int64_t>(w.s.size()) < kHeadBlock * n) w.s.resize(static_cast<size_t>(kHeadBlock * n));
  for (int64_t t = 0; t < n; ++t) {
    const uint16_t* src = p.kv + w.rows[t] * p.stride_kv_s;
    float* kt = w.k.data() + t * p.d_qk;
    for (int d = 0; d < p.d_qk; ++d) kt[d] = num::bf16_to_f32(src[d]);
  }
  return n;
}

void write_lonely(const Params& p, int64_t row) {
  for (int64_t h = 0; h < p.h_q; ++h) {
    uint16_t* out = p.out + row * p.stride_out_s + h * p.stride_out_h;
    std::fill(out, out + kDimV, uint16_t{0});
    p.max_logits[row * p.stride_max_logits_s + h] = -std::numeric_limits<float>::infinity();
    p.lse[row * p.stride_lse_s + h] = std::numeric_limits<float>::infinity();
  }
}

// Heads [h0, h0 + nh) of `row` over its n > 0 gathered keys.
void head_block(const Params& p, int64_t row, int64_t h0, int nh, int64_t n, Scratch& w) {
  // Queries with the softmax scale folded in (one multiply per element instead of per score).
  for (int hh = 0; hh < nh; ++hh) {
    const uint16_t* q = p.q + row * p.stride_q_s + (h0 + hh) * p.stride_q_h;
    float* qf = w.q.data() + hh * p.d_qk;
    for (int d = 0; d < p.d_qk; ++d) qf[d] = num::bf16_to_f32(q[d]) * p.sm_scale;
  }
  float max[kHeadBlock], sum[kHeadBlock];
  w.head_block(w.q.data(), nh, w.k.data(), n, p.d_qk, p.d_qk, kDimV, w.s.data(),
                                w.acc, max, sum);
  // Normalise, apply the sink (lse and max_logits unchanged), write.
  for (int hh = 0; hh < nh; ++hh) {
    const int64_t h = h0 + hh;
    const float lse = max[hh] + std::log(sum[hh]);
    const float factor = p.sink ? cpu_common::sink_factor(p.sink[h], lse) : 1.0f;
    const float inv = factor / sum[hh];
    uint16_t* out = p.out + row * p.stride_out_s + h * p.stride_out_h;
    for (int d = 0; d < kDimV; ++d) out[d] = num::f32_to_bf16(w.acc[hh][d] * inv);
    p.max_logits[row * p.stride_max_logits_s + h] = max[hh];
    p.lse[row * p.stride_lse_s + h] = lse;
  }
}

}  // namespace

void sparse_prefill_cpu_fast(const Params& p) {
  const cpu_common::HeadBlockFn head_block_build = cpu_common::default_head_block();
#pragma omp parallel
  {
    Scratch w;
    w.head_block = head_block_build;
    w.q.resize(static_cast<size_t>(kHeadBlock * p.d_qk));
#pragma omp for schedule(dynamic, 16)
    for (int64_t row = 0; row < p.s_q; ++row) {
      const int64_t n = gather(p, row, w);
      if (n == 0) {
        write_lonely(p, row);
        continue;
      }
      for (int64_t h0 = 0; h0 < p.h_q; h0 += kHeadBlock)
        head_block(p, row, h0, static_cast<int>(std::min<int64_t>(kHeadBlock, p.h_q - h0)), n, w);
    }
  }
}

}  // namespace latentkv::prefill
