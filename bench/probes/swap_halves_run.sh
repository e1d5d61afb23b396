#!/usr/bin/env bash
# One device call: dequantization stores whose chunk halves go in the order second_half_first picks
# (kernel.cuh; v4_fp8, v41 records and sm_80's v32_fp8) tested, then timed against main before it,
# same run; then the portable benches of main (the H200 files, where the machine is one).
# Here:
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/swap.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/main55.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests  (at the base)
# There (carry ["build-pk/swap.tar.xz", "build-pk/main55.tar.xz"]): bash bench/probes/swap_halves_run.sh [ROUNDS]
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/swap.tar.xz build-gpu-swap || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
t0=$(date +%s)
LKV_TEST_KERNELS=portable timeout 200 ./build-gpu-swap/lkv_cuda_tests --gtest_filter='Decode*:Dense*:Attention*:-*Sm90*' \
  >$OUT/tests-swap.log 2>&1
summary "portable suites" $? $(( $(date +%s) - t0 )) $OUT/tests-swap.log
grep -E "^\[  FAILED|Failure" $OUT/tests-swap.log | head -20
gzip -f $OUT/tests-swap.log
t0=$(date +%s)
LKV_TEST_KERNELS=portable timeout 120 compute-sanitizer --tool memcheck ./build-gpu-swap/lkv_cuda_tests \
  --gtest_filter='DecodeCuda.IdleWarpsDequantizeBitwise:DenseCuda.CornerCasesAndDeterminism' >$OUT/memcheck-swap.log 2>&1
summary "memcheck" $? $(( $(date +%s) - t0 )) $OUT/memcheck-swap.log
gzip -f $OUT/memcheck-swap.log
[ "$(left)" -gt 150 ] && LKV_AB_SPECS="decode v4_b128_h64_topk128_extra512p64;decode v4_b128_h128_topk128_extra1024p2;decode v4_b64_h64_topk128_extra512p2;decode v41_b128_h64;decode tp_v32_b128_h16;dense fp8_b128_sk8192_h16_sq1" \
  bash bench/probes/bins_ab.sh "${1:-2}" base=build-pk/main55.tar.xz swap=build-gpu-swap
# The portable benches of main (the H200 files were last made at v44).
[ "$(left)" -gt 240 ] && LKV_PREBUILT=build-pk/main55.tar.xz bash scripts/gpu.sh build dense_portable decode_portable >/tmp/benches.log 2>&1; tail -12 /tmp/benches.log
echo "left $(left) s"
