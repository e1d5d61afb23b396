#!/usr/bin/env bash
# One device call: the attention benches of one build on an H200 only (on any other GPU it stops at
# once, so that a call that lands elsewhere costs only its start): decode, dense and prefill with the
# kernel the device picks (the Hopper kernels), the compressor's record (call_lib.sh's `compressor`)
# when 230 s are left, then the attention benches with the portable kernel forced, while time is
# left (LKV_SECONDS: the call's budget, call_lib.sh).
# Here: the binaries packed as build-pk/NAME.tar.xz (LKV_PREBUILT_SM90=1
#   LKV_PREBUILT_OUT=build-pk/NAME.tar.xz bash scripts/gpu_prebuild.sh latentkv);
# there (carry the archive): bash bench/probes/h200_benches.sh [build-pk/NAME.tar.xz]
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader)
echo "$gpu"
case "$gpu" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0 ;; esac
unpack "${1:-build-pk/main.tar.xz}" build-gpu-h200 || exit 1
for op in decode dense prefill; do
  [ "$(left)" -gt 60 ] || break
  timeout $(( $(left) - 20 )) build-gpu-h200/latentkv bench "$op" --device cuda --kernel auto \
    --json "$OUT/$op-h200.json" >"$OUT/bench-$op-h200.log" 2>&1
  echo "bench $op (auto) rc=$?"; tail -2 "$OUT/bench-$op-h200.log"
done
# The compressor's record (reference, both formats) when enough time is left, then the portable
# attention benches.
[ "$(left)" -gt 230 ] && compressor h200 build-gpu-h200
benches h200 build-gpu-h200 decode dense prefill
# At most 8 files come back from a call: the six JSONs, compress-h200.tgz and the logs as one archive.
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
echo "left $(left) s"
