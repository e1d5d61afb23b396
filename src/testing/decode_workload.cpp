// Seeded sparse_decode workloads and the output comparison (see decode_workload.h).
//
// Every random value is a counter-based draw (normal_at / bits_at of a per-tensor stream), so a
// workload is the same whatever the thread count. Caches are filled through latentkv::quantize on
// the CPU, so their bytes are exactly what the format's writer produces.
#include "testing/decode_workload.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <limits>

#include "decode/params.h"
#include "formats/record_codec.h"
#include "latentkv/error.h"
#include "latentkv/numerics.h"
#include "testing/compress_workload.h"

namespace latentkv::testing {
namespace {

constexpr uint16_t kBf16Nan = 0x7fc0;

// Streams of the workload's random draws, offsets from opt.seed.
enum DrawStream : uint64_t {
  kStreamQ = 1,
  kStreamLatent = 2,
  kStreamExtraLatent = 3,
  kStreamIndex = 4,
  kStreamExtraIndex = 5,
  kStreamLength = 6,
  kStreamExtraLength = 7,
  kStreamSink = 8,
  kStreamAdversarial = 9,
};

int64_t pages_for(int64_t tokens, int64_t page_size) {
  return std::max<int64_t>(1, (tokens + page_size - 1) / page_size);
}

// Page stride: the records, the requested padding, rounded up to the GPU's 16-byte alignment.
int64_t stride_for(CacheFormat f, int64_t page_size, int64_t pad) {
  return (page_size * format_info(f).bytes_per_token + pad + 15) / 16 * 16;
}

// Fills every slot of one cache with the quantization of a randn latent.
std::vector<uint8_t> make_cache(CacheFormat f, int64_t num_pages, int64_t page_size,
                                int64_t page_stride, uint64_t seed) {
  const int64_t d_qk = format_info(f).d_qk, bpt = format_info(f).bytes_per_token;
  const int64_t n = num_pages * page_size;
  std::vector<uint8_t> kv(static_cast<size_t>(num_pages * page_stride), 0);
  std::vector<float> latents(static_cast<size_t>(n * d_qk));
  const int64_t total = n * d_qk;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < total; ++k) latents[k] = normal_at(seed, k);
  std::vector<int32_t> slots(static_cast<size_t>(n));
  for (int64_t s = 0; s < n; ++s) slots[s] = static_cast<int32_t>(s);
  const TensorView cache(kv.data(), DType::u8, {num_pages, page_size, 1, bpt},
                         {page_stride, bpt, bpt, 1});
  quantize(f, TensorView(latents.data(), DType::f32, {n, d_qk}),
           TensorView(slots.data(), DType::i32, {n}), cache);
  return kv;
}

// Indices [b, s_q, topk] drawn uniformly from [0, num_slots), then bent by the options.
std::vector<int32_t> make_indices(const DecodeWorkloadOptions& o, int64_t topk, int64_t num_slots,
                                  uint64_t stream) {
  const int64_t n = o.b * o.s_q * topk;
  std::vector<int32_t> idx(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    if (o.all_invalid) {
      idx[k] = invalid_index(static_cast<uint64_t>(k), num_slots);
      continue;
    }
    idx[k] = static_cast<int32_t>(bits_at(o.seed + stream, k) % static_cast<uint64_t>(num_slots));
    const uint64_t r = bits_at(o.seed + kStreamAdversarial + stream, k);
    if (o.adversarial && r % 10 == 0) idx[k] = invalid_index(r / 10, num_slots);
  }
  return idx;
}

// Lengths [b]: request 0 attends everything, the others a random prefix in [0, topk]; with
// zero_lengths the even requests attend nothing.
std::vector<int32_t> make_lengths(const DecodeWorkloadOptions& o, int64_t topk, uint64_t stream) {
  std::vector<int32_t> len(static_cast<size_t>(o.b));
  for (int64_t i = 0; i < o.b; ++i) {
    int64_t v = i == 0 ? topk : static_cast<int64_t>(bits_at(o.seed + stream, i) % (topk + 1));
    if (o.zero_lengths && i % 2 == 0) v = 0;
    len[i] = static_cast<int32_t>(v);
  }
  return len;
}

// Overwrites the record of every slot that no attended index references with NaN bytes: e4m3 NaN
// payloads, NaN scales (fp32 NaN for v32_fp8, ue8m0 0xff for the page-split format, whose pad byte
// becomes 0xff too, and for v41_fp8, e4m3 0x7f for v41_fp4, whose e2m1 payload has no NaN code)
// and bf16 NaN RoPE values.
void poison_unreferenced(CacheFormat f, std::vector<uint8_t>& kv, int64_t num_pages,
                         int64_t page_size, int64_t page_stride, const std::vector<int32_t>& idx,
                         int64_t b, int64_t s_q, int64_t topk, const std::vector<int32_t>& len) {
  const int64_t num_slots = num_pages * page_size;
  std::vector<bool> used(static_cast<size_t>(num_slots), false);
  for (int64_t i = 0; i < b; ++i) {
    const int64_t count = len.empty() ? topk : std::clamp<int64_t>(len[i], 0, topk);
    for (int64_t j = 0; j < s_q; ++j)
      for (int64_t k = 0; k < count; ++k) {
        const int64_t s = idx[(i * s_q + j) * topk + k];
        if (s >= 0 && s < num_slots) used[s] = true;
      }
  }
  const formats::CodecLayout L = formats::codec_layout(f);
  for (int64_t s = 0; s < num_slots; ++s) {
    if (used[s]) continue;
    const formats::RecordByteOffsets o = formats::record_byte_offsets(f, page_size, page_stride, s);
    uint8_t* data = kv.data() + o.data;
    uint8_t* scale = kv.data() + o.scale;
    std::fill(data, data + L.payload_bytes, uint8_t{0x7f});
    for (int r = 0; r < L.rope_dims; ++r) formats::store_u16_le(data + L.rope_offset + 2 * r, kBf16Nan);
    if (formats::is_page_split(f)) {
      std::fill(scale, scale + formats::kSplitScaleBytes, uint8_t{0xff});
    } else if (f == CacheFormat::v41_fp8) {
      std::fill(scale, scale + L.num_groups, uint8_t{0xff});  // one ue8m0 byte per group
    } else if (f == CacheFormat::v41_fp4) {
      std::fill(scale, scale + L.num_groups, uint8_t{0x7f});  // one e4m3 byte per group
    } else {
      for (int g = 0; g < L.num_groups; ++g) formats::store_u32_le(scale + 4 * g, 0x7fc00000u);
    }
  }
}

}  // namespace

int64_t DecodeWorkload::extra_topk() const {
  return opt.extra ? (opt.extra_topk > 0 ? opt.extra_topk : 64) : 0;
}

void DecodeWorkload::poison_outputs() {
  std::fill(out.begin(), out.end(), kBf16Nan);
  std::fill(lse.begin(), lse.end(), std::numeric_limits<float>::quiet_NaN());
}

int64_t DecodeWorkload::invalid_indices_to_minus_one() {
  int64_t changed = 0;
  auto tame = [&](std::vector<int32_t>& idx, int64_t slots) {
    for (int32_t& v : idx)
      if (v != -1 && (v < 0 || v >= slots)) {
        v = -1;
        ++changed;
      }
  };
  tame(indices, num_slots());
  tame(extra_indices, extra_num_slots());
  return changed;
}

DecodeWorkload make_decode_workload(const DecodeWorkloadOptions& opt) {
  LKV_CHECK(opt.format == CacheFormat::v32_fp8 || opt.format == CacheFormat::v4_fp8 ||
                opt.format == CacheFormat::v41_fp8,
            "decode workload: format must be v32_fp8, v4_fp8 or v41_fp8, got ", format_info(opt.format).name);
  LKV_CHECK(format_info(opt.extra_format.value_or(opt.format)).d_qk == format_info(opt.format).d_qk,
            "decode workload: the extra cache's format must have format's d_qk");
  LKV_CHECK(opt.b >= 1 && opt.s_q >= 1 && opt.h_q >= 1 && opt.topk >= 1 && opt.page_size >= 1 &&
                opt.extra_page_size >= 1 && opt.num_pages >= 0 && opt.page_pad_bytes >= 0,
            "decode workload: bad options b=", opt.b, " s_q=", opt.s_q, " h_q=", opt.h_q,
            " topk=", opt.topk, " page_size=", opt.page_size, " extra_page_size=", opt.extra_page_size,
            " num_pages=", opt.num_pages, " page_pad_bytes=", opt.page_pad_bytes);
  DecodeWorkload w;
  w.opt = opt;
  w.d_qk = format_info(opt.format).d_qk;
  const int64_t b = opt.b, s_q = opt.s_q, h_q = opt.h_q, topk = opt.topk;

  // ---- Caches: twice as many slots as the indices could name, so draws are mostly distinct.
  w.num_pages = opt.num_pages > 0 ? opt.num_pages : pages_for(b * topk * 2, opt.page_size);
  w.page_stride = stride_for(opt.format, opt.page_size, opt.page_pad_bytes);
  w.kv = make_cache(opt.format, w.num_pages, opt.page_size, w.page_stride, opt.seed + kStreamLatent);
  const int64_t extra_topk = w.extra_topk();
  if (opt.extra) {
    w.extra_num_pages = pages_for(b * extra_topk * 2, opt.extra_page_size);
    w.extra_page_stride = stride_for(w.extra_format(), opt.extra_page_size, opt.page_pad_bytes);
    w.extra_kv = make_cache(w.extra_format(), w.extra_num_pages, opt.extra_page_size,
                            w.extra_page_stride, opt.seed + kStreamExtraLatent);
  }

  // ---- q ~ randn, rounded to bf16.
  w.q.resize(static_cast<size_t>(b * s_q * h_q * w.d_qk));
  for (size_t k = 0; k < w.q.size(); ++k)
    w.q[k] = num::f32_to_bf16(normal_at(opt.seed + kStreamQ, k));

  // ---- Indices and lengths.
  w.indices = make_indices(opt, topk, w.num_slots(), kStreamIndex);
  if (opt.topk_length) w.topk_length = make_lengths(opt, topk, kStreamLength);
  if (opt.extra) {
    w.extra_indices = make_indices(opt, extra_topk, w.extra_num_slots(), kStreamExtraIndex);
    if (opt.extra_topk_length) w.extra_topk_length = make_lengths(opt, extra_topk, kStreamExtraLength);
  }

  // ---- Sinks: near the typical lse (ln(topk) for randn scores) so that they matter.
  if (opt.sink) {
    w.sink.resize(static_cast<size_t>(h_q));
    for (int64_t h = 0; h < h_q; ++h)
      w.sink[h] = opt.sink_special != 0.0f ? opt.sink_special
                                           : 4.0f + 2.0f * normal_at(opt.seed + kStreamSink, h);
  }

  // ---- NaN bytes in every record that nothing attends.
  if (opt.nan_unused) {
    poison_unreferenced(opt.format, w.kv, w.num_pages, opt.page_size, w.page_stride, w.indices, b,
                        s_q, topk, w.topk_length);
    if (opt.extra)
      poison_unreferenced(w.extra_format(), w.extra_kv, w.extra_num_pages, opt.extra_page_size,
                          w.extra_page_stride, w.extra_indices, b, s_q, extra_topk,
                          w.extra_topk_length);
  }

  w.out.resize(static_cast<size_t>(b * s_q * h_q * decode::kDimV));
  w.lse.resize(static_cast<size_t>(b * h_q * s_q));
  w.poison_outputs();
  return w;
}

SparseDecodeArgs DecodeWorkload::args() {
  const int64_t b = opt.b, s_q = opt.s_q, h_q = opt.h_q;
  const int64_t bpt = format_info(opt.format).bytes_per_token;
  SparseDecodeArgs a;
  a.q = TensorView(q.data(), DType::bf16, {b, s_q, h_q, d_qk});
  a.k_cache = TensorView(kv.data(), DType::u8, {num_pages, opt.page_size, 1, bpt},
                         {page_stride, bpt, bpt, 1});
  a.format = opt.format;
  a.indices = TensorView(indices.data(), DType::i32, {b, s_q, opt.topk});
  if (!topk_length.empty()) a.topk_length = TensorView(topk_length.data(), DType::i32, {b});
  if (!sink.empty()) a.attn_sink = TensorView(sink.data(), DType::f32, {h_q});
  if (opt.extra) {
    const int64_t extra_bpt = format_info(extra_format()).bytes_per_token;
    a.extra_k_cache = TensorView(extra_kv.data(), DType::u8,
                                 {extra_num_pages, opt.extra_page_size, 1, extra_bpt},
                                 {extra_page_stride, extra_bpt, extra_bpt, 1});
    a.extra_format = opt.extra_format;
    a.extra_indices = TensorView(extra_indices.data(), DType::i32, {b, s_q, extra_topk()});
    if (!extra_topk_length.empty())
      a.extra_topk_length = TensorView(extra_topk_length.data(), DType::i32, {b});
  }
  a.out = TensorView(out.data(), DType::bf16, {b, s_q, h_q, decode::kDimV});
  a.lse = TensorView(lse.data(), DType::f32, {b, h_q, s_q});
  return a;
}

namespace {

// +inf, -inf, NaN and finite values each form their own class.
int value_class(float x) {
  if (std::isnan(x)) return 0;
  if (std::isinf(x)) return x > 0 ? 1 : 2;
  return 3;
}

bool stat_mismatch(float a, float r) {
  return value_class(a) != value_class(r) ||
         (value_class(r) == 3 &&
          std::fabs(static_cast<double>(a) - r) > 1e-5 + 1e-5 * std::fabs(static_cast<double>(r)));
}

}  // namespace

AttentionDiff compare_attention_rows(int64_t rows, bool f16, const std::vector<uint16_t>& out,
                                     const std::vector<uint16_t>& ref_out,
                                     const std::vector<float>& lse,
                                     const std::vector<float>& ref_lse,
                                     const std::function<int64_t(int64_t)>& lse_at,
                                     const std::vector<float>* max_logits,
                                     const std::vector<float>* ref_max_logits) {
  constexpr int64_t kDimV = decode::kDimV;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  LKV_CHECK(static_cast<int64_t>(out.size()) == rows * kDimV && out.size() == ref_out.size() &&
                lse.size() == ref_lse.size() && static_cast<int64_t>(lse.size()) == rows,
            "compare: output sizes do not match the workload");
  const auto widen = [f16](uint16_t x) -> double { return f16 ? num::f16_to_f32(x) : num::bf16_to_f32(x); };
  AttentionDiff d;
  double max_ref = 0, dot = 0, norm_a = 0, norm_r = 0;
  for (int64_t row = 0; row < rows; ++row) {
    bool zero_a = true, zero_r = true;
    for (int64_t e = row * kDimV; e < (row + 1) * kDimV; ++e) {
      const double a = widen(out[e]), r = widen(ref_out[e]);
      if (std::isnan(a)) {
        ++d.nan_out;
        continue;
      }
      zero_a = zero_a && a == 0;
      zero_r = zero_r && r == 0;
      d.max_abs = std::max(d.max_abs, std::fabs(a - r));
      max_ref = std::max(max_ref, std::fabs(r));
      dot += a * r;
      norm_a += a * a;
      norm_r += r * r;
    }
    const int64_t l = lse_at(row);
    const float la = lse[l], lr = ref_lse[l];
    if (stat_mismatch(la, lr)) ++d.lse_mismatch;
    if (std::isfinite(lr) && std::isfinite(la))
      d.max_lse_err = std::max(d.max_lse_err, std::fabs(static_cast<double>(la) - lr));
    if (max_logits && stat_mismatch((*max_logits)[l], (*ref_max_logits)[l])) ++d.max_logits_mismatch;
    const bool lonely_a = zero_a && la == kInf;
    const bool lonely_r = zero_r && lr == kInf;
    if (lonely_a != lonely_r) ++d.mask_mismatch;
  }
  d.max_rel = max_ref > 0 ? d.max_abs / max_ref : d.max_abs;
  if (norm_a == 0 && norm_r == 0) d.cos_sim = 1;
  else if (norm_a == 0 || norm_r == 0) d.cos_sim = 0;
  else d.cos_sim = dot / std::sqrt(norm_a * norm_r);
  return d;
}


DecodeDiff compare_decode(const DecodeWorkload& w, const std::vector<uint16_t>& out,
                          const std::vector<float>& lse, const std::vector<uint16_t>& ref_out,
                          const std::vector<float>& ref_lse) {
  const int64_t b = w.opt.b, s_q = w.opt.s_q, h_q = w.opt.h_q;
  LKV_CHECK(static_cast<int64_t>(lse.size()) == b * h_q * s_q,
            "compare_decode: output sizes do not match the workload");
  // out row (i, j, h) of [b, s_q, h_q, 512]; its lse sits at (i, h, j) of [b, h_q, s_q].
  const auto lse_at = [s_q, h_q](int64_t row) {
    const int64_t h = row % h_q, j = (row / h_q) % s_q, i = row / (h_q * s_q);
    return (i * h_q + h) * s_q + j;
  };
  return compare_attention_rows(b * s_q * h_q, false, out, ref_out, lse, ref_lse, lse_at);
}

bool decode_close(const DecodeDiff& d, double max_rel_tol, double cos_tol) {
  return d.nan_out == 0 && d.lse_mismatch == 0 && d.mask_mismatch == 0 &&
         d.max_rel <= max_rel_tol && d.cos_sim >= cos_tol;
}

}  // namespace latentkv::testing
