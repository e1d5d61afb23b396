// The demo pipeline: its built-in checks pass on a small configuration, and fail when the pipeline
// is broken on purpose (compressed entries written one slot off), so the checks can fail.
#include <gtest/gtest.h>

#include "demo/demo.h"

using namespace latentkv;

namespace {
demo::DemoConfig tiny() {
  demo::DemoConfig c;
  c.requests = 2;
  c.heads = 4;
  c.steps = 200;
  c.window = 64;
  c.ratio = 32;
  c.page_size = 16;
  c.check_every = 40;
  return c;
}
}  // namespace

TEST(Demo, ChecksPassOnATinyPipeline) {
  const demo::DemoReport r = demo::run_demo(tiny(), nullptr);
  EXPECT_TRUE(r.ok()) << r.first_failure;
  EXPECT_EQ(r.checks, 5);
  EXPECT_EQ(r.tokens, 2 * 200);
  EXPECT_EQ(r.compressed_entries, 2 * (200 / 32));
  EXPECT_LT(r.bytes_per_token, r.bf16_bytes_per_token);
}

TEST(Demo, PrefilledContextAndOddSizes) {
  demo::DemoConfig c = tiny();
  c.prefill = 100;  // compressed entries from the prefill, then from decoding
  c.steps = 70;
  c.block_size = 5;
  c.page_size = 7;
  c.window = 50;
  c.heads = 3;
  c.check_every = 35;
  const demo::DemoReport r = demo::run_demo(c, nullptr);
  EXPECT_TRUE(r.ok()) << r.first_failure;
  EXPECT_EQ(r.checks, 2);
}

TEST(Demo, AWrongSlotMappingFailsTheChecks) {
  demo::DemoConfig c = tiny();
  c.fault = "wrong-slot";
  const demo::DemoReport r = demo::run_demo(c, nullptr);
  EXPECT_FALSE(r.ok());
  EXPECT_GT(r.checks_failed, 0);
  EXPECT_NE(r.first_failure.find("max_rel"), std::string::npos) << r.first_failure;
}
