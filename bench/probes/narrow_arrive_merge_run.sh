#!/usr/bin/env bash
# The merge check of the narrow kernel's barrier-1 arrival (warpgroup 1 `bar.arrive`), in one call:
# racecheck of the LKV_RACECHECK_BARRIERS build on the narrow kernel's three tests, then
# narrow_arrive_run.sh's A/B and synccheck against main's binaries; with LKV_REFRESH=1 on an H200,
# main's decode and dense files first.
#   bash bench/probes/narrow_arrive_merge_run.sh NEW.tar.xz NEW_RACECHECK.tar.xz BASE.tar.xz [ROUNDS]
set -uo pipefail
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu"
if [ "${LKV_REFRESH:-0}" = 1 ] && [[ "$gpu" == *H200* ]]; then
  OUT="$OUT/refresh" LKV_PREBUILT="$3" bash scripts/gpu.sh build decode dense | tail -8
fi
mkdir -p brc && tar xJf "$2" -C brc
LKV_TEST_KERNELS=sm90 timeout "${LKV_RC_BUILD_SECONDS:-220}" compute-sanitizer --tool racecheck \
  --racecheck-report hazard --error-exitcode 9 brc/lkv_cuda_tests \
  --gtest_filter='DenseCuda.Sm90NarrowBothForms:DenseCuda.Sm90Narrow32Rows:DecodeCuda.Sm90NarrowRowsAgreeWithWideRows' \
  >"$OUT/racecheck-rcbuild.log" 2>&1
echo "racecheck (racecheck build) rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/racecheck-rcbuild.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/racecheck-rcbuild.log" | tr '\n' ' ')"
gzip -f "$OUT/racecheck-rcbuild.log"
LKV_RC_SECONDS="${LKV_RC_SECONDS:-1}" bash bench/probes/narrow_arrive_run.sh "$1" "$3" "${4:-2}"
