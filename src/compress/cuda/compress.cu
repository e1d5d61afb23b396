// compress/cuda/compress.cu: the CUDA backend's host side: workspace layout, the index-check
// kernel, functional-mode zeroing and the launch of the compressor kernel.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "compress/cuda/config.h"
#include "compress/cuda/launch.h"
#include "cuda_common/cuda_check.h"
#include "cuda_common/device_cache.h"

namespace latentkv::compress::cuda {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Scratch layout. Every region is written before it is read within one call, so a workspace may be
// reused by calls of any shape. (The split counters, which must stay zero between calls, live in a
// buffer of their own: see cached_counters.)
struct Layout {
  size_t partials = 0;  // f32 [num_outputs, num_splits, 3, 512]
  size_t owners = 0;    // int32 [num_slots]: validation, which output claimed a slot
  size_t first_bad = 0; // int64 [4]: validation, first failing output and its record
  size_t total = 0;
};

std::atomic<int64_t>& max_slices_value() {
  static std::atomic<int64_t> v{[] {
    const char* e = std::getenv("LKV_COMPRESS_MAX_SLICES");
    return e ? std::clamp<int64_t>(std::atoll(e), 1, kMaxDimSlices) : kMaxDimSlices;
  }()};
  return v;
}

// The trace buffer and the grid of the launch(es) that last wrote it. With calls > 1 the buffer
// holds that many launches' stamps, zeroed once before the first of them, so that calls queued back
// to back keep their programmatic dependent launches (no memset between them).
struct TraceState {
  std::mutex mu;
  std::atomic<bool> on{false};  // read without the lock on every call
  unsigned long long* buf = nullptr;
  size_t capacity = 0;  // stamps
  int64_t calls = 1;    // launches per trace
  int64_t used = 0;     // launches traced so far (calls > 1)
  CompressTrace last;
};
TraceState& trace_state() {
  static TraceState t;
  return t;
}

}  // namespace

int64_t compress_max_slices() { return max_slices_value().load(std::memory_order_relaxed); }
void set_compress_max_slices(int64_t max_slices) {
  max_slices_value().store(std::clamp<int64_t>(max_slices, 1, kMaxDimSlices), std::memory_order_relaxed);
}

namespace {
// Plans forced for measurement (LKV_COMPRESS_FORCE_PLAN, read once): entries
// "outputs,C,splits,slices" separated by ';'; a call whose output count and C match an entry runs
// that plan instead of the planner's (rows per split rounded up to the row alignment; entries the
// kernel could not run, more than kMaxRowsPerSplit rows or a slicing that is not a power of two up
// to kMaxDimSlices, are ignored).
struct ForcedPlan {
  int64_t outputs, C, splits, slices;
};
const std::vector<ForcedPlan>& forced_plans() {
  static const std::vector<ForcedPlan> v = [] {
    std::vector<ForcedPlan> r;
    const char* e = std::getenv("LKV_COMPRESS_FORCE_PLAN");
    for (const char* s = e; s != nullptr && *s != '\0';) {
      long long o = 0, c = 0, sp = 0, sl = 0;
      if (std::sscanf(s, "%lld,%lld,%lld,%lld", &o, &c, &sp, &sl) == 4 && sp >= 1 && sl >= 1 &&
          sl <= kMaxDimSlices && (sl & (sl - 1)) == 0)
        r.push_back({o, c, sp, sl});
      s = std::strchr(s, ';');
      if (s != nullptr) ++s;
    }
    return r;
  }();
  return v;
}

std::atomic<int64_t>& plan_override() {  // splits * 16 + slices, 0: none
  static std::atomic<int64_t> v{0};
  return v;
}

// `splits` window splits of `slices` slices for a window of C rows (rows per split rounded up to the
// row alignment); num_splits 0 when the kernel cannot run it (more than kMaxRowsPerSplit rows).
SplitPlan fixed_plan(int64_t C, int64_t splits, int64_t slices) {
  SplitPlan plan;
  plan.rows_per_split = ((C + splits - 1) / splits + kRowAlign - 1) / kRowAlign * kRowAlign;
  plan.num_splits = (C + plan.rows_per_split - 1) / plan.rows_per_split;
  plan.dim_slices = slices;
  if (plan.rows_per_split > kMaxRowsPerSplit) plan.num_splits = 0;
  return plan;
}

std::atomic<bool>& slice_clusters_flag() {
  static std::atomic<bool> flag{[] {
    const char* e = std::getenv("LKV_COMPRESS_SLICE_CLUSTER");
    return !(e && std::strcmp(e, "0") == 0);
  }()};
  return flag;
}
}  // namespace

bool compress_slice_clusters() { return slice_clusters_flag().load(std::memory_order_relaxed); }
void set_compress_slice_clusters(bool on) { slice_clusters_flag().store(on, std::memory_order_relaxed); }

void set_compress_plan_override(int64_t splits, int64_t slices) {
  const bool on = splits >= 1 && slices >= 1 && slices <= kMaxDimSlices && (slices & (slices - 1)) == 0;
  plan_override().store(on ? splits * 16 + slices : 0, std::memory_order_relaxed);
}

namespace {
bool clusters_for(const Params& p, const SplitPlan& plan, int device) {
  // Compute capability 9.0 exactly: the cluster paths exist in the sm_90a code; newer GPUs run the
  // compute_80 PTX, whose kernel merges globally.
  const bool splits = compress_clusters() && plan.num_splits >= 2 && plan.num_splits <= kMaxClusterSplits &&
                      plan.dim_slices == 1;
  const bool slices = compress_slice_clusters() && plan.num_splits == 1 && plan.dim_slices > 1;
  if (!(splits || slices) || cuda_common::compute_capability(device) != 90) return false;
  return p.fp8 ? cluster_launch_fits<true>(p, plan, device) : cluster_launch_fits<false>(p, plan, device);
}
}  // namespace

SplitPlan plan_for(const Params& p, int device) {
  if (const int64_t o = plan_override().load(std::memory_order_relaxed); o != 0) {
    const SplitPlan plan = fixed_plan(p.compress_ratio, o / 16, o % 16);
    if (plan.num_splits > 0) return plan;
  }
  for (const ForcedPlan& f : forced_plans()) {
    if (f.outputs != p.num_outputs || f.C != p.compress_ratio) continue;
    const SplitPlan plan = fixed_plan(f.C, f.splits, f.slices);
    if (plan.num_splits > 0) return plan;
  }
  const int64_t resident = int64_t{kCtasPerSm} * cuda_common::sm_count(device);
  const bool slice_clusters = compress_slice_clusters() && cuda_common::compute_capability(device) == 90;
  SplitPlan plan = plan_splits(p.num_outputs, p.compress_ratio, resident, compress_max_slices(), slice_clusters);
  // A plan costed as finishing in clusters that the device cannot launch as such: plan without them.
  if (slice_clusters && plan.num_splits == 1 && plan.dim_slices > 1 && !clusters_for(p, plan, device))
    plan = plan_splits(p.num_outputs, p.compress_ratio, resident, compress_max_slices(), false);
  return plan;
}

void set_compress_trace(bool on) {
  TraceState& t = trace_state();
  std::lock_guard<std::mutex> lock(t.mu);
  t.on.store(on);
  // Turning it on starts a new trace; turning it off keeps the launches traced so far for
  // last_compress_trace().
  if (on) t.used = 0;
}

void set_compress_trace_calls(int64_t calls) {
  TraceState& t = trace_state();
  std::lock_guard<std::mutex> lock(t.mu);
  t.calls = std::max<int64_t>(1, calls);
  t.used = 0;
}

CompressTrace last_compress_trace() {
  TraceState& t = trace_state();
  std::lock_guard<std::mutex> lock(t.mu);
  CompressTrace r = t.last;
  if (t.calls > 1) {  // the launches traced since tracing was turned on
    r.calls = t.used;
    r.stamps.resize(static_cast<size_t>(t.used * r.num_outputs * r.ctas_per_output) * kTracePhases);
  }
  if (t.buf == nullptr || r.stamps.empty()) return r;
  LKV_CUDA_CHECK(cudaDeviceSynchronize());
  LKV_CUDA_CHECK(cudaMemcpy(r.stamps.data(), t.buf, r.stamps.size() * sizeof(unsigned long long),
                            cudaMemcpyDeviceToHost));
  return r;
}

namespace {

Layout layout_for(const Params& p, const SplitPlan& plan) {
  Layout l;
  l.partials = 0;
  const size_t partial_bytes =
      plan.merged() ? sizeof(float) * p.num_outputs * plan.num_splits * 3 * kDim : 0;
  l.owners = l.partials + align_up(partial_bytes);
  l.first_bad = l.owners + align_up(sizeof(int32_t) * p.num_slots);
  l.total = l.first_bad + align_up(4 * sizeof(int64_t));
  return l;
}

// Checks output i with one warp: lane 0 its own indices, all lanes its window's blocks (the lowest
// bad block is reported). Returns the code in every lane.
__device__ int32_t check_output(const Params& p, int64_t i, int lane, int64_t* value,
                                int64_t* extra) {
  int64_t req = 0, lb0 = 0, lb1 = -1;
  int32_t code = validate_header(p, i, value, extra, &req, &lb0, &lb1);
  if (code != kOk) return code;
  int64_t bad_lb = INT64_MAX, bad_phys = 0;
  for (int64_t lb = lb0 + lane; lb <= lb1; lb += 32) {
    int64_t v = 0, x = 0;
    if (validate_block(p, req, lb, &v, &x) != kOk) {
      bad_lb = lb;
      bad_phys = v;
      break;
    }
  }
  int64_t min_lb = bad_lb;
  for (int o = 16; o > 0; o >>= 1) min_lb = min(min_lb, __shfl_xor_sync(0xffffffffu, min_lb, o));
  if (min_lb == INT64_MAX) return kOk;
  const unsigned who = __ballot_sync(0xffffffffu, bad_lb == min_lb);
  *value = __shfl_sync(0xffffffffu, bad_phys, __ffs(who) - 1);
  *extra = min_lb;
  return kBlockOutOfRange;
}

// Pass 1, one warp per output: check it, claim its slot in the owner table (a second claimant is a
// duplicate), and keep the lowest failing output index.
__global__ void validate_kernel(const Params p, int32_t* owners, unsigned long long* first_bad) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= p.num_outputs) return;
  int64_t value = 0, extra = 0;
  int32_t code = check_output(p, i, lane, &value, &extra);
  if (lane != 0) return;
  if (code == kOk) {
    const int64_t slot = p.slot_mapping[p.boundary[i]];
    if (slot < 0) return;
    if (atomicCAS(&owners[slot], -1, static_cast<int32_t>(i)) == -1) return;
  }
  atomicMin(first_bad, static_cast<unsigned long long>(i));
}

// Pass 2, one warp: describe the failing output found by pass 1 (record = code, value, extra).
__global__ void describe_kernel(const Params p, const int32_t* owners,
                                const unsigned long long* first_bad, int64_t* record) {
  const unsigned long long i = *first_bad;
  if (i == ~0ull) return;
  int64_t value = 0, extra = 0;
  int32_t code = check_output(p, static_cast<int64_t>(i), threadIdx.x, &value, &extra);
  if (threadIdx.x != 0) return;
  if (code == kOk) {  // it passed alone, so it lost a slot to another output
    code = kDuplicateSlot;
    value = p.slot_mapping[p.boundary[i]];
    extra = owners[value];
  }
  record[0] = code;
  record[1] = value;
  record[2] = extra;
}

std::atomic<bool>& clusters_flag() {
  static std::atomic<bool> flag{[] {
    // Off by default: on the H200 the cluster merge measured slower than the global one where it
    // was meant to help (8192 tokens: 24.6 vs 19.6 us at C = 128, 29.4 vs 21.7 at C = 256) and no
    // faster elsewhere (bench/NOTES.md), so it stays an opt-in for experiments.
    const char* e = std::getenv("LKV_COMPRESS_CLUSTER");
    return e && std::strcmp(e, "1") == 0;
  }()};
  return flag;
}

}  // namespace

bool compress_clusters() { return clusters_flag().load(std::memory_order_relaxed); }


bool merges_in_clusters(const Params& p, int device) { return clusters_for(p, plan_for(p, device), device); }
void set_compress_clusters(bool on) { clusters_flag().store(on, std::memory_order_relaxed); }

namespace {
std::atomic<bool>& pdl_flag() {
  static std::atomic<bool> flag{[] {
    const char* e = std::getenv("LKV_COMPRESS_PDL");
    return !(e && std::strcmp(e, "0") == 0);
  }()};
  return flag;
}
}  // namespace

bool compress_pdl() { return pdl_flag().load(std::memory_order_relaxed); }
void set_compress_pdl(bool on) { pdl_flag().store(on, std::memory_order_relaxed); }
bool compress_pdl_on(int device) { return compress_pdl() && cuda_common::ptx_version(device) >= 90; }

namespace {
std::atomic<bool>& warm_flag() {
  static std::atomic<bool> flag{[] {
    const char* e = std::getenv("LKV_COMPRESS_WARM_INDICES");
    return !(e && std::strcmp(e, "0") == 0);
  }()};
  return flag;
}

// Bytes of the block-table extent the kernel's entry prefetch covers (kernel.cuh, step 1).
int64_t table_bytes(const Params& p) {
  return p.num_reqs > 0 ? ((p.num_reqs - 1) * p.stride_table_req + p.blocks_per_req) * 4 : 0;
}
// The 128-byte lines `bytes` bytes at p touch.
int64_t lines_of(const void* p, int64_t bytes) {
  if (bytes <= 0) return 0;
  const auto a = reinterpret_cast<uintptr_t>(p);
  return static_cast<int64_t>(((a + bytes - 1) >> 7) - (a >> 7)) + 1;
}

int64_t warm_lines(const Params& p) {
  // At most 1/32 of the state bytes the call streams (a window of C rows of 4096 bytes per output):
  // the contest's layouts need ~0.5%; an engine's block table sized for far longer requests than
  // this call's windows is left alone.
  // (In double: C has no upper bound, so the product could overflow 64 bits.)
  const double streamed = static_cast<double>(p.num_outputs) * static_cast<double>(p.compress_ratio) * kStateWidth *
                          static_cast<double>(sizeof(float));
  const double index = static_cast<double>(p.num_tokens * (8 + 4 + 8) + table_bytes(p));
  if (!compress_warm_indices() || index > streamed / 32) return 0;
  const int64_t lines = std::max({lines_of(p.slot_mapping, p.num_tokens * 8), lines_of(p.token_to_req, p.num_tokens * 4),
                                  lines_of(p.positions, p.num_tokens * 8), lines_of(p.block_table, table_bytes(p))});
  return lines < (int64_t{1} << 31) ? lines : 0;
}
}  // namespace

bool compress_warm_indices() { return warm_flag().load(std::memory_order_relaxed); }
void set_compress_warm_indices(bool on) { warm_flag().store(on, std::memory_order_relaxed); }
bool warms_indices(const Params& p) { return warm_lines(p) > 0; }

// The launch limits (outputs on grid x, a window's CTAs on grid y), checked before the plan's
// scratch is sized, allocated or written: a compress_ratio beyond 65535 splits of the largest split
// can never launch, and unchecked it made the plan's products and the scratch size wrap (a 2^60-ish
// ratio sized a 2 KB buffer that the index checks then wrote past).
SplitPlan checked_plan(const Params& p, int device) {
  LKV_CHECK(p.compress_ratio <= 65535 * kMaxRowsPerSplit, "compress_kv on CUDA supports compress_ratio <= ",
            65535 * kMaxRowsPerSplit, " (65535 splits of ", kMaxRowsPerSplit, " rows), got ", p.compress_ratio);
  LKV_CHECK(p.num_outputs <= 0x7fffffff, "compress_kv on CUDA supports at most 2^31 - 1 outputs, got ",
            p.num_outputs);
  const SplitPlan plan = plan_for(p, device);
  LKV_CHECK(plan.ctas_per_output() <= 65535, "compress_kv on CUDA: the plan's ", plan.ctas_per_output(),
            " CTAs per output exceed the grid's y limit of 65535 (compress_ratio=", p.compress_ratio, ")");
  return plan;
}

size_t workspace_bytes(const Params& p, int device) { return layout_for(p, checked_plan(p, device)).total; }

ValidationFailure validate(const Params& p, void* workspace, Stream stream) {
  int device = 0;
  LKV_CUDA_CHECK(cudaGetDevice(&device));  // the dispatcher's DeviceGuard made it the tensors' device
  const Layout l = layout_for(p, checked_plan(p, device));
  auto* base = static_cast<uint8_t*>(workspace);
  auto* owners = reinterpret_cast<int32_t*>(base + l.owners);
  auto* first_bad = reinterpret_cast<unsigned long long*>(base + l.first_bad);
  auto* record = reinterpret_cast<int64_t*>(base + l.first_bad + 8);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  LKV_CUDA_CHECK(cudaMemsetAsync(owners, 0xff, sizeof(int32_t) * p.num_slots, s));
  LKV_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xff, 8, s));
  ValidationFailure f;
  if (p.num_outputs > 0) {
    constexpr int kWarps = 8;
    const int64_t blocks = (p.num_outputs + kWarps - 1) / kWarps;
    validate_kernel<<<static_cast<unsigned>(blocks), kWarps * 32, 0, s>>>(p, owners, first_bad);
    LKV_CUDA_CHECK_LAUNCH();
    describe_kernel<<<1, 32, 0, s>>>(p, owners, first_bad, record);
    LKV_CUDA_CHECK_LAUNCH();
  }
  int64_t host[4];
  LKV_CUDA_CHECK(cudaMemcpyAsync(host, first_bad, sizeof(host), cudaMemcpyDeviceToHost, s));
  LKV_CUDA_CHECK(cudaStreamSynchronize(s));
  if (host[0] == -1) return f;  // 0xff..ff: no failure
  f.output = host[0];
  f.code = static_cast<int32_t>(host[1]);
  f.value = host[2];
  f.extra = host[3];
  return f;
}

void compress(const Params& p, bool functional, int64_t page_extent, void* workspace,
              int* counters, bool zero_counters, Stream stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  int device = 0;
  LKV_CUDA_CHECK(cudaGetDevice(&device));  // the dispatcher's DeviceGuard made it the tensors' device
  // (Already checked by workspace_bytes, which sized the scratch, before anything was written.)
  const SplitPlan plan = checked_plan(p, device);
  const int64_t num_pages = p.num_slots / p.page_size;
  if (functional && num_pages == 1)
    LKV_CUDA_CHECK(cudaMemsetAsync(p.kv, 0, page_extent, s));  // one page: its stride is no pitch
  else if (functional && num_pages > 1)
    LKV_CUDA_CHECK(cudaMemset2DAsync(p.kv, p.page_stride, 0, page_extent, num_pages, s));
  if (p.num_outputs == 0) return;
  const Layout l = layout_for(p, plan);
  auto* base = static_cast<uint8_t*>(workspace);
  float* partials = reinterpret_cast<float*>(base + l.partials);
  if (zero_counters && plan.merged())
    LKV_CUDA_CHECK(cudaMemsetAsync(counters, 0, sizeof(int) * p.num_outputs, s));
  const bool cluster = clusters_for(p, plan, device);
  unsigned long long* trace = nullptr;
  bool trace_back_to_back = false;
  if (TraceState& t = trace_state(); t.on.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(t.mu);
    const size_t n = static_cast<size_t>(p.num_outputs * plan.ctas_per_output()) * kTracePhases;
    trace_back_to_back = t.calls > 1;
    if (!trace_back_to_back || t.used == 0) {  // a single traced launch, or the first of several
      const size_t total = n * static_cast<size_t>(t.calls);
      if (total > t.capacity) {
        if (t.buf) LKV_CUDA_CHECK(cudaFree(t.buf));
        LKV_CUDA_CHECK(cudaMalloc(&t.buf, total * sizeof(unsigned long long)));
        t.capacity = total;
      }
      LKV_CUDA_CHECK(cudaMemsetAsync(t.buf, 0, total * sizeof(unsigned long long), s));
      t.last.num_outputs = p.num_outputs;
      t.last.ctas_per_output = plan.ctas_per_output();
      t.last.plan = plan;
      t.last.calls = 1;
      t.last.stamps.assign(total, 0);
    }
    if (!trace_back_to_back) {
      trace = t.buf;
    } else if (t.used < t.calls) {  // launches beyond the buffer run untraced
      LKV_CHECK(t.last.num_outputs == p.num_outputs && t.last.ctas_per_output == plan.ctas_per_output(),
                "compress_kv trace: calls traced back to back must share one grid");
      trace = t.buf + n * static_cast<size_t>(t.used);
      ++t.used;
    }
  }
  // A single traced launch is ordinary (its stamp buffer was just cleared by a memset); launches
  // traced back to back keep programmatic dependent launch, which is what they measure.
  const bool pdl = (trace == nullptr || trace_back_to_back) && compress_pdl_on(device);
  Params q = p;
  q.warm_lines = static_cast<uint32_t>(warm_lines(p));
  if (q.fp8) launch_compress_kernel<true>(q, plan, partials, counters, cluster, pdl, trace, stream);
  else launch_compress_kernel<false>(q, plan, partials, counters, cluster, pdl, trace, stream);
}

}  // namespace latentkv::compress::cuda
