#!/usr/bin/env bash
# Same-run A/B of several prebuilt `latentkv` binaries (archives packed by scripts/gpu_prebuild.sh,
# each holding latentkv and PREBUILT_REV, or directories holding both), alternated round by round over the same bench cases, with
# a table of per-case medians and each binary's time over the first's last.
#   here:  pack each tree's binary (e.g. LKV_PREBUILT_OUT=build-pk/base.tar.xz bash scripts/gpu_prebuild.sh latentkv
#          in a worktree of the base commit)
#   there: LKV_AB_SPECS='dense fp8_;decode tp_v32' bash bench/probes/bins_ab.sh ROUNDS base=build-pk/base.tar.xz new=build-pk/new.tar.xz ...
# A spec is "OP FILTER [BENCH OPTIONS...]" (as gpu.sh's env_ab); LKV_AB_KERNEL picks the kernel
# (default portable); extra environment for every run goes in LKV_AB_ENV ("VAR=VALUE ...").
# JSONs: $OUT/bins-ab.tgz; the table: $OUT/bins-ab.txt.
set -u
rounds=${1:?"usage: bins_ab.sh ROUNDS LABEL=ARCHIVE ..."}
shift
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT/bins-ab"
labels=()
for pair in "$@"; do
  label=${pair%%=*} archive=${pair#*=}
  if [ -d "$archive" ]; then  # a build directory already unpacked (e.g. gpu.sh's build-gpu)
    mkdir -p "build-ab/$label" && cp "$archive/latentkv" "$archive/PREBUILT_REV" "build-ab/$label/" || exit 1
  else
    mkdir -p "build-ab/$label" && tar xJf "$archive" -C "build-ab/$label" latentkv PREBUILT_REV || exit 1
  fi
  echo "$label: binaries of $(cat "build-ab/$label/PREBUILT_REV")"
  labels+=("$label")
done
IFS=';' read -r -a specs <<<"${LKV_AB_SPECS:?set LKV_AB_SPECS}"
read -r -a extra_env <<<"${LKV_AB_ENV:-}"
for r in $(seq 1 "$rounds"); do
  for label in "${labels[@]}"; do
    for spec in "${specs[@]}"; do
      read -r op filter extra <<<"$spec"
      read -r -a extra_args <<<"${extra:-}"
      tag=$(printf '%s' "$op-$filter${extra:+-$extra}" | tr -c 'A-Za-z0-9_.,-' '_')
      env "${extra_env[@]}" timeout 120 "build-ab/$label/latentkv" bench "$op" --device cuda \
        --kernel "${LKV_AB_KERNEL:-portable}" --filter "$filter" "${extra_args[@]}" \
        --json "$OUT/bins-ab/$tag-$label-$r.json" >>"$OUT/bins-ab.log" 2>&1 || echo "bench $spec ($label, round $r) failed"
    done
  done
done
python3 - "$OUT/bins-ab" "$rounds" "${labels[@]}" <<'PY' | tee "$OUT/bins-ab.txt"
import glob, json, os, statistics, sys
d, rounds, labels = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
t = {}
for f in sorted(glob.glob(f"{d}/*.json")):
    stem = os.path.basename(f)[:-5]
    label = stem.rsplit("-", 2)[1]
    for c in json.load(open(f))["cases"]:
        t.setdefault(c["name"], {}).setdefault(label, []).append(c["time_us"])
print(f"median us of {rounds} rounds; then each / {labels[0]}")
print(f"{'case':44s}" + "".join(f"{l:>10s}" for l in labels) + "".join(f"{l:>10s}" for l in labels[1:]))
for name, m in t.items():
    if all(l in m for l in labels):
        med = [statistics.median(m[l]) for l in labels]
        print(f"{name:44s}" + "".join(f"{v:10.1f}" for v in med) + "".join(f"{v / med[0]:10.3f}" for v in med[1:]))
PY
(cd "$OUT" && tar czf bins-ab.tgz bins-ab && rm -rf bins-ab)
