// compress/cpu: the CPU backends of compress_kv and the float64 oracle used to judge every backend.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compress/cpu/pool.h"
#include "compress/params.h"

namespace latentkv::compress {

// Float64 oracle: computes each record with double arithmetic, written to read like the math, and
// writes it (same bytes layout as the fast paths). Inputs must already be validated.
void compress_oracle(const Params& p);

// Fast fp32 path: OpenMP over outputs (or over (output, dim range) pairs when outputs are few),
// the window streamed once in chunks of 8 rows with one rescale per chunk, pooled by pool.h's
// kernel for the widest instruction set the CPU runs. The dim ranges never change the bytes; the
// instruction set may, in the last bit of a value (pool.h).
struct CpuFastOptions {
  std::optional<CpuIsa> isa;  // default: default_cpu_isa()
  int dim_splits = 0;  // ranges per window, multiples of kPoolDimAlign dims; 0: cpu_dim_splits()
};
void compress_cpu_fast(const Params& p, const CpuFastOptions& opt = {});

// How many dim ranges (1, 2, 4 or 8) the fast path cuts each window into, so that both cores of a
// small machine work even on one or three outputs (a serving engine's decode step): the cut that
// keeps the threads busiest, counting how evenly the tasks fall over the threads (the schedule runs
// them in rounds) and 10% lost per halving of the range (shorter runs of each row, and the records
// written in a second loop). Measured on 2 cores, AVX-512, 1 output of C = 512: 54 us whole,
// 31 / 34 / 38 us in 2 / 4 / 8 ranges; 2 outputs: 57 us whole, 58 us in 2 ranges.
inline int cpu_dim_splits(int64_t num_outputs, int num_threads) {
  int best = 1;
  double best_use = 0.0;
  double kept = 1.0;  // 0.9 per halving
  for (int splits = 1; splits <= 8; splits *= 2, kept *= 0.9) {
    const int64_t tasks = num_outputs * splits;
    const int64_t rounds = (tasks + num_threads - 1) / num_threads;
    if (rounds == 0) break;
    const double use =
        static_cast<double>(tasks) / static_cast<double>(rounds * num_threads) * kept;
    if (use > best_use + 1e-9) {
      best = splits;
      best_use = use;
    }
  }
  return best;
}

// The oracle's view of one output, for judging a backend's bytes (see check.h).
struct OracleRecord {
  double y[kDim];      // normalised latent before any rounding: c * rsqrt(mean(c^2) + eps) * w
  double y_tol[kDim];  // how far an fp32 computation of y may honestly land from y
  double rope[kRope];  // rotated RoPE values (from the fp32-rounded y, as every backend rotates)
  double rope_tol[kRope];  // how far an fp32 rotation of an honest fp32 y may land from rope
};
OracleRecord oracle_record(const Params& p, int64_t i);

}  // namespace latentkv::compress
