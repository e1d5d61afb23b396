// compress/check.h: judging a backend's compressor records against the float64 oracle.
//
// A reordered fp32 sum cannot reproduce any one reference's bytes everywhere, so a record is judged
// as SPEC.md section 3 says: every payload byte must equal the oracle's, except where the oracle's y
// lies within the honest fp32 error (OracleRecord::y_tol) of a bf16 rounding boundary; then any byte
// reachable from the bf16 values in [y - tol, y + tol] is accepted and counted as an ambiguity. A scale
// byte must equal the oracle's unless the group's maximum is itself ambiguous in that way. RoPE bf16
// values must be within 1 bf16 ulp of the float64 rotation of some y within its tolerance
// (OracleRecord::rope_tol, then the ulp), and the pad byte must be 0.
#pragma once

#include <cstdint>
#include <string>

#include "compress/params.h"

namespace latentkv::compress {

struct CheckReport {
  int64_t records = 0;           // records judged (outputs with a slot >= 0)
  int64_t bytes = 0;             // bytes judged
  int64_t differing_bytes = 0;   // bytes that differ from the oracle's own bytes
  int64_t ambiguous_accepted = 0;  // of those, NoPE payload or scale bytes accepted as ambiguities
  int64_t rope_accepted = 0;       // of those, RoPE bytes within the RoPE tolerance
  int64_t failures = 0;          // bytes that are wrong
  std::string first_failure;     // description of the first wrong byte
  bool ok() const { return failures == 0; }
};

// p: the inputs (host memory); result: a host copy of the cache written by the backend, with the
// geometry of p.kv (p.kv itself is not read).
CheckReport check_records(const Params& p, const uint8_t* result);

}  // namespace latentkv::compress
