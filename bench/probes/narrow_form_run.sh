#!/usr/bin/env bash
# One device call for the narrow kernel's default form (bench/NOTES.md v62: dense decode's pages take
# the warp-specialised form, sparse lists two CTAs per SM), on any GPU, in order while time is left:
#   1. a same-run A/B, 2 rounds: the base build, the new build's default, and the new build with
#      LKV_SM90_NARROW_WS=0 (two CTAs for every launch), on the cases the narrow kernel runs and a
#      64-row control;
#   2. on an H200 only: `bench decode` and `bench dense` of the new build, with the kernel the
#      device picks (the Hopper files; the portable kernels did not change since v58);
#   3. the new build's tests of both forms, the dense suite (which now runs the warp-specialised
#      form on its v32_fp8 pages) and the decode corner cases; memcheck and racecheck of the dense
#      corner cases;
#   4. on an H200 only: `bench prefill`.
# At most 8 files come back: the A/B (one archive), up to three JSONs, the logs (one archive).
# Here: LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/NAME.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
# there (carry both): bash bench/probes/narrow_form_run.sh BASE_ARCHIVE NEW_ARCHIVE
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader)
echo "$gpu"
h200=0; case "$gpu" in *H200*) h200=1 ;; esac
unpack "${1:?base archive}" build-base || exit 1
unpack "${2:?new archive}" build-gpu-new || exit 1
with_env build-two "$PWD/build-gpu-new/latentkv" LKV_SM90_NARROW_WS=0 "$(cat build-gpu-new/PREBUILT_REV)"
OUT=$OUT/ab LKV_AB_KERNEL=auto \
  LKV_AB_SPECS="dense fp8_b128_sk4096_h16_sq1;dense fp8_b128_sk8192_h16_sq1;decode tp_v32_b128_h16;decode tp_v32_b128_h32" \
  bash bench/probes/bins_ab.sh 2 "base=$PWD/build-base" "new=$PWD/build-gpu-new" "two=$PWD/build-two"
(cd "$OUT" && tar czf ab.tgz ab && rm -rf ab)
echo "A/B done, left $(left) s"
bench() {  # LABEL OP
  [ "$(left)" -gt 90 ] || { echo "no time for $1"; return; }
  timeout $(( $(left) - 60 )) build-gpu-new/latentkv bench "$2" --device cuda --kernel auto \
    --json "$OUT/$1.json" >"$OUT/bench-$1.log" 2>&1
  echo "bench $1 rc=$?"; tail -2 "$OUT/bench-$1.log"
}
[ "$h200" = 1 ] && { bench decode-h200 decode; bench dense-h200 dense; }
if [ "$(left)" -gt 120 ]; then
  t0=$(date +%s)
  timeout $(( $(left) > 300 ? 200 : $(left) - 100 )) build-gpu-new/lkv_cuda_tests \
    --gtest_filter='DenseCuda.*:DecodeCuda.Sm90NarrowRowsAgreeWithWideRows:DecodeCuda.CornerCases' >"$OUT/tests.log" 2>&1
  summary "tests" $? $(( $(date +%s) - t0 )) "$OUT/tests.log"
  grep -E "^\[  FAILED|Failure" "$OUT/tests.log" | head -20
fi
for tool in memcheck racecheck; do
  [ "$(left)" -gt 100 ] || break
  t0=$(date +%s)
  LKV_TEST_KERNELS=sm90 timeout 80 compute-sanitizer --tool "$tool" build-gpu-new/lkv_cuda_tests \
    --gtest_filter='DenseCuda.CornerCasesAndDeterminism' >"$OUT/$tool.log" 2>&1
  summary "$tool" $? $(( $(date +%s) - t0 )) "$OUT/$tool.log"
done
[ "$h200" = 1 ] && bench prefill-h200 prefill
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
echo "left $(left) s"
