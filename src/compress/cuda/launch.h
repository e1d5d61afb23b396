// compress/cuda/launch.h: the CUDA backend's entry points (declarations only; no CUDA headers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "compress/params.h"
#include "compress/plan.h"
#include "latentkv/tensor.h"

namespace latentkv::compress::cuda {

// The first invalid output found on the device (code 0: none).
struct ValidationFailure {
  int32_t code = 0;
  int64_t output = -1;
  int64_t value = 0;
  int64_t extra = 0;
};

// Bytes of scratch workspace compress() needs for these parameters (partials, validation).
size_t workspace_bytes(const Params& p, int device);

// Runs the index checks on the device and waits for them (this synchronises the stream).
ValidationFailure validate(const Params& p, void* workspace, Stream stream);

// Compresses. page_extent: bytes of each page that belong to the cache tensor (zeroed first in
// functional mode). workspace: workspace_bytes() bytes of scratch. The per-output split counters
// come from cached_counters(): zero when allocated, and every completed call leaves them zero.
// counters: [num_outputs] split counters, zero on entry unless zero_counters asks the call to clear
// them first (caller-provided workspaces); every completed call leaves them zero.
void compress(const Params& p, bool functional, int64_t page_extent, void* workspace,
              int* counters, bool zero_counters, Stream stream);


}  // namespace latentkv::compress::cuda

namespace latentkv::compress::cuda {
// One instantiation per payload kind (instantiations/*.cu).
// cluster: the splits of each output form a thread-block cluster (sm_90; 2 <= num_splits <=
// kMaxClusterSplits) and merge through distributed shared memory.
// pdl: with programmatic dependent launch (the device must run the sm_90 code: compress_pdl_on).
// trace: null, or kTracePhases globaltimer stamps per CTA (see set_compress_trace).
template <bool kFp8>
void launch_compress_kernel(const Params& p, const SplitPlan& plan, float* partials, int* counters,
                            bool cluster, bool pdl, unsigned long long* trace, Stream stream);

// Whether clusters of the plan's size fit on `device` for this payload kind (asked once).
template <bool kFp8>
bool cluster_launch_fits(const Params& p, const SplitPlan& plan, int device);

// Whether split outputs merge inside thread-block clusters: off by default (measured slower on the
// H200); LKV_COMPRESS_CLUSTER=1 or set_compress_clusters(true) turns it on (the results are the
// same bytes either way), used where
// the device runs the sm_90 code (compute capability 9.0), the plan has 2..kMaxClusterSplits splits
// and such clusters fit.
bool compress_clusters();
void set_compress_clusters(bool on);
// Whether compress() on `device` runs these parameters' CTAs as clusters, either path (what the
// tests ask to know that they exercised it).
bool merges_in_clusters(const Params& p, int device);

// Programmatic dependent launch of the compressor kernel (kernel.cuh says what it overlaps): on by
// default; LKV_COMPRESS_PDL=0 (read once per process) or set_compress_pdl(false) turns it off, for
// measuring it. compress_pdl_on(device): whether compress() on `device` launches with it now (also
// needs the device to run the sm_90 code, whose griddepcontrol instructions older targets lack).
// Traced launches never use it (their stamp buffer is cleared by a memset just before them).
bool compress_pdl();
void set_compress_pdl(bool on);
bool compress_pdl_on(int device);

// Dimension slices of an unsplit window finishing inside their thread-block cluster (kernel.cuh):
// on by default where the device runs the sm_90 code (compute capability 9.0) and such clusters fit;
// the planner then costs those plans without a merge. LKV_COMPRESS_SLICE_CLUSTER=0 (read once per
// process) or set_compress_slice_clusters(false) turns it off (the slices then merge globally, with
// the same bytes for the same plan). merges_in_clusters() also answers for this path.
bool compress_slice_clusters();
void set_compress_slice_clusters(bool on);

// The L2 prefetch of the index arrays at the kernel's entry (kernel.cuh, step 1): on by default
// where those arrays (slots, requests, positions: 20 bytes per token; the block table) are at most
// 1/32 of the state bytes the call streams; LKV_COMPRESS_WARM_INDICES=0 (read once per process) or
// set_compress_warm_indices(false) turns it off. The bytes written are the same either way.
// warms_indices(p): whether compress() prefetches for these parameters.
bool compress_warm_indices();
void set_compress_warm_indices(bool on);
bool warms_indices(const Params& p);

// The plan compress() uses for these parameters on `device`.
SplitPlan plan_for(const Params& p, int device);
// plan_for after the launch limits are checked (an error naming the value otherwise); every path
// that sizes or uses the scratch goes through it first.
SplitPlan checked_plan(const Params& p, int device);
// Every call runs `splits` window splits of `slices` dimension slices (for tests and measurements;
// a plan the kernel cannot run, or splits 0, leaves the choice to the planner).
void set_compress_plan_override(int64_t splits, int64_t slices);
// The largest dimension slicing the planner may choose: kMaxDimSlices by default,
// LKV_COMPRESS_MAX_SLICES=1 (or set_compress_max_slices(1)) restores window splits only.
int64_t compress_max_slices();
void set_compress_max_slices(int64_t max_slices);

// Phase tracing for the benchmark: while on, each compress() launch records kTracePhases
// %globaltimer stamps (ns) per CTA in a library-owned buffer (zeroed before the launch; stamps a
// CTA does not reach stay 0); last_compress_trace() waits for the device and returns the last
// launch's stamps, CTA (output, split x slices) major, with the grid it ran.
void set_compress_trace(bool on);
struct CompressTrace {
  int64_t num_outputs = 0, ctas_per_output = 0;
  SplitPlan plan;
  int64_t calls = 1;                       // launches traced (set_compress_trace_calls)
  std::vector<unsigned long long> stamps;  // [calls][CTAs][kTracePhases]
};
CompressTrace last_compress_trace();
// Traces of calls queued back to back: with calls > 1, turning tracing on clears room for that many
// launches (of one grid), each traced launch takes the next and keeps programmatic dependent
// launch, and last_compress_trace() returns those traced since tracing was turned on. 1 (the
// default) traces each launch alone.
void set_compress_trace_calls(int64_t calls);
}  // namespace latentkv::compress::cuda
