#!/usr/bin/env bash
# One device call (bench/NOTES.md v57): the portable kernel's prologue with its index loads ahead of
# Q, tile 0's copies not waiting for Q, and SparseSource's topk lengths loaded behind the first index
# loads (branch wip/lengths), against main with the same `bench decode --lengths` flag
# (wip/lengths-base): racecheck of the layout and token-group tests on the candidate's
# LKV_RACECHECK_BARRIERS build, then candidate_run.sh (suites, memcheck, A/B, benches).
# Here:
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/lengths.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_RACECHECK=1 LKV_PREBUILT_OUT=build-pk/lengthsrc.tar.xz bash scripts/gpu_prebuild.sh lkv_cuda_tests
#   (in wip/lengths-base) LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/lengthsbase.tar.xz bash scripts/gpu_prebuild.sh latentkv
# There (carry build-pk/{lengths,lengthsrc,lengthsbase}.tar.xz): bash bench/probes/lengths_run.sh [ROUNDS]
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/lengthsrc.tar.xz build-gpu-rc &&
  sanitize racecheck lengths build-gpu-rc '*.WideAndNarrowLayoutsAgreeBitwise:AttentionCuda.TokenGroups:*.IdleWarpsDequantizeBitwise' 120
LKV_SECONDS=$(left) LKV_AB_SPECS="decode v4_b64_h64_topk128_extra512p64;decode v4_b64_h64_topk128_extra512p64 --lengths;decode v4_b128_h64_topk128_extra512p64;decode v4_b128_h64_topk128_extra512p64 --lengths;decode v4_b128_h128_topk128_extra1024p2;decode v32_b128_h128;decode tp_v32_b128_h16;dense fp8_b128_sk8192_h16_sq1;prefill sq4096_skv8192_topk2048_h128_d576" \
  bash "$(dirname "$0")/candidate_run.sh" "${1:-2}" build-pk/lengthsbase.tar.xz lengths=build-pk/lengths.tar.xz decode
