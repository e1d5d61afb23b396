#!/usr/bin/env bash
# One device call for a change to the narrow Hopper kernel (bench/NOTES.md v58): the CUDA decode and
# dense suites of the new build on the kernel each case picks (the narrow one for CTAs of at most 16
# rows on an H100 / H200), memcheck and racecheck of the adversarial-index tests on the sm90
# kernels, then a same-run A/B against the base build's binaries on the cases the narrow kernel
# runs, with controls.
# Here: both archives packed by
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/NAME.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
# there (carry both): bash bench/probes/narrow_idx_run.sh ROUNDS BASE_LABEL=ARCHIVE NEW_LABEL=ARCHIVE
# (session 58: call 2 `2 main=build-pk/main.tar.xz idx=build-pk/idx.tar.xz`, call 4
# `2 idx=build-pk/idx.tar.xz idx2=build-pk/idx2.tar.xz`).
set -u
source "$(dirname "$0")/call_lib.sh"
ab_start "${1:-2}" "${2:-main=build-pk/main.tar.xz}" "${3:-idx=build-pk/idx.tar.xz}" || exit 1
t0=$(date +%s)
timeout 200 build-gpu-new/lkv_cuda_tests --gtest_filter='DecodeCuda.*:DenseCuda.*' >"$OUT/tests-new.log" 2>&1
summary "decode + dense suites (auto kernels)" $? $(( $(date +%s) - t0 )) "$OUT/tests-new.log"
grep -E "^\[  FAILED|Failure" "$OUT/tests-new.log" | head -20
for tool in memcheck racecheck; do
  t0=$(date +%s)
  LKV_TEST_KERNELS=sm90 timeout 120 compute-sanitizer --tool "$tool" build-gpu-new/lkv_cuda_tests \
    --gtest_filter='DecodeCuda.CornerCases:DenseCuda.CornerCasesAndDeterminism' >"$OUT/$tool-new.log" 2>&1
  summary "$tool (sm90 kernels)" $? $(( $(date +%s) - t0 )) "$OUT/$tool-new.log"
done
LKV_AB_KERNEL=auto LKV_AB_SPECS="decode tp_v32_b128_h16;dense fp8_b128_sk4096_h16_sq1;dense fp8_b128_sk8192_h16_sq1;decode tp_v32_b128_h32;decode v32_b128_h128;dense fp8_b128_sk8192_h32_sq1" \
  bash bench/probes/bins_ab.sh "$rounds" "$base" "$new"
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
echo "left $(left) s"
