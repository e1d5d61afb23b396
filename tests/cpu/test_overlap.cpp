// Outputs that share memory with an input or with another output are refused before anything is
// written, by every op (check_no_overlap, core/tensor.cpp). The ops read their index inputs again
// while writing: a fuzzer placed kv_cache over kv_slot_mapping (compress_kv followed a slot that an
// earlier record had overwritten: a write outside the cache), lse over block_table (dense_decode
// read a page number that a row's lse had replaced) and max_logits over seq_offsets_kv
// (sparse_prefill_batched read a garbage segment). Here the aliased views lie inside the output's
// own buffer, so a missing check would corrupt only that buffer, which the test compares.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "latentkv/compress.h"
#include "latentkv/decode.h"
#include "latentkv/dense.h"
#include "latentkv/error.h"
#include "latentkv/formats.h"
#include "latentkv/prefill.h"
#include "testing/attention_workload.h"
#include "testing/compress_workload.h"
#include "testing/decode_workload.h"
#include "test_util.h"

namespace latentkv {
namespace {

using testing::error_of;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Overlap, SparseDecodeOutputsOverInputsOrEachOther) {
  testing::DecodeWorkloadOptions o;
  o.b = 2;
  o.h_q = 16;
  o.topk = 64;
  testing::DecodeWorkload w = testing::make_decode_workload(o);
  // lse over out's first bytes (two outputs), then indices read from out's buffer.
  SparseDecodeArgs a = w.args();
  a.lse = TensorView(a.out.data, DType::f32, {a.lse.size(0), a.lse.size(1), a.lse.size(2)});
  std::vector<uint8_t> before(static_cast<uint8_t*>(a.out.data),
                              static_cast<uint8_t*>(a.out.data) + a.out.numel() * 2);
  std::string e = error_of([&] { sparse_decode(a); });
  EXPECT_TRUE(has(e, "sparse_decode: out overlaps lse in memory")) << e;
  a = w.args();
  a.indices = TensorView(a.out.data, DType::i32, {a.indices.size(0), a.indices.size(1), a.indices.size(2)});
  e = error_of([&] { sparse_decode(a); });
  EXPECT_TRUE(has(e, "sparse_decode: out overlaps indices in memory")) << e;
  EXPECT_EQ(0, std::memcmp(before.data(), a.out.data, before.size())) << "out written after rejecting";
}

TEST(Overlap, DenseDecodeLengthsInsideAnOutput) {
  testing::DenseWorkloadOptions o;
  o.b = 3;
  testing::DenseWorkload w = testing::make_dense_workload(o);
  DenseDecodeArgs a = w.args();
  a.cache_seqlens = TensorView(a.lse.data, DType::i32, {a.cache_seqlens.size(0)});
  const std::vector<float> before = w.lse;
  const std::string e = error_of([&] { dense_decode(a); });
  EXPECT_TRUE(has(e, "dense_decode: lse overlaps cache_seqlens in memory")) << e;
  EXPECT_EQ(0, std::memcmp(before.data(), w.lse.data(), before.size() * sizeof(float)));
}

TEST(Overlap, BatchedPrefillOffsetsInsideAnOutput) {
  testing::PrefillWorkloadOptions o;
  o.seq_q = {3, 4};
  o.seq_kv = {40, 50};
  o.h_q = 8;
  o.topk = 16;
  testing::PrefillWorkload w = testing::make_prefill_workload(o);
  ASSERT_TRUE(w.batched());
  SparsePrefillArgs a = w.args();
  std::memcpy(w.max_logits.data(), w.seq_offsets_kv.data(), w.seq_offsets_kv.size() * sizeof(int64_t));
  const std::vector<float> before = w.max_logits;
  const TensorView offsets_q(w.seq_offsets_q.data(), DType::i64, {static_cast<int64_t>(w.seq_offsets_q.size())});
  const TensorView offsets_kv(w.max_logits.data(), DType::i64, {static_cast<int64_t>(w.seq_offsets_kv.size())});
  const std::string e = error_of([&] { sparse_prefill_batched(a, offsets_q, offsets_kv); });
  EXPECT_TRUE(has(e, "sparse_prefill_batched: max_logits overlaps seq_offsets_kv in memory")) << e;
  EXPECT_EQ(0, std::memcmp(before.data(), w.max_logits.data(), before.size() * sizeof(float)));
}

TEST(Overlap, CompressIndicesInsideTheCache) {
  testing::WorkloadOptions o;
  o.num_reqs = 1;
  o.tokens_per_req = 256;
  testing::CompressWorkload w = testing::make_workload(o);
  CompressArgs a = w.args();
  std::memcpy(w.kv.data(), w.boundary.data(), w.boundary.size() * sizeof(int64_t));
  a.boundary_token_indices = TensorView(w.kv.data(), DType::i64, {static_cast<int64_t>(w.boundary.size())});
  const std::vector<uint8_t> before = w.kv;
  const std::string e = error_of([&] { compress_kv(a); });
  EXPECT_TRUE(has(e, "compress_kv: kv_cache overlaps boundary_token_indices in memory")) << e;
  EXPECT_EQ(before, w.kv);
  // An invalid mode code is named rather than taken as in-place.
  a = w.args();
  a.mode = static_cast<CompressMode>(7);
  EXPECT_TRUE(has(error_of([&] { compress_kv(a); }), "mode must be in-place or functional, got code 7"));
}

TEST(Overlap, QuantizeSlotsInsideTheCache) {
  std::vector<uint8_t> cache(4 * 656, 0xab);
  std::vector<float> latents(2 * 576, 1.0f);
  int64_t slots_value[2] = {0, 1};
  std::memcpy(cache.data() + 3 * 656, slots_value, sizeof slots_value);  // slots in page 3's record
  const std::vector<uint8_t> before = cache;
  const std::string e = error_of([&] {
    quantize(CacheFormat::v32_fp8, TensorView(latents.data(), DType::f32, {2, 576}),
             TensorView(cache.data() + 3 * 656, DType::i64, {2}), TensorView(cache.data(), DType::u8, {4, 1, 1, 656}));
  });
  EXPECT_TRUE(has(e, "quantize: cache overlaps slots in memory")) << e;
  EXPECT_EQ(before, cache);
  // Disjoint views of one buffer are fine.
  std::vector<uint8_t> both(4 * 656 + 16);
  std::memcpy(both.data() + 4 * 656, slots_value, sizeof slots_value);
  EXPECT_NO_THROW(quantize(CacheFormat::v32_fp8, TensorView(latents.data(), DType::f32, {2, 576}),
                           TensorView(both.data() + 4 * 656, DType::i64, {2}),
                           TensorView(both.data(), DType::u8, {4, 1, 1, 656})));
}

TEST(Overlap, OneSharedByteAtEitherEndIsAnOverlap) {
  // A one-record cache at bytes [8, 664) of a buffer; an 8-byte slot whose last byte is the cache's
  // first, or whose first byte is the cache's last, overlaps it; one byte further out does not.
  std::vector<uint8_t> buf(8 + 656 + 16, 0);
  uint8_t* cache = buf.data() + 8;
  std::vector<float> latents(576, 1.0f);
  auto run = [&](uint8_t* slot_at) {
    std::memset(slot_at, 0, 8);
    return error_of([&] {
      quantize(CacheFormat::v32_fp8, TensorView(latents.data(), DType::f32, {1, 576}),
               TensorView(slot_at, DType::i64, {1}), TensorView(cache, DType::u8, {1, 1, 1, 656}));
    });
  };
  EXPECT_TRUE(has(run(cache - 7), "quantize: cache overlaps slots in memory"));
  EXPECT_TRUE(has(run(cache + 655), "quantize: cache overlaps slots in memory"));
  EXPECT_EQ(run(cache - 8), "");
  EXPECT_EQ(run(cache + 656), "");
  // An empty view touches no bytes, wherever it points.
  EXPECT_EQ(error_of([&] {
              quantize(CacheFormat::v32_fp8, TensorView(latents.data(), DType::f32, {0, 576}),
                       TensorView(cache + 8, DType::i64, {0}), TensorView(cache, DType::u8, {1, 1, 1, 656}));
            }),
            "");
}

TEST(Overlap, PositionsToSlotsOutputOverItsInputs) {
  std::vector<int32_t> positions = {0, 5, 9};
  std::vector<int32_t> table = {2, 0};
  const std::vector<int32_t> before = positions;
  const std::string e = error_of([&] {
    positions_to_slots(TensorView(table.data(), DType::i32, {1, 2}), TensorView(positions.data(), DType::i32, {1, 3}),
                       8, TensorView(positions.data(), DType::i32, {1, 3}));
  });
  EXPECT_TRUE(has(e, "positions_to_slots: slots overlaps positions in memory")) << e;
  EXPECT_EQ(positions, before);
}

}  // namespace
}  // namespace latentkv
