// compress/plan.h: how compress_kv's window work is split across CTAs (a pure function, tested on
// the CPU). Few outputs with long windows must still fill every SM. Two cuts are available:
//  - window splits: an output's C rows are cut into splits whose partial (max, sum, weighted sum)
//    triples are merged by the last CTA of the output;
//  - dimension slices: the 512 dims are cut into 1, 2, 4 or 8 slices, each streamed by its own CTA
//    (the per-dimension softmax is independent across dims; only the RMSNorm and the record's
//    quantization need all of them, and the last CTA does those; or, for an unsplit window on sm_90,
//    each slice finishes its own dims after one exchange inside its thread-block cluster).
// Either way the last CTA reads every partial triple of its output back from L2; it reads them in
// rounds of 4 splits (2 row groups x 2 loads in flight), so many window splits cost one L2 round trip
// per 4 splits, while dimension slices of one split cost a single round. Slicing is what keeps the
// merge short when C is large and outputs are few.
//
// The choice is a small cost model in row-equivalents (one full-width row streamed by one CTA at its
// share of HBM bandwidth when every resident slot holds a CTA): a CTA costs its rows x its width
// fraction x its share plus a fixed overhead (the dependent loads of its prologue), the grid runs
// in waves of `resident_ctas`, a merged output adds the publish-and-ticket latency plus one L2
// round per 4 splits, and each level of a CTA's row-group merge tree (log2 of 2 x slices) adds its
// barrier. A wave of fewer CTAs than the resident slots streams each faster, down to the share of
// kSaturatingFraction x resident CTAs, which already keep HBM busy: on the H200 a grid of 256 CTAs
// (~2 per SM) streamed the contest cases as fast as 512 and needed half the merges (bench/NOTES.md
// v35). Among the plans within kTieRows of the lowest cost, the one with the fewest CTAs wins
// (then the lower cost, then fewer slices).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "latentkv/numerics.h"  // LKV_HD

namespace latentkv::compress {

struct SplitPlan {
  int64_t num_splits = 1;      // window splits per output
  int64_t rows_per_split = 1;  // window rows per split (the last split may have fewer)
  int64_t dim_slices = 1;      // CTAs per split, each streaming kDim / dim_slices dims (1, 2, 4, 8)
  LKV_HD int64_t ctas_per_output() const { return num_splits * dim_slices; }
  LKV_HD bool merged() const { return ctas_per_output() > 1; }
};

inline constexpr int64_t kMaxRowsPerSplit = 256;  // bounds the prologue's row-offset table in smem
inline constexpr int64_t kMinRowsPerSplit = 16;   // below this the merge costs more than it saves
inline constexpr int64_t kMaxDimSlices = 8;       // 64 dims (256 contiguous bytes of a row) per CTA
// A CTA streams with 2 x dim_slices row groups of 4 unrolled rows: a step of 8 x dim_slices rows.
inline constexpr int64_t kRowAlign = 8;
// A CTA's fixed cost in row-equivalents: ~4 dependent memory latencies before its first row load
// and after its last, each worth about 1.5 rows of streaming at a CTA's share of bandwidth.
inline constexpr double kCtaOverheadRows = 6.0;
// A merged output's publish, fence and ticket (~2 dependent latencies), and each L2 round of the
// final merge (one latency).
inline constexpr double kMergeTicketRows = 3.0;
inline constexpr double kMergeRoundRows = 1.5;
inline constexpr int64_t kMergeSplitsPerRound = 4;
// Each level of the row-group merge tree: a barrier and a shared-memory exchange after the CTA's
// slowest warp, ~0.37 us on the H200 (streamed->groups 1.06 / 1.42 / 1.81 us for 2 / 3 / 4 levels,
// bench/NOTES.md v35), with one row-equivalent ~0.49 us (4 KB x 528 CTAs at 4.4 TB/s).
inline constexpr double kTreeLevelRows = 0.75;
// The fraction of the resident slots whose CTAs (32 KB of loads in flight each) saturate HBM.
inline constexpr double kSaturatingFraction = 0.45;
inline constexpr double kTieRows = 0.5;
// Slices of an unsplit window that finish inside their thread-block cluster (sm_90: the CUDA
// kernel's slice_finish) pay no merge: one cluster barrier after the slowest of the S slices, with
// an exchange of one float per lane, instead of the publish, ticket and L2 round of a merge (about
// 2.3 us on the H200 for the 4-split merge, bench/NOTES.md v35). Charged per log2(S): fitted to the
// H200's times of 1 x 2, 1 x 4 and 1 x 8 against the merged plans (bench/NOTES.md v36: 1.15, 2.2
// and 3.6 row-equivalents). The fit predates the branchless merge, which shortened both the tree
// and the merge; a plan sweep after it found the picks still the fastest (v36 item 6).
inline constexpr double kClusterExchangeRows = 1.15;

// resident_ctas: CTAs the GPU runs at once (SMs x CTAs per SM). max_slices: the largest dimension
// slicing allowed (a power of two <= kMaxDimSlices; 1 turns slicing off). slice_clusters: unsplit
// sliced windows finish in clusters (no merge; kClusterExchangeRows per log2(slices) instead).
inline SplitPlan plan_splits(int64_t num_outputs, int64_t C, int64_t resident_ctas,
                             int64_t max_slices = kMaxDimSlices, bool slice_clusters = false) {
  num_outputs = std::max<int64_t>(num_outputs, 1);
  C = std::max<int64_t>(C, 1);
  resident_ctas = std::max<int64_t>(resident_ctas, 1);
  max_slices = std::clamp<int64_t>(max_slices, 1, kMaxDimSlices);
  // Every candidate's cost, then the choice among those within kTieRows of the lowest.
  struct Candidate {
    SplitPlan plan;
    int64_t ctas;
    double cost;
  };
  std::vector<Candidate> candidates;
  const int64_t min_rows = std::min(kMinRowsPerSplit, (C + kRowAlign - 1) / kRowAlign * kRowAlign);
  for (int64_t slices = 1; slices <= max_slices; slices *= 2) {
    const int64_t align = kRowAlign * slices;
    for (int64_t rows = min_rows; rows <= kMaxRowsPerSplit; rows += kRowAlign) {
      const int64_t splits = (C + rows - 1) / rows;
      const int64_t real_rows = (C + splits - 1) / splits;  // balanced split
      const int64_t ctas = num_outputs * splits * slices;
      const int64_t waves = (ctas + resident_ctas - 1) / resident_ctas;
      const double width = 1.0 / static_cast<double>(slices);
      // A sliced CTA walks its rows in steps of `align`: a partial step costs a whole one.
      const double steps_rows = static_cast<double>((real_rows + align - 1) / align * align);
      int log_slices = 0;
      for (int64_t g = slices; g > 1; g /= 2) ++log_slices;
      const double merge = splits == 1 && slices > 1 && slice_clusters ? kClusterExchangeRows * log_slices
                           : splits * slices > 1
                               ? kMergeTicketRows +
                                     kMergeRoundRows * static_cast<double>(
                                         (splits + kMergeSplitsPerRound - 1) / kMergeSplitsPerRound)
                               : 0.0;
      const int64_t wave_ctas = std::min(ctas, resident_ctas);
      const double share = std::max(static_cast<double>(wave_ctas), kSaturatingFraction * static_cast<double>(resident_ctas)) /
                           static_cast<double>(resident_ctas);
      int levels = 1;  // log2(2 x slices)
      for (int64_t g = 2 * slices; g > 2; g /= 2) ++levels;
      const double cost = static_cast<double>(waves) * (steps_rows * width * share + kCtaOverheadRows) + merge +
                          kTreeLevelRows * levels;
      SplitPlan plan;
      plan.num_splits = splits;
      plan.rows_per_split = (real_rows + kRowAlign - 1) / kRowAlign * kRowAlign;
      plan.dim_slices = slices;
      candidates.push_back({plan, ctas, cost});
      if (rows >= C) break;
    }
  }
  double lowest = candidates.front().cost;
  for (const Candidate& c : candidates) lowest = std::min(lowest, c.cost);
  // Within the margin: fewest CTAs, then lowest cost, then the first visited (fewer slices).
  const Candidate* pick = nullptr;
  for (const Candidate& c : candidates) {
    if (c.cost > lowest + kTieRows) continue;
    if (pick == nullptr || c.ctas < pick->ctas || (c.ctas == pick->ctas && c.cost < pick->cost - 1e-9)) pick = &c;
  }
  SplitPlan best = pick->plan;
  best.rows_per_split = std::min(best.rows_per_split, kMaxRowsPerSplit);
  best.num_splits = (C + best.rows_per_split - 1) / best.rows_per_split;
  return best;
}

}  // namespace latentkv::compress
