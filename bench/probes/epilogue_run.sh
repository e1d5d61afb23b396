#!/usr/bin/env bash
# One device call (bench/NOTES.md v56 item 5): the portable kernel's end with out rows staged in
# shared memory and stored whole (branch wip/epilogue, 6249e86) against main 5b34a3b's kernels
# (72d2e03's, packed as build-pk/prologue.tar.xz), then its portable decode, dense and prefill benches.
# Here: LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/epilogue.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
# There (carry build-pk/{prologue,epilogue}.tar.xz): bash bench/probes/epilogue_run.sh [ROUNDS]
# (Run then with the candidate's label `epilogue` and the benches' `epi`; the JSONs were renamed on commit.)
LKV_AB_SPECS="decode v32_b128_h128;decode v4_b64_h64_topk128_extra512p64;decode v4_b128_h64_topk128_extra512p64;decode v4_b128_h128_topk128_extra1024p2;decode v41_b128_h64_topk128_extra512p64;decode tp_v32_b128_h32;dense fp8_b128_sk8192_h64_sq1;dense fp8_b128_sk4096_h32_sq1;dense bf16_b128_sk4096_h64_sq1;prefill sq4096_skv8192_topk2048_h128_d576" \
  exec bash "$(dirname "$0")/candidate_run.sh" "${1:-2}" build-pk/prologue.tar.xz epilogue=build-pk/epilogue.tar.xz decode dense prefill
