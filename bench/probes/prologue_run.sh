#!/usr/bin/env bash
# One device call (bench/NOTES.md v56): the portable kernel's prologue with Q copied by cp.async and
# the prologue's index loads issued together (branch wip/prologue), against main: its portable
# suites, memcheck of the adversarial-index tests, an A/B of the two, then main's portable decode
# and dense benches (the JSONs to $OUT).
# Here (main at 4dbd012 packed as build-pk/fold2.tar.xz, its kernels being 9665eba's; wip/prologue):
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/prologue.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
# There (carry build-pk/{fold2,prologue}.tar.xz): bash bench/probes/prologue_run.sh [ROUNDS]
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/fold2.tar.xz build-gpu-main || exit 1
unpack build-pk/prologue.tar.xz build-gpu-pro || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
check prologue build-gpu-pro
[ "$(left)" -gt 200 ] && LKV_AB_SPECS="decode v32_b128_h128;decode v4_b64_h64_topk128_extra512p64;decode v4_b128_h64_topk128_extra512p64;decode v4_b128_h128_topk128_extra1024p2;decode v41_b128_h64_topk128_extra512p64;decode tp_v32_b128_h16;dense fp8_b128_sk8192_h64_sq1;dense fp8_b128_sk8192_h16_sq1;dense fp8_b128_sk4096_h32_sq1;dense bf16_b128_sk4096_h16_sq1;prefill sq4096_skv8192_topk2048_h128_d576" \
  bash bench/probes/bins_ab.sh "${1:-2}" base=build-gpu-main prologue=build-gpu-pro
benches main build-gpu-main decode dense
echo "left $(left) s"
