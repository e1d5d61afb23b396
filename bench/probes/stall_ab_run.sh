#!/usr/bin/env bash
# One device call: per-instruction stall samples (ncu SourceCounters + WarpStateStats) of the first
# launch of KERNEL_REGEX in `bench OP --filter FILTER`, for each build, summarised by stall_top.py
# (bench/NOTES.md v59: the narrow kernel by dim halves against the landed one).
# there: LKV_STALL_SPEC="decode tp_v32_b128_h16 narrow_kernel" bash bench/probes/stall_ab_run.sh LABEL=ARCHIVE ...
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
read -r op filter kernel <<<"${LKV_STALL_SPEC:-decode tp_v32_b128_h16 narrow_kernel}"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for pair in "$@"; do
  label=${pair%%=*}
  unpack "${pair#*=}" "build-st/$label" >/dev/null || exit 1
  timeout 150 ncu --clock-control none -k "regex:$kernel" -c 1 --section SourceCounters --section WarpStateStats \
    -f -o "$OUT/prof-$label" "build-st/$label/latentkv" bench "$op" --device cuda --kernel auto --filter "$filter" \
    --reps 1 >"$OUT/ncu-$label.log" 2>&1
  ncu --import "$OUT/prof-$label.ncu-rep" --page source --print-source sass --csv 2>>"$OUT/ncu-$label.log" |
    gzip >"$OUT/prof-$label-sass.csv.gz"
  rm -f "$OUT/prof-$label.ncu-rep"
  echo "== $label ($filter)"
  python3 "$(dirname "$0")/stall_top.py" "$OUT/prof-$label-sass.csv.gz" 14
done
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
