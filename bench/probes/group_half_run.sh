#!/usr/bin/env bash
# One device call for two portable-kernel changes, each tested and then timed against main (dfd1c2b)
# in the same run (bench/NOTES.md v55):
#   swap: dequantization stores in the order second_half_first picks (v4_fp8 and v41 records);
#   gh:   swap plus token groups whose pairs split d_qk (score_group_half; CTAs of <= 16 rows).
# Here (gh at the branch's head, swap at its first commit, main55 at dfd1c2b):
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/gh.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_RACECHECK=1 LKV_PREBUILT_OUT=build-pk/ghrc.tar.xz bash scripts/gpu_prebuild.sh lkv_cuda_tests
# There (carry build-pk/{gh,ghrc,swap,main55}.tar.xz): bash bench/probes/group_half_run.sh [ROUNDS]
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/gh.tar.xz build-gpu-gh || exit 1
unpack build-pk/swap.tar.xz build-gpu-swap || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
t0=$(date +%s)
LKV_TEST_KERNELS=portable timeout 200 ./build-gpu-gh/lkv_cuda_tests --gtest_filter='Decode*:Dense*:Attention*:Prefill*:-*Sm90*' \
  >$OUT/tests-gh.log 2>&1
summary "portable suites (gh)" $? $(( $(date +%s) - t0 )) $OUT/tests-gh.log
grep -E "^\[  FAILED|Failure" $OUT/tests-gh.log | head -20
gzip -f $OUT/tests-gh.log
t0=$(date +%s)
LKV_TEST_KERNELS=portable timeout 100 compute-sanitizer --tool memcheck ./build-gpu-gh/lkv_cuda_tests \
  --gtest_filter='DecodeCuda.IdleWarpsDequantizeBitwise:AttentionCuda.TokenGroups' >$OUT/memcheck-gh.log 2>&1
summary "memcheck (gh)" $? $(( $(date +%s) - t0 )) $OUT/memcheck-gh.log
gzip -f $OUT/memcheck-gh.log
[ "$(left)" -gt 170 ] && LKV_AB_SPECS="dense fp8_b128_sk8192_h16_sq1;dense fp8_b128_sk4096_h16_sq1;decode v4_b128_h64_topk128_extra512p64;decode v4_b128_h128_topk128_extra1024p2;decode v4_b64_h64_topk128_extra512p2;decode v41_b128_h64" \
  bash bench/probes/bins_ab.sh "${1:-2}" base=build-pk/main55.tar.xz swap=build-gpu-swap gh=build-gpu-gh
if [ "$(left)" -gt 120 ]; then
  unpack build-pk/ghrc.tar.xz build-gpu-rc && t0=$(date +%s)
  LKV_TEST_KERNELS=portable timeout $(( $(left) - 20 )) compute-sanitizer --tool racecheck ./build-gpu-rc/lkv_cuda_tests \
    --gtest_filter='AttentionCuda.TokenGroups' >$OUT/racecheck-gh.log 2>&1
  summary "racecheck (gh)" $? $(( $(date +%s) - t0 )) $OUT/racecheck-gh.log
  gzip -f $OUT/racecheck-gh.log
fi
echo "left $(left) s"
