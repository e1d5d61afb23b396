#!/usr/bin/env bash
# One device call: v32_fp8 and v4_fp8 dequantization with conflict-free stores (kernel.cuh, dequantize_tile's
# kHalves) tested, then timed against the build before it, same run. Ran once (bench/NOTES.md v54)
# on branch wip/dequant-halves at 3b22d07, which also split v4_fp8 records; main takes v32_fp8 only.
# Here:
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/halves.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/final.tar.xz bash scripts/gpu_prebuild.sh latentkv   (in a checkout of the base)
# There (carry ["build-pk/halves.tar.xz", "build-pk/final.tar.xz"]): bash bench/probes/dequant_halves_run.sh [ROUNDS]
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/halves.tar.xz build-gpu || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
t0=$(date +%s)
LKV_TEST_KERNELS=portable timeout 200 ./build-gpu/lkv_cuda_tests --gtest_filter='Decode*:Dense*:Attention*:-*Sm90*' \
  >$OUT/tests-halves.log 2>&1
summary "portable suites" $? $(( $(date +%s) - t0 )) $OUT/tests-halves.log
grep -E "^\[  FAILED|Failure" $OUT/tests-halves.log | head -20
gzip -f $OUT/tests-halves.log
t0=$(date +%s)
LKV_TEST_KERNELS=portable timeout 120 compute-sanitizer --tool memcheck ./build-gpu/lkv_cuda_tests \
  --gtest_filter='DecodeCuda.IdleWarpsDequantizeBitwise:DenseCuda.CornerCasesAndDeterminism' >$OUT/memcheck-halves.log 2>&1
summary "memcheck" $? $(( $(date +%s) - t0 )) $OUT/memcheck-halves.log
gzip -f $OUT/memcheck-halves.log
[ "$(left)" -gt 150 ] && LKV_AB_SPECS="dense fp8_b128_sk8192_h16_sq1;dense fp8_b128_sk8192_h32_sq1;dense fp8_b128_sk8192_h64_sq1;dense fp8_b128_sk8192_h16_sq2;decode tp_v32_b128;decode v32_b128_h128;decode v4_b128_h64_topk128_extra512p64;decode v4_b128_h128_topk128_extra1024p2;decode v41_b128_h64" \
  bash bench/probes/bins_ab.sh "${1:-2}" base=build-pk/final.tar.xz halves=build-gpu
# The portable benches with the new build (the files to commit if it is kept).
[ "$(left)" -gt 240 ] && bash scripts/gpu.sh dense_portable decode_portable >$OUT/benches.log 2>&1 && tail -3 $OUT/benches.log
echo "left $(left) s"
