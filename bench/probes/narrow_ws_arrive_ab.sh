#!/usr/bin/env bash
# One device call: what every consumer thread arriving on the narrow warp-specialised form's empty
# barrier costs against lane 0 of each warp arriving after a __syncwarp (bench/NOTES.md v64: the
# binaries of main before and after 50cd8ab). Same-run A/B, ROUNDS rounds (default 3): both builds'
# default forms on dense v32_fp8 pages h_q 16 (the warp-specialised form is their default), and
# both with the form forced on the tensor-parallel h_q 16 sparse case.
# there (carry both): bash bench/probes/narrow_ws_arrive_ab.sh build-pk/BASE.tar.xz build-pk/NEW.tar.xz [ROUNDS]
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack "${1:?base archive}" build-main || exit 1
unpack "${2:?new archive}" build-all || exit 1
with_env build-main-ws "$PWD/build-main/latentkv" LKV_SM90_NARROW_WS=1 "$(cat build-main/PREBUILT_REV)"
with_env build-all-ws "$PWD/build-all/latentkv" LKV_SM90_NARROW_WS=1 "$(cat build-all/PREBUILT_REV)"
OUT=$OUT/ab LKV_AB_KERNEL=auto \
  LKV_AB_SPECS="dense fp8_b128_sk4096_h16_sq1;dense fp8_b128_sk8192_h16_sq1;decode tp_v32_b128_h16" \
  bash bench/probes/bins_ab.sh "${3:-3}" "main=$PWD/build-main" "all=$PWD/build-all" \
  "main_ws=$PWD/build-main-ws" "all_ws=$PWD/build-all-ws"
(cd "$OUT" && tar czf ab.tgz ab && rm -rf ab)
echo "left $(left) s"
