#!/usr/bin/env bash
# The first device run of value sharing in the portable kernel (kernel.cuh, kShareV: 16-row CTAs
# with token groups, and kShare32: one-group CTAs of 17-32 rows; bench/NOTES.md v52): the portable
# attention suites, an A/B against 34cc400's `latentkv`, racecheck and memcheck.
# Here, three archives (~25 MB, within the device call's 64 MiB carry with the tree):
#   LKV_PREBUILT_SM90=1 bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests   # build-pk/bins.tar.xz (sv)
#   then, with `#define LKV_SCORE_N8_CHAINS 4`, `#define LKV_SCORE_N8_AHEAD 3` and
#   `#define LKV_SHARE32_HALF_CHAINS 8` set in kernel.cuh for that build only (more accumulator
#   chains in the 16-row and the kShare32 score products):
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/v4c.tar.xz bash scripts/gpu_prebuild.sh latentkv
#   and with `#define LKV_SHARE32_MUL_TILES 8` (the multiplying warps of 17-32-row CTAs keep a quarter
#   of O, warps 4-7 three quarters): LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/q8.tar.xz
#   bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
#   build-pk/a34.tar.xz: 34cc400's latentkv (a worktree of 34cc400, LKV_PREBUILT_OUT=... gpu_prebuild.sh latentkv)
# (The variant's eight-chain score product runs only in the kShare32 kernels, so the bitwise
# sharing tests would fail with it; the tests run on the default archive.)
# There (carry ["build-pk/bins.tar.xz", "build-pk/a34.tar.xz", "build-pk/v4c.tar.xz", "build-pk/q8.tar.xz"]):
#   bash bench/probes/share_value_first_run.sh tests   # <= 9 min: suites (144 s in v51), q8's tests, sanitizers
#   bash bench/probes/share_value_first_run.sh bench   # ~6 min: the A/B, the copy-warp timings
#   bash bench/probes/share_value_first_run.sh quick   # <= 9 min: the suites, q8's sharing tests, a short
#                                                      # A/B (34cc400 / sv / q8) and racecheck in one call
# (Each stage fits one device call; both in one call may pass the 600 s limit.)
set -u
stage=${1:?"usage: share_value_first_run.sh tests|bench|quick"}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/gpu.txt
mkdir -p build-gpu && tar xJf build-pk/bins.tar.xz -C build-gpu && cat build-gpu/PREBUILT_REV
mkdir -p build-q8 && tar xJf build-pk/q8.tar.xz -C build-q8
# The portable attention suites (limit $1 s), then the q8 binary's tests matching $2.
suites() {
  local t0=$(date +%s)
  LKV_DECODE_KERNEL=portable timeout "$1" ./build-gpu/lkv_cuda_tests --gtest_brief=1 \
    --gtest_filter='DecodeCuda.*:AttentionCuda.*:DenseCuda.*:PrefillCuda.*' >$OUT/tests.log 2>&1
  echo "tests rc=$? $(( $(date +%s) - t0 )) s"
  grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure' $OUT/tests.log | head -20
  t0=$(date +%s)
  LKV_DECODE_KERNEL=portable timeout 40 ./build-q8/lkv_cuda_tests --gtest_brief=1 --gtest_filter="$2" >$OUT/tests-q8.log 2>&1
  echo "q8 tests rc=$? $(( $(date +%s) - t0 )) s"; grep -E '^\[  (PASSED|FAILED) |Failure' $OUT/tests-q8.log | head -10
}
if [ "$stage" = tests ]; then
suites 300 '*ValueSharingBitwise:DecodeCuda.CornerCases'
t0=$(date +%s)
timeout 90 compute-sanitizer --tool racecheck --racecheck-report hazard ./build-gpu/lkv_cuda_tests \
  --gtest_filter='AttentionCuda.IdleWarpsDequantizeBitwise:AttentionCuda.ValueSharingBitwise' >$OUT/racecheck.log 2>&1
echo "racecheck rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/racecheck.log
t0=$(date +%s)
timeout 90 compute-sanitizer --tool memcheck ./build-gpu/lkv_cuda_tests \
  --gtest_filter='DecodeCuda.IdleWarpsDequantizeBitwise:DecodeCuda.ValueSharingBitwise' >$OUT/memcheck.log 2>&1
echo "memcheck rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/memcheck.log
fi
if [ "$stage" = bench ]; then
t0=$(date +%s)
LKV_AB_SPECS='dense fp8_b128_sk8192;dense fp8_b128_sk4096_h16_sq1;dense fp8_b128_sk4096_h32_sq1;decode tp_v32;decode v32_b128' \
  timeout 300 bash bench/probes/bins_ab.sh 2 a34=build-pk/a34.tar.xz sv=build-gpu v4c=build-pk/v4c.tar.xz q8=build-q8
echo "ab $(( $(date +%s) - t0 )) s"
# kShare32 puts pair 1's value half on warp 7, which issues the tile's bulk copies in 17-48-row CTAs
# (decode::cuda::copy_warps_for): 1, 2 and 4 issuers on the 32-row cases, the branch's binary.
t0=$(date +%s)
for cw in 1 2 4 1 2 4; do
  [ $(( $(date +%s) - t0 )) -lt 90 ] || { echo "copy warps: out of time"; break; }
  for spec in "dense fp8_b128_sk8192_h32_sq1" "decode tp_v32_b128_h32"; do
    read -r op filter <<<"$spec"
    LKV_COPY_WARPS=$cw timeout 30 ./build-gpu/latentkv bench "$op" --device cuda --kernel portable --filter "$filter" \
      --json "$OUT/copy-warps-$cw-$op.json" >/dev/null 2>&1
    python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['cases'][0]; print(sys.argv[2], c['name'], round(c['time_us'], 1))" \
      "$OUT/copy-warps-$cw-$op.json" "copy warps $cw:" 2>/dev/null || echo "copy warps $cw $spec failed"
  done
done | tee $OUT/copy-warps.txt
fi
if [ "$stage" = quick ]; then
suites 220 '*ValueSharingBitwise'
t0=$(date +%s)
LKV_AB_SPECS='dense fp8_b128_sk8192_h16_sq1;dense fp8_b128_sk8192_h32_sq1;dense fp8_b128_sk8192_h16_sq2;decode tp_v32' \
  timeout 200 bash bench/probes/bins_ab.sh 2 a34=build-pk/a34.tar.xz sv=build-gpu q8=build-q8
echo "ab $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
timeout 60 compute-sanitizer --tool racecheck --racecheck-report hazard ./build-gpu/lkv_cuda_tests \
  --gtest_filter='AttentionCuda.ValueSharingBitwise' >$OUT/racecheck.log 2>&1
echo "racecheck rc=$? $(( $(date +%s) - t0 )) s"; tail -3 $OUT/racecheck.log
fi
