#!/usr/bin/env bash
# One device call, useful on either Hopper: on an H200, h200_benches.sh (the attention benches of a
# build, the kernel the device picks, then the portable one while time is left); on any other GPU,
# `bench dense` and `bench decode` of the build with the kernel the device picks, as that GPU's
# record of the build (JSONs named by the GPU: dense-h100.json, ...), or, given a base archive as
# well, a same-run A/B of the two builds (bins_ab.sh, 2 rounds) on LKV_AB_SPECS (default: dense
# pages of 16 and 64 rows, bf16 and v32_fp8).
# There (carry the archives): bash bench/probes/hopper_benches_run.sh build-pk/NAME.tar.xz [BASE.tar.xz]
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader)
case "$gpu" in *H200*) exec bash "$(dirname "$0")/h200_benches.sh" "$@" ;; esac
echo "$gpu"
tag=$(echo "$gpu" | grep -o -E 'H100|A100|L40S|L4' | head -1 | tr 'A-Z' 'a-z'); tag=${tag:-gpu}
unpack "${1:?archive}" build-gpu-x || exit 1
if [ -n "${2:-}" ]; then
  LKV_AB_KERNEL=auto LKV_AB_SPECS=${LKV_AB_SPECS:-"dense bf16_b128_sk4096_h16_sq1;dense bf16_b128_sk4096_h64_sq1;dense fp8_b128_sk4096_h16_sq1;dense fp8_b128_sk4096_h64_sq1"} \
    bash bench/probes/bins_ab.sh 2 "base=$2" "new=$PWD/build-gpu-x"
  echo "left $(left) s"
  exit 0
fi
for op in dense decode; do
  [ "$(left)" -gt 60 ] || break
  timeout $(( $(left) - 20 )) build-gpu-x/latentkv bench "$op" --device cuda --kernel auto \
    --json "$OUT/$op-$tag.json" >"$OUT/bench-$op-$tag.log" 2>&1
  echo "bench $op (auto) rc=$?"; tail -2 "$OUT/bench-$op-$tag.log"
done
echo "left $(left) s"
