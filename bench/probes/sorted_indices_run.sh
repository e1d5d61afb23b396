#!/usr/bin/env bash
# Sparse decode with each query token's top-k indices in ascending slot order against the bench's
# random order (LKV_BENCH_SORTED_INDICES=1 sorts them in `bench decode`), same binary, alternated;
# then ncu's DRAM bytes of the first attention launch in both orders (bench/NOTES.md v59).
# there: bash bench/probes/sorted_indices_run.sh ROUNDS DIR (DIR holds latentkv; e.g. build-gpu-new)
# (session 59: after `narrow_idx_run.sh 2 base=build-pk/base.tar.xz nopf2=build-pk/nopf2.tar.xz`,
# `2 build-gpu-new`, the build of the narrow kernel without its prefetch)
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT/sorted"
rounds=${1:-2} dir=${2:-build-gpu-new}
cases=("decode tp_v32_b128_h16" "decode tp_v32_b128_h32" "decode v4_b128_h64_topk128_extra512p2" "decode v32_b128_h128")
for r in $(seq 1 "$rounds"); do
  for order in random sorted; do
    for c in "${cases[@]}"; do
      read -r op filter <<<"$c"
      env $([ $order = sorted ] && echo LKV_BENCH_SORTED_INDICES=1) timeout 120 "$dir/latentkv" bench "$op" \
        --device cuda --kernel auto --filter "$filter" --json "$OUT/sorted/$filter-$order-$r.json" >>"$OUT/sorted.log" 2>&1
    done
  done
done
python3 - "$OUT/sorted" <<'PY' | tee "$OUT/sorted.txt"
import glob, json, os, statistics, sys
t = {}
for f in glob.glob(os.path.join(sys.argv[1], "*.json")):
    order = f.rsplit("-", 2)[1]
    for c in json.load(open(f))["cases"]:
        t.setdefault(c["name"], {}).setdefault(order, []).append(c)
print(f"{'case':44s} {'random us':>10s} {'sorted us':>10s} {'ratio':>7s} {'HBM% r':>7s} {'HBM% s':>7s}")
for n, d in sorted(t.items()):
    m = {o: statistics.median(c["time_us"] for c in d[o]) for o in d}
    f = {o: statistics.median(c.get("frac_of_ceiling", 0) for c in d[o]) for o in d}
    print(f"{n:44s} {m['random']:10.1f} {m['sorted']:10.1f} {m['sorted']/m['random']:7.3f} {100*f['random']:7.1f} {100*f['sorted']:7.1f}")
PY
for order in random sorted; do
  env $([ $order = sorted ] && echo LKV_BENCH_SORTED_INDICES=1) timeout 100 ncu --clock-control none \
    -k 'regex:narrow_kernel|attend_kernel' -c 1 --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    "$dir/latentkv" bench decode --device cuda --kernel auto --filter tp_v32_b128_h16 --reps 1 >"$OUT/ncu-sorted-$order.log" 2>&1
  echo "ncu tp_v32_b128_h16 $order: $(grep -E '"(gpu__time|dram__bytes)' "$OUT/ncu-sorted-$order.log" |
    awk -F'","' '{gsub(/"/,"",$NF); printf "%s=%s %s  ", $(NF-2), $NF, $(NF-1)}')"
done
