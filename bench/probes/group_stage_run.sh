#!/usr/bin/env bash
# One device call (bench/NOTES.md v56 Next 2), prepared in session 56: token-group CTAs (at most 16
# rows) stage their out rows in the key tiles and store them whole (branch wip/group-stage), against
# main (v56's staged end for one-group CTAs): racecheck of the token-group tests on the candidate's
# LKV_RACECHECK_BARRIERS build, then candidate_run.sh (suites, memcheck, A/B, benches).
# Here (main's binaries as build-pk/main.tar.xz; in wip/group-stage):
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/groupstage.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_RACECHECK=1 LKV_PREBUILT_OUT=build-pk/groupstagerc.tar.xz bash scripts/gpu_prebuild.sh lkv_cuda_tests
# There (carry build-pk/{main,groupstage,groupstagerc}.tar.xz): bash bench/probes/group_stage_run.sh [ROUNDS]
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/groupstagerc.tar.xz build-gpu-rc &&
  sanitize racecheck groupstage build-gpu-rc 'AttentionCuda.TokenGroups:DecodeCuda.TokenGroups:*.IdleWarpsDequantizeBitwise' 120
LKV_SECONDS=$(left) LKV_AB_SPECS="dense fp8_b128_sk8192_h16_sq1;dense fp8_b128_sk4096_h16_sq1;decode tp_v32_b128_h16;dense bf16_b128_sk4096_h16_sq1;dense fp8_b128_sk8192_h32_sq1;decode v4_b128_h64_topk128_extra512p64" \
  bash "$(dirname "$0")/candidate_run.sh" "${1:-2}" build-pk/main.tar.xz groupstage=build-pk/groupstage.tar.xz dense decode
