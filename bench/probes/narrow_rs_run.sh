#!/usr/bin/env bash
# One device call: the narrow_rs.cu probe (the narrow kernel's score product with A from registers,
# bench/NOTES.md v61), built there; then, on an H200 only, the attention benches of a build
# (h200_benches.sh) with the time left.
# At most 8 files come back: narrow_rs.txt and h200_benches.sh's seven.
# There (carry the archive): bash bench/probes/narrow_rs_run.sh [build-pk/NAME.tar.xz]
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader)
echo "$gpu" | tee "$OUT/narrow_rs.txt"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Isrc -Iinclude -Xptxas=-v \
  -o /tmp/nrs bench/probes/narrow_rs.cu >/tmp/narrow_rs-build.log 2>&1 || { tail -20 /tmp/narrow_rs-build.log; exit 1; }
grep -E "spill|Used" /tmp/narrow_rs-build.log | tee -a "$OUT/narrow_rs.txt"
timeout 240 /tmp/nrs >>"$OUT/narrow_rs.txt" 2>&1
python3 "$(dirname "$0")/narrow_rs_table.py" "$OUT/narrow_rs.txt" | tee -a "$OUT/narrow_rs.txt"
echo "probe done, left $(left) s"
case "$gpu" in
  *H200*) [ -n "${1:-}" ] && LKV_SECONDS=$(left) bash "$(dirname "$0")/h200_benches.sh" "$1" ;;
esac
