#!/usr/bin/env bash
# One device call: the narrow kernel's 32-row instance (decode/sm90/launch.h narrow_wide_rows, CTAs
# of 17-32 rows). Its tests (the decode and dense ones against the 64-row kernel and the oracle, the
# corner cases at h_q 32), then a same-run A/B of one build with LKV_SM90_NARROW32=0 (the 64-row
# kernel) and =1 on the cases it takes (tensor-parallel h_q 32, also on lists whose query tokens
# share 90% of their slots, `bench decode --list-overlap 0.9`; dense v32_fp8 pages of 32 rows) and
# two 16-row controls (and, given a base archive, the base build's default on the same cases: the
# 16-row warp-specialised form's code moved; a base older than --list-overlap fails that spec),
# then memcheck and racecheck of the new dense test while time is left. LKV_N32_SPECS replaces the
# A/B's cases (bins_ab.sh specs).
# Here: LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/NAME.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
# There (carry the archives): bash bench/probes/narrow32_run.sh build-pk/NAME.tar.xz [ROUNDS [build-pk/BASE.tar.xz]]
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack "${1:?archive}" build-n32 || exit 1
tests='DecodeCuda.Sm90Narrow32RowsAgreeWith64RowKernel:DenseCuda.Sm90Narrow32Rows:DecodeCuda.CornerCases'
t0=$(date +%s)
# (At most 240 s, and 100 s of the call left for the A/B.)
tmax=$(( $(left) - 100 )); [ "$tmax" -gt 240 ] && tmax=240
timeout "$tmax" build-n32/lkv_cuda_tests --gtest_filter="$tests" >"$OUT/tests-n32.log" 2>&1
summary "tests" $? $(( $(date +%s) - t0 )) "$OUT/tests-n32.log"
grep -E "^\[  FAILED|Failure" "$OUT/tests-n32.log" | head -20
grep -E "^\[(decode|dense)\]" "$OUT/tests-n32.log" | grep -E "32-row|narrow 32" | sort -t' ' -k1,1 |
  awk '{for(i=1;i<=NF;i++) if($i=="max_rel") m=($(i+1)>m?$(i+1):m)} END {print "worst max_rel of the 32-row lines:", m}'
gzip -f "$OUT/tests-n32.log"
with_env build-n64x "$PWD/build-n32/latentkv" LKV_SM90_NARROW32=0 "$(cat build-n32/PREBUILT_REV)"
with_env build-n32x "$PWD/build-n32/latentkv" LKV_SM90_NARROW32=1 "$(cat build-n32/PREBUILT_REV)"
OUT=$OUT/ab LKV_AB_KERNEL=auto \
  LKV_AB_SPECS="${LKV_N32_SPECS:-decode tp_v32_b128_h32;decode tp_v32_b128_h32 --list-overlap 0.9;dense fp8_b128_sk4096_h32_sq1;dense fp8_b128_sk8192_h32_sq1;dense fp8_b128_sk8192_h16_sq2;decode tp_v32_b128_h16;dense fp8_b128_sk4096_h16_sq1}" \
  bash bench/probes/bins_ab.sh "${2:-2}" "n64=$PWD/build-n64x" "n32=$PWD/build-n32x" ${3:+"base=$3"}
(cd "$OUT" && tar czf ab.tgz ab && rm -rf ab)
echo "left $(left) s"
for tool in memcheck racecheck; do
  [ "$(left)" -gt 90 ] || break
  t0=$(date +%s)
  timeout $(( $(left) - 30 )) compute-sanitizer --tool "$tool" build-n32/lkv_cuda_tests \
    --gtest_filter='DenseCuda.Sm90Narrow32Rows' >"$OUT/$tool-n32.log" 2>&1
  summary "$tool (DenseCuda.Sm90Narrow32Rows)" $? $(( $(date +%s) - t0 )) "$OUT/$tool-n32.log"
  gzip -f "$OUT/$tool-n32.log"
done
echo "left $(left) s"
