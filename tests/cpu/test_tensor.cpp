// Core types: shape checks produce the messages the ops promise, devices parse, errors carry kinds.
#include <gtest/gtest.h>

#include <string>

#include "latentkv/error.h"
#include "latentkv/tensor.h"
#include "test_util.h"

using namespace latentkv;

TEST(Tensor, ShapeMessageNamesExpectedAndGot) {
  uint16_t buf[2 * 64 * 512];
  TensorView q(buf, DType::bf16, {2, 1, 64, 512});
  SizeEnv env;
  const std::string msg = latentkv::testing::error_of(
      [&] { check_tensor(q, "q", {"b", "s_q", "h_q", 576}, DType::bf16, env); });
  EXPECT_NE(msg.find("expected q of shape [b, s_q, h_q, 576] bf16, got [2, 1, 64, 512] bf16"),
            std::string::npos)
      << msg;
}

TEST(Tensor, DtypeMismatchIsATypeError) {
  float buf[4];
  TensorView t(buf, DType::f32, {4});
  SizeEnv env;
  try {
    check_tensor(t, "w", {4}, DType::bf16, env);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kType);
    EXPECT_NE(std::string(e.what()).find("got [4] f32"), std::string::npos) << e.what();
  }
}

TEST(Tensor, NamedSizesMustAgree) {
  float a[6], b[8];
  TensorView x(a, DType::f32, {2, 3});
  TensorView y(b, DType::f32, {2, 4});
  SizeEnv env;
  check_tensor(x, "x", {"n", 3}, DType::f32, env);
  EXPECT_EQ(env.get("n"), 2);
  check_tensor(y, "y", {"n", 4}, DType::f32, env);
  TensorView z(b, DType::f32, {4, 2});
  const std::string msg = latentkv::testing::error_of([&] { check_tensor(z, "z", {"n", 2}, DType::f32, env); });
  EXPECT_NE(msg.find("n is 2 elsewhere"), std::string::npos) << msg;
}

TEST(Tensor, ContiguityAndStrides) {
  float a[24];
  TensorView t(a, DType::f32, {2, 3, 4});
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.numel(), 24);
  TensorView s(a, DType::f32, {2, 3}, {12, 1});
  EXPECT_FALSE(s.is_contiguous());
  check_inner_contiguous(s, "s");
  TensorView u(a, DType::f32, {2, 3}, {1, 2});
  EXPECT_THROW(check_inner_contiguous(u, "u"), Error);
}

TEST(Tensor, DeviceParsing) {
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  EXPECT_EQ(parse_device("cuda:3").index, 3);
  EXPECT_EQ(parse_device("cuda").str(), "cuda:0");
  // Malformed indices are latentkv errors, not std::stoi's exceptions.
  for (const char* bad : {"tpu", "cuda:", "cuda:x1", "cuda:-1", "cuda:99999999999"}) {
    const std::string msg = latentkv::testing::error_of([&] { parse_device(bad); });
    EXPECT_NE(msg.find(std::string("bad device '") + bad + "'"), std::string::npos) << msg;
  }
}

TEST(Tensor, ElementCountsAndNullData) {
  float a[6];
  SizeEnv env;
  const int64_t big = int64_t{1} << 40;
  // [2^40, 2^40] elements overflow int64 and are named; with a zero dimension the view is empty
  // (the product of the others is never formed) and fine, null data included.
  std::string msg = latentkv::testing::error_of(
      [&] { check_tensor(TensorView(a, DType::f32, {big, big}), "x", {"m", "n"}, DType::f32, env); });
  EXPECT_NE(msg.find("(its element count overflows int64)"), std::string::npos) << msg;
  SizeEnv env2;
  EXPECT_NO_THROW(check_tensor(TensorView(nullptr, DType::f32, {big, big, 0}), "x", {"m", "n", "k"}, DType::f32, env2));
  SizeEnv env3;
  msg = latentkv::testing::error_of(
      [&] { check_tensor(TensorView(nullptr, DType::f32, {2, 3}), "x", {2, 3}, DType::f32, env3); });
  EXPECT_NE(msg.find("(null data)"), std::string::npos) << msg;
  // A named size bound to 0 by an empty view still has to agree.
  SizeEnv env4;
  check_tensor(TensorView(a, DType::f32, {0, 3}), "x", {"n", 3}, DType::f32, env4);
  msg = latentkv::testing::error_of(
      [&] { check_tensor(TensorView(a, DType::f32, {2, 3}), "y", {"n", 3}, DType::f32, env4); });
  EXPECT_NE(msg.find("n is 0 elsewhere"), std::string::npos) << msg;
}

TEST(Tensor, StridesWhoseByteSpanOverflowsAreRefused) {
  float a[64];
  // Strides no allocation can have (the last row 2^62 elements, 2^64 bytes, away; a negative one
  // as far the other way): the span is never formed unchecked, and the view is refused by name,
  // by the shape checker and by the overlap check (which ops may run on views the shape checker
  // never saw, such as a cache).
  const int64_t far = int64_t{1} << 62;
  for (int64_t stride : {far, -far}) {
    const TensorView v(a, DType::f32, {5, 4}, {stride, 1});
    SizeEnv env;
    std::string msg = latentkv::testing::error_of([&] { check_tensor(v, "x", {"m", 4}, DType::f32, env); });
    EXPECT_NE(msg.find("expected x of shape [m, 4] f32, got [5, 4] f32 (its strides' byte span overflows int64)"),
              std::string::npos)
        << msg;
    const TensorView out(a, DType::f32, {4});
    msg = latentkv::testing::error_of([&] { check_no_overlap({{&out, "out"}}, {{&v, "cache"}}, "op"); });
    EXPECT_NE(msg.find("cache [5, 4] f32 has strides whose byte span overflows int64"), std::string::npos) << msg;
  }
  // The largest span that fits is fine: 2^60 elements of 4 bytes, 2^62 bytes.
  SizeEnv env;
  EXPECT_NO_THROW(check_tensor(TensorView(a, DType::f32, {2, 4}, {int64_t{1} << 60, 1}), "x", {"m", 4}, DType::f32, env));
}

TEST(Tensor, LengthOneDimensionsIgnoreTheirStrides) {
  float a[64];
  // A dimension of length 1 is never stepped over: its stride says nothing about the layout.
  EXPECT_TRUE(TensorView(a, DType::f32, {2, 1, 3}, {3, 99, 1}).is_contiguous());
  EXPECT_NO_THROW(check_inner_contiguous(TensorView(a, DType::f32, {2, 1}, {5, 3}), "v"));
  EXPECT_THROW(check_inner_contiguous(TensorView(a, DType::f32, {2, 2}, {5, 3}), "v"), Error);
}

TEST(Tensor, NoOverlapAcrossDevices) {
  // The same address on two devices is two buffers.
  uint8_t buf[16];
  const TensorView out(buf, DType::u8, {16});
  const TensorView in(buf, DType::u8, {16}, {1}, Device::cuda(0));
  EXPECT_NO_THROW(check_no_overlap({{&out, "out"}}, {{&in, "in"}}, "op"));
  const TensorView same(buf, DType::u8, {16});
  EXPECT_THROW(check_no_overlap({{&out, "out"}}, {{&same, "in"}}, "op"), Error);
}

TEST(Tensor, DtypeSizes) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::e4m3), 1u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_STREQ(dtype_name(DType::e8m0), "e8m0");
}

TEST(TensorView, RowsAligned) {
  alignas(64) static uint16_t buf[4096];
  // bf16 [4, 3, 520]: rows of 1040 bytes, a multiple of 16.
  EXPECT_TRUE(TensorView(buf, DType::bf16, {4, 3, 520}).rows_aligned(16));
  // A start 2 bytes in.
  EXPECT_FALSE(TensorView(buf + 1, DType::bf16, {4, 3, 520}).rows_aligned(16));
  // Rows 1036 bytes apart: not a multiple of 16.
  EXPECT_FALSE(TensorView(buf, DType::bf16, {2, 518}).rows_aligned(16));
  // A dimension of length 1 is never stepped over, so its stride does not matter.
  EXPECT_TRUE(TensorView(buf, DType::bf16, {1, 2, 512}, {3, 512, 1}).rows_aligned(16));
  // The innermost stride is not looked at (contiguity is checked elsewhere).
  EXPECT_TRUE(TensorView(buf, DType::u8, {2, 16}, {16, 2}).rows_aligned(16));
}

TEST(TensorView, AlignmentStringNamesWhatWasChecked) {
  alignas(64) static uint16_t buf[64];
  const TensorView v(buf + 1, DType::bf16, {2, 3}, {5, 1});
  EXPECT_EQ(v.alignment_str(16), "address % 16 = 2, strides [5, 1] x 2 bytes");
}

// check_distinct_elements: layouts whose elements each have an address of their own pass (in any
// order of strides, padded, transposed, reversed, length-1 dimensions with any stride); layouts
// where two elements meet are refused with the strides named.
TEST(Tensor, DistinctElements) {
  static float buf[1];
  const auto view = [](std::vector<int64_t> shape, std::vector<int64_t> strides) {
    return TensorView(buf, DType::f32, shape, strides);
  };
  for (const TensorView& ok : {view({2, 3, 4}, {12, 4, 1}), view({2, 3, 4}, {12, 1, 3}), view({2, 3, 4}, {100, 7, 2}),
                               view({2, 3, 4}, {-12, 4, -1}), view({2, 1, 4}, {4, 0, 1}), view({1}, {0}),
                               view({2, 2}, {2, 1}), view({3, 2}, {1, 3})})
    EXPECT_NO_THROW(check_distinct_elements(ok, "t")) << ok.shape_str();
  for (const TensorView& bad : {view({2, 3}, {0, 1}), view({2, 2}, {1, 1}), view({2, 3}, {2, 1}), view({3, 2}, {1, 2}),
                                view({2, 3, 4}, {12, 4, 2}), view({2, 3, 4}, {-3, 4, 1})}) {
    const std::string e = latentkv::testing::error_of([&] { check_distinct_elements(bad, "t"); });
    EXPECT_NE(e.find("two of its elements share an address"), std::string::npos) << bad.shape_str() << ": " << e;
  }
  EXPECT_NE(latentkv::testing::error_of([&] { check_distinct_elements(view({2, 3}, {2, 1}), "lse"); })
                .find("lse [2, 3] f32 has strides [2, 1] under which"),
            std::string::npos);
}
