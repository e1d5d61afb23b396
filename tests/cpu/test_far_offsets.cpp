// Every op on the CPU with its cache (or kv rows, or state) beyond 4 GiB: each case runs once as
// made and once with its data copied past kFarOffsetBytes into a view that many pages (rows, blocks)
// longer, with its indices, block tables and slots shifted to match; the oracle and the fast path
// must each give the same bytes both times. The long views come from LazyHostBuffer, so only the
// pages that are written or read cost memory; everything else reads as zero, so a byte offset
// computed in 32 bits would read zeros (or write 4 GiB too low, which the writing ops check).
// The last test does the same for the attention ops' q and outputs, whose rows lie 4.5 GiB apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "formats_reference.h"
#include "latentkv/compress.h"
#include "latentkv/decode.h"
#include "latentkv/dense.h"
#include "latentkv/formats.h"
#include "latentkv/prefill.h"
#include "testing/attention_workload.h"
#include "testing/compress_workload.h"
#include "testing/decode_workload.h"
#include "test_util.h"

using namespace latentkv;
using latentkv::testing::far_rows;
using latentkv::testing::kFarOffsetBytes;
using latentkv::testing::LazyHostBuffer;
using latentkv::testing::shift_valid;

namespace {

// How far below the far data an offset computed in 32 bits would land.
constexpr size_t kWrap = size_t{1} << 32;

// `bytes` of host data copied into `buf` after `skip` rows of `row_bytes`, and `view` (rows along
// its first dimension) made to cover the buffer up to the data's last row.
void place_far(LazyHostBuffer& buf, const void* data, size_t bytes, int64_t row_bytes, int64_t skip,
               TensorView& view) {
  const size_t at = static_cast<size_t>(skip) * static_cast<size_t>(row_bytes);
  ASSERT_NE(buf.get(), nullptr) << "no host memory for a view past 4 GiB";
  ASSERT_LE(at + bytes, buf.size());
  std::memcpy(buf.get() + at, data, bytes);
  view.data = buf.get();
  view.shape[0] += skip;
}

size_t far_buffer_bytes(size_t data_bytes, int64_t row_bytes) {
  return static_cast<size_t>(far_rows(row_bytes)) * static_cast<size_t>(row_bytes) + data_bytes;
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(FarOffsetsCpu, SparseDecodeRecordsPast4GiB) {
  using latentkv::testing::DecodeWorkload;
  using latentkv::testing::DecodeWorkloadOptions;
  const std::pair<CacheFormat, std::optional<CacheFormat>> formats[] = {
      {CacheFormat::v32_fp8, std::nullopt},
      {CacheFormat::v4_fp8, std::nullopt},
      {CacheFormat::v41_fp8, CacheFormat::v41_fp4}};
  uint64_t seed = 500;
  for (const auto& [f, ef] : formats)
    for (DecodeImpl impl : {DecodeImpl::kCpuOracle, DecodeImpl::kCpuFast}) {
      DecodeWorkloadOptions o;
      o.format = f;
      o.extra_format = ef;
      o.b = 2;
      o.s_q = 2;
      o.h_q = 16;
      o.topk = 100;
      o.page_size = 61;
      o.topk_length = true;
      o.sink = true;
      o.extra = f != CacheFormat::v32_fp8;
      o.extra_topk = 40;
      o.extra_page_size = 2;
      o.seed = seed++;
      const std::string label = std::string(format_info(f).name) + (ef ? "+fp4" : "") +
                                (impl == DecodeImpl::kCpuOracle ? " oracle" : " fast");
      DecodeWorkload w = latentkv::testing::make_decode_workload(o);
      w.poison_outputs();
      sparse_decode(w.args(), nullptr, impl);
      const std::vector<uint16_t> out = w.out;
      const std::vector<float> lse = w.lse;

      DecodeWorkload far = w;
      const int64_t skip = far_rows(w.page_stride);
      shift_valid(far.indices, w.num_slots(), skip * o.page_size);
      const int64_t extra_skip = o.extra ? far_rows(w.extra_page_stride) : 0;
      if (o.extra) shift_valid(far.extra_indices, w.extra_num_slots(), extra_skip * o.extra_page_size);
      ASSERT_LE(skip * o.page_size + w.num_slots(), INT32_MAX);
      LazyHostBuffer main_buf(far_buffer_bytes(w.kv.size(), w.page_stride));
      LazyHostBuffer extra_buf(o.extra ? far_buffer_bytes(w.extra_kv.size(), w.extra_page_stride) : 1);
      far.poison_outputs();
      SparseDecodeArgs a = far.args();
      place_far(main_buf, w.kv.data(), w.kv.size(), w.page_stride, skip, a.k_cache);
      if (o.extra) place_far(extra_buf, w.extra_kv.data(), w.extra_kv.size(), w.extra_page_stride, extra_skip, a.extra_k_cache);
      ASSERT_FALSE(HasFatalFailure()) << label;
      sparse_decode(a, nullptr, impl);
      EXPECT_EQ(far.out, out) << label;
      EXPECT_TRUE(same_floats(far.lse, lse)) << label;
    }
}

TEST(FarOffsetsCpu, SparsePrefillRowsPast4GiB) {
  using latentkv::testing::PrefillWorkload;
  using latentkv::testing::PrefillWorkloadOptions;
  for (int64_t d_qk : {576, 512})
    for (PrefillImpl impl : {PrefillImpl::kCpuOracle, PrefillImpl::kCpuFast}) {
      PrefillWorkloadOptions o;
      o.s_q = 4;
      o.s_kv = 300;
      o.h_q = 16;
      o.d_qk = d_qk;
      o.topk = 80;
      o.topk_length = true;
      o.sink = true;
      o.seed = 600 + d_qk;
      const std::string label = "d_qk " + std::to_string(d_qk) + (impl == PrefillImpl::kCpuOracle ? " oracle" : " fast");
      PrefillWorkload w = latentkv::testing::make_prefill_workload(o);
      w.run(impl);
      const PrefillWorkload near = w;

      const int64_t row_bytes = d_qk * 2, skip = far_rows(row_bytes);
      ASSERT_LE(skip + w.s_kv, INT32_MAX);
      PrefillWorkload far = w;
      shift_valid(far.indices, w.s_kv, skip);
      LazyHostBuffer buf(far_buffer_bytes(w.kv.size() * 2, row_bytes));
      far.poison_outputs();
      SparsePrefillArgs a = far.args();
      place_far(buf, w.kv.data(), w.kv.size() * 2, row_bytes, skip, a.kv);
      ASSERT_FALSE(HasFatalFailure()) << label;
      sparse_prefill(a, nullptr, impl);
      EXPECT_EQ(far.out, near.out) << label;
      EXPECT_TRUE(same_floats(far.lse, near.lse)) << label;
      EXPECT_TRUE(same_floats(far.max_logits, near.max_logits)) << label;
    }
}

TEST(FarOffsetsCpu, DenseDecodePagesPast4GiB) {
  using latentkv::testing::DenseWorkload;
  using latentkv::testing::DenseWorkloadOptions;
  for (bool fp8 : {false, true})
    for (DenseImpl impl : {DenseImpl::kCpuOracle, DenseImpl::kCpuFast}) {
      DenseWorkloadOptions o;
      o.b = 2;
      o.s_q = 2;
      o.h_q = 16;
      o.page_size = 53;
      o.max_len = 300;
      o.fp8 = fp8;
      o.causal = true;
      o.garbage_block_table = true;
      o.seed = 700 + fp8;
      const std::string label = std::string(fp8 ? "v32_fp8" : "bf16") + (impl == DenseImpl::kCpuOracle ? " oracle" : " fast");
      DenseWorkload w = latentkv::testing::make_dense_workload(o);
      w.run(impl);
      const DenseWorkload near = w;

      const int64_t page_bytes = fp8 ? w.page_stride_fp8 : o.page_size * o.h_kv * o.d_qk * 2;
      const int64_t skip = far_rows(page_bytes);
      const size_t bytes = fp8 ? w.k_cache_fp8.size() : w.k_cache.size() * 2;
      DenseWorkload far = w;
      shift_valid(far.block_table, w.num_pages, skip);
      LazyHostBuffer buf(far_buffer_bytes(bytes, page_bytes));
      far.poison_outputs();
      DenseDecodeArgs a = far.args();
      place_far(buf, fp8 ? static_cast<const void*>(w.k_cache_fp8.data()) : w.k_cache.data(), bytes, page_bytes, skip,
                a.k_cache);
      ASSERT_FALSE(HasFatalFailure()) << label;
      dense_decode(a, nullptr, impl);
      EXPECT_EQ(far.out, near.out) << label;
      EXPECT_TRUE(same_floats(far.lse, near.lse)) << label;
    }
}

// The writing ops also check the bytes 4 GiB below the far data, where an offset computed in 32
// bits would write: they must still read as zero.
TEST(FarOffsetsCpu, CompressStateAndCachePast4GiB) {
  using latentkv::testing::CompressWorkload;
  using latentkv::testing::WorkloadOptions;
  for (CacheFormat f : {CacheFormat::v4_int8, CacheFormat::v4_fp8})
    for (CompressImpl impl : {CompressImpl::kCpuOracle, CompressImpl::kCpuFast}) {
      WorkloadOptions o;
      o.num_reqs = 2;
      o.tokens_per_req = 520;
      o.compress_ratio = 128;
      o.block_size = 16;
      o.shuffle_blocks = true;
      o.random_slots = true;
      o.random_initial_cache = true;
      o.format = f;
      o.seed = 800 + static_cast<int>(f);
      const std::string label = std::string(format_info(f).name) + (impl == CompressImpl::kCpuOracle ? " oracle" : " fast");
      CompressWorkload w = latentkv::testing::make_workload(o);
      const std::vector<uint8_t> initial = w.kv;
      compress_kv(w.args(), nullptr, impl);
      const std::vector<uint8_t> near = w.kv;
      ASSERT_NE(near, initial) << label << ": the case writes records";

      const int64_t block_bytes = o.block_size * 4096, skip_blocks = far_rows(block_bytes);
      const int64_t skip_pages = far_rows(w.page_stride);
      CompressWorkload far = w;
      far.kv = initial;
      shift_valid(far.block_table, w.num_blocks, skip_blocks);
      for (int64_t& s : far.slot_mapping)
        if (s >= 0) s += skip_pages * o.page_size;
      LazyHostBuffer state_buf(far_buffer_bytes(w.state.size() * 4, block_bytes));
      LazyHostBuffer kv_buf(far_buffer_bytes(initial.size(), w.page_stride));
      CompressArgs a = far.args();
      place_far(state_buf, w.state.data(), w.state.size() * 4, block_bytes, skip_blocks, a.state_cache);
      place_far(kv_buf, initial.data(), initial.size(), w.page_stride, skip_pages, a.kv_cache);
      ASSERT_FALSE(HasFatalFailure()) << label;
      compress_kv(a, nullptr, impl);
      const unsigned char* got = kv_buf.get() + static_cast<size_t>(skip_pages) * static_cast<size_t>(w.page_stride);
      EXPECT_EQ(std::memcmp(got, near.data(), near.size()), 0) << label;
      EXPECT_TRUE(std::all_of(got - kWrap, got - kWrap + near.size(), [](unsigned char v) { return v == 0; }))
          << label << ": bytes where a 32-bit offset would wrap to changed";
    }
}

TEST(FarOffsetsCpu, QuantizeAndDequantizePast4GiB) {
  uint32_t seed = 900;
  for (CacheFormat f : lkv_test::kAllFormats) {
    SCOPED_TRACE(format_info(f).name);
    const auto l = lkv_test::ref_layout(f);
    const int64_t P = 64, pages = 3, stride = lkv_test::padded_stride(f, P), num_slots = pages * P, n = 50;
    std::vector<float> x = lkv_test::random_latents(n, l.d_qk, l.group, seed++, false);
    std::vector<int64_t> slots(n);
    std::iota(slots.begin(), slots.end(), 0);
    for (int64_t k = 0; k < n; ++k) slots[k] = (k * 37 + 5) % num_slots;  // distinct: 37 is coprime to 192
    slots[7] = -1;
    lkv_test::HostCache host(f, pages, P, stride, 0);
    quantize(f, TensorView(x.data(), DType::f32, {n, l.d_qk}), TensorView(slots.data(), DType::i64, {n}), host.view4());

    const int64_t skip = far_rows(stride);
    std::vector<int64_t> far_slots = slots;
    for (int64_t& s : far_slots)
      if (s >= 0) s += skip * P;
    LazyHostBuffer buf(far_buffer_bytes(host.bytes.size(), stride));
    ASSERT_NE(buf.get(), nullptr);
    const TensorView far4(buf.get(), DType::u8, {skip + pages, P, 1, l.bpt}, {stride, l.bpt, l.bpt, 1});
    quantize(f, TensorView(x.data(), DType::f32, {n, l.d_qk}), TensorView(far_slots.data(), DType::i64, {n}), far4);
    const unsigned char* got = buf.get() + static_cast<size_t>(skip) * static_cast<size_t>(stride);
    EXPECT_EQ(std::memcmp(got, host.bytes.data(), host.bytes.size()), 0) << "the far pages";
    EXPECT_TRUE(std::all_of(got - kWrap, got - kWrap + host.bytes.size(), [](unsigned char v) { return v == 0; }))
        << "bytes where a 32-bit offset would wrap to changed";

    std::vector<int64_t> read(num_slots);
    std::iota(read.begin(), read.end(), 0);
    std::vector<uint16_t> want(num_slots * l.d_qk), back(num_slots * l.d_qk, 0x7777);
    dequantize(f, host.view2(), TensorView(read.data(), DType::i64, {num_slots}),
               TensorView(want.data(), DType::bf16, {num_slots, l.d_qk}), P);
    for (int64_t& s : read) s += skip * P;
    const TensorView far2(buf.get(), DType::u8, {skip + pages, stride}, {stride, 1});
    dequantize(f, far2, TensorView(read.data(), DType::i64, {num_slots}),
               TensorView(back.data(), DType::bf16, {num_slots, l.d_qk}), P);
    EXPECT_EQ(back, want) << "rows read back from the far pages";
  }
}

namespace {

// Rows of a query, output or statistics tensor spread out so that row k starts k x 4.5 GiB into a
// buffer: a first-dimension stride of kFarOffsetBytes / sizeof(T) elements. The views of every op
// below take their rows this way (request k, or query row k for prefill).
struct SpreadRows {
  LazyHostBuffer buf;
  int64_t rows;
  size_t row_bytes;
  SpreadRows(int64_t n, size_t bytes) : buf(static_cast<size_t>(n - 1) * kFarOffsetBytes + bytes), rows(n), row_bytes(bytes) {}
  unsigned char* row(int64_t k) const { return buf.get() + static_cast<size_t>(k) * kFarOffsetBytes; }
  // Fills row k from `src` (rows of row_bytes back to back).
  void put(const void* src) {
    for (int64_t k = 0; k < rows; ++k) std::memcpy(row(k), static_cast<const unsigned char*>(src) + k * row_bytes, row_bytes);
  }
  template <typename T>
  std::vector<T> gather() const {
    std::vector<T> v(static_cast<size_t>(rows) * row_bytes / sizeof(T));
    for (int64_t k = 0; k < rows; ++k) std::memcpy(reinterpret_cast<unsigned char*>(v.data()) + k * row_bytes, row(k), row_bytes);
    return v;
  }
  template <typename T>
  static int64_t stride() { return static_cast<int64_t>(kFarOffsetBytes / sizeof(T)); }
  // A view of `shape` whose first dimension has the spread stride and the rest are contiguous.
  template <typename T>
  TensorView view(DType dtype, std::vector<int64_t> shape) const {
    std::vector<int64_t> strides(shape.size(), 1);
    for (size_t d = shape.size() - 1; d-- > 1;) strides[d] = strides[d + 1] * shape[d + 1];
    strides[0] = stride<T>();
    return TensorView(buf.get(), dtype, shape, strides);
  }
};

// A decode-shaped op (q and out [b, s_q, h_q, *], lse [b, h_q, s_q]; `a` its compact arguments)
// run through `call` with request k's rows of q, out and lse k x 4.5 GiB apart: the same out and
// lse as the compact run (`out`, `lse`).
template <class Args, class Call>
void expect_spread_decode_rows(Args a, int64_t b, int64_t s_q, int64_t h_q, int64_t d_qk,
                               const std::vector<uint16_t>& q_host, const std::vector<uint16_t>& out,
                               const std::vector<float>& lse, const Call& call,
                               const char* what) {
  const int64_t per_b = s_q * h_q;
  SpreadRows q(b, per_b * d_qk * 2), o(b, per_b * 512 * 2), l(b, per_b * 4);
  ASSERT_TRUE(q.buf.get() && o.buf.get() && l.buf.get()) << what << ": no host memory for rows past 4 GiB";
  q.put(q_host.data());
  a.q = q.view<uint16_t>(DType::bf16, {b, s_q, h_q, d_qk});
  a.out = o.view<uint16_t>(DType::bf16, {b, s_q, h_q, 512});
  a.lse = l.view<float>(DType::f32, {b, h_q, s_q});
  call(a);
  EXPECT_EQ(o.gather<uint16_t>(), out) << what;
  EXPECT_TRUE(same_floats(l.gather<float>(), lse)) << what;
}

}  // namespace

// Queries and outputs past 4 GiB: request 1's (query row 1's) q, out and lse (and max_logits) rows
// start 4.5 GiB after request 0's, through first-dimension strides that long; every op, oracle and
// fast path, must give the same bytes as with compact tensors.
TEST(FarOffsetsCpu, QueriesAndOutputsPast4GiB) {
  // Sparse decode (and, below, dense decode): [b, s_q, h_q, *] rows and lse [b, h_q, s_q].
  for (DecodeImpl impl : {DecodeImpl::kCpuOracle, DecodeImpl::kCpuFast}) {
    latentkv::testing::DecodeWorkloadOptions o;
    o.format = CacheFormat::v4_fp8;
    o.b = 2;
    o.s_q = 2;
    o.h_q = 16;
    o.topk = 64;
    o.extra = true;
    o.sink = true;
    o.seed = 1000;
    latentkv::testing::DecodeWorkload w = latentkv::testing::make_decode_workload(o);
    w.poison_outputs();
    sparse_decode(w.args(), nullptr, impl);
    expect_spread_decode_rows(w.args(), o.b, o.s_q, o.h_q, w.d_qk, w.q, w.out, w.lse,
                              [&](const SparseDecodeArgs& a) { sparse_decode(a, nullptr, impl); }, "sparse_decode");
  }
  for (DenseImpl impl : {DenseImpl::kCpuOracle, DenseImpl::kCpuFast}) {
    latentkv::testing::DenseWorkloadOptions o;
    o.b = 2;
    o.s_q = 2;
    o.h_q = 16;
    o.fp8 = true;
    o.causal = true;
    o.seed = 1001;
    latentkv::testing::DenseWorkload w = latentkv::testing::make_dense_workload(o);
    w.run(impl);
    expect_spread_decode_rows(w.args(), o.b, o.s_q, o.h_q, o.d_qk, w.q, w.out, w.lse,
                              [&](const DenseDecodeArgs& a) { dense_decode(a, nullptr, impl); }, "dense_decode");
  }
  // Sparse prefill: [s_q, h_q, *] rows, max_logits and lse [s_q, h_q].
  for (PrefillImpl impl : {PrefillImpl::kCpuOracle, PrefillImpl::kCpuFast}) {
    latentkv::testing::PrefillWorkloadOptions o;
    o.s_q = 2;
    o.h_q = 16;
    o.topk_length = true;
    o.seed = 1002;
    latentkv::testing::PrefillWorkload w = latentkv::testing::make_prefill_workload(o);
    w.run(impl);
    SpreadRows q(o.s_q, o.h_q * o.d_qk * 2), out(o.s_q, o.h_q * 512 * 2), mx(o.s_q, o.h_q * 4), lse(o.s_q, o.h_q * 4);
    ASSERT_NE(lse.buf.get(), nullptr);
    q.put(w.q.data());
    SparsePrefillArgs a = w.args();
    a.q = q.view<uint16_t>(DType::bf16, {o.s_q, o.h_q, o.d_qk});
    a.out = out.view<uint16_t>(DType::bf16, {o.s_q, o.h_q, 512});
    a.max_logits = mx.view<float>(DType::f32, {o.s_q, o.h_q});
    a.lse = lse.view<float>(DType::f32, {o.s_q, o.h_q});
    sparse_prefill(a, nullptr, impl);
    EXPECT_EQ(out.gather<uint16_t>(), w.out) << "sparse_prefill";
    EXPECT_TRUE(same_floats(mx.gather<float>(), w.max_logits)) << "sparse_prefill";
    EXPECT_TRUE(same_floats(lse.gather<float>(), w.lse)) << "sparse_prefill";
  }
}
