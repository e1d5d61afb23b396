#!/usr/bin/env bash
# The merge check of the narrow kernel's barrier-1 arrival (warpgroup 1 `bar.arrive`), in one call:
# racecheck of the LKV_RACECHECK_BARRIERS build on the narrow kernel's three tests, the whole
# lkv_cuda_tests on the default build, narrow_arrive_run.sh's A/B against main's binaries (its
# synccheck and racecheck skipped unless LKV_SC_SECONDS / LKV_RC_SECONDS are given), and with
# LKV_REFRESH=1 on an H200, the H200 decode and dense files of BASE's binaries (main's) last, if
# the call has run less than LKV_REFRESH_BY seconds (440).
#   bash bench/probes/narrow_arrive_merge_run.sh NEW.tar.xz NEW_RACECHECK.tar.xz BASE.tar.xz [ROUNDS]
set -uo pipefail
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu"
mkdir -p brc bnew && tar xJf "$2" -C brc && tar xJf "$1" -C bnew
LKV_TEST_KERNELS=sm90 timeout "${LKV_RC_BUILD_SECONDS:-200}" compute-sanitizer --tool racecheck \
  --racecheck-report hazard --error-exitcode 9 brc/lkv_cuda_tests \
  --gtest_filter='DenseCuda.Sm90NarrowBothForms:DenseCuda.Sm90Narrow32Rows:DecodeCuda.Sm90NarrowRowsAgreeWithWideRows' \
  >"$OUT/racecheck-rcbuild.log" 2>&1
echo "racecheck (racecheck build) rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/racecheck-rcbuild.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/racecheck-rcbuild.log" | tr '\n' ' ') at ${SECONDS}s"
timeout "${LKV_SUITE_SECONDS:-200}" bnew/lkv_cuda_tests >"$OUT/cuda-tests.log" 2>&1
echo "lkv_cuda_tests rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$OUT/cuda-tests.log" | tr '\n' ' ') at ${SECONDS}s"
gzip -f "$OUT/racecheck-rcbuild.log" "$OUT/cuda-tests.log"
LKV_SC_SECONDS="${LKV_SC_SECONDS:-1}" LKV_RC_SECONDS="${LKV_RC_SECONDS:-1}" bash bench/probes/narrow_arrive_run.sh "$1" "$3" "${4:-2}"
echo "A/B done at ${SECONDS}s"
if [ "${LKV_REFRESH:-0}" = 1 ] && [[ "$gpu" == *H200* ]] && [ "$SECONDS" -lt "${LKV_REFRESH_BY:-440}" ]; then
  OUT="$OUT/refresh" LKV_PREBUILT="$3" bash scripts/gpu.sh build decode dense | tail -8
fi
