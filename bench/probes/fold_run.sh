#!/usr/bin/env bash
# One device call (bench/NOTES.md v55): pair scores in registers, tested and timed against the token
# groups' d_qk split (wip/group-half, 9785377):
#   gr:     token groups take P from registers (no pair barrier between P and the value product);
#   fold:   gr plus the d_qk split's folded exchange (kernel.cuh kFold: all four n8 tiles, no
#           exchange of maxima, P from registers; one pair barrier per tile);
#   fold32: fold plus the split for 32-row CTAs too (split_dqk_pays; dense h_q 32 s_q 1, 16 x 2).
# Here:
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/gh2.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests  (at 9785377)
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/gr.tar.xz ... (45d96bf), fold.tar.xz and foldrc.tar.xz (9ace05c,
#   the second with LKV_PREBUILT_RACECHECK=1, lkv_cuda_tests only), fold32.tar.xz (103473f, latentkv only)
# There (carry those five archives): bash bench/probes/fold_run.sh [ROUNDS]
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/fold.tar.xz build-gpu-fold || exit 1
for b in gr fold32; do unpack build-pk/$b.tar.xz build-gpu-$b || exit 1; done
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
t0=$(date +%s)
LKV_TEST_KERNELS=portable timeout 200 ./build-gpu-fold/lkv_cuda_tests --gtest_filter='Decode*:Dense*:Attention*:Prefill*:-*Sm90*' \
  >$OUT/tests-fold.log 2>&1
summary "portable suites (fold)" $? $(( $(date +%s) - t0 )) $OUT/tests-fold.log
grep -E "^\[  FAILED|Failure" $OUT/tests-fold.log | head -20
gzip -f $OUT/tests-fold.log
t0=$(date +%s)
LKV_TEST_KERNELS=portable timeout 100 compute-sanitizer --tool memcheck ./build-gpu-fold/lkv_cuda_tests \
  --gtest_filter='DecodeCuda.WideAndNarrowLayoutsAgreeBitwise:AttentionCuda.TokenGroups' >$OUT/memcheck-fold.log 2>&1
summary "memcheck (fold)" $? $(( $(date +%s) - t0 )) $OUT/memcheck-fold.log
gzip -f $OUT/memcheck-fold.log
unpack build-pk/foldrc.tar.xz build-gpu-rc && t0=$(date +%s)
LKV_TEST_KERNELS=portable timeout 120 compute-sanitizer --tool racecheck ./build-gpu-rc/lkv_cuda_tests \
  --gtest_filter='AttentionCuda.TokenGroups:DecodeCuda.WideAndNarrowLayoutsAgreeBitwise' >$OUT/racecheck-fold.log 2>&1
summary "racecheck (fold)" $? $(( $(date +%s) - t0 )) $OUT/racecheck-fold.log
gzip -f $OUT/racecheck-fold.log
[ "$(left)" -gt 150 ] && LKV_AB_SPECS="dense fp8_b128_sk8192_h16_sq1;dense fp8_b128_sk8192_h32_sq1;dense fp8_b128_sk8192_h16_sq2;dense fp8_b128_sk8192_h64_sq1;decode tp_v32_b128;decode v32_b128_h128;decode v4_b128_h64_topk128_extra512p64;decode v4_b128_h128_topk128_extra1024p2;decode v41_b128_h64_topk128_extra512p64" \
  bash bench/probes/bins_ab.sh "${1:-2}" base=build-pk/gh2.tar.xz gr=build-gpu-gr fold=build-gpu-fold fold32=build-gpu-fold32
echo "left $(left) s"
