// The fast fp32 CPU path of sparse_decode.
//
// Work split. With at least as many (request, query token) pairs as OpenMP threads, threads take
// pairs (dynamic schedule: lengths differ per request). With fewer, and more blocks of heads per
// pair than pairs (small-batch decode: b 1 and s_q 1 would keep one core busy), the threads share
// each pair in turn: first its tokens' decoding, then its blocks of heads. Either way a pair's
// attended tokens are dequantized once into an fp32 buffer shared by all of its heads; heads then
// go kHeadBlock at a time, so each key row is loaded into L1 once per block rather than once per
// head. Softmax takes two passes over the scores (max,
// then exponentials), with fp32 scores, sums and accumulators. Inner loops run over the contiguous
// d dimension and vectorise.
//
// The result of a pair depends only on its inputs and the compiled order of operations, never on
// the thread or the split that ran it, so the output is bitwise identical from run to run and for
// any thread count.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_common/dequant.h"
#include "cpu_common/head_block.h"
#include "decode/cpu/decode_cpu.h"

namespace latentkv::decode {
namespace {

using cpu_common::kHeadBlock;

// A pair's attended tokens and their dequantized keys.
struct Gathered {
  std::vector<const CacheRef*> cache;  // [n] the cache of each attended token
  std::vector<int64_t> slot;           // [n] its slot
  std::vector<float> k;                // [n, d_qk] the attended keys
};

// One thread's buffers.
struct Scratch {
  cpu_common::HeadBlockFn head_block;  // this CPU's build (cpu_common::default_head_block)
  cpu_common::PayloadFn payload;       // and its payload decoding (cpu_common::default_payload)
  std::vector<float> q;                // [kHeadBlock, d_qk] scaled queries of the block
  std::vector<float> s;                // [kHeadBlock, n] scores, then exp(s - max)
  alignas(64) float acc[kHeadBlock][kDimV];
};

// One token's dequantized row as fp32 [d_qk] (cpu_common/dequant.h: the same values as
// formats::decode_unit's bf16 row, the payload decoded by lanes).
template <CacheFormat F>
void dequantize_f32(const CacheRef& c, int64_t slot, Scratch& w, float* out) {
  const formats::RecordByteOffsets o = formats::record_byte_offsets(F, c.page_size, c.page_stride, slot);
  cpu_common::dequantize_record_f32<F>(c.base + o.data, c.base + o.scale, out, w.payload);
}

void dequantize_f32(const CacheRef& c, int64_t slot, Scratch& w, float* out) {
  switch (c.format) {
    case CacheFormat::v32_fp8: return dequantize_f32<CacheFormat::v32_fp8>(c, slot, w, out);
    case CacheFormat::v4_fp8: return dequantize_f32<CacheFormat::v4_fp8>(c, slot, w, out);
    case CacheFormat::v4_int8: return dequantize_f32<CacheFormat::v4_int8>(c, slot, w, out);
    case CacheFormat::v41_fp8: return dequantize_f32<CacheFormat::v41_fp8>(c, slot, w, out);
    case CacheFormat::v41_fp4: return dequantize_f32<CacheFormat::v41_fp4>(c, slot, w, out);
  }
}

// The attended tokens of (i, j), main then extra; sizes g's key buffer. Returns their count.
int64_t collect(const Params& p, int64_t i, int64_t j, Gathered& g) {
  g.cache.clear();
  g.slot.clear();
  for (const CacheRef* c : {&p.main, &p.extra}) {
    const int64_t count = valid_count(*c, i);
    for (int64_t k = 0; k < count; ++k) {
      const int64_t slot = candidate_slot(*c, i, j, k, count);
      if (slot == -1) continue;
      g.cache.push_back(c);
      g.slot.push_back(slot);
    }
  }
  const int64_t n = static_cast<int64_t>(g.slot.size());
  if (static_cast<int64_t>(g.k.size()) < n * p.d_qk) g.k.resize(static_cast<size_t>(n * p.d_qk));
  return n;
}

void dequantize_token(const Params& p, Gathered& g, int64_t t, Scratch& w) {
  dequantize_f32(*g.cache[t], g.slot[t], w, g.k.data() + t * p.d_qk);
}

// A query that attends nothing: out 0, lse +inf, with or without a sink.
void write_lonely(const Params& p, int64_t i, int64_t j) {
  for (int64_t h = 0; h < p.h_q; ++h) {
    uint16_t* out = p.out + i * p.stride_out_b + j * p.stride_out_s + h * p.stride_out_h;
    std::fill(out, out + kDimV, uint16_t{0});
    p.lse[i * p.stride_lse_b + h * p.stride_lse_h + j * p.stride_lse_s] = std::numeric_limits<float>::infinity();
  }
}

// (i, j) of `pair` and its attended tokens in g; a pair with none is written (out 0, lse +inf) and
// 0 returned.
int64_t begin_pair(const Params& p, int64_t pair, Gathered& g, int64_t& i, int64_t& j) {
  i = pair / p.s_q;
  j = pair % p.s_q;
  const int64_t n = collect(p, i, j, g);
  if (n == 0) write_lonely(p, i, j);
  return n;
}

// Heads [h0, h0 + nh) of pair (i, j) over its n > 0 gathered keys k [n, d_qk].
void head_block(const Params& p, int64_t i, int64_t j, int64_t h0, int nh, const float* k, int64_t n, Scratch& w) {
  const int d_qk = p.d_qk;
  // Queries with the softmax scale folded in (one multiply per element instead of per score).
  for (int hh = 0; hh < nh; ++hh) {
    const uint16_t* q = p.q + i * p.stride_q_b + j * p.stride_q_s + (h0 + hh) * p.stride_q_h;
    float* qf = w.q.data() + hh * d_qk;
    for (int d = 0; d < d_qk; ++d) qf[d] = num::bf16_to_f32(q[d]) * p.scale;
  }

  if (static_cast<int64_t>(w.s.size()) < kHeadBlock * n) w.s.resize(static_cast<size_t>(kHeadBlock * n));
  float m[kHeadBlock], sum[kHeadBlock];
  w.head_block(w.q.data(), nh, k, n, d_qk, d_qk, kDimV, w.s.data(), w.acc, m, sum);

  // Normalise, apply the sink (lse unchanged; a +inf sink zeroes the output), write.
  for (int hh = 0; hh < nh; ++hh) {
    const int64_t h = h0 + hh;
    const float lse = m[hh] + std::log(sum[hh]);
    const float factor = p.sink ? cpu_common::sink_factor(p.sink[h], lse) : 1.0f;
    const float inv = factor / sum[hh];
    uint16_t* out = p.out + i * p.stride_out_b + j * p.stride_out_s + h * p.stride_out_h;
    for (int d = 0; d < kDimV; ++d) out[d] = num::f32_to_bf16(w.acc[hh][d] * inv);
    p.lse[i * p.stride_lse_b + h * p.stride_lse_h + j * p.stride_lse_s] = lse;
  }
}

}  // namespace

void sparse_decode_cpu_fast(const Params& p) {
  const int64_t pairs = p.b * p.s_q;
  const int64_t head_blocks = (p.h_q + kHeadBlock - 1) / kHeadBlock;
  const cpu_common::HeadBlockFn head_block_build = cpu_common::default_head_block();
  const cpu_common::PayloadFn payload_build = cpu_common::default_payload();
  auto make_scratch = [&](Scratch& w) {
    w.head_block = head_block_build;
    w.payload = payload_build;
    w.q.resize(static_cast<size_t>(kHeadBlock * p.d_qk));
  };
  auto heads_of = [&](int64_t hb) { return static_cast<int>(std::min<int64_t>(kHeadBlock, p.h_q - hb * kHeadBlock)); };

  // Sharing a pair pays where its blocks of heads outnumber the pairs (it runs one pair at a time).
  if (pairs >= omp_get_max_threads() || head_blocks <= pairs) {
#pragma omp parallel
    {
      Scratch w;
      make_scratch(w);
      Gathered g;
#pragma omp for schedule(dynamic, 1)
      for (int64_t pair = 0; pair < pairs; ++pair) {
        int64_t i, j;
        const int64_t n = begin_pair(p, pair, g, i, j);
        if (n == 0) continue;
        for (int64_t t = 0; t < n; ++t) dequantize_token(p, g, t, w);
        for (int64_t hb = 0; hb < head_blocks; ++hb) head_block(p, i, j, hb * kHeadBlock, heads_of(hb), g.k.data(), n, w);
      }
    }
    return;
  }
  // Fewer pairs than threads: all threads on one pair at a time.
  Gathered g;
  for (int64_t pair = 0; pair < pairs; ++pair) {
    int64_t i, j;
    const int64_t n = begin_pair(p, pair, g, i, j);
    if (n == 0) continue;
#pragma omp parallel
    {
      Scratch w;
      make_scratch(w);
#pragma omp for schedule(static)
      for (int64_t t = 0; t < n; ++t) dequantize_token(p, g, t, w);
      // (The loop's barrier: every key is decoded before any head block reads it.)
#pragma omp for schedule(dynamic, 1)
      for (int64_t hb = 0; hb < head_blocks; ++hb) head_block(p, i, j, hb * kHeadBlock, heads_of(hb), g.k.data(), n, w);
    }
  }
}

}  // namespace latentkv::decode
