// The shared attention kernel's host-side parameter helpers (decode/cuda/attend_params.h has no
// CUDA headers, so they are checked here on every build): decode-shaped row mapping and the split
// workspace layout.
#include <gtest/gtest.h>

#include "decode/cuda/attend_params.h"
#include "decode/params.h"
#include "dense/params.h"

using namespace latentkv;
using decode::cuda::Geometry;
using decode::cuda::OutRef;

namespace {

template <class P>
void expect_decode_rows(const P& p) {
  Geometry g{};
  OutRef o{};
  decode::cuda::set_decode_rows(p, g, o);
  EXPECT_EQ(g.q, p.q);
  EXPECT_EQ(g.stride_q_r1, p.stride_q_b);
  EXPECT_EQ(g.stride_q_r2, p.stride_q_s);
  EXPECT_EQ(g.stride_q_h, p.stride_q_h);
  EXPECT_EQ(g.n1, p.b);
  EXPECT_EQ(g.n2, p.s_q);
  EXPECT_EQ(g.h_q, p.h_q);
  EXPECT_EQ(g.scale, p.scale);
  EXPECT_EQ(o.out, p.out);
  EXPECT_EQ(o.stride_out_r1, p.stride_out_b);
  EXPECT_EQ(o.stride_out_r2, p.stride_out_s);
  EXPECT_EQ(o.stride_out_h, p.stride_out_h);
  EXPECT_EQ(o.lse, p.lse);
  EXPECT_EQ(o.stride_lse_r1, p.stride_lse_b);
  EXPECT_EQ(o.stride_lse_r2, p.stride_lse_s);
  EXPECT_EQ(o.stride_lse_h, p.stride_lse_h);
}

template <class P>
P distinct_fields() {
  static uint16_t q[1], out[1];
  static float lse[1];
  P p{};
  p.q = q;
  p.stride_q_b = 1001;
  p.stride_q_s = 1002;
  p.stride_q_h = 1003;
  p.b = 7;
  p.s_q = 3;
  p.h_q = 70;
  p.scale = 0.125f;
  p.out = out;
  p.stride_out_b = 2001;
  p.stride_out_s = 2002;
  p.stride_out_h = 2003;
  p.lse = lse;
  p.stride_lse_b = 3001;
  p.stride_lse_h = 3002;
  p.stride_lse_s = 3003;
  return p;
}

}  // namespace

TEST(AttendParams, DecodeRowsFromSparseAndDenseParams) {
  expect_decode_rows(distinct_fields<decode::Params>());
  expect_decode_rows(distinct_fields<dense::Params>());
}

TEST(AttendParams, SplitWorkspaceLayout) {
  EXPECT_EQ(decode::cuda::split_workspace_bytes(5, 3, 1, true), 0u);  // one split: no scratch
  const size_t n = 5 * 3 * 4;
  const auto round = [](size_t x) { return (x + 255) / 256 * 256; };
  EXPECT_EQ(decode::cuda::split_workspace_bytes(5, 3, 4, false), round(n * 2048) + round(n * 4));
  EXPECT_EQ(decode::cuda::split_workspace_bytes(5, 3, 4, true), round(n * 2048) + 2 * round(n * 4));
  alignas(256) static uint8_t ws[1 << 20];
  Geometry g{};
  g.n1 = 5;
  g.n2 = 1;
  g.h_q = 3;
  g.num_splits = 4;
  decode::cuda::place_split_workspace(g, ws, true);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(g.partial_out), ws);
  EXPECT_EQ(reinterpret_cast<uint8_t*>(g.partial_lse), ws + round(n * 2048));
  EXPECT_EQ(reinterpret_cast<uint8_t*>(g.partial_max), ws + round(n * 2048) + round(n * 4));
}
