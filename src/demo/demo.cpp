// The end-to-end KV pipeline of DeepSeek-V4 attention decoding (see demo.h).
#include "demo/demo.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "latentkv/compress.h"
#include "latentkv/decode.h"
#include "latentkv/error.h"
#include "latentkv/formats.h"
#include "latentkv/numerics.h"
#include "testing/compress_workload.h"
#ifdef LKV_WITH_CUDA
#include "cuda_common/bench.h"
#include "cuda_common/device_cache.h"
#endif

namespace latentkv::demo {
namespace {

constexpr int kDim = 512;
constexpr int kRecord = 584;  // v4_fp8 record bytes (576 data + 8 scale)

// Memory on the demo's device: plain host memory for the CPU, cudaMalloc for a GPU.
class Mem {
 public:
  explicit Mem(Device d) : dev_(d) {}
  ~Mem() {
    for (void* p : owned_) {
#ifdef LKV_WITH_CUDA
      if (dev_.is_cuda()) {
        bench_cuda::free(p);
        continue;
      }
#endif
      std::free(p);
    }
  }
  Mem(const Mem&) = delete;
  Mem& operator=(const Mem&) = delete;

  void* alloc(size_t bytes) {
    bytes = std::max<size_t>(bytes, 16);
    void* p = nullptr;
#ifdef LKV_WITH_CUDA
    if (dev_.is_cuda()) {
      p = bench_cuda::alloc(bytes);
      std::vector<uint8_t> zeros(bytes, 0);
      bench_cuda::to_device(p, zeros.data(), bytes);
      owned_.push_back(p);
      return p;
    }
#endif
    p = std::calloc(bytes, 1);
    LKV_CHECK(p != nullptr, "demo: out of host memory (", bytes, " bytes)");
    owned_.push_back(p);
    return p;
  }
  void put(void* dst, const void* src, size_t bytes) {
#ifdef LKV_WITH_CUDA
    if (dev_.is_cuda()) return bench_cuda::to_device(dst, src, bytes);
#endif
    std::memcpy(dst, src, bytes);
  }
  void get(void* dst, const void* src, size_t bytes) {
#ifdef LKV_WITH_CUDA
    if (dev_.is_cuda()) return bench_cuda::to_host(dst, src, bytes);
#endif
    std::memcpy(dst, src, bytes);
  }
  void sync() {
#ifdef LKV_WITH_CUDA
    if (dev_.is_cuda()) bench_cuda::synchronize();
#endif
  }
  template <typename T>
  T* upload(const std::vector<T>& v) {
    T* p = static_cast<T*>(alloc(v.size() * sizeof(T)));
    put(p, v.data(), v.size() * sizeof(T));
    return p;
  }

 private:
  Device dev_;
  std::vector<void*> owned_;
};

// The ground truth: every value is a function of (seed, request, position), so nothing needs to be
// stored and the checks can rebuild any cache from scratch.
struct Truth {
  uint64_t seed;
  float state(int64_t r, int64_t pos, int d) const {  // d < 512: value, else score
    return testing::normal_at(seed + (d < kDim ? 11 : 12), (static_cast<uint64_t>(r) << 40) + pos * 512 + (d % kDim));
  }
  float latent(int64_t r, int64_t pos, int d) const {
    return testing::normal_at(seed + 13, (static_cast<uint64_t>(r) << 40) + pos * 512 + d);
  }
  float prefill_entry(int64_t r, int64_t k, int d) const {  // compressed entries of the prefill
    return testing::normal_at(seed + 14, (static_cast<uint64_t>(r) << 40) + k * 512 + d);
  }
  uint16_t q(int64_t step, int64_t r, int64_t h, int d, int64_t heads) const {
    return num::f32_to_bf16(testing::normal_at(seed + 15, ((step * 4096 + r) * heads + h) * 512 + d));
  }
};

TensorView view(void* p, DType t, std::vector<int64_t> shape, Device d) { return TensorView(p, t, shape, d); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

DemoReport run_demo(const DemoConfig& c, std::FILE* progress) {
  LKV_CHECK(c.requests >= 1 && c.steps >= 1 && c.heads >= 1 && c.window >= 1 && c.ratio >= 1 &&
                c.block_size >= 1 && c.page_size >= 1 && c.prefill >= 0 && c.check_every >= 1,
            "demo: requests, steps, heads, window, ratio, block_size, page_size and check_every must be >= 1 "
            "and prefill >= 0, got ", c.requests, ", ", c.steps, ", ", c.heads, ", ", c.window, ", ", c.ratio, ", ",
            c.block_size, ", ", c.page_size, ", ", c.check_every, " and ", c.prefill);
  LKV_CHECK(c.fault.empty() || c.fault == "wrong-slot", "demo: unknown fault '", c.fault,
            "' (known: wrong-slot)");
  const Device dev = c.device;
  const int64_t b = c.requests, C = c.ratio, bs = c.block_size, P = c.page_size;
  const int64_t max_pos = c.prefill + c.steps;
  const Truth truth{c.seed};
  Mem mem(dev);
  DemoReport rep;

  // ---- Geometry.
  // State cache: a ring of blocks per request, enough for one compression window plus the block
  // being written; the block table maps every logical block onto the ring (repeated blocks).
  const int64_t ring_blocks = (C + bs - 1) / bs + 1;
  const int64_t logical_blocks = (max_pos + bs - 1) / bs;
  const int64_t num_phys = b * ring_blocks;
  std::vector<int32_t> perm(static_cast<size_t>(num_phys));
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t k = num_phys - 1; k > 0; --k)
    std::swap(perm[k], perm[testing::bits_at(c.seed + 21, k) % (k + 1)]);
  std::vector<int32_t> table(static_cast<size_t>(b * logical_blocks));
  for (int64_t r = 0; r < b; ++r)
    for (int64_t lb = 0; lb < logical_blocks; ++lb)
      table[r * logical_blocks + lb] = perm[r * ring_blocks + lb % ring_blocks];
  auto state_row = [&](int64_t r, int64_t pos) {
    return static_cast<int64_t>(table[r * logical_blocks + pos / bs]) * bs + pos % bs;
  };
  // Window cache (main): `window` ring slots per request, rounded up to whole pages.
  const int64_t wslots = (c.window + P - 1) / P * P;
  // Compressed cache (extra): every entry the run will produce, per request, in whole pages.
  const int64_t maxc = std::max<int64_t>(1, max_pos / C);
  const int64_t cslots = (maxc + P - 1) / P * P;

  float* d_state = static_cast<float*>(mem.alloc(sizeof(float) * num_phys * bs * 1024));
  int32_t* d_table = mem.upload(table);
  uint8_t* d_window = static_cast<uint8_t*>(mem.alloc(static_cast<size_t>(b * wslots / P * P * kRecord)));
  uint8_t* d_comp = static_cast<uint8_t*>(mem.alloc(static_cast<size_t>(b * cslots / P * P * kRecord)));
  std::vector<uint16_t> weight(kDim);
  for (int d = 0; d < kDim; ++d) weight[d] = num::f32_to_bf16(1.0f + 0.1f * testing::normal_at(c.seed + 16, d));
  std::vector<float> cos_sin(static_cast<size_t>(max_pos * 64));
  for (int64_t pos = 0; pos < max_pos; ++pos)
    for (int j = 0; j < 32; ++j) {
      const double a = pos * std::pow(10000.0, -2.0 * j / 64.0);
      cos_sin[pos * 64 + j] = static_cast<float>(std::cos(a));
      cos_sin[pos * 64 + 32 + j] = static_cast<float>(std::sin(a));
    }
  uint16_t* d_weight = mem.upload(weight);
  float* d_cos = mem.upload(cos_sin);
  std::vector<float> sink(static_cast<size_t>(c.heads));
  for (int64_t h = 0; h < c.heads; ++h) sink[h] = testing::normal_at(c.seed + 17, h);
  float* d_sink = mem.upload(sink);
  std::vector<int32_t> win_idx(static_cast<size_t>(b * c.window)), comp_idx(static_cast<size_t>(b * maxc));
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t k = 0; k < c.window; ++k) win_idx[r * c.window + k] = static_cast<int32_t>(r * wslots + k);
    for (int64_t k = 0; k < maxc; ++k) comp_idx[r * maxc + k] = static_cast<int32_t>(r * cslots + k);
  }
  int32_t* d_win_idx = mem.upload(win_idx);
  int32_t* d_comp_idx = mem.upload(comp_idx);
  int32_t* d_win_len = static_cast<int32_t*>(mem.alloc(sizeof(int32_t) * b));
  int32_t* d_comp_len = static_cast<int32_t*>(mem.alloc(sizeof(int32_t) * b));
  uint16_t* d_q = static_cast<uint16_t*>(mem.alloc(sizeof(uint16_t) * b * c.heads * kDim));
  uint16_t* d_out = static_cast<uint16_t*>(mem.alloc(sizeof(uint16_t) * b * c.heads * kDim));
  float* d_lse = static_cast<float*>(mem.alloc(sizeof(float) * b * c.heads));
  float* d_latents = static_cast<float*>(mem.alloc(sizeof(float) * b * kDim));
  int64_t* d_slots = static_cast<int64_t*>(mem.alloc(sizeof(int64_t) * b));
  int32_t* d_tok_req = static_cast<int32_t*>(mem.alloc(sizeof(int32_t) * b));
  int64_t* d_tok_pos = static_cast<int64_t*>(mem.alloc(sizeof(int64_t) * b));
  int64_t* d_boundary = static_cast<int64_t*>(mem.alloc(sizeof(int64_t) * b));
  int64_t* d_kv_slots = static_cast<int64_t*>(mem.alloc(sizeof(int64_t) * b));
  {
    std::vector<int32_t> req(static_cast<size_t>(b));
    std::vector<int64_t> bnd(static_cast<size_t>(b));
    std::iota(req.begin(), req.end(), 0);
    std::iota(bnd.begin(), bnd.end(), 0);
    mem.put(d_tok_req, req.data(), sizeof(int32_t) * b);
    mem.put(d_boundary, bnd.data(), sizeof(int64_t) * b);
  }

  const TensorView window_cache = view(d_window, DType::u8, {b * wslots / P, P, 1, kRecord}, dev);
  const TensorView comp_cache = view(d_comp, DType::u8, {b * cslots / P, P, 1, kRecord}, dev);

  // The latents of position pos (every request) are model output: made on the host, untimed.
  std::vector<float> lat(static_cast<size_t>(b * kDim));
  auto make_latents = [&](int64_t pos) {
    for (int64_t r = 0; r < b; ++r)
      for (int d = 0; d < kDim; ++d) lat[r * kDim + d] = truth.latent(r, pos, d);
  };
  // Writes the latents made by make_latents(pos) into their window slots.
  auto put_window = [&](int64_t pos) {
    std::vector<int64_t> slots(static_cast<size_t>(b));
    for (int64_t r = 0; r < b; ++r) slots[r] = r * wslots + pos % c.window;
    mem.put(d_latents, lat.data(), lat.size() * sizeof(float));
    mem.put(d_slots, slots.data(), slots.size() * sizeof(int64_t));
    quantize(CacheFormat::v4_fp8, view(d_latents, DType::f32, {b, kDim}, dev),
             view(d_slots, DType::i64, {b}, dev), window_cache);
  };
  // The states of position pos (generated by the "model", untimed), then their writes.
  std::vector<float> rows(static_cast<size_t>(b * 1024));
  auto make_states = [&](int64_t pos) {
    for (int64_t r = 0; r < b; ++r)
      for (int d = 0; d < 1024; ++d) rows[r * 1024 + d] = truth.state(r, pos, d);
  };
  auto put_states = [&](int64_t pos) {
    for (int64_t r = 0; r < b; ++r)
      mem.put(d_state + state_row(r, pos) * 1024, rows.data() + r * 1024, sizeof(float) * 1024);
  };
  auto write_state = [&](int64_t pos) {
    make_states(pos);
    put_states(pos);
  };

  // ---- Prefill: the context before the first decode step (not timed): compressed entries of
  // positions [0, prefill) straight from their latents, the window, and the state ring.
  if (c.prefill > 0) {
    for (int64_t k = 0; k < c.prefill / C; ++k) {
      std::vector<float> lat(static_cast<size_t>(b * kDim));
      std::vector<int64_t> slots(static_cast<size_t>(b));
      for (int64_t r = 0; r < b; ++r) {
        for (int d = 0; d < kDim; ++d) lat[r * kDim + d] = truth.prefill_entry(r, k, d);
        slots[r] = r * cslots + k;
      }
      mem.put(d_latents, lat.data(), lat.size() * sizeof(float));
      mem.put(d_slots, slots.data(), slots.size() * sizeof(int64_t));
      quantize(CacheFormat::v4_fp8, view(d_latents, DType::f32, {b, kDim}, dev),
               view(d_slots, DType::i64, {b}, dev), comp_cache);
    }
    for (int64_t pos = std::max<int64_t>(0, c.prefill - c.window); pos < c.prefill; ++pos) {
      make_latents(pos);
      put_window(pos);
    }
    for (int64_t pos = std::max<int64_t>(0, c.prefill - C); pos < c.prefill; ++pos) write_state(pos);
  }
  rep.compressed_entries = b * (c.prefill / C);

  // ---- One plan for the whole run: shapes do not change, only lengths do.
  int num_sms = 1;
#ifdef LKV_WITH_CUDA
  if (dev.is_cuda()) num_sms = cuda_common::sm_count(dev.index);
#endif
  const DecodePlan plan = plan_decode(b, 1, c.heads, c.window, maxc, num_sms);
  SparseDecodeArgs att;
  att.q = view(d_q, DType::bf16, {b, 1, c.heads, kDim}, dev);
  att.k_cache = window_cache;
  att.format = CacheFormat::v4_fp8;
  att.indices = view(d_win_idx, DType::i32, {b, 1, c.window}, dev);
  att.topk_length = view(d_win_len, DType::i32, {b}, dev);
  att.attn_sink = view(d_sink, DType::f32, {c.heads}, dev);
  att.extra_k_cache = comp_cache;
  att.extra_indices = view(d_comp_idx, DType::i32, {b, 1, maxc}, dev);
  att.extra_topk_length = view(d_comp_len, DType::i32, {b}, dev);
  att.out = view(d_out, DType::bf16, {b, 1, c.heads, kDim}, dev);
  att.lse = view(d_lse, DType::f32, {b, c.heads, 1}, dev);
  att.plan = &plan;

  CompressArgs comp;
  comp.state_cache = view(d_state, DType::f32, {num_phys, bs, 1024}, dev);
  comp.token_to_req = view(d_tok_req, DType::i32, {b}, dev);
  comp.positions = view(d_tok_pos, DType::i64, {b}, dev);
  comp.boundary_token_indices = view(d_boundary, DType::i64, {b}, dev);
  comp.block_table = view(d_table, DType::i32, {b, logical_blocks}, dev);
  comp.rms_norm_weight = view(d_weight, DType::bf16, {kDim}, dev);
  comp.cos_sin_cache = view(d_cos, DType::f32, {max_pos, 64}, dev);
  comp.kv_slot_mapping = view(d_kv_slots, DType::i64, {b}, dev);
  comp.kv_cache = comp_cache;
  comp.block_size = bs;
  comp.compress_ratio = C;
  comp.page_size = P;
  comp.format = CacheFormat::v4_fp8;

  // ---- The check: rebuild the caches from the ground truth with the oracles, attend, compare.
  auto check = [&](int64_t step, int64_t pos, const std::vector<uint16_t>& q) {
    const int64_t n = std::min(pos + 1, c.window), m = (pos + 1) / C, pe = c.prefill / C;
    // Reference window: the last n latents of each request, in order, at slots r * window + k.
    const int64_t rw_pages = (b * c.window + P - 1) / P, rc_pages = (b * maxc + P - 1) / P;
    std::vector<uint8_t> ref_win(static_cast<size_t>(rw_pages * P * kRecord)), ref_comp(static_cast<size_t>(rc_pages * P * kRecord));
    std::vector<float> lat(static_cast<size_t>(b * n * kDim));
    std::vector<int64_t> slots(static_cast<size_t>(b * n));
    for (int64_t r = 0; r < b; ++r)
      for (int64_t k = 0; k < n; ++k) {
        for (int d = 0; d < kDim; ++d) lat[(r * n + k) * kDim + d] = truth.latent(r, pos - n + 1 + k, d);
        slots[r * n + k] = r * c.window + k;
      }
    quantize(CacheFormat::v4_fp8, TensorView(lat.data(), DType::f32, {b * n, kDim}),
             TensorView(slots.data(), DType::i64, {b * n}),
             TensorView(ref_win.data(), DType::u8, {rw_pages, P, 1, kRecord}));
    // Reference compressed entries: prefill ones from their latents, the others by the float64
    // compressor oracle over the ground-truth states (one state block of C rows per entry).
    std::vector<float> plat;
    std::vector<int64_t> pslots;
    for (int64_t r = 0; r < b; ++r)
      for (int64_t k = 0; k < std::min(m, pe); ++k) {
        for (int d = 0; d < kDim; ++d) plat.push_back(truth.prefill_entry(r, k, d));
        pslots.push_back(r * maxc + k);
      }
    if (!pslots.empty())
      quantize(CacheFormat::v4_fp8, TensorView(plat.data(), DType::f32, {static_cast<int64_t>(pslots.size()), kDim}),
               TensorView(pslots.data(), DType::i64, {static_cast<int64_t>(pslots.size())}),
               TensorView(ref_comp.data(), DType::u8, {rc_pages, P, 1, kRecord}));
    const int64_t md = m - std::min(m, pe);  // entries made during decoding
    if (md > 0) {
      std::vector<float> st(static_cast<size_t>(b * md * C * 1024));
      std::vector<int32_t> tab(static_cast<size_t>(b * maxc), 0), treq;
      std::vector<int64_t> tpos, tbnd, tslot;
      for (int64_t r = 0; r < b; ++r)
        for (int64_t e = 0; e < md; ++e) {
          const int64_t k = pe + e, blk = r * md + e;
          tab[r * maxc + k] = static_cast<int32_t>(blk);
          for (int64_t i = 0; i < C; ++i)
            for (int d = 0; d < 1024; ++d) st[(blk * C + i) * 1024 + d] = truth.state(r, k * C + i, d);
          treq.push_back(static_cast<int32_t>(r));
          tpos.push_back(k * C + C - 1);
          tbnd.push_back(static_cast<int64_t>(tbnd.size()));
          tslot.push_back(r * maxc + k);
        }
      const int64_t nt = static_cast<int64_t>(treq.size());
      CompressArgs ra;
      ra.state_cache = TensorView(st.data(), DType::f32, {b * md, C, 1024});
      ra.token_to_req = TensorView(treq.data(), DType::i32, {nt});
      ra.positions = TensorView(tpos.data(), DType::i64, {nt});
      ra.boundary_token_indices = TensorView(tbnd.data(), DType::i64, {nt});
      ra.block_table = TensorView(tab.data(), DType::i32, {b, maxc});
      ra.rms_norm_weight = TensorView(weight.data(), DType::bf16, {kDim});
      ra.cos_sin_cache = TensorView(cos_sin.data(), DType::f32, {max_pos, 64});
      ra.kv_slot_mapping = TensorView(tslot.data(), DType::i64, {nt});
      ra.kv_cache = TensorView(ref_comp.data(), DType::u8, {rc_pages, P, 1, kRecord});
      ra.block_size = C;
      ra.compress_ratio = C;
      ra.page_size = P;
      ra.format = CacheFormat::v4_fp8;
      compress_kv(ra, nullptr, CompressImpl::kCpuOracle);
    }
    // Reference attention by the float64 decode oracle over the reference caches.
    std::vector<int32_t> ridx(static_cast<size_t>(b * c.window)), rcidx(static_cast<size_t>(b * maxc));
    std::vector<int32_t> rlen(static_cast<size_t>(b), static_cast<int32_t>(n)), rclen(static_cast<size_t>(b), static_cast<int32_t>(m));
    for (int64_t r = 0; r < b; ++r) {
      for (int64_t k = 0; k < c.window; ++k) ridx[r * c.window + k] = static_cast<int32_t>(r * c.window + k);
      for (int64_t k = 0; k < maxc; ++k) rcidx[r * maxc + k] = static_cast<int32_t>(r * maxc + k);
    }
    std::vector<uint16_t> ref_out(static_cast<size_t>(b * c.heads * kDim));
    std::vector<float> ref_lse(static_cast<size_t>(b * c.heads));
    SparseDecodeArgs ref;
    ref.q = TensorView(const_cast<uint16_t*>(q.data()), DType::bf16, {b, 1, c.heads, kDim});
    ref.k_cache = TensorView(ref_win.data(), DType::u8, {rw_pages, P, 1, kRecord});
    ref.format = CacheFormat::v4_fp8;
    ref.indices = TensorView(ridx.data(), DType::i32, {b, 1, c.window});
    ref.topk_length = TensorView(rlen.data(), DType::i32, {b});
    ref.attn_sink = TensorView(sink.data(), DType::f32, {c.heads});
    ref.extra_k_cache = TensorView(ref_comp.data(), DType::u8, {rc_pages, P, 1, kRecord});
    ref.extra_indices = TensorView(rcidx.data(), DType::i32, {b, 1, maxc});
    ref.extra_topk_length = TensorView(rclen.data(), DType::i32, {b});
    ref.out = TensorView(ref_out.data(), DType::bf16, {b, 1, c.heads, kDim});
    ref.lse = TensorView(ref_lse.data(), DType::f32, {b, c.heads, 1});
    sparse_decode(ref, nullptr, DecodeImpl::kCpuOracle);

    std::vector<uint16_t> out(ref_out.size());
    std::vector<float> lse(ref_lse.size());
    mem.get(out.data(), d_out, out.size() * sizeof(uint16_t));
    mem.get(lse.data(), d_lse, lse.size() * sizeof(float));
    double max_abs = 0, max_ref = 0, dot = 0, na = 0, nb = 0, lse_err = 0;
    bool nan = false;
    for (size_t k = 0; k < out.size(); ++k) {
      const double x = num::bf16_to_f32(out[k]), y = num::bf16_to_f32(ref_out[k]);
      nan |= std::isnan(x);
      max_abs = std::max(max_abs, std::fabs(x - y));
      max_ref = std::max(max_ref, std::fabs(y));
      dot += x * y;
      na += x * x;
      nb += y * y;
    }
    bool lse_ok = true;
    for (size_t k = 0; k < lse.size(); ++k) {
      if (std::isinf(ref_lse[k]) || !std::isfinite(lse[k])) {
        lse_ok &= lse[k] == ref_lse[k];
        continue;
      }
      const double e = std::fabs(static_cast<double>(lse[k]) - ref_lse[k]);
      lse_err = std::max(lse_err, e);
      lse_ok &= e <= 1e-4 + 1e-5 * std::fabs(ref_lse[k]);
    }
    const double max_rel = max_ref > 0 ? max_abs / max_ref : max_abs;
    const double cos = (na > 0 && nb > 0) ? dot / std::sqrt(na * nb) : (na == nb ? 1.0 : 0.0);
    ++rep.checks;
    rep.worst_max_rel = std::max(rep.worst_max_rel, max_rel);
    rep.worst_cos = std::min(rep.worst_cos, cos);
    rep.worst_lse_err = std::max(rep.worst_lse_err, lse_err);
    if (nan || !lse_ok || max_rel > 1e-2 || cos < 0.9999) {
      if (rep.checks_failed++ == 0) {
        char buf[256];
        std::snprintf(buf, sizeof(buf),
                      "step %lld (position %lld): max_rel %.3g, cos %.7f, lse %s, NaN %s",
                      static_cast<long long>(step), static_cast<long long>(pos), max_rel, cos,
                      lse_ok ? "ok" : "mismatch", nan ? "yes" : "no");
        rep.first_failure = buf;
      }
    }
  };

  // ---- Decode.
  const auto t_start = std::chrono::steady_clock::now();
  std::vector<uint16_t> q(static_cast<size_t>(b * c.heads * kDim));
  for (int64_t step = 0; step < c.steps; ++step) {
    const int64_t pos = c.prefill + step;
    make_states(pos);
    auto t0 = std::chrono::steady_clock::now();
    put_states(pos);
    mem.sync();
    rep.state_s += seconds_since(t0);

    make_latents(pos);
    t0 = std::chrono::steady_clock::now();
    put_window(pos);
    mem.sync();
    rep.window_s += seconds_since(t0);

    if ((pos + 1) % C == 0) {
      t0 = std::chrono::steady_clock::now();
      std::vector<int64_t> tpos(static_cast<size_t>(b), pos), tslot(static_cast<size_t>(b));
      const int64_t k = (pos + 1) / C - 1;
      for (int64_t r = 0; r < b; ++r)
        tslot[r] = r * cslots + (c.fault == "wrong-slot" ? (k + 1) % cslots : k);
      mem.put(d_tok_pos, tpos.data(), sizeof(int64_t) * b);
      mem.put(d_kv_slots, tslot.data(), sizeof(int64_t) * b);
      compress_kv(comp);
      mem.sync();
      rep.compress_s += seconds_since(t0);
      rep.compressed_entries += b;
    }

    // The query is model output (on the GPU it would already be in device memory), not pipeline
    // work: made and uploaded before the attention timer starts.
    for (int64_t r = 0; r < b; ++r)
      for (int64_t h = 0; h < c.heads; ++h)
        for (int d = 0; d < kDim; ++d) q[(r * c.heads + h) * kDim + d] = truth.q(step, r, h, d, c.heads);
    mem.put(d_q, q.data(), q.size() * sizeof(uint16_t));
    mem.sync();
    t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> wl(static_cast<size_t>(b), static_cast<int32_t>(std::min(pos + 1, c.window)));
    std::vector<int32_t> cl(static_cast<size_t>(b), static_cast<int32_t>((pos + 1) / C));
    mem.put(d_win_len, wl.data(), sizeof(int32_t) * b);
    mem.put(d_comp_len, cl.data(), sizeof(int32_t) * b);
    sparse_decode(att);
    mem.sync();
    rep.attention_s += seconds_since(t0);

    if (step % c.check_every == c.check_every - 1 || step == c.steps - 1) check(step, pos, q);
    if (progress && (step % 16 == 15 || step == c.steps - 1)) {
      const int width = 40, done = static_cast<int>(width * (step + 1) / c.steps);
      std::fprintf(progress, "\r  [%.*s%*s] %lld/%lld steps, %lld checks, %lld failed", done,
                   "########################################", width - done, "",
                   static_cast<long long>(step + 1), static_cast<long long>(c.steps),
                   static_cast<long long>(rep.checks), static_cast<long long>(rep.checks_failed));
      std::fflush(progress);
    }
  }
  if (progress) std::fprintf(progress, "\n");
  rep.seconds = seconds_since(t_start);
  rep.tokens = b * c.steps;
  const double stage_total = rep.state_s + rep.window_s + rep.compress_s + rep.attention_s;
  rep.tokens_per_s = stage_total > 0 ? static_cast<double>(rep.tokens) / stage_total : 0;
  const double context = static_cast<double>(max_pos);
  rep.bytes_per_token = (std::min<double>(context, c.window) * kRecord + std::floor(context / C) * kRecord) / context;
  rep.bf16_bytes_per_token = kDim * 2.0;
  return rep;
}

}  // namespace latentkv::demo
