// The fast fp32 CPU path of sparse_decode.
//
// Work split: OpenMP threads take (request, query token) pairs (dynamic schedule: lengths differ per
// request). A pair's attended tokens are dequantized once into an fp32 buffer shared by all of its
// heads; heads then go kHeadBlock at a time, so each key row is loaded into L1 once per block rather
// than once per head. Softmax takes two passes over the scores (max, then exponentials), with fp32
// scores, sums and accumulators. Inner loops run over the contiguous d dimension and vectorise.
//
// The result of a pair depends only on its inputs and the compiled order of operations, never on the
// thread that ran it, so the output is bitwise identical from run to run.
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

struct Scratch {
  cpu_common::HeadBlockFn head_block;  // this CPU's build (cpu_common::default_head_block)
  cpu_common::PayloadFn payload;       // and its payload decoding (cpu_common::default_payload)
  std::vector<const CacheRef*> cache;  // [n] the cache of each attended token
  std::vector<int64_t> slot;           // [n] its slot
  std::vector<uint16_t> row;           // [d_qk] one dequantized token, bf16 (v41_fp4)
  std::vector<float> k;                // [n, d_qk] the attended keys
  std::vector<float> q;                // [kHeadBlock, d_qk] scaled queries of the block
  std::vector<float> s;                // [kHeadBlock, n] scores, then exp(s - max)
  alignas(64) float acc[kHeadBlock][kDimV];
};

// One token's dequantized row as fp32 [d_qk] (cpu_common/dequant.h: the same values as
// formats::decode_unit's bf16 row, the payload decoded by lanes).
template <CacheFormat F>
void dequantize_f32(const CacheRef& c, int64_t slot, const Scratch& w, uint16_t* row, float* out) {
  const formats::RecordByteOffsets o = formats::record_byte_offsets(F, c.page_size, c.page_stride, slot);
  cpu_common::dequantize_record_f32<F>(c.base + o.data, c.base + o.scale, row, out, w.payload);
}

void dequantize_f32(CacheFormat f, const CacheRef& c, int64_t slot, const Scratch& w, uint16_t* row, float* out) {
  switch (f) {
    case CacheFormat::v32_fp8: return dequantize_f32<CacheFormat::v32_fp8>(c, slot, w, row, out);
    case CacheFormat::v4_fp8: return dequantize_f32<CacheFormat::v4_fp8>(c, slot, w, row, out);
    case CacheFormat::v4_int8: return dequantize_f32<CacheFormat::v4_int8>(c, slot, w, row, out);
    case CacheFormat::v41_fp8: return dequantize_f32<CacheFormat::v41_fp8>(c, slot, w, row, out);
    case CacheFormat::v41_fp4: return dequantize_f32<CacheFormat::v41_fp4>(c, slot, w, row, out);
  }
}

// Gathers the attended tokens of (i, j), main then extra, and dequantizes each once.
int64_t gather(const Params& p, int64_t i, int64_t j, Scratch& w) {
  w.cache.clear();
  w.slot.clear();
  for (const CacheRef* c : {&p.main, &p.extra}) {
    const int64_t count = valid_count(*c, i);
    for (int64_t k = 0; k < count; ++k) {
      const int64_t slot = candidate_slot(*c, i, j, k, count);
      if (slot == -1) continue;
      w.cache.push_back(c);
      w.slot.push_back(slot);
    }
  }
  const int64_t n = static_cast<int64_t>(w.slot.size());
  if (static_cast<int64_t>(w.k.size()) < n * p.d_qk) w.k.resize(static_cast<size_t>(n * p.d_qk));
  if (static_cast<int64_t>(w.s.size()) < kHeadBlock * n) w.s.resize(static_cast<size_t>(kHeadBlock * n));
  for (int64_t t = 0; t < n; ++t)
    dequantize_f32(p.format, *w.cache[t], w.slot[t], w, w.row.data(), w.k.data() + t * p.d_qk);
  return n;
}

// Heads [h0, h0 + nh) of pair (i, j) over its n > 0 gathered keys.
void head_block(const Params& p, int64_t i, int64_t j, int64_t h0, int nh, int64_t n, Scratch& w) {
  const int d_qk = p.d_qk;
  // Queries with the softmax scale folded in (one multiply per element instead of per score).
  for (int hh = 0; hh < nh; ++hh) {
    const uint16_t* q = p.q + i * p.stride_q_b + j * p.stride_q_s + (h0 + hh) * p.stride_q_h;
    float* qf = w.q.data() + hh * d_qk;
    for (int d = 0; d < d_qk; ++d) qf[d] = num::bf16_to_f32(q[d]) * p.scale;
  }

  float m[kHeadBlock], sum[kHeadBlock];
  w.head_block(w.q.data(), nh, w.k.data(), n, d_qk, d_qk, kDimV, w.s.data(), w.acc, m,
                                sum);

  // Normalise, apply the sink (lse unchanged; a +inf sink zeroes the output), write.
  for (int hh = 0; hh < nh; ++hh) {
    const int64_t h = h0 + hh;
    const float lse = m[hh] + std::log(sum[hh]);
    const float factor = p.sink ? cpu_common::sink_factor(p.sink[h], lse) : 1.0f;
    const float inv = factor / sum[hh];
    uint16_t* out = p.out + i * p.stride_out_b + j * p.stride_out_s + h * p.stride_out_h;
    for (int d = 0; d < kDimV; ++d) out[d] = num::f32_to_bf16(w.acc[hh][d] * inv);
    p.lse[i * p.stride_lse_b + h * p.stride_lse_h + j] = lse;
  }
}

}  // namespace

void sparse_decode_cpu_fast(const Params& p) {
  const int64_t pairs = p.b * p.s_q;
  const cpu_common::HeadBlockFn head_block_build = cpu_common::default_head_block();
  const cpu_common::PayloadFn payload_build = cpu_common::default_payload();
#pragma omp parallel
  {
    Scratch w;
    w.head_block = head_block_build;
    w.payload = payload_build;
    w.row.resize(static_cast<size_t>(p.d_qk));
    w.q.resize(static_cast<size_t>(kHeadBlock * p.d_qk));
#pragma omp for schedule(dynamic, 1)
    for (int64_t pair = 0; pair < pairs; ++pair) {
      const int64_t i = pair / p.s_q, j = pair % p.s_q;
      const int64_t n = gather(p, i, j, w);
      if (n == 0) {
        // A lonely query: out 0, lse +inf, with or without a sink.
        for (int64_t h = 0; h < p.h_q; ++h) {
          uint16_t* out = p.out + i * p.stride_out_b + j * p.stride_out_s + h * p.stride_out_h;
          std::fill(out, out + kDimV, uint16_t{0});
          p.lse[i * p.stride_lse_b + h * p.stride_lse_h + j] = std::numeric_limits<float>::infinity();
        }
        continue;
      }
      for (int64_t h0 = 0; h0 < p.h_q; h0 += kHeadBlock)
        head_block(p, i, j, h0, static_cast<int>(std::min<int64_t>(kHeadBlock, p.h_q - h0)), n, w);
    }
  }
}

}  // namespace latentkv::decode
