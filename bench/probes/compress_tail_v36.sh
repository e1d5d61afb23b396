#!/usr/bin/env bash
# Session 36's compressor probes in one device call (after `gpu.sh build` with the latentkv target):
#  1. the cluster merge (LKV_COMPRESS_CLUSTER=1) against the global one on the same 256-CTA plans
#     (4 splits x 1 slice for the three 8192-token cases, so that every one is eligible),
#  2. --trace-stream with the current plans and with the old 512-CTA plans,
#  3. bench/probes/l2_handoff.cu.
# Usage: bash bench/probes/compress_tail_v36.sh OUTDIR [ROUNDS]
set -uo pipefail
out=$1
rounds=${2:-2}
mkdir -p "$out"
B=./build-gpu/latentkv
four="64,128,4,1;32,256,4,1;16,512,4,1"
old="64,128,4,2;32,256,4,4;16,512,4,8;256,128,2,1;128,256,4,1;64,512,4,2"
for r in $(seq 1 "$rounds"); do
  for mode in global cluster; do
    c=0; [ $mode = cluster ] && c=1
    LKV_COMPRESS_CLUSTER=$c LKV_COMPRESS_FORCE_PLAN="$four" $B bench compress --device cuda --format v4_int8 \
      --cases quick --trace --json "$out/$mode-$r.json" >"$out/$mode-$r.txt" 2>&1
  done
done
$B bench compress --device cuda --format v4_int8 --cases quick --trace-stream >"$out/stream-new.txt" 2>&1
LKV_COMPRESS_FORCE_PLAN="$old" $B bench compress --device cuda --format v4_int8 --cases quick --trace-stream \
  >"$out/stream-old.txt" 2>&1
nvcc -O3 -arch=sm_90a -o /tmp/l2h bench/probes/l2_handoff.cu && /tmp/l2h >"$out/l2_handoff.txt" 2>&1
python3 - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for mode in ["global", "cluster"]:
    for r in range(1, rounds + 1):
        d = json.load(open(f"{out}/{mode}-{r}.json"))
        for c in d["cases"]:
            rows.setdefault(c["name"], {}).setdefault(mode, []).append(c["time_us"])
print(f"{'case':28s} {'global':>16s} {'cluster':>16s}")
for name, v in rows.items():
    print(f"{name:28s} " + " ".join(f"{min(v[m]):7.1f}-{max(v[m]):7.1f}" for m in ["global", "cluster"]))
PY
