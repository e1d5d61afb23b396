#!/usr/bin/env bash
# One device call: the narrow Hopper kernel with its in-loop index copied by cp.async (bench/NOTES.md
# v58): the CUDA decode and dense suites on the kernel each case picks (the narrow one for CTAs of at
# most 16 rows on an H100 / H200), memcheck and racecheck of the adversarial-index tests, then a
# same-run A/B against main's binaries on the cases the narrow kernel runs, with controls.
# Here: build-pk/main.tar.xz (main) and build-pk/idx.tar.xz (the change), both packed by
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=... bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests;
# there (carry both): bash bench/probes/narrow_idx_run.sh [ROUNDS]
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack build-pk/idx.tar.xz build-gpu-idx || exit 1
t0=$(date +%s)
timeout 200 build-gpu-idx/lkv_cuda_tests --gtest_filter='DecodeCuda.*:DenseCuda.*' >"$OUT/tests-idx.log" 2>&1
summary "decode + dense suites (auto kernels)" $? $(( $(date +%s) - t0 )) "$OUT/tests-idx.log"
grep -E "^\[  FAILED|Failure" "$OUT/tests-idx.log" | head -20
for tool in memcheck racecheck; do
  t0=$(date +%s)
  LKV_TEST_KERNELS=sm90 timeout 120 compute-sanitizer --tool "$tool" build-gpu-idx/lkv_cuda_tests \
    --gtest_filter='DecodeCuda.CornerCases:DenseCuda.CornerCasesAndDeterminism' >"$OUT/$tool-idx.log" 2>&1
  summary "$tool (sm90 kernels)" $? $(( $(date +%s) - t0 )) "$OUT/$tool-idx.log"
done
LKV_AB_KERNEL=auto LKV_AB_SPECS="decode tp_v32_b128_h16;dense fp8_b128_sk4096_h16_sq1;dense fp8_b128_sk8192_h16_sq1;decode tp_v32_b128_h32;decode v32_b128_h128;dense fp8_b128_sk8192_h32_sq1" \
  bash bench/probes/bins_ab.sh "${1:-2}" main=build-pk/main.tar.xz idx=build-pk/idx.tar.xz
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
echo "left $(left) s"
