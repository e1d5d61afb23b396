#!/usr/bin/env bash
# One device call for the narrow kernel's warp-specialised form (LKV_SM90_NARROW_WS=1, bench/NOTES.md
# v60), in order while time is left: its two tests; a same-run A/B of the base build, the new
# build's default (two CTAs per SM), the new build with the form on and any variants with it on, on
# the cases the narrow kernel runs and controls, then on the tensor-parallel cases with sorted
# index lists; memcheck and racecheck of the adversarial-index tests with the form on; ncu's
# throughput sections of both forms (LKV_WS_PROFILE=1); the decode and dense suites with it on.
# Here: LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/NAME.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
# there (carry them): bash bench/probes/narrow_ws_run.sh ROUNDS BASE_LABEL=ARCHIVE NEW_LABEL=ARCHIVE [LABEL=ARCHIVE...]
# (the further archives: variants of the form, e.g. narrow_ws_prefetch.patch applied, run with it on)
set -u
source "$(dirname "$0")/call_lib.sh"
ab_start "${1:-2}" "${2:-main=build-pk/main60.tar.xz}" "${3:-nws=build-pk/nws.tar.xz}" || exit 1
t0=$(date +%s)
timeout 150 build-gpu-new/lkv_cuda_tests \
  --gtest_filter='DecodeCuda.Sm90NarrowRowsAgreeWithWideRows:DenseCuda.Sm90NarrowBothForms' >"$OUT/tests-ws.log" 2>&1
summary "the form's tests" $? $(( $(date +%s) - t0 )) "$OUT/tests-ws.log"
grep -E "^\[  FAILED|Failure" "$OUT/tests-ws.log" | head -20
# with_form DIR BINARY DESCRIPTION: DIR/latentkv runs BINARY with the form on (a label for bins_ab.sh).
with_form() { with_env "$1" "$2" LKV_SM90_NARROW_WS=1 "$3"; }
# The third label: the new binary with the form on; further labels (arguments 4 on, LABEL=ARCHIVE):
# variants' binaries, run with the form on.
with_form build-ws "$PWD/build-ab/${new%%=*}/latentkv" "${new#*=}"
wsl=("ws=$PWD/build-ws")
for pair in "${@:4}"; do
  l=${pair%%=*}
  mkdir -p "build-v-$l" && tar xJf "${pair#*=}" -C "build-v-$l" latentkv PREBUILT_REV || exit 1
  with_form "build-w-$l" "$PWD/build-v-$l/latentkv" "$(cat "build-v-$l/PREBUILT_REV")"
  wsl+=("$l=$PWD/build-w-$l")
done
LKV_AB_KERNEL=auto LKV_AB_SPECS="decode tp_v32_b128_h16;dense fp8_b128_sk4096_h16_sq1;dense fp8_b128_sk8192_h16_sq1;decode tp_v32_b128_h32;decode v32_b128_h128" \
  bash bench/probes/bins_ab.sh "$rounds" "$base" "$new" "${wsl[@]}"
# The same with each index list sorted by slot (LKV_BENCH_SORTED_INDICES=1: fewer DRAM bytes, so a
# GPU whose HBM limits the random gather shows what the SM side of each form costs).
OUT=$OUT/sorted LKV_AB_ENV=LKV_BENCH_SORTED_INDICES=1 LKV_AB_KERNEL=auto \
  LKV_AB_SPECS="decode tp_v32_b128_h16;decode tp_v32_b128_h32" bash bench/probes/bins_ab.sh "$rounds" "$base" "$new" "${wsl[@]}"
for tool in memcheck racecheck; do
  [ "$(left)" -gt 50 ] || break
  t0=$(date +%s)
  LKV_SM90_NARROW_WS=1 LKV_TEST_KERNELS=sm90 timeout $(( $(left) > 110 ? 80 : $(left) - 30 )) compute-sanitizer --tool "$tool" build-gpu-new/lkv_cuda_tests \
    --gtest_filter='DecodeCuda.CornerCases:DenseCuda.CornerCasesAndDeterminism' >"$OUT/$tool-ws.log" 2>&1
  summary "$tool (form on)" $? $(( $(date +%s) - t0 )) "$OUT/$tool-ws.log"
done
# Where each form's time goes (LKV_WS_PROFILE=1): ncu's throughput sections of the first narrow
# launch of each case, two-CTA form and warp-specialised form, the lines that matter printed.
profile() {  # NAME WS OP FILTER
  local t0; t0=$(date +%s)
  LKV_SM90_NARROW_WS=$2 timeout 100 ncu --clock-control none -k 'regex:narrow_kernel' -c 1 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section LaunchStats --section Occupancy build-gpu-new/latentkv bench "$3" --device cuda --kernel auto \
    --filter "$4" --reps 1 >"$OUT/details-$1.log" 2>&1
  echo "profile $1 rc=$? $(( $(date +%s) - t0 )) s"
  grep -E "Duration|Block Size|Registers Per|Issue Slots Busy|Issued Ipc|Memory Throughput|DRAM Throughput|L1/TEX Hit|Mem Pipes Busy|Shared Memory|Warp Cycles Per Issued|Eligible Warps|Achieved Occupancy|Max Bandwidth|L1/TEX Cache Throughput|Compute \(SM\) Throughput" \
    "$OUT/details-$1.log" | head -24
}
if [ "${LKV_WS_PROFILE:-0}" = 1 ]; then
  for form in 1 0; do
    [ "$(left)" -gt 90 ] || break
    profile "tp-ws$form" $form decode tp_v32_b128_h16
    profile "dense-ws$form" $form dense fp8_b128_sk4096_h16_sq1
  done
fi
if [ "$(left)" -gt 120 ]; then
  t0=$(date +%s)
  LKV_SM90_NARROW_WS=1 timeout $(( $(left) - 100 )) build-gpu-new/lkv_cuda_tests --gtest_filter='DecodeCuda.*:DenseCuda.*' >"$OUT/tests-suites-ws.log" 2>&1
  summary "decode + dense suites (form on)" $? $(( $(date +%s) - t0 )) "$OUT/tests-suites-ws.log"
  grep -E "^\[  FAILED|Failure" "$OUT/tests-suites-ws.log" | head -20
fi
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
echo "left $(left) s"
