#!/usr/bin/env bash
# One device call: compute-sanitizer's racecheck of the narrow Hopper kernel's warp-specialised form
# on sparse lists (bench/NOTES.md v63: three reports between the attended-mask word's write,
# narrow.cuh resolve_store, and its read in products, during DecodeCuda.Sm90NarrowRowsAgreeWithWideRows
# on an H200; the protocol orders both by the full/empty mbarriers). For each archive, while time is
# left: that test, then DecodeCuda.CornerCases with the form forced (LKV_SM90_NARROW_WS=1), each with
# the test's output line-buffered (stdbuf), so that a report lands beside the case that made it
# (redirected, stdout is block-buffered and the reports fell mid-line of an unrelated case).
# Further archives run the same (bench/NOTES.md v64 compared main before and after its consumers all
# arrived on the empty barrier: 3 reports before, 0 after).
# Here: LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/NAME.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
# there (carry them): bash bench/probes/narrow_ws_racecheck_run.sh build-pk/NAME.tar.xz [build-pk/OTHER.tar.xz ...]
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
n=0
for archive in "$@"; do
  n=$((n + 1)); dir=build-rc-$n
  unpack "$archive" "$dir" || exit 1
  for t in "DecodeCuda.Sm90NarrowRowsAgreeWithWideRows|" "DecodeCuda.CornerCases|LKV_SM90_NARROW_WS=1"; do
    filter=${t%%|*} env_set=${t#*|}
    [ "$(left)" -gt 60 ] || break 2
    log=$OUT/racecheck-$n-${filter#*.}.log t0=$(date +%s)
    env $env_set LKV_TEST_KERNELS=sm90 timeout $(( $(left) > 200 ? 180 : $(left) - 20 )) stdbuf -oL -eL \
      compute-sanitizer --tool racecheck "$dir/lkv_cuda_tests" --gtest_filter="$filter" >"$log" 2>&1
    summary "racecheck $n ${env_set:+($env_set) }$filter" $? $(( $(date +%s) - t0 )) "$log"
    # The case each report came from (the first case line after it: a case prints once it has run),
    # and the kernels named.
    awk '/Race reported/ {hit = 1} /^\[(decode|dense)\]/ && hit {print; hit = 0}' "$log" | sort | uniq -c | head -10
    grep -o "Race reported between [A-Za-z]* access at void latentkv::decode::[a-z0-9_]*::[a-z_]*<[^(]*" "$log" |
      cut -c1-200 | sort | uniq -c | head -10
    gzip -f "$log"
  done
done
echo "left $(left) s"
