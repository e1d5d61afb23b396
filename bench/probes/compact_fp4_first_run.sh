#!/usr/bin/env bash
# The compact kernel's first run with DeepSeek V4.1's fp4 extra cache (session 49), binaries from
# scripts/gpu_prebuild.sh (build-pk/bins.tar.xz; build-pk/base.tar.xz for the A/B at the end):
#   there (carry ["build-pk"]): bash bench/probes/compact_fp4_first_run.sh
# The DecodeCuda suite (every kernel: portable, compact forced, Hopper), memcheck and the compute_80
# PTX under forced JIT with the compact kernel forced, `bench decode --kernel compact --filter v41_`;
# on an H200 also bench/probes/fp4_dequant_ab.sh's A/B (two rounds). Outputs in $OUT.
set -u
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
t0=$(date +%s)
mkdir -p build-gpu && tar xJf build-pk/bins.tar.xz -C build-gpu
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "binaries of $(cat build-gpu/PREBUILT_REV) on $gpu"
timeout 200 ./build-gpu/lkv_cuda_tests --gtest_brief=1 --gtest_filter='DecodeCuda.*' >"$OUT/cuda-decode.log" 2>&1
echo "DecodeCuda rc=$? ($(($(date +%s) - t0)) s): $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda-decode.log" | tr '\n' ' ')"
grep -E 'FAILED|Failure' "$OUT/cuda-decode.log" | head -20
echo "compact fp4 lines: $(grep -cE '^\[decode\] compact fp4' "$OUT/cuda-decode.log"), worst max_rel $(grep -E '^\[decode\] compact fp4' "$OUT/cuda-decode.log" | grep -oE 'max_rel [0-9.e+-]+' | awk '{print $2}' | sort -g | tail -1)"
LKV_TEST_KERNELS=compact timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 ./build-gpu/lkv_cuda_tests \
  --gtest_filter='DecodeCuda.Fp4ExtraCacheAgainstTheOracle:DecodeCuda.CornerCases' >"$OUT/memcheck-compact.log" 2>&1
echo "memcheck (compact) rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-compact.log" | tail -1) ($(($(date +%s) - t0)) s)"
CUDA_FORCE_PTX_JIT=1 LKV_TEST_KERNELS=compact timeout 120 ./build-gpu/lkv_cuda_tests --gtest_brief=1 \
  --gtest_filter='DecodeCuda.Fp4*' >"$OUT/cuda-ptxjit-compact.log" 2>&1
echo "compute_80 PTX, compact, rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda-ptxjit-compact.log" | tr '\n' ' ')"
timeout 60 ./build-gpu/latentkv bench decode --device cuda --kernel compact --filter v41_ \
  --json "$OUT/decode-v41-compact.json" 2>&1 | tee "$OUT/bench-decode-v41-compact.log"
if [[ "$gpu" == *H200* ]]; then
  mkdir -p build-ab-base && tar xJf build-pk/base.tar.xz -C build-ab-base
  for r in 1 2; do
    for v in base change; do
      bin=./build-gpu/latentkv; [ $v = base ] && bin=./build-ab-base/latentkv
      for k in auto portable; do
        timeout 60 $bin bench decode --device cuda --kernel $k --filter v41_ --json "$OUT/ab-$v-$k-$r.json" >/dev/null 2>&1
      done
    done
  done
  python3 - "$OUT" <<'PY'
import json, statistics, sys
d = sys.argv[1]
for k in ("auto", "portable"):
    t = {}
    for v in ("base", "change"):
        for r in (1, 2):
            try: cases = json.load(open(f"{d}/ab-{v}-{k}-{r}.json"))["cases"]
            except Exception: continue
            for c in cases: t.setdefault(c["name"], {}).setdefault(v, []).append(c["time_us"])
    print(f"kernel {k}: case, base us, change us (medians of 2), change/base")
    for name, m in t.items():
        if "base" in m and "change" in m:
            b, c = statistics.median(m["base"]), statistics.median(m["change"])
            print(f"  {name:44s} {b:9.1f} {c:9.1f} {c / b:7.3f}")
PY
fi
(cd "$OUT" && tar czf run.tgz ./*.json ./*.log && rm -f ./*.json ./*.log)
echo "done in $(($(date +%s) - t0)) s"
