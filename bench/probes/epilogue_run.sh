#!/usr/bin/env bash
# One device call (bench/NOTES.md v56): the portable kernel's end with out rows staged in shared
# memory and stored whole (branch wip/epilogue), against main: its portable suites, memcheck of the
# adversarial-index tests, an A/B of the two, then its portable decode, dense and prefill benches
# (JSONs to $OUT).
# Here (main 5b34a3b's kernels packed as build-pk/prologue.tar.xz from 72d2e03; wip/epilogue):
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/epilogue.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
# There (carry build-pk/{prologue,epilogue}.tar.xz): bash bench/probes/epilogue_run.sh [ROUNDS]
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/prologue.tar.xz build-gpu-main || exit 1
unpack build-pk/epilogue.tar.xz build-gpu-epi || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
check epilogue build-gpu-epi
[ "$(left)" -gt 200 ] && LKV_AB_SPECS="decode v32_b128_h128;decode v4_b64_h64_topk128_extra512p64;decode v4_b128_h64_topk128_extra512p64;decode v4_b128_h128_topk128_extra1024p2;decode v41_b128_h64_topk128_extra512p64;decode tp_v32_b128_h32;dense fp8_b128_sk8192_h64_sq1;dense fp8_b128_sk4096_h32_sq1;dense bf16_b128_sk4096_h64_sq1;prefill sq4096_skv8192_topk2048_h128_d576" \
  bash bench/probes/bins_ab.sh "${1:-2}" base=build-gpu-main epilogue=build-gpu-epi
benches epi build-gpu-epi decode dense prefill
(cd "$OUT" && tar czf logs.tgz bench-*.log memcheck-*.log.gz tests-*.log.gz && rm -f bench-*.log memcheck-*.log.gz tests-*.log.gz)
echo "left $(left) s"
