// The fast fp32 CPU path of dense_decode.
//
// Work split: OpenMP threads take (request, query row) pairs (dynamic schedule: lengths differ per
// request), or with fewer pairs than threads share each pair (dense_decode_cpu_fast). For a pair,
// the visible keys of one kv head are converted to fp32 once (dequantized for v32_fp8) into a
// buffer shared by the h_q / h_kv query heads that read that kv head; those heads go
// cpu_common::kHeadBlock at a time through cpu_common's head block (fp32 scores, two-pass softmax,
// fp32 accumulators).
//
// The result of a pair depends only on its inputs and the compiled order of operations, never on
// the thread or the split that ran it, so the output is bitwise identical from run to run and
// across thread counts.
#include <omp.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "cpu_common/dequant.h"
#include "cpu_common/head_block.h"
#include "dense/cpu/dense_cpu.h"

namespace latentkv::dense {
namespace {

using cpu_common::kHeadBlock;

struct Scratch {
  cpu_common::HeadBlockFn head_block;  // this CPU's build (cpu_common::default_head_block)
  cpu_common::PayloadFn payload;       // and its payload decoding (cpu_common::default_payload)
  std::vector<float> k;  // [n, d_qk] visible keys of one kv head
  std::vector<float> q;  // [kHeadBlock, d_qk] scaled queries of the block
  std::vector<float> s;  // [kHeadBlock, n] scores, then exp(s - max)
  alignas(64) float acc[kHeadBlock][cpu_common::kMaxDimV];
};

// Query heads [h0, h0 + nh) of pair (i, j) over the n > 0 keys k [n, d_qk].
void head_block(const Params& p, int64_t i, int64_t j, int64_t h0, int nh, const float* k, int64_t n, Scratch& w) {
  for (int hh = 0; hh < nh; ++hh) {
    const uint16_t* q = p.q + i * p.stride_q_b + j * p.stride_q_s + (h0 + hh) * p.stride_q_h;
    float* qf = w.q.data() + hh * p.d_qk;
    for (int d = 0; d < p.d_qk; ++d) qf[d] = half_to_f32(p.dtype, q[d]) * p.scale;
  }
  if (static_cast<int64_t>(w.s.size()) < kHeadBlock * n) w.s.resize(static_cast<size_t>(kHeadBlock * n));
  float max[kHeadBlock], sum[kHeadBlock];
  w.head_block(w.q.data(), nh, k, n, p.d_qk, p.d_qk, kDimV, w.s.data(), w.acc, max, sum);
  for (int hh = 0; hh < nh; ++hh) {
    const int64_t h = h0 + hh;
    const float inv = 1.0f / sum[hh];
    uint16_t* out = p.out + i * p.stride_out_b + j * p.stride_out_s + h * p.stride_out_h;
    for (int d = 0; d < kDimV; ++d) out[d] = f32_to_half(p.dtype, w.acc[hh][d] * inv);
    p.lse[i * p.stride_lse_b + h * p.stride_lse_h + j * p.stride_lse_s] = max[hh] + std::log(sum[hh]);
  }
}

// Key t of request i for kv head kv_head as fp32 [d_qk] (the oracle's load_key values; v32_fp8
// pages with the payload decoded by lanes, cpu_common/dequant.h).
void key_f32(const Params& p, int64_t i, int64_t t, int64_t kv_head, Scratch& w, float* kt) {
  if (p.fp8) {
    constexpr CacheFormat F = CacheFormat::v32_fp8;
    const formats::RecordByteOffsets o = formats::record_byte_offsets(F, p.page_size, p.page_stride_fp8, token_slot(p, i, t));
    cpu_common::dequantize_record_f32<F>(p.k_cache_fp8 + o.data, p.k_cache_fp8 + o.scale, kt, w.payload);
  } else {
    load_key(p, i, t, kv_head, kt);
  }
}

// A row that sees no key: out 0, lse +inf.
void write_lonely(const Params& p, int64_t i, int64_t j) {
  const uint16_t zero = f32_to_half(p.dtype, 0.0f);
  for (int64_t h = 0; h < p.h_q; ++h) {
    uint16_t* out = p.out + i * p.stride_out_b + j * p.stride_out_s + h * p.stride_out_h;
    std::fill(out, out + kDimV, zero);
    p.lse[i * p.stride_lse_b + h * p.stride_lse_h + j * p.stride_lse_s] = std::numeric_limits<float>::infinity();
  }
}

// (i, j) of `pair` and its visible keys' count; a pair with none is written (out 0, lse +inf) and 0
// returned.
int64_t begin_pair(const Params& p, int64_t pair, int64_t& i, int64_t& j) {
  i = pair / p.s_q;
  j = pair % p.s_q;
  const int64_t n = visible_keys(p, i, j);
  if (n == 0) write_lonely(p, i, j);
  return n;
}

}  // namespace

// Work split as in sparse decode (decode/cpu/fast.cpp): threads take (request, query token) pairs,
// or, with fewer pairs than threads and more blocks of heads per kv head than pairs, share each
// pair's key loading and then its blocks of heads, kv head by kv head. Bitwise the same either way.
void dense_decode_cpu_fast(const Params& p) {
  const int64_t pairs = p.b * p.s_q;
  const int64_t heads_per_kv = p.h_q / p.h_kv;
  const int64_t blocks_per_kv = (heads_per_kv + kHeadBlock - 1) / kHeadBlock;
  const cpu_common::HeadBlockFn head_block_build = cpu_common::default_head_block();
  const cpu_common::PayloadFn payload_build = cpu_common::default_payload();
  auto make_scratch = [&](Scratch& w) {
    w.head_block = head_block_build;
    w.payload = payload_build;
    w.q.resize(static_cast<size_t>(kHeadBlock * p.d_qk));
  };
  // Block hb of kv head kv_head: its first head and head count.
  auto block = [&](int64_t kv_head, int64_t hb, int64_t& h0) {
    h0 = kv_head * heads_per_kv + hb * kHeadBlock;
    return static_cast<int>(std::min<int64_t>(kHeadBlock, heads_per_kv - hb * kHeadBlock));
  };

  // Sharing a pair pays where its blocks of heads outnumber the pairs (it runs one pair at a time).
  if (pairs >= omp_get_max_threads() || blocks_per_kv <= pairs) {
#pragma omp parallel
    {
      Scratch w;
      make_scratch(w);
#pragma omp for schedule(dynamic, 1)
      for (int64_t pair = 0; pair < pairs; ++pair) {
        int64_t i, j;
        const int64_t n = begin_pair(p, pair, i, j);
        if (n == 0) continue;
        if (static_cast<int64_t>(w.k.size()) < n * p.d_qk) w.k.resize(static_cast<size_t>(n * p.d_qk));
        for (int64_t kv_head = 0; kv_head < p.h_kv; ++kv_head) {
          for (int64_t t = 0; t < n; ++t) key_f32(p, i, t, kv_head, w, w.k.data() + t * p.d_qk);
          for (int64_t hb = 0; hb < blocks_per_kv; ++hb) {
            int64_t h0;
            const int nh = block(kv_head, hb, h0);
            head_block(p, i, j, h0, nh, w.k.data(), n, w);
          }
        }
      }
    }
    return;
  }
  // Fewer pairs than threads: all threads on one (pair, kv head) at a time.
  std::vector<float> keys;
  for (int64_t pair = 0; pair < pairs; ++pair) {
    int64_t i, j;
    const int64_t n = begin_pair(p, pair, i, j);
    if (n == 0) continue;
    if (static_cast<int64_t>(keys.size()) < n * p.d_qk) keys.resize(static_cast<size_t>(n * p.d_qk));
    for (int64_t kv_head = 0; kv_head < p.h_kv; ++kv_head) {
#pragma omp parallel
      {
        Scratch w;
        make_scratch(w);
#pragma omp for schedule(static)
        for (int64_t t = 0; t < n; ++t) key_f32(p, i, t, kv_head, w, keys.data() + t * p.d_qk);
        // (The loop's barrier: every key is loaded before any head block reads it.)
#pragma omp for schedule(dynamic, 1)
        for (int64_t hb = 0; hb < blocks_per_kv; ++hb) {
          int64_t h0;
          const int nh = block(kv_head, hb, h0);
          head_block(p, i, j, h0, nh, keys.data(), n, w);
        }
      }
    }
  }
}

}  // namespace latentkv::dense
