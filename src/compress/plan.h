// compress/plan.h: how compress_kv's window work is split across CTAs (a pure function, tested on
// the CPU). Few outputs with long windows must still fill every SM, so a window is cut into splits
// whose partial (max, sum, weighted sum) triples are merged by the last CTA of each output.
#pragma once

#include <algorithm>
#include <cstdint>

namespace latentkv::compress {

struct SplitPlan {
  int64_t num_splits = 1;      // CTAs per output
  int64_t rows_per_split = 1;  // window rows per CTA (the last split may have fewer)
};

inline constexpr int64_t kMaxRowsPerSplit = 256;  // bounds the prologue's row-offset table in smem
inline constexpr int64_t kMinRowsPerSplit = 16;   // below this the merge costs more than it saves
inline constexpr int64_t kRowAlign = 8;           // 2 row groups x 4 rows unrolled per step

// target_ctas: how many CTAs keep the GPU busy (a couple of waves of resident CTAs).
inline SplitPlan plan_splits(int64_t num_outputs, int64_t C, int64_t target_ctas) {
  SplitPlan plan;
  num_outputs = std::max<int64_t>(num_outputs, 1);
  int64_t splits = (target_ctas + num_outputs - 1) / num_outputs;
  const int64_t max_splits = std::max<int64_t>(1, C / kMinRowsPerSplit);
  splits = std::clamp<int64_t>(splits, 1, max_splits);
  splits = std::max(splits, (C + kMaxRowsPerSplit - 1) / kMaxRowsPerSplit);
  int64_t rows = (C + splits - 1) / splits;
  rows = std::min(kMaxRowsPerSplit, (rows + kRowAlign - 1) / kRowAlign * kRowAlign);
  plan.rows_per_split = rows;
  plan.num_splits = (C + rows - 1) / rows;
  return plan;
}

}  // namespace latentkv::compress
