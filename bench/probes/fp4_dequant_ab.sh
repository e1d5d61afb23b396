#!/usr/bin/env bash
# Same-run A/B of the fp4 chunk decoding (session 49): the binaries of the change against those of
# the commit before it, both built here by scripts/gpu_prebuild.sh, on the V4.1 decode cases.
#   here:  bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests        (the change: build-pk/bins.tar.xz)
#          the base commit's latentkv packed as build-pk/base.tar.xz   (same script, other checkout)
#   there (carry ["build-pk"]): bash bench/probes/fp4_dequant_ab.sh [rounds]
# Tests first (the fp4 and Hopper decode suites, memcheck of the fp4 test, the compute_80 PTX under
# forced JIT), then `bench decode --filter v41_` with the automatic and the portable kernel,
# base and change alternated; a table of per-case medians and change/base last. JSONs: $OUT/ab.tgz.
set -u
rounds=${1:-3}
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
t0=$(date +%s)
mkdir -p build-gpu build-ab-base && tar xJf build-pk/bins.tar.xz -C build-gpu && tar xJf build-pk/base.tar.xz -C build-ab-base
echo "change: $(cat build-gpu/PREBUILT_REV), base: $(cat build-ab-base/PREBUILT_REV)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 200 ./build-gpu/lkv_cuda_tests --gtest_brief=1 --gtest_filter='DecodeCuda.*:Sm90Primitives.*' >"$OUT/cuda-decode.log" 2>&1
echo "decode + primitives tests rc=$? ($(($(date +%s) - t0)) s): $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda-decode.log" | tr '\n' ' ')"
grep -E 'FAILED|Failure' "$OUT/cuda-decode.log" | head -20
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 ./build-gpu/lkv_cuda_tests \
  --gtest_filter='DecodeCuda.Fp4ExtraCacheAgainstTheOracle:DecodeCuda.CornerCases' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
CUDA_FORCE_PTX_JIT=1 timeout 150 ./build-gpu/lkv_cuda_tests --gtest_brief=1 --gtest_filter='DecodeCuda.Fp4*' >"$OUT/cuda-ptxjit.log" 2>&1
echo "compute_80 PTX (forced JIT) fp4 tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda-ptxjit.log" | tr '\n' ' ')"
mkdir -p "$OUT/ab"
for r in $(seq 1 "$rounds"); do
  for v in base change; do
    bin=./build-gpu/latentkv; [ $v = base ] && bin=./build-ab-base/latentkv
    for k in auto portable; do
      timeout 60 $bin bench decode --device cuda --kernel $k --filter v41_ --json "$OUT/ab/$v-$k-$r.json" >/dev/null 2>&1 ||
        echo "bench $v $k round $r failed"
    done
  done
done
python3 - "$OUT/ab" "$rounds" <<'PY'
import json, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
for k in ("auto", "portable"):
    t = {}
    for v in ("base", "change"):
        for r in range(1, rounds + 1):
            try: cases = json.load(open(f"{d}/{v}-{k}-{r}.json"))["cases"]
            except Exception: continue
            for c in cases: t.setdefault(c["name"], {}).setdefault(v, []).append(c["time_us"])
    print(f"kernel {k}: case, base us (median of {rounds}), change us, change/base")
    for name, m in t.items():
        if "base" in m and "change" in m:
            b, c = statistics.median(m["base"]), statistics.median(m["change"])
            print(f"  {name:44s} {b:9.1f} {c:9.1f} {c / b:7.3f}")
PY
(cd "$OUT" && tar czf ab.tgz ab ./*.log gpu.txt && rm -rf ab ./*.log)
echo "done in $(($(date +%s) - t0)) s"
