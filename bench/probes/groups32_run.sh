#!/usr/bin/env bash
# One device call: token groups over 17-32-row CTAs of quantized keys (LKV_GROUPS32, kernel.cuh
# kGroupRows 32) tested and timed against one group, plus the racecheck of the
# LKV_RACECHECK_BARRIERS build on the 16-row sharing kernels (bench/NOTES.md v53 Next 1).
# Ran once (bench/NOTES.md v54) on branch wip/groups32 at 74a1534, which holds the kernel variant
# and its tests; main does not (the variant measured slower).
# Here:
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/g32.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_RACECHECK=1 LKV_PREBUILT_OUT=build-pk/rc.tar.xz bash scripts/gpu_prebuild.sh lkv_cuda_tests
#     (the racecheck build from main, whose sharing kernels this branch leaves as they are)
# There (carry ["build-pk/g32.tar.xz", "build-pk/rc.tar.xz"]): bash bench/probes/groups32_run.sh
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/g32.tar.xz build-gpu && unpack build-pk/rc.tar.xz build-rc || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
# 1. The new tests, then the portable attention suites with every 17-32-row launch on the new kernel.
t0=$(date +%s)
LKV_TEST_KERNELS=portable timeout 120 ./build-gpu/lkv_cuda_tests --gtest_filter='*.TokenGroups32' >$OUT/tests-g32.log 2>&1
summary "TokenGroups32" $? $(( $(date +%s) - t0 )) $OUT/tests-g32.log
t0=$(date +%s)
LKV_GROUPS32=1 LKV_TEST_KERNELS=portable timeout 200 ./build-gpu/lkv_cuda_tests \
  --gtest_filter='Decode*:Dense*:Attention*:-*Sm90*:*.TokenGroups32' >$OUT/tests-suites-g32.log 2>&1
summary "suites with LKV_GROUPS32=1" $? $(( $(date +%s) - t0 )) $OUT/tests-suites-g32.log
gzip -f $OUT/tests-suites-g32.log
# 2. A/B, two rounds: 32-row cases and a 16-row control (the new kernel does not run there).
[ "$(left)" -gt 280 ] && LKV_AB_VAR=LKV_GROUPS32 LKV_AB_VALUES="0 1" \
  LKV_AB_SPECS="dense fp8_b128_sk8192_h32_sq1;dense fp8_b128_sk8192_h16_sq2;dense fp8_b128_sk4096_h32_sq1;decode tp_v32_b128_h32;dense fp8_b128_sk8192_h16_sq1" \
  bash scripts/gpu.sh env_ab && cat $OUT/ab-env.txt
# 3. Memcheck of the new tests.
t0=$(date +%s)
[ "$(left)" -gt 200 ] && { LKV_TEST_KERNELS=portable timeout 120 compute-sanitizer --tool memcheck ./build-gpu/lkv_cuda_tests \
  --gtest_filter='*.TokenGroups32' >$OUT/memcheck-g32.log 2>&1
  summary "memcheck TokenGroups32" $? $(( $(date +%s) - t0 )) $OUT/memcheck-g32.log; gzip -f $OUT/memcheck-g32.log; }
# 4. Racecheck of the LKV_RACECHECK_BARRIERS build (predicted: 0 hazards).
t0=$(date +%s)
[ "$(left)" -gt 60 ] && { timeout $(( $(left) - 20 )) compute-sanitizer --tool racecheck --racecheck-report hazard ./build-rc/lkv_cuda_tests \
  --gtest_filter='*.IdleWarpsDequantizeBitwise:*.TokenGroups' >$OUT/racecheck-rc.log 2>&1
  summary "racecheck (LKV_RACECHECK_BARRIERS)" $? $(( $(date +%s) - t0 )) $OUT/racecheck-rc.log; gzip -f $OUT/racecheck-rc.log; }
echo "left $(left) s"
