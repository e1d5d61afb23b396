#!/usr/bin/env bash
# One device call: every CUDA suite of a build (all kernels, as `gpu.sh test` runs them), then a
# same-run A/B of its binaries against a base build on the narrow kernel's cases with controls.
# Here: both archives packed by
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/NAME.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
# there (carry both): bash bench/probes/final_check_run.sh ROUNDS BASE_LABEL=ARCHIVE NEW_LABEL=ARCHIVE
# (session 58, call 5: `2 main=build-pk/main.tar.xz v58=build-pk/idx2.tar.xz`).
set -u
source "$(dirname "$0")/call_lib.sh"
ab_start "${1:-2}" "${2:-main=build-pk/main.tar.xz}" "${3:-v58=build-pk/idx2.tar.xz}" || exit 1
t0=$(date +%s)
timeout 420 build-gpu-new/lkv_cuda_tests >"$OUT/cuda-tests.log" 2>&1
summary "every CUDA suite" $? $(( $(date +%s) - t0 )) "$OUT/cuda-tests.log"
grep -E "^\[  FAILED|Failure" "$OUT/cuda-tests.log" | head -20
LKV_AB_KERNEL=auto LKV_AB_SPECS="decode tp_v32_b128_h16;dense fp8_b128_sk4096_h16_sq1;dense fp8_b128_sk8192_h16_sq1;decode v32_b128_h128;dense fp8_b128_sk8192_h32_sq1" \
  bash bench/probes/bins_ab.sh "$rounds" "$base" "$new"
(cd "$OUT" && gzip -f cuda-tests.log && tar czf logs.tgz ./*.log ./cuda-tests.log.gz 2>/dev/null; rm -f ./*.log)
echo "left $(left) s"
