#!/usr/bin/env bash
# Same-run A/B of the idle warps' share of the portable kernel's dequantization (session 50, as run at
# a941ba5, whose config.h had kIdleTokens, since removed with the shares it measured slower): in
# CTAs of at most 16 rows (token groups) warps 4-7 multiply nothing; they dequantized 32, 24 or 20
# of each next tile's 32 tokens (the multiplying warps 0-3 the rest), against the equal shares of
# every other CTA (LKV_IDLE_DEQUANT=0 in the default binary), and 32 for 32-row CTAs as well
# (LKV_IDLE_DEQUANT=1).
#   here, at a941ba5:  bash scripts/gpu_prebuild.sh, then latentkv and lkv_cuda_tests packed as
#          build-pk/bins-ab.tar.xz; builds of latentkv with -DCMAKE_CUDA_FLAGS=-DLKV_IDLE_DEQUANT_TOKENS=24
#          and =20 in build-v24 / build-v20, packed as build-pk/idle-variants.tar.xz (v24/latentkv, v20/latentkv)
#   there (carry ["build-pk/bins-ab.tar.xz", "build-pk/idle-variants.tar.xz"]):
#          LKV_AB_BINS=build-pk/bins-ab.tar.xz bash bench/probes/idle_dequant_ab.sh [rounds]
# Tests first (the new bitwise tests and the portable attention suites), then the portable kernel
# on dense v32_fp8 pages and sparse decode's tensor-parallel V3.2 cases, the variants alternated; a
# table of per-case medians and variant / equal-shares last. JSONs: $OUT/ab.tgz.
set -u
rounds=${1:-2}
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
t0=$(date +%s)
mkdir -p build-gpu build-idle && tar xJf "${LKV_AB_BINS:-build-pk/bins.tar.xz}" -C build-gpu && tar xJf build-pk/idle-variants.tar.xz -C build-idle
echo "binaries of $(cat build-gpu/PREBUILT_REV)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
LKV_DECODE_KERNEL=portable timeout 300 ./build-gpu/lkv_cuda_tests --gtest_brief=1 \
  --gtest_filter='DecodeCuda.*:AttentionCuda.*:DenseCuda.*:PrefillCuda.*' >"$OUT/cuda-portable.log" 2>&1
echo "attention suites rc=$? ($(($(date +%s) - t0)) s): $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda-portable.log" | tr '\n' ' ')"
grep -E 'FAILED|Failure' "$OUT/cuda-portable.log" | head -20
timeout 150 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 ./build-gpu/lkv_cuda_tests \
  --gtest_filter='AttentionCuda.IdleWarpsDequantizeBitwise' >"$OUT/racecheck.log" 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/racecheck.log" | tail -1)"
mkdir -p "$OUT/ab"
run() {  # run LABEL BINARY ROUND [VAR=VALUE]
  local label=$1 bin=$2 r=$3; shift 3
  env "$@" timeout 60 $bin bench dense --device cuda --kernel portable --filter fp8_ --json "$OUT/ab/$label-dense-$r.json" >/dev/null 2>&1 ||
    echo "bench dense $label round $r failed"
  env "$@" timeout 60 $bin bench decode --device cuda --kernel portable --filter tp_v32 --json "$OUT/ab/$label-decode-$r.json" >/dev/null 2>&1 ||
    echo "bench decode $label round $r failed"
}
for r in $(seq 1 "$rounds"); do
  run equal ./build-gpu/latentkv "$r" LKV_IDLE_DEQUANT=0
  run idle32 ./build-gpu/latentkv "$r"
  run idle24 ./build-idle/v24/latentkv "$r"
  run idle20 ./build-idle/v20/latentkv "$r"
  run idle32all ./build-gpu/latentkv "$r" LKV_IDLE_DEQUANT=1
done
python3 - "$OUT/ab" "$rounds" <<'PY'
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
labels = ("equal", "idle32", "idle24", "idle20", "idle32all")
for op in ("dense", "decode"):
    t = {}
    for v in labels:
        for r in range(1, rounds + 1):
            try: cases = json.load(open(f"{d}/{v}-{op}-{r}.json"))["cases"]
            except Exception: continue
            for c in cases: t.setdefault(c["name"], {}).setdefault(v, []).append(c["time_us"])
    print(f"{op}: median us of {rounds} rounds; then each / equal")
    print(f"  {'case':36s}" + "".join(f"{v:>10s}" for v in labels) + "".join(f"{v:>10s}" for v in labels[1:]))
    for name, m in t.items():
        if all(v in m for v in labels):
            med = [statistics.median(m[v]) for v in labels]
            print(f"  {name:36s}" + "".join(f"{x:10.1f}" for x in med) + "".join(f"{x / med[0]:10.3f}" for x in med[1:]))
PY
(cd "$OUT" && tar czf ab.tgz ab ./*.log gpu.txt && rm -rf ab ./*.log)
echo "done in $(($(date +%s) - t0)) s"
