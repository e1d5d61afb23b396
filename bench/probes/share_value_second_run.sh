#!/usr/bin/env bash
# The second device run of value sharing (bench/NOTES.md v53): the first (v52's probe, `quick`)
# passed the suites but had racecheck report hazards in the 16-row kernels, and measured kShare32
# (17-32-row CTAs) 1.18-1.22x slower. This run takes the 16-row form alone with every warp meeting
# the same number of barriers per iteration (e12b183 and later), and asks whether racecheck goes by
# that count (bench/probes/racecheck_partial_barrier.cu, three forms).
# Here:
#   nvcc -arch=sm_90a -lineinfo -o build-pk/probe/racecheck_partial_barrier bench/probes/racecheck_partial_barrier.cu
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/eq.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
#   (build-pk/a34.tar.xz, bins.tar.xz and v4c.tar.xz: share_value_first_run.sh's header)
# There (carry ["build-pk/probe", "build-pk/eq.tar.xz", "build-pk/a34.tar.xz", "build-pk/bins.tar.xz",
# "build-pk/v4c.tar.xz"]): bash bench/probes/share_value_second_run.sh   (<= 9 min)
set -u
start=$(date +%s)
left() { echo $(( ${LKV_SECONDS:-540} - ($(date +%s) - start) )); }  # LKV_SECONDS: the call's budget
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
for form in partial whole own; do
  timeout 30 compute-sanitizer --tool racecheck --racecheck-report hazard build-pk/probe/racecheck_partial_barrier $form \
    >$OUT/probe-$form.log 2>&1
  echo "probe $form rc=$?: $(grep -h 'reads differ' $OUT/probe-$form.log) | $(grep -h 'RACECHECK SUMMARY' $OUT/probe-$form.log)"
done
mkdir -p build-gpu && tar xJf build-pk/eq.tar.xz -C build-gpu && cat build-gpu/PREBUILT_REV
t0=$(date +%s)
timeout 100 compute-sanitizer --tool racecheck --racecheck-report hazard ./build-gpu/lkv_cuda_tests \
  --gtest_filter='AttentionCuda.IdleWarpsDequantizeBitwise:DecodeCuda.IdleWarpsDequantizeBitwise' >$OUT/racecheck-eq.log 2>&1
echo "racecheck eq rc=$? $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/racecheck-eq.log | tr '\n' ' ') $(grep 'RACECHECK SUMMARY' $OUT/racecheck-eq.log)"
t0=$(date +%s)
LKV_DECODE_KERNEL=portable timeout 100 ./build-gpu/lkv_cuda_tests --gtest_brief=1 \
  --gtest_filter='*.TokenGroups:*.IdleWarpsDequantizeBitwise:DecodeCuda.CornerCases:DenseCuda.CornerCasesAndDeterminism:DenseCuda.BadDeviceValuesAreClampedOrSkipped' \
  >$OUT/tests-eq-16row.log 2>&1
echo "16-row tests eq rc=$? $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)|^\[  FAILED  \]|Failure' $OUT/tests-eq-16row.log | head -5 | tr '\n' ' ')"
t0=$(date +%s)
LKV_AB_SPECS='dense fp8_b128_sk8192_h16;dense fp8_b128_sk8192_h32_sq1;decode tp_v32_b128_h16;decode v32_b128' \
  timeout 120 bash bench/probes/bins_ab.sh 2 a34=build-pk/a34.tar.xz sv=build-pk/bins.tar.xz eq=build-gpu v4c=build-pk/v4c.tar.xz
echo "ab $(( $(date +%s) - t0 )) s"
if [ "$(left)" -gt 70 ]; then
  t0=$(date +%s)
  timeout 60 compute-sanitizer --tool memcheck ./build-gpu/lkv_cuda_tests \
    --gtest_filter='DecodeCuda.IdleWarpsDequantizeBitwise' >$OUT/memcheck-eq.log 2>&1
  echo "memcheck eq rc=$? $(( $(date +%s) - t0 )) s: $(grep -E '^\[  (PASSED|FAILED)' $OUT/memcheck-eq.log | tr '\n' ' ') $(grep 'ERROR SUMMARY' $OUT/memcheck-eq.log)"
fi
# The whole portable suites if there is time (the other 80 attend_kernel instantiations are
# SASS-identical to 34cc400's, which passed them in v51).
[ "$(left)" -gt 200 ] || { echo "left $(left) s: no time for the suites"; exit 0; }
t0=$(date +%s)
LKV_DECODE_KERNEL=portable timeout 230 ./build-gpu/lkv_cuda_tests --gtest_brief=1 \
  --gtest_filter='DecodeCuda.*:AttentionCuda.*:DenseCuda.*:PrefillCuda.*' >$OUT/tests-eq.log 2>&1
echo "tests eq rc=$? $(( $(date +%s) - t0 )) s"
grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure' $OUT/tests-eq.log | head -20
echo "left $(left) s"
