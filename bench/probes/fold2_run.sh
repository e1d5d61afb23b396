#!/usr/bin/env bash
# One device call, prepared in session 55 (bench/NOTES.md v55, Next 1 and 2): main's portable suites
# (the token groups' d_qk split as landed, and DecodeCuda.WideAndNarrowLayoutsAgreeBitwise now on
# the portable kernel), then the folded d_qk split of branch wip/fold2 (its suites, racecheck of
# both layout tests on its racecheck build) and an A/B of the two, same run.
# Here (main at f6fe2b6 or later; wip/fold2 at 9665eba, e.g. in a worktree with .deps linked):
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/main.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=$main/build-pk/fold2.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_RACECHECK=1 LKV_PREBUILT_OUT=$main/build-pk/fold2rc.tar.xz bash scripts/gpu_prebuild.sh lkv_cuda_tests
# There (carry build-pk/{main,fold2,fold2rc}.tar.xz): bash bench/probes/fold2_run.sh [ROUNDS]
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/main.tar.xz build-gpu-main || exit 1
unpack build-pk/fold2.tar.xz build-gpu-fold2 || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
suites main build-gpu-main 150
suites fold2 build-gpu-fold2 150
unpack build-pk/fold2rc.tar.xz build-gpu-rc &&
  sanitize racecheck fold2 build-gpu-rc 'AttentionCuda.WideAndNarrowLayoutsAgreeBitwise:DecodeCuda.WideAndNarrowLayoutsAgreeBitwise' 150
[ "$(left)" -gt 150 ] && LKV_AB_SPECS="decode v32_b128_h128;decode v4_b128_h64_topk128_extra512p64;decode v4_b128_h128_topk128_extra1024p2;decode v41_b128_h64_topk128_extra512p64;dense fp8_b128_sk8192_h64_sq1;dense fp8_b128_sk8192_h16_sq1;dense fp8_b128_sk8192_h32_sq1" \
  bash bench/probes/bins_ab.sh "${1:-2}" base=build-gpu-main fold2=build-gpu-fold2
echo "left $(left) s"
