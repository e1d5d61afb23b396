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

// Fast fp32 path: OpenMP over outputs, the window streamed once in chunks of 8 rows with one
// rescale per chunk, pooled by pool.h's kernel for the widest instruction set the CPU runs. The
// instruction set may change the bytes in the last bit of a value (pool.h).
struct CpuFastOptions {
  std::optional<CpuIsa> isa;  // default: default_cpu_isa()
};
void compress_cpu_fast(const Params& p, const CpuFastOptions& opt = {});

// The oracle's view of one output, for judging a backend's bytes (see check.h).
struct OracleRecord {
  double y[kDim];      // normalised latent before any rounding: c * rsqrt(mean(c^2) + eps) * w
  double y_tol[kDim];  // how far an fp32 computation of y may honestly land from y
  double rope[kRope];  // rotated RoPE values (from the fp32-rounded y, as every backend rotates)
  double rope_tol[kRope];  // how far an fp32 rotation of an honest fp32 y may land from rope
};
OracleRecord oracle_record(const Params& p, int64_t i);

}  // namespace latentkv::compress
