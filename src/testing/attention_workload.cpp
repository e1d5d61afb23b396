// Seeded sparse_prefill and dense_decode workloads and the output comparison (see
// attention_workload.h).
//
// Every random value is a counter-based draw (normal_at / bits_at of a per-tensor stream), so a
// workload is the same whatever the thread count. The v32_fp8 cache is filled through
// latentkv::quantize, so its bytes are exactly what the format's writer produces.
#include "testing/attention_workload.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "latentkv/numerics.h"
#include "formats/record_codec.h"
#include "latentkv/error.h"
#include "latentkv/formats.h"
#include "latentkv/numerics.h"
#include "testing/compress_workload.h"

namespace latentkv::testing {
namespace {

constexpr uint16_t kBf16Nan = 0x7fc0;
constexpr uint16_t kF16Nan = 0x7e00;
constexpr int64_t kDimV = 512;

// Streams of the workloads' random draws, offsets from opt.seed.
enum DrawStream : uint64_t {
  kStreamQ = 1,
  kStreamKv = 2,
  kStreamIndex = 3,
  kStreamLength = 4,
  kStreamSink = 5,
  kStreamAdversarial = 6,
  kStreamPages = 7,
  kStreamGarbage = 8,
};

// Sinks near the typical lse (ln(keys) for randn scores) so that they matter.
std::vector<float> make_sinks(int64_t h_q, float special, uint64_t seed) {
  std::vector<float> sink(static_cast<size_t>(h_q));
  for (int64_t h = 0; h < h_q; ++h)
    sink[h] = special != 0.0f ? special : 4.0f + 2.0f * normal_at(seed, h);
  return sink;
}

}  // namespace

// ---- sparse_prefill ----------------------------------------------------------------------------

std::pair<int64_t, int64_t> PrefillWorkload::segment(int64_t row) const {
  if (!batched()) return {0, s_kv};
  const auto it = std::upper_bound(seq_offsets_q.begin(), seq_offsets_q.end() - 1, row);
  const int64_t n = (it - seq_offsets_q.begin()) - 1;
  return {seq_offsets_kv[n], seq_offsets_kv[n + 1] - seq_offsets_kv[n]};
}

void PrefillWorkload::poison_outputs() {
  std::fill(out.begin(), out.end(), kBf16Nan);
  std::fill(max_logits.begin(), max_logits.end(), std::numeric_limits<float>::quiet_NaN());
  std::fill(lse.begin(), lse.end(), std::numeric_limits<float>::quiet_NaN());
}

SparsePrefillArgs PrefillWorkload::args() {
  const int64_t h_q = opt.h_q, d_qk = opt.d_qk;
  SparsePrefillArgs a;
  a.q = TensorView(q.data(), DType::bf16, {s_q, h_q, d_qk});
  a.kv = TensorView(kv.data(), DType::bf16, {s_kv, 1, d_qk});
  a.indices = TensorView(indices.data(), DType::i32, {s_q, 1, opt.topk});
  a.sm_scale = opt.sm_scale > 0.0f ? opt.sm_scale
                                   : static_cast<float>(1.0 / std::sqrt(static_cast<double>(d_qk)));
  if (!sink.empty()) a.attn_sink = TensorView(sink.data(), DType::f32, {h_q});
  if (!topk_length.empty()) a.topk_length = TensorView(topk_length.data(), DType::i32, {s_q});
  a.out = TensorView(out.data(), DType::bf16, {s_q, h_q, kDimV});
  a.max_logits = TensorView(max_logits.data(), DType::f32, {s_q, h_q});
  a.lse = TensorView(lse.data(), DType::f32, {s_q, h_q});
  return a;
}

void PrefillWorkload::run(PrefillImpl impl) {
  poison_outputs();
  const SparsePrefillArgs a = args();
  if (!batched()) {
    sparse_prefill(a, nullptr, impl);
    return;
  }
  const int64_t n = static_cast<int64_t>(seq_offsets_q.size());
  sparse_prefill_batched(a, TensorView(seq_offsets_q.data(), DType::i64, {n}),
                         TensorView(seq_offsets_kv.data(), DType::i64, {n}), nullptr, impl);
}

PrefillWorkload make_prefill_workload(const PrefillWorkloadOptions& opt) {
  LKV_CHECK(opt.h_q >= 1 && opt.topk >= 1 && opt.d_qk >= kDimV && opt.seq_q.size() == opt.seq_kv.size(),
            "prefill workload: bad options h_q=", opt.h_q, " topk=", opt.topk, " d_qk=", opt.d_qk,
            " (seq_q has ", opt.seq_q.size(), " sequences, seq_kv ", opt.seq_kv.size(), ")");
  PrefillWorkload w;
  w.opt = opt;
  const int64_t h_q = opt.h_q, d_qk = opt.d_qk, topk = opt.topk;
  if (opt.seq_q.empty()) {
    w.s_q = opt.s_q;
    w.s_kv = opt.s_kv;
  } else {
    w.seq_offsets_q.assign(1, 0);
    w.seq_offsets_kv.assign(1, 0);
    for (size_t n = 0; n < opt.seq_q.size(); ++n) {
      w.seq_offsets_q.push_back(w.seq_offsets_q.back() + opt.seq_q[n]);
      w.seq_offsets_kv.push_back(w.seq_offsets_kv.back() + opt.seq_kv[n]);
    }
    w.s_q = w.seq_offsets_q.back();
    w.s_kv = w.seq_offsets_kv.back();
  }
  const int64_t s_q = w.s_q, s_kv = w.s_kv;

  // ---- q and kv ~ randn, rounded to bf16.
  w.q.resize(static_cast<size_t>(s_q * h_q * d_qk));
  w.kv.resize(static_cast<size_t>(s_kv * d_qk));
  const int64_t nq = static_cast<int64_t>(w.q.size()), nkv = static_cast<int64_t>(w.kv.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < nq; ++k) w.q[k] = num::f32_to_bf16(normal_at(opt.seed + kStreamQ, k));
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < nkv; ++k) w.kv[k] = num::f32_to_bf16(normal_at(opt.seed + kStreamKv, k));

  // ---- Indices, uniform over each row's segment, then bent by the options.
  w.indices.resize(static_cast<size_t>(s_q * topk));
  for (int64_t row = 0; row < s_q; ++row) {
    const int64_t len = w.segment(row).second;
    for (int64_t k = 0; k < topk; ++k) {
      const int64_t e = row * topk + k;
      if (opt.all_invalid || len == 0) {
        w.indices[e] = invalid_index(static_cast<uint64_t>(e), len);
        continue;
      }
      w.indices[e] = static_cast<int32_t>(bits_at(opt.seed + kStreamIndex, e) % static_cast<uint64_t>(len));
      const uint64_t r = bits_at(opt.seed + kStreamAdversarial, e);
      if (opt.adversarial && r % 10 == 0) w.indices[e] = invalid_index(r / 10, len);
    }
  }
  if (opt.rising_scores) {
    for (int64_t row = 0; row < s_q; ++row)
      std::sort(w.indices.begin() + row * topk, w.indices.begin() + (row + 1) * topk);
    for (int64_t r = 0; r < s_kv; ++r) {
      int64_t begin = 0, len = s_kv;  // the segment holding kv row r
      for (size_t n = 0; n + 1 < w.seq_offsets_kv.size(); ++n)
        if (r >= w.seq_offsets_kv[n] && r < w.seq_offsets_kv[n + 1]) {
          begin = w.seq_offsets_kv[n];
          len = w.seq_offsets_kv[n + 1] - begin;
        }
      const float f = std::ldexp(1.0f, 2 * static_cast<int>(4 * (r - begin) / len));  // 1, 4, 16, 64
      for (int64_t d = 0; d < d_qk; ++d) {
        uint16_t& x = w.kv[static_cast<size_t>(r * d_qk + d)];
        x = num::f32_to_bf16(num::bf16_to_f32(x) * f);
      }
    }
  }
  if (opt.topk_length) {
    w.topk_length.resize(static_cast<size_t>(s_q));
    for (int64_t row = 0; row < s_q; ++row) {
      int64_t v = row == 0 ? topk : static_cast<int64_t>(bits_at(opt.seed + kStreamLength, row) % (topk + 1));
      if (opt.zero_lengths && row % 2 == 0) v = 0;
      w.topk_length[row] = static_cast<int32_t>(v);
    }
  }
  if (opt.sink) w.sink = make_sinks(h_q, opt.sink_special, opt.seed + kStreamSink);

  // ---- NaN in every kv row that no attended candidate references.
  if (opt.nan_unused) {
    std::vector<bool> used(static_cast<size_t>(s_kv), false);
    for (int64_t row = 0; row < s_q; ++row) {
      const auto [begin, len] = w.segment(row);
      const int64_t count = w.topk_length.empty() ? topk : std::clamp<int64_t>(w.topk_length[row], 0, topk);
      for (int64_t k = 0; k < count; ++k) {
        const int64_t idx = w.indices[row * topk + k];
        if (idx >= 0 && idx < len) used[begin + idx] = true;
      }
    }
    for (int64_t r = 0; r < s_kv; ++r)
      if (!used[r]) std::fill(w.kv.begin() + r * d_qk, w.kv.begin() + (r + 1) * d_qk, kBf16Nan);
  }

  w.out.resize(static_cast<size_t>(s_q * h_q * kDimV));
  w.max_logits.resize(static_cast<size_t>(s_q * h_q));
  w.lse.resize(static_cast<size_t>(s_q * h_q));
  w.poison_outputs();
  return w;
}

// ---- dense_decode ------------------------------------------------------------------------------

void DenseWorkload::poison_outputs() {
  std::fill(out.begin(), out.end(), opt.f16 ? kF16Nan : kBf16Nan);
  std::fill(lse.begin(), lse.end(), std::numeric_limits<float>::quiet_NaN());
}

DenseDecodeArgs DenseWorkload::args() {
  const int64_t b = opt.b, s_q = opt.s_q, h_q = opt.h_q, P = opt.page_size;
  const DType half = opt.f16 ? DType::f16 : DType::bf16;
  DenseDecodeArgs a;
  a.q = TensorView(q.data(), half, {b, s_q, h_q, opt.d_qk});
  if (opt.fp8) {
    const int64_t bpt = format_info(CacheFormat::v32_fp8).bytes_per_token;
    a.k_cache = TensorView(k_cache_fp8.data(), DType::u8, {num_pages, P, 1, bpt},
                           {page_stride_fp8, bpt, bpt, 1});
    a.fp8 = true;
  } else {
    a.k_cache = TensorView(k_cache.data(), half, {num_pages, P, opt.h_kv, opt.d_qk});
  }
  a.block_table = TensorView(block_table.data(), DType::i32, {b, max_pages});
  a.cache_seqlens = TensorView(cache_seqlens.data(), DType::i32, {b});
  a.causal = opt.causal;
  a.softmax_scale = opt.softmax_scale;
  a.out = TensorView(out.data(), half, {b, s_q, h_q, kDimV});
  a.lse = TensorView(lse.data(), DType::f32, {b, h_q, s_q});
  return a;
}

void DenseWorkload::run(DenseImpl impl) {
  poison_outputs();
  dense_decode(args(), nullptr, impl);
}

DenseWorkload make_dense_workload(const DenseWorkloadOptions& opt) {
  LKV_CHECK(opt.b >= 1 && opt.s_q >= 1 && opt.h_q >= 1 && opt.h_kv >= 1 && opt.h_q % opt.h_kv == 0 &&
                opt.page_size >= 1 && opt.max_len >= 0 && opt.spare_pages >= 0 &&
                (opt.lengths.empty() || static_cast<int64_t>(opt.lengths.size()) == opt.b) &&
                (!opt.fp8 || (opt.h_kv == 1 && opt.d_qk == 576)),
            "dense workload: bad options b=", opt.b, " s_q=", opt.s_q, " h_q=", opt.h_q, " h_kv=", opt.h_kv,
            " P=", opt.page_size, " max_len=", opt.max_len, " spare_pages=", opt.spare_pages, " lengths: ",
            opt.lengths.size(), " fp8=", opt.fp8, " d_qk=", opt.d_qk, " (fp8 needs h_kv 1 and d_qk 576)");
  DenseWorkload w;
  w.opt = opt;
  const int64_t b = opt.b, s_q = opt.s_q, h_q = opt.h_q, h_kv = opt.h_kv, d_qk = opt.d_qk;
  const int64_t P = opt.page_size;

  // ---- Lengths and the pages each request needs.
  w.cache_seqlens.resize(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) {
    int64_t len = !opt.lengths.empty() ? opt.lengths[i]
                  : i == 0 ? opt.max_len
                           : static_cast<int64_t>(bits_at(opt.seed + kStreamLength, i) % (opt.max_len + 1));
    if (opt.zero_lengths && i % 2 == 0) len = 0;
    w.cache_seqlens[i] = static_cast<int32_t>(len);
  }
  int64_t needed_total = 0, longest = 0;
  for (int32_t len : w.cache_seqlens) {
    needed_total += (len + P - 1) / P;
    longest = std::max<int64_t>(longest, len);
  }
  // One column beyond the longest request, so every request has entries it must not read.
  w.max_pages = (longest + P - 1) / P + 1;
  w.num_pages = needed_total + opt.spare_pages;

  // ---- Block table: pages in a random order, handed out request by request; the entries beyond
  // a request's needed blocks hold some other valid page, or with garbage_block_table values that
  // would fault if read.
  std::vector<int32_t> order(static_cast<size_t>(w.num_pages));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t k = w.num_pages - 1; k > 0; --k)
    std::swap(order[k], order[bits_at(opt.seed + kStreamPages, k) % static_cast<uint64_t>(k + 1)]);
  w.block_table.resize(static_cast<size_t>(b * w.max_pages));
  int64_t next = 0;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t needed = (w.cache_seqlens[i] + P - 1) / P;
    for (int64_t blk = 0; blk < w.max_pages; ++blk) {
      const int64_t e = i * w.max_pages + blk;
      if (blk < needed) {
        w.block_table[e] = order[next++];
      } else if (opt.garbage_block_table) {
        w.block_table[e] = invalid_index(bits_at(opt.seed + kStreamGarbage, e), w.num_pages);
      } else {
        w.block_table[e] = w.num_pages > 0 ? order[bits_at(opt.seed + kStreamGarbage, e) % w.num_pages] : 0;
      }
    }
  }

  // ---- Which slots some request reads (the rest may be poisoned).
  std::vector<bool> used(static_cast<size_t>(w.num_pages * P), false);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t t = 0; t < w.cache_seqlens[i]; ++t)
      used[w.block_table[i * w.max_pages + t / P] * P + t % P] = true;

  // ---- The cache: randn latents, as 16-bit values or quantized v32_fp8 records.
  const int64_t n_slots = w.num_pages * P;
  std::vector<float> latents(static_cast<size_t>(n_slots * h_kv * d_qk));
  const int64_t n_lat = static_cast<int64_t>(latents.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n_lat; ++k) latents[k] = normal_at(opt.seed + kStreamKv, k);
  if (opt.fp8) {
    const FormatInfo& fi = format_info(CacheFormat::v32_fp8);
    w.page_stride_fp8 = (P * fi.bytes_per_token + 15) / 16 * 16;
    w.k_cache_fp8.assign(static_cast<size_t>(w.num_pages * w.page_stride_fp8), 0);
    std::vector<int32_t> slots(static_cast<size_t>(n_slots));
    std::iota(slots.begin(), slots.end(), 0);
    const TensorView cache(w.k_cache_fp8.data(), DType::u8, {w.num_pages, P, 1, fi.bytes_per_token},
                           {w.page_stride_fp8, fi.bytes_per_token, fi.bytes_per_token, 1});
    if (n_slots > 0)
      quantize(CacheFormat::v32_fp8, TensorView(latents.data(), DType::f32, {n_slots, d_qk}),
               TensorView(slots.data(), DType::i32, {n_slots}), cache);
    if (opt.nan_unused) {
      // e4m3 NaN payloads, fp32 NaN scales and bf16 NaN RoPE values.
      const formats::CodecLayout L = formats::codec_layout(CacheFormat::v32_fp8);
      for (int64_t s = 0; s < n_slots; ++s) {
        if (used[s]) continue;
        const formats::RecordByteOffsets o =
            formats::record_byte_offsets(CacheFormat::v32_fp8, P, w.page_stride_fp8, s);
        uint8_t* data = w.k_cache_fp8.data() + o.data;
        std::fill(data, data + L.payload_bytes, uint8_t{0x7f});
        for (int g = 0; g < L.num_groups; ++g)
          formats::store_u32_le(w.k_cache_fp8.data() + o.scale + 4 * g, 0x7fc00000u);
        for (int r = 0; r < L.rope_dims; ++r)
          formats::store_u16_le(data + L.rope_offset + 2 * r, kBf16Nan);
      }
    }
  } else {
    w.k_cache.resize(latents.size());
    for (int64_t k = 0; k < n_lat; ++k) {
      const bool unused = opt.nan_unused && !used[k / (h_kv * d_qk)];
      w.k_cache[k] = unused ? (opt.f16 ? kF16Nan : kBf16Nan)
                            : (opt.f16 ? num::f32_to_f16(latents[k]) : num::f32_to_bf16(latents[k]));
    }
  }

  // ---- q ~ randn.
  w.q.resize(static_cast<size_t>(b * s_q * h_q * d_qk));
  for (size_t k = 0; k < w.q.size(); ++k) {
    const float x = normal_at(opt.seed + kStreamQ, k);
    w.q[k] = opt.f16 ? num::f32_to_f16(x) : num::f32_to_bf16(x);
  }

  w.out.resize(static_cast<size_t>(b * s_q * h_q * kDimV));
  w.lse.resize(static_cast<size_t>(b * h_q * s_q));
  w.poison_outputs();
  return w;
}

// ---- comparison --------------------------------------------------------------------------------

AttentionDiff compare_prefill(const PrefillWorkload& w, const std::vector<uint16_t>& out,
                              const std::vector<float>& max_logits, const std::vector<float>& lse,
                              const std::vector<uint16_t>& ref_out,
                              const std::vector<float>& ref_max_logits,
                              const std::vector<float>& ref_lse) {
  LKV_CHECK(max_logits.size() == lse.size() && ref_max_logits.size() == ref_lse.size(),
            "compare_prefill: max_logits and lse sizes differ");
  // out [s_q, h_q, 512] and lse/max_logits [s_q, h_q] share their row order.
  return compare_attention_rows(w.s_q * w.opt.h_q, false, out, ref_out, lse, ref_lse,
                      [](int64_t row) { return row; }, &max_logits, &ref_max_logits);
}

AttentionDiff compare_dense(const DenseWorkload& w, const std::vector<uint16_t>& out,
                            const std::vector<float>& lse, const std::vector<uint16_t>& ref_out,
                            const std::vector<float>& ref_lse) {
  const int64_t s_q = w.opt.s_q, h_q = w.opt.h_q;
  // out row (i, j, h) of [b, s_q, h_q, 512]; its lse sits at (i, h, j) of [b, h_q, s_q].
  const auto lse_at = [s_q, h_q](int64_t row) {
    const int64_t h = row % h_q, j = (row / h_q) % s_q, i = row / (h_q * s_q);
    return (i * h_q + h) * s_q + j;
  };
  return compare_attention_rows(w.opt.b * s_q * h_q, w.opt.f16, out, ref_out, lse, ref_lse, lse_at);
}

bool attention_close(const AttentionDiff& d, double max_rel_tol, double cos_tol) {
  return d.nan_out == 0 && d.lse_mismatch == 0 && d.max_logits_mismatch == 0 &&
         d.mask_mismatch == 0 && d.max_rel <= max_rel_tol && d.cos_sim >= cos_tol;
}

}  // namespace latentkv::testing
