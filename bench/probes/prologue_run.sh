#!/usr/bin/env bash
# One device call (bench/NOTES.md v56 item 3): the portable kernel's prologue with Q copied by
# cp.async and the prologue's index loads issued together (branch wip/prologue, 72d2e03) against
# main's kernels (9665eba's, packed as build-pk/fold2.tar.xz), then main's portable decode and dense
# benches (run then as the same steps written out; now through candidate_run.sh, whose benches use
# the candidate's build: 72d2e03's sources are main 5b34a3b's).
# Here: LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/prologue.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
# There (carry build-pk/{fold2,prologue}.tar.xz): bash bench/probes/prologue_run.sh [ROUNDS]
LKV_AB_SPECS="decode v32_b128_h128;decode v4_b64_h64_topk128_extra512p64;decode v4_b128_h64_topk128_extra512p64;decode v4_b128_h128_topk128_extra1024p2;decode v41_b128_h64_topk128_extra512p64;decode tp_v32_b128_h16;dense fp8_b128_sk8192_h64_sq1;dense fp8_b128_sk8192_h16_sq1;dense fp8_b128_sk4096_h32_sq1;dense bf16_b128_sk4096_h16_sq1;prefill sq4096_skv8192_topk2048_h128_d576" \
  exec bash "$(dirname "$0")/candidate_run.sh" "${1:-2}" build-pk/fold2.tar.xz prologue=build-pk/prologue.tar.xz decode dense
