#!/usr/bin/env bash
# The narrow kernel with warpgroup 1 arriving at barrier 1 (bar.arrive) against main's binaries:
# dense v32_fp8 pages and the tensor-parallel cases, alternated, then synccheck and racecheck.
#   bash bench/probes/narrow_arrive_run.sh NEW.tar.xz BASE.tar.xz [ROUNDS]
set -uo pipefail
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT" bn bb
tar xJf "$1" -C bn && tar xJf "$2" -C bb
for r in $(seq "${3:-2}"); do
  for b in bn bb; do
    $b/latentkv bench dense --device cuda --filter fp8_b128_sk --json "$OUT/dense-fp8-$b-$r.json" >/dev/null 2>&1
    $b/latentkv bench decode --device cuda --filter tp_ --json "$OUT/decode-tp-$b-$r.json" >/dev/null 2>&1
  done
done
python3 - "$OUT" "${3:-2}" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
for op in ("dense-fp8", "decode-tp"):
    t = {b: [{c["name"]: c["time_us"] for c in json.load(open(f"{out}/{op}-{b}-{r}.json"))["cases"]} for r in range(1, rounds + 1)] for b in ("bn", "bb")}
    for name in t["bn"][0]:
        new = [x[name] for x in t["bn"]]; base = [x[name] for x in t["bb"]]
        print(f"{name:40s} new {' '.join(f'{v:7.1f}' for v in new)}  base {' '.join(f'{v:7.1f}' for v in base)}  new/base {sum(new)/sum(base):.3f}")
PY
timeout "${LKV_SC_SECONDS:-100}" compute-sanitizer --tool synccheck --error-exitcode 9 bn/lkv_cuda_tests \
  --gtest_filter='DenseCuda.Sm90NarrowBothForms:DenseCuda.Sm90Narrow32Rows:DecodeCuda.Sm90NarrowRowsAgreeWithWideRows:DecodeCuda.CornerCases' >"$OUT/synccheck.log" 2>&1
echo "synccheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/synccheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/synccheck.log" | tr '\n' ' ')"
timeout "${LKV_RC_SECONDS:-80}" compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 bn/lkv_cuda_tests \
  --gtest_filter='DenseCuda.Sm90NarrowBothForms:DenseCuda.Sm90Narrow32Rows' >"$OUT/racecheck.log" 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/racecheck.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/racecheck.log" | tr '\n' ' ')"
(cd "$OUT" && tar czf narrow-arrive.tgz ./*.json ./*.log && rm -f ./*.json ./*.log)
