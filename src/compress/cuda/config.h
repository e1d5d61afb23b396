// compress/cuda/config.h: the compressor kernel's tile constants, each with its reason.
#pragma once

#include "compress/params.h"
#include "compress/plan.h"

namespace latentkv::compress::cuda {

// A row of 512 values (then 512 scores) is covered by 128 threads with one 16-byte load each
// (4 floats): 2 KB contiguous per warp-quad, fully coalesced.
inline constexpr int kLanesPerRow = kDim / 4;  // 128
// Two row groups per CTA at full width: 256 threads, so a CTA keeps 2 rows x 4 unrolled x 2 loads x
// 16 B x 128 = 32 KB in flight, and 4 resident CTAs per SM cover the HBM latency-bandwidth product.
// A CTA streaming a slice of 512 / S dims has 2S row groups of 128 / S lanes: the same 32 KB.
// (The merge and the finalisation always use the full-width mapping: 2 groups of 128 lanes.)
inline constexpr int kRowGroups = 2;
inline constexpr int kThreads = kLanesPerRow * kRowGroups;  // 256
// Rows each group loads before it consumes them: 8 independent 16-byte loads per thread in flight,
// and one rescale of the running sums per 4 rows instead of per row.
inline constexpr int kUnroll = 4;
static_assert(kRowGroups * kUnroll == kRowAlign, "the planner's row alignment is one CTA step");
// Resident CTAs per SM assumed by the planner: 256 threads at 64 registers (ptxas -v) fill the
// 64K-register file four times.
inline constexpr int kCtasPerSm = 4;
// The most splits one output's cluster may hold: 16, the largest (non-portable) cluster an
// H100/H200 runs; a plan with more splits merges through global memory.
inline constexpr int64_t kMaxClusterSplits = 16;
// Timestamps a traced launch records per CTA (bench compress --trace): entry, header resolved, row
// table ready, rows streamed, row groups merged, ticket taken, partials loaded (thread 0's merge of
// the splits' triples done, so its loads have returned), splits merged (the two row groups'
// results exchanged), norm (RMSNorm's sum of squares reduced), record written; then, appended so
// that the others keep their numbers, boundary (the CTA's boundary index loaded) and table (its
// first block-table entry loaded).
inline constexpr int kTracePhases = 12;
inline constexpr int kTraceWritten = 9;

}  // namespace latentkv::compress::cuda
