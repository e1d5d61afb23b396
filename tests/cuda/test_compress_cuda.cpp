// compress_kv on the GPU against the float64 oracle's judgement: all 12 contest workloads, the
// stress grid, the modes, every error path with checks on, adversarial indices with checks off,
// bitwise determinism, and state and cache past 4 GiB. Runs only where a CUDA device exists.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "compress/check.h"
#include "compress/cuda/launch.h"
#include "compress/params.h"
#include "cuda/device_buffer.h"
#include "cuda/switches.h"
#include "cuda_common/bench.h"
#include "latentkv/compress.h"
#include "latentkv/error.h"
#include "testing/compress_workload.h"
#include "test_util.h"

using namespace latentkv;
using latentkv::testing::CompressWorkload;
using latentkv::testing::DeviceArena;
using latentkv::testing::DeviceBuffer;
using latentkv::testing::kFarOffsetBytes;
using latentkv::testing::make_workload;
using latentkv::testing::WorkloadOptions;

namespace {

// A workload copied to the device; args() gives device views, kv() the cache back on the host.
struct DeviceWorkload {
  CompressWorkload& w;
  DeviceBuffer<float> state, cos_sin;
  DeviceBuffer<int32_t> token_to_req, block_table;
  DeviceBuffer<int64_t> positions, boundary, slots;
  DeviceBuffer<uint16_t> weight;
  DeviceBuffer<uint8_t> kv;

  explicit DeviceWorkload(CompressWorkload& wl)
      : w(wl), state(wl.state), cos_sin(wl.cos_sin), token_to_req(wl.token_to_req),
        block_table(wl.block_table), positions(wl.positions), boundary(wl.boundary),
        slots(wl.slot_mapping), weight(wl.weight), kv(wl.kv) {}

  void reupload_indices() {
    token_to_req.upload(w.token_to_req);
    block_table.upload(w.block_table);
    positions.upload(w.positions);
    boundary.upload(w.boundary);
    slots.upload(w.slot_mapping);
  }

  CompressArgs args(CompressMode mode = CompressMode::kInPlace) {
    CompressArgs a = w.args(mode);
    const Device d = Device::cuda(0);
    auto move = [&](TensorView& t, void* p) {
      t.data = p;
      t.device = d;
    };
    move(a.state_cache, state.get());
    move(a.token_to_req, token_to_req.get());
    move(a.positions, positions.get());
    move(a.boundary_token_indices, boundary.get());
    move(a.block_table, block_table.get());
    move(a.rms_norm_weight, weight.get());
    move(a.cos_sin_cache, cos_sin.get());
    move(a.kv_slot_mapping, slots.get());
    move(a.kv_cache, kv.get());
    return a;
  }
};


// Marks the bytes of slot's record (its data row and its scale row) in m.
void mark_record(std::vector<bool>& m, const compress::Params& p, int64_t slot) {
  for (int k = 0; k < compress::kDataBytes; ++k) m[compress::data_offset(p, slot) + k] = true;
  for (int k = 0; k < compress::kScaleBytes; ++k) m[compress::scale_offset(p, slot) + k] = true;
}

// Which bytes belong to records of outputs that are valid and have a slot.
std::vector<bool> valid_record_mask(CompressWorkload& w) {
  std::vector<bool> m(w.kv.size(), false);
  const compress::Params p = w.params();
  for (int64_t i = 0; i < w.num_outputs; ++i) {
    int64_t v, x, req, lb0, lb1;
    if (compress::validate_header(p, i, &v, &x, &req, &lb0, &lb1) != compress::kOk) continue;
    const int64_t slot = w.slot_mapping[w.boundary[i]];
    if (slot >= 0) mark_record(m, p, slot);
  }
  return m;
}

// One in-place run on the GPU with the switches as they stand; the cache's bytes after it.
std::vector<uint8_t> gpu_bytes(CompressWorkload& w, const std::string& label) {
  DeviceWorkload d(w);
  compress_kv(d.args(), nullptr, CompressImpl::kCuda);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << label;
  return d.kv.download();
}

// The records in `got` pass the oracle's judgement and every byte outside them is the initial one.
compress::CheckReport expect_records_and_nothing_else(CompressWorkload& w, const std::vector<uint8_t>& got,
                                                      const std::string& label) {
  const compress::CheckReport rep = compress::check_records(w.params(), got.data());
  EXPECT_TRUE(rep.ok()) << label << ": " << rep.first_failure;
  const std::vector<bool> mask = valid_record_mask(w);
  for (size_t k = 0; k < got.size(); ++k)
    if (!mask[k] && got[k] != w.kv[k]) {
      ADD_FAILURE() << label << ": byte " << k << " outside the records changed";
      break;
    }
  return rep;
}

// A workload with a shuffled block table, random slots and a random initial cache; the payload
// alternates with n (int8 for even n).
CompressWorkload varied_workload(int64_t reqs, int64_t tokens, int64_t C, int64_t block_size, int n,
                                 uint64_t seed) {
  WorkloadOptions o;
  o.num_reqs = reqs;
  o.tokens_per_req = tokens;
  o.compress_ratio = C;
  o.block_size = block_size;
  o.shuffle_blocks = true;
  o.random_slots = true;
  o.random_initial_cache = true;
  o.format = (n % 2) ? CacheFormat::v4_fp8 : CacheFormat::v4_int8;
  o.seed = seed;
  return make_workload(o);
}

compress::CheckReport gpu_run_and_check(CompressWorkload& w, const std::string& label) {
  DeviceWorkload d(w);
  compress_kv(d.args(), nullptr, CompressImpl::kCuda);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint8_t> got = d.kv.download();
  const std::vector<bool> mask = valid_record_mask(w);
  int64_t changed_outside = 0;
  for (size_t k = 0; k < got.size(); ++k) changed_outside += (!mask[k] && got[k] != w.kv[k]);
  EXPECT_EQ(changed_outside, 0) << label << ": bytes outside the records changed";
  const compress::CheckReport rep = compress::check_records(w.params(), got.data());
  EXPECT_TRUE(rep.ok()) << label << ": " << rep.first_failure << " (" << rep.failures << " wrong)";
  // SPEC.md: accepted payload/scale ambiguities must be tiny, about 1e-5 of the bytes or less.
  EXPECT_LE(rep.ambiguous_accepted, std::max<int64_t>(3, rep.bytes / 50000)) << label;
  std::printf("[check] %-28s records %7lld bytes %9lld differing %4lld ambiguous %4lld rope-ulp %4lld "
              "wrong %lld\n",
              label.c_str(), static_cast<long long>(rep.records), static_cast<long long>(rep.bytes),
              static_cast<long long>(rep.differing_bytes),
              static_cast<long long>(rep.ambiguous_accepted),
              static_cast<long long>(rep.rope_accepted), static_cast<long long>(rep.failures));
  return rep;
}

// Equal-length requests over a shuffled block table (the rest of the options at their defaults).
WorkloadOptions shuffled(int64_t num_reqs, int64_t tokens_per_req, int64_t C) {
  WorkloadOptions o;
  o.num_reqs = num_reqs;
  o.tokens_per_req = tokens_per_req;
  o.compress_ratio = C;
  o.shuffle_blocks = true;
  return o;
}

#define REQUIRE_GPU() \
  if (!latentkv::testing::has_cuda_device()) GTEST_SKIP() << "no CUDA device"

}  // namespace

TEST(CompressCuda, ContestWorkloadsAgainstOracle) {
  REQUIRE_GPU();
  for (const auto& c : latentkv::testing::contest_cases())
    for (CacheFormat f : {CacheFormat::v4_int8, CacheFormat::v4_fp8}) {
      WorkloadOptions o;
      o.num_reqs = c.num_reqs;
      o.tokens_per_req = c.total_tokens / c.num_reqs;
      o.compress_ratio = c.compress_ratio;
      o.format = f;
      o.seed = 1000 + c.total_tokens + c.compress_ratio;
      CompressWorkload w = make_workload(o);
      gpu_run_and_check(w, std::string(c.name) + (f == CacheFormat::v4_fp8 ? "/fp8" : "/int8"));
    }
}

TEST(CompressCuda, StressGrid) {
  REQUIRE_GPU();
  struct S { int64_t bs, C, P, tokens; bool shuffle, repeat; float scale; int64_t reqs; };
  const S cases[] = {
      {1, 128, 64, 512, true, false, 1.0f, 2},   {4, 4, 2, 64, false, false, 1.0f, 3},
      {8, 128, 64, 1000, true, true, 1.0f, 2},   {16, 256, 256, 700, true, false, 1.0f, 2},
      {64, 512, 64, 1100, false, true, 1.0f, 2}, {8, 1, 2, 40, true, false, 1.0f, 2},
      {8, 1000, 64, 2100, true, false, 1.0f, 2}, {8, 128, 64, 512, true, false, 1e-3f, 2},
      {8, 128, 64, 512, true, false, 1e3f, 2},   {3, 37, 53, 300, true, true, 1.0f, 2},
      {8, 512, 64, 8192, true, false, 1.0f, 1},  {8, 4096, 64, 8192, true, false, 1.0f, 1},
  };
  for (const S& c : cases)
    for (CacheFormat f : {CacheFormat::v4_int8, CacheFormat::v4_fp8}) {
      WorkloadOptions o;
      o.num_reqs = c.reqs;
      o.tokens_per_req = c.tokens;
      o.compress_ratio = c.C;
      o.block_size = c.bs;
      o.page_size = c.P;
      o.shuffle_blocks = c.shuffle;
      o.repeat_blocks = c.repeat;
      o.random_slots = true;
      o.random_initial_cache = true;
      o.state_scale = c.scale;
      o.format = f;
      o.page_pad_bytes = c.P == 53 ? 8 : 0;  // 53 * 584 + 8 = 30960, a multiple of 16
      CompressWorkload w = make_workload(o);
      gpu_run_and_check(w, "bs" + std::to_string(c.bs) + "_C" + std::to_string(c.C) + "_P" +
                               std::to_string(c.P) + "_x" + std::to_string(c.scale));
    }
}

TEST(CompressCuda, FunctionalModeAndDeterminism) {
  REQUIRE_GPU();
  WorkloadOptions o;
  o.num_reqs = 1;
  o.tokens_per_req = 8192;
  o.compress_ratio = 512;  // few outputs: many splits merged by the last CTA
  o.random_slots = true;
  o.random_initial_cache = true;
  CompressWorkload w = make_workload(o);
  DeviceWorkload d(w);
  compress_kv(d.args(CompressMode::kFunctional), nullptr, CompressImpl::kCuda);
  const std::vector<uint8_t> first = d.kv.download();
  const std::vector<bool> mask = valid_record_mask(w);
  for (size_t k = 0; k < first.size(); ++k)
    if (!mask[k]) {
      ASSERT_EQ(first[k], 0) << "functional mode left byte " << k;
    }
  EXPECT_TRUE(compress::check_records(w.params(), first.data()).ok());
  for (int run = 0; run < 20; ++run) {
    d.kv.upload(w.kv);
    compress_kv(d.args(CompressMode::kFunctional), nullptr, CompressImpl::kCuda);
    ASSERT_EQ(d.kv.download(), first) << "run " << run << " differs";
  }
}

TEST(CompressCuda, ErrorsNameTheValueAndWriteNothing) {
  REQUIRE_GPU();
  WorkloadOptions o;
  o.num_reqs = 2;
  o.tokens_per_req = 512;
  o.random_initial_cache = true;
  struct Bad {
    const char* expect;
    std::function<void(CompressWorkload&)> spoil;
  };
  const Bad bads[] = {
      {"boundary_token_indices[1] = 5000", [](auto& w) { w.boundary[1] = 5000; }},
      {"slot 100000", [](auto& w) { w.slot_mapping[w.boundary[2]] = 100000; }},
      {"request 7", [](auto& w) { w.token_to_req[w.boundary[0]] = 7; }},
      {"position 126 with compress_ratio 128 has a window starting before position 0", [](auto& w) { w.positions[w.boundary[0]] = 126; }},
      {"position -9223372036854775807 with compress_ratio 128",  // no overflow past the check
       [](auto& w, auto&...) { w.positions[w.boundary[1]] = INT64_MIN + 1; }},
      {"logical block 64", [](auto& w) { w.positions[w.boundary[3]] = 512; }},
      {"to block 999", [](auto& w) { w.block_table[3] = 999; }},
      {"to block -4", [](auto& w) { w.block_table[5] = -4; }},
      {"slot 1 is written by outputs 1 and 2", [](auto& w) { w.slot_mapping[w.boundary[2]] = 1; }},
      {"boundary_token_indices[1] = -1 is outside [0, num_tokens = 1024)", [](auto& w) { w.boundary[1] = -1; }},
      {"token_to_req gives request -1", [](auto& w) { w.token_to_req[w.boundary[2]] = -1; }},
      // One past the last slot (the cache holds num_pages * 64 of them).
      {"outside the cache's", [](auto& w) { w.slot_mapping[w.boundary[3]] = w.num_pages * 64; }},
  };
  // Both modes: functional mode clears the cache with one memset, which must come after every check.
  for (CompressMode mode : {CompressMode::kInPlace, CompressMode::kFunctional})
    for (const Bad& bad : bads) {
      CompressWorkload w = make_workload(o);
      DeviceWorkload d(w);
      bad.spoil(w);
      d.reupload_indices();
      const std::string msg =
          latentkv::testing::error_of([&] { compress_kv(d.args(mode), nullptr, CompressImpl::kCuda); });
      EXPECT_NE(msg.find(bad.expect), std::string::npos) << "got: " << msg;
      EXPECT_EQ(d.kv.download(), w.kv) << "cache changed after rejecting: " << bad.expect
                                       << (mode == CompressMode::kFunctional ? " (functional)" : " (in place)");
    }
}

// A compress_ratio beyond what the grid can run (65535 splits of 256 rows) is refused before the
// scratch is sized: unchecked, 256 (2^54 - 1) / 3 wrapped the scratch size to 2 KB and the index
// checks wrote before it. Nothing is written, and compress_workspace_bytes refuses it too.
TEST(CompressCuda, CompressRatioBeyondTheGridIsRefusedFirst) {
  REQUIRE_GPU();
  WorkloadOptions o;
  o.num_reqs = 1;
  o.tokens_per_req = 256;
  o.random_initial_cache = true;
  CompressWorkload w = make_workload(o);
  DeviceWorkload d(w);
  for (const int64_t C : {int64_t{1537228672809129216}, int64_t{65535} * 256 + 1}) {
    CompressArgs a = d.args();
    a.compress_ratio = C;
    const std::string msg = latentkv::testing::error_of([&] { compress_kv(a, nullptr, CompressImpl::kCuda); });
    EXPECT_NE(msg.find("supports compress_ratio <= 16776960"), std::string::npos) << msg;
    EXPECT_NE(msg.find(", got " + std::to_string(C)), std::string::npos) << msg;
    EXPECT_NE(latentkv::testing::error_of([&] { compress_workspace_bytes(a); }).find("compress_ratio"), std::string::npos);
    EXPECT_EQ(d.kv.download(), w.kv) << "cache changed after rejecting compress_ratio " << C;
  }
}

TEST(CompressCuda, UncheckedBadIndicesAreSkippedNeverFollowed) {
  REQUIRE_GPU();
  // With the checks off, bad indices must not be followed (docs/compress.md): valid outputs are
  // written (and judged by the oracle); an output whose own indices are bad (boundary, request,
  // window, slot, RoPE row) writes nothing; an output whose header is good but whose window has a
  // block outside the state cache skips that block's rows and is written from the others (not
  // judged: the oracle would follow the bad block). No access leaves its buffer (run under
  // compute-sanitizer by scripts/gpu.sh). Both modes: functional mode zeroes every other byte.
  WorkloadOptions o;
  o.num_reqs = 2;
  o.tokens_per_req = 1024;
  o.random_initial_cache = true;
  CompressWorkload w = make_workload(o);
  // The block table widened to twice the blocks per request (the new columns map to block 0), so
  // that a window past position 1023 lies inside it while its RoPE row (1024) is past the 1024 rows
  // of cos_sin_cache.
  const int64_t bpr = w.blocks_per_req;
  std::vector<int32_t> wide(static_cast<size_t>(o.num_reqs * 2 * bpr), 0);
  for (int64_t r = 0; r < o.num_reqs; ++r)
    std::copy(w.block_table.begin() + r * bpr, w.block_table.begin() + (r + 1) * bpr, wide.begin() + r * 2 * bpr);
  w.block_table = wide;
  w.blocks_per_req = 2 * bpr;
  w.boundary[0] = -3;
  w.boundary[1] = 1 << 30;
  w.slot_mapping[w.boundary[2]] = int64_t{1} << 40;
  w.token_to_req[w.boundary[3]] = -1;
  w.positions[w.boundary[4]] = int64_t{1} << 50;
  w.positions[w.boundary[5]] = 3;
  w.positions[w.boundary[6]] = 1030;  // RoPE row 1024
  w.block_table[1] = -100;                  // request 0, logical block 1: output 0's window
  w.block_table[9] = 1 << 30;               // request 0, logical block 9: output 0's window
  w.block_table[2 * bpr + 20] = -100;       // request 1, logical block 20: output 9's window
  w.block_table[2 * bpr + 100] = 1 << 30;   // request 1, logical block 100: output 14's window
  // The outputs whose every index is valid (the host checks' order: header, then each block).
  const compress::Params p = w.params();
  std::vector<bool> valid(static_cast<size_t>(w.num_outputs));
  std::vector<int64_t> holed_slots;  // good headers, a bad block in the window: written, not judged
  int64_t n_valid = 0, n_rope = 0;
  for (int64_t i = 0; i < w.num_outputs; ++i) {
    int64_t value = 0, extra = 0, req = 0, lb0 = 0, lb1 = -1;
    int32_t code = compress::validate_header(p, i, &value, &extra, &req, &lb0, &lb1);
    n_rope += code == compress::kRopePosOutOfRange;
    const bool header_ok = code == compress::kOk;
    for (int64_t lb = lb0; code == compress::kOk && lb <= lb1; ++lb) code = compress::validate_block(p, req, lb, &value, &extra);
    valid[i] = code == compress::kOk;
    n_valid += valid[i];
    if (header_ok && !valid[i]) holed_slots.push_back(w.slot_mapping[w.boundary[i]]);
  }
  ASSERT_EQ(n_rope, 1);
  ASSERT_EQ(n_valid, 7);                  // of 16: outputs 0-6, 9 and 14 are invalid,
  ASSERT_EQ(holed_slots.size(), 2u);      // 9 and 14 by a block alone
  // The same workload with only the valid outputs (the others pointed at token 0, which has no
  // slot), for the record judge, which would follow the bad indices itself.
  CompressWorkload judged = w;
  ASSERT_EQ(judged.slot_mapping[0], -1);
  for (int64_t i = 0; i < w.num_outputs; ++i)
    if (!valid[i]) judged.boundary[i] = 0;
  const std::vector<bool> mask = valid_record_mask(judged);  // the bytes of the valid outputs' records
  // The bytes of the holed outputs' records, which the kernel writes from the rows that remain.
  std::vector<bool> holed(w.kv.size(), false);
  for (const int64_t slot : holed_slots) {
    ASSERT_GE(slot, 0);
    mark_record(holed, p, slot);
  }
  for (CompressMode mode : {CompressMode::kInPlace, CompressMode::kFunctional}) {
    const std::string label = mode == CompressMode::kInPlace ? "in place" : "functional";
    DeviceWorkload d(w);
    CompressArgs a = d.args(mode);
    a.check_indices = false;
    compress_kv(a, nullptr, CompressImpl::kCuda);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << label;
    const std::vector<uint8_t> got = d.kv.download();
    int64_t holed_changed = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      const uint8_t before = mode == CompressMode::kInPlace ? w.kv[k] : 0;
      if (holed[k]) {
        holed_changed += got[k] != before;
      } else if (!mask[k]) {
        ASSERT_EQ(got[k], before) << label << ": byte " << k << " outside the valid records";
      }
    }
    // Both holed records were written (over a random initial cache, or over the functional zeros).
    EXPECT_GT(holed_changed, compress::kDataBytes) << label;  // more than one record: both
    const compress::CheckReport rep = compress::check_records(judged.params(), got.data());
    EXPECT_EQ(rep.records, n_valid) << label;
    EXPECT_TRUE(rep.ok()) << label << ": " << rep.first_failure;
  }
}

TEST(CompressCuda, CallerWorkspaceOnAStreamCapturedInAGraph) {
  REQUIRE_GPU();
  // With a caller-provided workspace and the checks off, a call allocates nothing and never
  // synchronises: it can be captured in a CUDA graph, and replays give the same bytes as a plain
  // call with latentkv's own workspace.
  // C = 512: 16 outputs in many splits, so the counters matter; C = 128: 8 splits per output,
  // merged inside clusters on sm_90 when those are switched on (both settings run).
  latentkv::testing::RestoreSwitch<bool> restore(compress::cuda::compress_clusters, compress::cuda::set_compress_clusters);
  for (bool clusters : {false, true})
  for (int64_t C : {512, 128}) {
    compress::cuda::set_compress_clusters(clusters);
    SCOPED_TRACE("C " + std::to_string(C) + (clusters ? ", clusters on" : ", clusters off"));
    CompressWorkload w = make_workload(shuffled(1, 8192, C));
    DeviceWorkload d(w);
    compress_kv(d.args(CompressMode::kFunctional), nullptr, CompressImpl::kCuda);
    const std::vector<uint8_t> expected = d.kv.download();

    CompressArgs a = d.args(CompressMode::kFunctional);
    a.check_indices = false;
    const size_t bytes = compress_workspace_bytes(a);
    ASSERT_GT(bytes, 0u);
    // A workspace need not be zeroed by the caller; 256 bytes more for the misaligned start below.
    std::vector<uint8_t> garbage(bytes + 256, 0x5a);
    DeviceBuffer<uint8_t> ws(garbage);
    // Refused workspaces (one byte short; 16 bytes past a 256-byte boundary) write nothing, in
    // functional mode too, whose memset comes after these checks.
    d.kv.upload(w.kv);
    a.workspace = ws.get();
    a.workspace_bytes = bytes - 1;
    EXPECT_NE(latentkv::testing::error_of([&] { compress_kv(a); })
                  .find("workspace of " + std::to_string(bytes - 1) + " bytes is too small"),
              std::string::npos);
    a.workspace = ws.get() + 16;
    a.workspace_bytes = bytes;
    EXPECT_NE(latentkv::testing::error_of([&] { compress_kv(a); })
                  .find("workspace must be 256-byte aligned, got address % 256 = 16"),
              std::string::npos);
    EXPECT_EQ(d.kv.download(), w.kv) << "cache changed after a refused workspace";
    a.workspace = ws.get();

    cudaStream_t stream;
    LKV_TEST_CUDA(cudaStreamCreate(&stream));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    LKV_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    compress_kv(a, stream, CompressImpl::kCuda);
    LKV_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
    LKV_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 3; ++replay) {
      d.kv.upload(w.kv);
      LKV_TEST_CUDA(cudaGraphLaunch(exec, stream));
      LKV_TEST_CUDA(cudaStreamSynchronize(stream));
      ASSERT_EQ(d.kv.download(), expected) << "replay " << replay;
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

// Programmatic dependent launch: a kernel queued just ahead of the call, which lets its dependents in
// at once and writes an input only after 200 us, must still be waited for before that input is
// read, so the bytes equal an ordinary launch's on the written input. The state is written ahead of
// both forms (with overlap_prologue it is the one input the kernel ahead may write), the block table
// ahead of the default form only. On a device that runs the sm_90 code the compressor's CTAs do
// start during the delay, so a wait in the wrong place reads the stale input and fails here.
TEST(CompressCuda, ProgrammaticLaunchWaitsForTheKernelAhead) {
  REQUIRE_GPU();
  namespace cc = compress::cuda;
  latentkv::testing::RestoreSwitch<bool> restore(cc::compress_pdl, cc::set_compress_pdl);
  int major = 0, minor = 0;
  LKV_TEST_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
  LKV_TEST_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
  cc::set_compress_pdl(true);
  const bool pdl = cc::compress_pdl_on(0);
  std::printf("[pdl] compute capability %d.%d: the compressor launches with PDL %s\n", major, minor,
              pdl ? "on" : "off");
  if (major == 9 && minor == 0) {
    EXPECT_TRUE(pdl);  // the build carries sm_90a code
  }
  cudaStream_t stream;
  LKV_TEST_CUDA(cudaStreamCreate(&stream));
  for (int64_t C : {128, 512}) {
    CompressWorkload w = make_workload(shuffled(2, 4096, C));
    DeviceWorkload d(w);
    CompressArgs a = d.args();
    a.check_indices = false;
    cc::set_compress_pdl(false);
    compress_kv(a, stream, CompressImpl::kCuda);  // also sizes the stream's cached buffers
    LKV_TEST_CUDA(cudaStreamSynchronize(stream));
    const std::vector<uint8_t> expected = d.kv.download();
    EXPECT_TRUE(compress::check_records(w.params(), expected.data()).ok());
    cc::set_compress_pdl(true);

    const DeviceBuffer<float> state_truth(w.state);
    const DeviceBuffer<int32_t> table_truth(w.block_table);
    const std::vector<float> stale_state(w.state.size(), 0.0f);
    std::vector<int32_t> stale_table(w.block_table.size(), 0);  // block 0 everywhere: valid, wrong
    for (int form = 0; form < 3; ++form) {
      const bool overlap = form == 1;
      const bool table = form == 2;
      const std::string label = "C " + std::to_string(C) + (overlap ? ", overlap_prologue" : "") +
                                (table ? ", block table written ahead" : ", state written ahead");
      d.kv.upload(w.kv);
      if (table) {
        d.block_table.upload(stale_table);
        latentkv::bench_cuda::delayed_copy(d.block_table.get(), table_truth.get(),
                                           w.block_table.size() * sizeof(int32_t), 200.0, stream);
      } else {
        d.state.upload(stale_state);
        latentkv::bench_cuda::delayed_copy(d.state.get(), state_truth.get(), w.state.size() * sizeof(float),
                                           200.0, stream);
      }
      a.overlap_prologue = overlap;
      compress_kv(a, stream, CompressImpl::kCuda);
      LKV_TEST_CUDA(cudaStreamSynchronize(stream));
      EXPECT_EQ(d.kv.download(), expected) << label;
      d.state.upload(w.state);
      d.block_table.upload(w.block_table);
    }
  }
  cudaStreamDestroy(stream);
}

TEST(CompressCuda, MoreOutputsThanAGridDimensionOf65535) {
  REQUIRE_GPU();
  // C = 4 (DeepSeek V4's short compressor) over 280000 tokens: 70000 outputs run on grid x.
  WorkloadOptions o;
  o.num_reqs = 1;
  o.tokens_per_req = 280000;
  o.compress_ratio = 4;
  o.block_size = 16;
  o.page_size = 64;
  CompressWorkload w = make_workload(o);
  ASSERT_EQ(w.num_outputs, 70000);
  gpu_run_and_check(w, "70000 outputs, C=4");
}

// Split outputs merged inside thread-block clusters (distributed shared memory) against the global
// merge (partials, fence, ticket): the same merge order and arithmetic, so the same bytes. Shapes
// give plans of 2 to more than 16 splits per output (the last merge globally under either
// setting), a shuffled table and random slots; each result also passes the oracle's judgement.
TEST(CompressCuda, ClusterMergeMatchesGlobalMergeBitwise) {
  REQUIRE_GPU();
  struct S { int64_t reqs, tokens, C; };
  const S cases[] = {{1, 8192, 128}, {1, 8192, 256}, {1, 8192, 512}, {2, 4096, 96}, {1, 2048, 1000}};
  latentkv::testing::RestoreSwitch<bool> restore_clusters(compress::cuda::compress_clusters,
                                                           compress::cuda::set_compress_clusters);
  latentkv::testing::RestoreSwitch<int64_t> restore_slices(compress::cuda::compress_max_slices,
                                                            compress::cuda::set_compress_max_slices);
  compress::cuda::set_compress_max_slices(1);  // clusters hold window splits only
  int n = 0, clustered = 0;
  for (const S& c : cases)
    for (CacheFormat f : {CacheFormat::v4_int8, CacheFormat::v4_fp8}) {
      WorkloadOptions o;
      o.num_reqs = c.reqs;
      o.tokens_per_req = c.tokens;
      o.compress_ratio = c.C;
      o.shuffle_blocks = true;
      o.random_slots = true;
      o.random_initial_cache = true;
      o.format = f;
      o.seed = 4200 + n++;
      CompressWorkload w = make_workload(o);
      char buf[64];
      std::snprintf(buf, sizeof(buf), "C%lld_t%lld/%s", static_cast<long long>(c.C),
                    static_cast<long long>(c.tokens), f == CacheFormat::v4_fp8 ? "fp8" : "int8");
      const std::string label = buf;
      std::vector<uint8_t> got[2];
      bool used = false;
      for (int cl = 0; cl < 2; ++cl) {
        compress::cuda::set_compress_clusters(cl == 1);
        if (cl == 1) used = compress::cuda::merges_in_clusters(w.params(), 0);
        DeviceWorkload d(w);
        compress_kv(d.args(), nullptr, CompressImpl::kCuda);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << label;
        got[cl] = d.kv.download();
      }
      compress::cuda::set_compress_clusters(false);
      EXPECT_FALSE(compress::cuda::merges_in_clusters(w.params(), 0)) << label << ": switched off, yet clusters";
      clustered += used;
      EXPECT_EQ(got[0], got[1]) << label << ": cluster and global merges differ";
      const compress::CheckReport rep = compress::check_records(w.params(), got[1].data());
      EXPECT_TRUE(rep.ok()) << label << ": " << rep.first_failure;
      std::printf("[check] cluster %-22s records %lld, merged in clusters: %s, same bytes as the "
                  "global merge: %s\n",
                  label.c_str(), static_cast<long long>(rep.records), used ? "yes" : "no",
                  got[0] == got[1] ? "yes" : "NO");
    }
  int cc_major = 0, cc_minor = 0;
  cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, 0);
  if (cc_major == 9 && cc_minor == 0) {
    EXPECT_GT(clustered, 0) << "no case took the cluster merge on a compute capability 9.0 device";
  } else {
    GTEST_SKIP() << "compute capability " << cc_major << "." << cc_minor
                 << ": no cluster merge here (both runs merged globally; bytes compared anyway)";
  }
}

// Slices of an unsplit window finishing inside their cluster (kernel.cuh, slice_finish) against
// the same plan merged globally: the same bytes (the sums of squares are added in the global
// finisher's order), records that pass the oracle check, and the cluster path really taken on a
// compute capability 9.0 device. Plans 1 x 2, 1 x 4, 1 x 8 forced; odd C and block sizes included.
TEST(CompressCuda, SliceClustersMatchGlobalMergeBitwise) {
  REQUIRE_GPU();
  struct S { int64_t reqs, tokens, C, bs; };
  const S cases[] = {{1, 8192, 128, 64}, {1, 8192, 256, 64}, {2, 4096, 96, 16}, {2, 300, 37, 3}, {1, 2048, 200, 1}};
  latentkv::testing::RestoreSwitch<bool> restore(compress::cuda::compress_slice_clusters,
                                                 compress::cuda::set_compress_slice_clusters);
  struct ClearOverride {
    ~ClearOverride() { compress::cuda::set_compress_plan_override(0, 0); }
  } clear_override;
  int n = 0, clustered = 0;
  for (const S& c : cases)
    for (int64_t slices : {2, 4, 8}) {
      CompressWorkload w = varied_workload(c.reqs, c.tokens, c.C, c.bs, n, 6100 + n);
      ++n;
      compress::cuda::set_compress_plan_override(1, slices);
      const compress::SplitPlan plan = compress::cuda::plan_for(w.params(), 0);
      ASSERT_EQ(plan.num_splits, 1);
      ASSERT_EQ(plan.dim_slices, slices);
      char buf[96];
      std::snprintf(buf, sizeof(buf), "C%lld_t%lld_bs%lld_1x%lld", static_cast<long long>(c.C),
                    static_cast<long long>(c.tokens), static_cast<long long>(c.bs), static_cast<long long>(slices));
      std::vector<uint8_t> got[2];
      bool used = false;
      for (int cl = 0; cl < 2; ++cl) {
        compress::cuda::set_compress_slice_clusters(cl == 1);
        if (cl == 0) {
          EXPECT_FALSE(compress::cuda::merges_in_clusters(w.params(), 0)) << buf;
        } else {
          used = compress::cuda::merges_in_clusters(w.params(), 0);
        }
        got[cl] = gpu_bytes(w, buf);
      }
      clustered += used;
      EXPECT_EQ(got[0], got[1]) << buf << ": slices finishing in clusters differ from the global merge";
      const compress::CheckReport rep = expect_records_and_nothing_else(w, got[1], buf);
      std::printf("[check] slice clusters %-26s records %lld, in clusters: %s, same bytes as the global "
                  "merge: %s\n",
                  buf, static_cast<long long>(rep.records), used ? "yes" : "no", got[0] == got[1] ? "yes" : "NO");
    }
  int cc_major = 0, cc_minor = 0;
  cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, 0);
  if (cc_major == 9 && cc_minor == 0) {
    EXPECT_EQ(clustered, n) << "a case did not finish in clusters on a compute capability 9.0 device";
  } else {
    GTEST_SKIP() << "compute capability " << cc_major << "." << cc_minor
                 << ": no slice clusters here (both runs merged globally; bytes compared anyway)";
  }
}

// The L2 prefetch of the index arrays at the kernel's entry (kernel.cuh, step 1) changes no byte:
// the same records with it on and off, over shuffled tables, random slots, a random initial cache,
// both payloads and every finishing path (split merges, slice clusters, unsplit windows), each
// passing the oracle's judgement. Also the rule that decides it: on for the contest's layouts,
// off when the arrays are large beside the streamed state, off when switched off.
TEST(CompressCuda, IndexPrefetchChangesNoByte) {
  REQUIRE_GPU();
  latentkv::testing::RestoreSwitch<bool> restore(compress::cuda::compress_warm_indices,
                                                 compress::cuda::set_compress_warm_indices);
  struct S { int64_t reqs, tokens, C, bs; };
  const S cases[] = {{1, 8192, 128, 64}, {1, 8192, 256, 64}, {4, 8192, 512, 64}, {2, 4096, 96, 16}, {3, 700, 4, 5}};
  int n = 0;
  for (const S& c : cases) {
    CompressWorkload w = varied_workload(c.reqs, c.tokens, c.C, c.bs, n, 7300 + n);
    ++n;
    char buf[96];
    std::snprintf(buf, sizeof(buf), "C%lld_t%lld_r%lld_bs%lld", static_cast<long long>(c.C),
                  static_cast<long long>(c.tokens), static_cast<long long>(c.reqs), static_cast<long long>(c.bs));
    std::vector<uint8_t> got[2];
    for (int on = 0; on < 2; ++on) {
      compress::cuda::set_compress_warm_indices(on == 1);
      EXPECT_EQ(compress::cuda::warms_indices(w.params()), on == 1) << buf;
      got[on] = gpu_bytes(w, buf);
    }
    EXPECT_EQ(got[0], got[1]) << buf << ": the prefetch changed the bytes";
    const compress::CheckReport rep = expect_records_and_nothing_else(w, got[1], buf);
    std::printf("[check] index prefetch %-24s records %lld, same bytes with and without: %s\n", buf,
                static_cast<long long>(rep.records), got[0] == got[1] ? "yes" : "NO");
  }
  // The rule: the arrays (20 bytes per token and the block table) against 1/32 of the streamed state.
  compress::cuda::set_compress_warm_indices(true);
  compress::Params p{};
  p.num_outputs = 64;
  p.compress_ratio = 128;  // 64 x 128 rows x 4096 bytes = 32 MiB streamed; 1 MiB allowed
  p.num_tokens = 8192;     // 160 KiB
  p.num_reqs = 1;
  p.blocks_per_req = 128;
  p.stride_table_req = 128;
  EXPECT_TRUE(compress::cuda::warms_indices(p));
  p.num_reqs = 1024;  // an engine's table for 1024 requests of 2^17 tokens in 64-row blocks: 8 MiB
  p.blocks_per_req = 2048;
  p.stride_table_req = 2048;
  EXPECT_FALSE(compress::cuda::warms_indices(p));
  compress::cuda::set_compress_warm_indices(false);
  p.num_reqs = 1;
  EXPECT_FALSE(compress::cuda::warms_indices(p));
}

// Dimension slices (plan.h): each slicing the planner can choose (1, 2, 4, 8 CTAs per split, each
// streaming 512 / S dims) on shapes with few outputs and long windows, against the oracle, with
// every byte outside the records checked, and bitwise equal across repeated runs.
TEST(CompressCuda, EveryDimensionSlicingAgainstOracle) {
  REQUIRE_GPU();
  struct S { int64_t reqs, tokens, C, bs; };
  const S cases[] = {{1, 8192, 128, 64}, {1, 8192, 256, 64}, {1, 8192, 512, 64},
                     {1, 2048, 1000, 8}, {2, 300, 37, 3}, {1, 8192, 4096, 16}};
  latentkv::testing::RestoreSwitch<int64_t> restore(compress::cuda::compress_max_slices,
                                                     compress::cuda::set_compress_max_slices);
  bool seen[compress::kMaxDimSlices + 1] = {};
  int n = 0;
  for (const S& c : cases)
    for (int64_t max_slices : {1, 2, 4, 8}) {
      CompressWorkload w = varied_workload(c.reqs, c.tokens, c.C, c.bs, n, 5100 + n);
      ++n;
      compress::cuda::set_compress_max_slices(max_slices);
      const compress::SplitPlan plan = compress::cuda::plan_for(w.params(), 0);
      EXPECT_LE(plan.dim_slices, max_slices);
      seen[plan.dim_slices] = true;
      char buf[96];
      std::snprintf(buf, sizeof(buf), "C%lld_t%lld_max%lld(%lldx%lld)", static_cast<long long>(c.C),
                    static_cast<long long>(c.tokens), static_cast<long long>(max_slices),
                    static_cast<long long>(plan.num_splits), static_cast<long long>(plan.dim_slices));
      gpu_run_and_check(w, buf);
      // Twice more on fresh copies: the same bytes.
      std::vector<uint8_t> got[2];
      for (int r = 0; r < 2; ++r) {
        DeviceWorkload d(w);
        compress_kv(d.args(), nullptr, CompressImpl::kCuda);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << buf;
        got[r] = d.kv.download();
      }
      EXPECT_EQ(got[0], got[1]) << buf << ": repeated runs differ";
    }
  for (int64_t sl : {1, 2, 4, 8}) EXPECT_TRUE(seen[sl]) << "no case ran with " << sl << " dimension slices";
}

// State blocks and cache pages past 4 GiB: each workload is run once as made and once with its
// state placed beyond 4.5 GiB in a state cache that many blocks longer (every other byte NaN), its
// cache beyond 4.5 GiB in a cache that many pages longer (every other byte 0xab), and its block
// table and valid slots shifted to match. The far pages must end as the compact run's cache did and
// the bytes 4 GiB below them, where an offset computed in 32 bits would write, must keep their 0xab.
TEST(CompressCuda, StateAndCachePast4GiB) {
  REQUIRE_GPU();
  const size_t arena_bytes = kFarOffsetBytes + (size_t{64} << 20);
  DeviceArena state_arena(arena_bytes, 0xff), kv_arena(arena_bytes, 0xab);
  if (!state_arena.get() || !kv_arena.get()) GTEST_SKIP() << "the device lacks 2 x 4.6 GiB of free memory";
  for (int n = 0; n < 4; ++n) {
    CompressWorkload w = varied_workload(2, n < 2 ? 1000 : 300, n < 2 ? 128 : 4, n < 2 ? 16 : 3, n, 2400 + n);
    const std::string label = std::string(n % 2 ? "fp8" : "int8") + " C " + std::to_string(w.opt.compress_ratio);
    const std::vector<uint8_t> near = gpu_bytes(w, label);
    expect_records_and_nothing_else(w, near, label);

    const int64_t block_bytes = w.opt.block_size * 4096;
    const int64_t far_blocks = latentkv::testing::far_rows(block_bytes);
    const int64_t far_pages = latentkv::testing::far_rows(w.page_stride);
    ASSERT_LE(far_blocks + w.num_blocks, INT32_MAX) << label;
    CompressWorkload far = w;
    latentkv::testing::shift_valid(far.block_table, w.num_blocks, far_blocks);
    for (int64_t& slot : far.slot_mapping)
      if (slot >= 0) slot += far_pages * w.opt.page_size;
    DeviceWorkload d(far);
    CompressArgs a = d.args();
    const size_t state_at = static_cast<size_t>(far_blocks * block_bytes);
    const size_t kv_at = static_cast<size_t>(far_pages * w.page_stride);
    ASSERT_LE(state_at + w.state.size() * 4, state_arena.size()) << label;
    ASSERT_LE(kv_at + w.kv.size(), kv_arena.size()) << label;
    LKV_TEST_CUDA(cudaMemcpy(state_arena.get() + state_at, w.state.data(), w.state.size() * 4, cudaMemcpyHostToDevice));
    LKV_TEST_CUDA(cudaMemcpy(kv_arena.get() + kv_at, w.kv.data(), w.kv.size(), cudaMemcpyHostToDevice));
    a.state_cache.data = state_arena.get();
    a.state_cache.shape[0] += far_blocks;
    a.kv_cache.data = kv_arena.get();
    a.kv_cache.shape[0] += far_pages;
    compress_kv(a, nullptr, CompressImpl::kCuda);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << label;
    std::vector<uint8_t> got(w.kv.size()), low(w.kv.size());
    LKV_TEST_CUDA(cudaMemcpy(got.data(), kv_arena.get() + kv_at, got.size(), cudaMemcpyDeviceToHost));
    LKV_TEST_CUDA(cudaMemcpy(low.data(), kv_arena.get() + kv_at - (size_t{1} << 32), low.size(), cudaMemcpyDeviceToHost));
    const bool same = got == near;
    const int64_t low_changed = std::count_if(low.begin(), low.end(), [](uint8_t v) { return v != 0xab; });
    std::printf("[compress] %-12s state past %.1f GiB, cache past %.1f GiB: %s, %lld bytes changed where a 32-bit offset would wrap to\n",
                label.c_str(), static_cast<double>(state_at) / (1 << 30), static_cast<double>(kv_at) / (1 << 30),
                same ? "same bytes" : "DIFFERENT", static_cast<long long>(low_changed));
    EXPECT_TRUE(same) << label;
    EXPECT_EQ(low_changed, 0) << label;
    // Restore the far pages' neighbourhood for the next workload (its cache may be longer).
    LKV_TEST_CUDA(cudaMemset(kv_arena.get() + kv_at, 0xab, w.kv.size()));
  }
}
