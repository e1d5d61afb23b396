#!/usr/bin/env bash
# One device call on any GPU: the CUDA tests that place records, rows, pages, state blocks and
# q/out rows past 4 GiB (`*Past4GiB`, each needs about 5 GiB of device memory) and the CUDA-only
# refusal tests; then, on an H200 only, h200_benches.sh's attention benches of the same build; then
# memcheck of the same tests while time is left (LKV_SECONDS: the call's budget, call_lib.sh).
# Here: LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/NAME.tar.xz bash scripts/gpu_prebuild.sh
#   latentkv lkv_cuda_tests
# There (carry the archive): bash bench/probes/far_run.sh build-pk/NAME.tar.xz
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT/far"
gpu=$(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader)
echo "$gpu"
unpack "${1:?archive}" build-gpu-far || exit 1
# With them, the CUDA-only refusals: the compressor's (both modes, misaligned and short
# workspaces) and the attention ops' (rows not aligned to 16 bytes, d_qk other than 512 or 576).
filter='*Past4GiB*:CompressCuda.ErrorsNameTheValueAndWriteNothing:CompressCuda.CallerWorkspaceOnAStreamCapturedInAGraph'
filter+=':DecodeCuda.MisalignedRowsAreNamed:AttentionCuda.MisalignedRowsAndOtherWidthsAreNamed'
t0=$(date +%s)
timeout 200 build-gpu-far/lkv_cuda_tests --gtest_filter="$filter" >"$OUT/far/tests.log" 2>&1
summary "far tests" $? $(( $(date +%s) - t0 )) "$OUT/far/tests.log"
grep -E '^\[       OK|^\[  FAILED|Failure' "$OUT/far/tests.log" | head -30
case "$gpu" in
  *H200*)
    # The benches get what is left but 150 s, which memcheck then uses.
    LKV_SECONDS=$(( $(left) - 150 )) bash "$(dirname "$0")/h200_benches.sh" "$1" ;;
esac
if [ "$(left)" -gt 60 ]; then
  t0=$(date +%s)
  timeout $(( $(left) - 20 )) compute-sanitizer --tool memcheck --error-exitcode 9 \
    build-gpu-far/lkv_cuda_tests --gtest_filter="$filter" >"$OUT/far/memcheck.log" 2>&1
  summary "far tests, memcheck" $? $(( $(date +%s) - t0 )) "$OUT/far/memcheck.log"
fi
# At most 8 files come back from a call: h200_benches.sh's six JSONs and logs.tgz, and this one.
# (the logs sit in far/, away from the *.log that h200_benches.sh packs)
(cd "$OUT" && tar czf far-logs.tgz far && rm -rf far)
echo "left $(left) s"
