#!/usr/bin/env bash
# The next device call for value sharing (bench/NOTES.md v53 Next 1-3), within one call's 600 s:
# racecheck of the LKV_RACECHECK_BARRIERS build on the 16-row sharing kernels (predicted: 0
# hazards), the portable dense and decode benches of the default build (the committed H200 files
# are v44-era), and stall samples of the two 16-row cases.
# Here (archives of the current tree):
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_RACECHECK=1 LKV_PREBUILT_OUT=build-pk/rc.tar.xz bash scripts/gpu_prebuild.sh lkv_cuda_tests
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/final.tar.xz bash scripts/gpu_prebuild.sh latentkv
# There (carry ["build-pk/final.tar.xz", "build-pk/rc.tar.xz"]):
#   bash bench/probes/share_value_third_run.sh
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/final.tar.xz build-gpu && unpack build-pk/rc.tar.xz build-rc || exit 1
t0=$(date +%s)
timeout 150 compute-sanitizer --tool racecheck --racecheck-report hazard ./build-rc/lkv_cuda_tests \
  --gtest_filter='*.IdleWarpsDequantizeBitwise:*.TokenGroups' >$OUT/racecheck-rc.log 2>&1
summary "racecheck (LKV_RACECHECK_BARRIERS)" $? $(( $(date +%s) - t0 )) $OUT/racecheck-rc.log
gzip $OUT/racecheck-rc.log
# gpu.sh without its build stage runs build-gpu/latentkv as unpacked above.
[ "$(left)" -gt 200 ] && bash scripts/gpu.sh dense_portable decode_portable
[ "$(left)" -gt 90 ] && LKV_PROFILE_KERNEL=portable LKV_PROFILE_OP=dense \
  LKV_PROFILE_FILTER='fp8_b128_sk8192_h16_sq1' OUT=$OUT/prof bash scripts/gpu.sh profile_sass
echo "left $(left) s"
