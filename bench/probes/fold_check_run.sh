#!/usr/bin/env bash
# One device call (bench/NOTES.md v55): the portable suites on the token groups' d_qk split alone
# (gh2, 9785377: what lands), and why the folded split's dense v32_fp8 h_q 64 case differs from the
# narrow layout (fold, 9ace05c): the test repeated, and racechecked on the racecheck build.
# There (carry build-pk/{gh2,fold,foldrc}.tar.xz): bash bench/probes/fold_check_run.sh
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/gh2.tar.xz build-gpu-gh2 || exit 1
unpack build-pk/fold.tar.xz build-gpu-fold || exit 1
unpack build-pk/foldrc.tar.xz build-gpu-rc || exit 1
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
LKV_TEST_KERNELS=portable timeout 150 ./build-gpu-gh2/lkv_cuda_tests --gtest_filter='Decode*:Dense*:Attention*:Prefill*:-*Sm90*' \
  >$OUT/tests-gh2.log 2>&1
summary "portable suites (gh2)" $? $(( $(date +%s) - t0 )) $OUT/tests-gh2.log
grep -E "^\[  FAILED" $OUT/tests-gh2.log | head
gzip -f $OUT/tests-gh2.log
LKV_TEST_KERNELS=portable timeout 60 ./build-gpu-fold/lkv_cuda_tests --gtest_filter='AttentionCuda.WideAndNarrowLayoutsAgreeBitwise' \
  --gtest_repeat=3 >$OUT/repeat-fold.log 2>&1
echo "repeat (fold): $(grep -cE '^\[  FAILED  \] AttentionCuda' $OUT/repeat-fold.log) failed runs of 3; $(grep -c 'Failure' $OUT/repeat-fold.log) failures"
LKV_TEST_KERNELS=portable timeout 60 ./build-gpu-gh2/lkv_cuda_tests --gtest_filter='AttentionCuda.WideAndNarrowLayoutsAgreeBitwise' \
  >$OUT/repeat-gh2.log 2>&1; summary "gh2 wide/narrow" $? 0 $OUT/repeat-gh2.log
t0=$(date +%s)
LKV_TEST_KERNELS=portable timeout 150 compute-sanitizer --tool racecheck ./build-gpu-rc/lkv_cuda_tests \
  --gtest_filter='AttentionCuda.WideAndNarrowLayoutsAgreeBitwise' >$OUT/racecheck-fold-dense.log 2>&1
summary "racecheck dense (fold)" $? $(( $(date +%s) - t0 )) $OUT/racecheck-fold-dense.log
grep -m5 -E "Race reported|Error: Race|hazard" $OUT/racecheck-fold-dense.log
gzip -f $OUT/racecheck-fold-dense.log $OUT/repeat-fold.log $OUT/repeat-gh2.log
echo "left $(left) s"
