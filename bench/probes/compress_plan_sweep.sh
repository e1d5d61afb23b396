#!/usr/bin/env bash
# Times the compressor's contest cases under several forced split x slice plans
# (LKV_COMPRESS_FORCE_PLAN, compress.cu), alternating the sets, to check the planner's choices.
# Usage (device machine, after `gpu.sh build`): bash bench/probes/compress_plan_sweep.sh OUTDIR [ROUNDS]
# Each entry is outputs,C,splits,slices for one contest case (outputs = tokens / C).
set -uo pipefail
out=$1
rounds=${2:-2}
mkdir -p "$out"
declare -A sets
sets[S0]=""
sets[S1]="64,128,4,1;32,256,4,2;16,512,4,4;256,128,1,1;128,256,2,1;64,512,4,1;256,256,1,1;128,512,2,1;256,512,2,2"
sets[S2]="64,128,2,2;32,256,2,4;16,512,2,8;256,128,1,2;128,256,1,2;64,512,2,2;256,256,1,2;128,512,2,2"
sets[S3]="64,128,1,4;32,256,1,8;16,512,8,2;128,256,2,2;64,512,2,4"
sets[S4]="64,128,8,1;32,256,8,2;16,512,8,4;128,256,1,4;64,512,1,4"
for r in $(seq 1 "$rounds"); do
  for s in S0 S1 S2 S3 S4; do
    LKV_COMPRESS_FORCE_PLAN="${sets[$s]}" ./build-gpu/latentkv bench compress --device cuda --format v4_int8 \
      --cases contest --json "$out/$s-$r.json" >"$out/$s-$r.txt" 2>&1
  done
done
python3 - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for s in ["S0", "S1", "S2", "S3", "S4"]:
    for r in range(1, rounds + 1):
        d = json.load(open(f"{out}/{s}-{r}.json"))
        for c in d["cases"]:
            n = c.get("numbers", c)
            plan = f'{int(n["plan_splits"])}x{int(n["plan_dim_slices"])}'
            rows.setdefault(c["name"], {}).setdefault(s, [plan, []])[1].append(c["time_us"])
print("case                 " + "".join(f"{s:>22s}" for s in ["S0", "S1", "S2", "S3", "S4"]))
for name, v in rows.items():
    cells = "".join(f'{v[s][0]:>6s} {min(v[s][1]):6.1f}-{max(v[s][1]):6.1f}' for s in ["S0", "S1", "S2", "S3", "S4"])
    print(f"{name:20s} {cells}")
PY
