// compress/plan.h: how compress_kv's window work is split across CTAs (a pure function, tested on
// the CPU). Few outputs with long windows must still fill every SM, so a window can be cut into
// splits whose partial (max, sum, weighted sum) triples are merged by the last CTA of each output.
//
// The choice is a small cost model: a CTA costs its rows plus a fixed overhead (the dependent loads
// of its prologue, and for splits the publish-and-merge of a triple), and the grid runs in waves of
// `resident_ctas`; the plan maximises useful rows per unit of (waves x CTA time).
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
// A CTA's fixed cost in row-equivalents: ~4 dependent memory latencies before its first row load
// and after its last, each worth about 1.5 rows of streaming at a CTA's share of bandwidth.
inline constexpr double kCtaOverheadRows = 6.0;

// resident_ctas: CTAs the GPU runs at once (SMs x CTAs per SM).
inline SplitPlan plan_splits(int64_t num_outputs, int64_t C, int64_t resident_ctas) {
  num_outputs = std::max<int64_t>(num_outputs, 1);
  resident_ctas = std::max<int64_t>(resident_ctas, 1);
  SplitPlan best;
  double best_cost = 0;
  bool have = false;
  const int64_t min_rows = std::min(kMinRowsPerSplit, (C + kRowAlign - 1) / kRowAlign * kRowAlign);
  for (int64_t rows = min_rows; rows <= kMaxRowsPerSplit; rows += kRowAlign) {
    const int64_t splits = (C + rows - 1) / rows;
    const int64_t real_rows = (C + splits - 1) / splits;  // balanced split
    const int64_t ctas = num_outputs * splits;
    const int64_t waves = (ctas + resident_ctas - 1) / resident_ctas;
    const double merge = splits > 1 ? kCtaOverheadRows / 2 : 0.0;
    // Time ~ waves x (rows + overhead) of one CTA; ties go to fewer splits.
    const double cost = static_cast<double>(waves) * (static_cast<double>(real_rows) + kCtaOverheadRows + merge);
    if (!have || cost < best_cost - 1e-9) {
      best_cost = cost;
      best.num_splits = splits;
      best.rows_per_split = (real_rows + kRowAlign - 1) / kRowAlign * kRowAlign;
      have = true;
    }
    if (rows >= C) break;
  }
  best.num_splits = (C + best.rows_per_split - 1) / best.rows_per_split;
  return best;
}

}  // namespace latentkv::compress
