#!/usr/bin/env bash
# One device call for two portable-kernel changes, each tested and then timed against main (dfd1c2b)
# in the same run (bench/NOTES.md v55):
#   swap: dequantization stores in the order second_half_first picks (v4_fp8 and v41 records;
#         branch wip/swap-halves at 2d51546, dropped);
#   gh:   swap plus token groups whose pairs split d_qk (score_group_half; CTAs of <= 16 rows;
#         wip/swap-halves at 37977b1; main took the split alone, 9785377).
# Here (gh and ghrc at 37977b1, swap from 2d51546's sources, main55 at dfd1c2b):
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/gh.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_RACECHECK=1 LKV_PREBUILT_OUT=build-pk/ghrc.tar.xz bash scripts/gpu_prebuild.sh lkv_cuda_tests
# There (carry build-pk/{gh,ghrc,swap,main55}.tar.xz): bash bench/probes/group_half_run.sh [ROUNDS]
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/gh.tar.xz build-gpu-gh || exit 1
unpack build-pk/swap.tar.xz build-gpu-swap || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
suites gh build-gpu-gh
sanitize memcheck gh build-gpu-gh 'DecodeCuda.IdleWarpsDequantizeBitwise:AttentionCuda.TokenGroups' 100
[ "$(left)" -gt 170 ] && LKV_AB_SPECS="dense fp8_b128_sk8192_h16_sq1;dense fp8_b128_sk4096_h16_sq1;decode v4_b128_h64_topk128_extra512p64;decode v4_b128_h128_topk128_extra1024p2;decode v4_b64_h64_topk128_extra512p2;decode v41_b128_h64" \
  bash bench/probes/bins_ab.sh "${1:-2}" base=build-pk/main55.tar.xz swap=build-gpu-swap gh=build-gpu-gh
if [ "$(left)" -gt 120 ]; then
  unpack build-pk/ghrc.tar.xz build-gpu-rc && sanitize racecheck gh build-gpu-rc 'AttentionCuda.TokenGroups' $(( $(left) - 20 ))
fi
echo "left $(left) s"
