#!/usr/bin/env bash
# The portable kernels' compute_80 code (what sm_80 / sm_86 GPUs and GPUs newer than Hopper run)
# timed on the device by forcing the driver to compile the embedded PTX instead of loading the
# sm_90a machine code (CUDA_FORCE_PTX_JIT=1): build-gpu (default) against build-gpu-variant (a
# variant build, e.g. -DLKV_PORTABLE_F32_DEQUANT=ON), two alternations, then `scripts/gpu.sh
# test_jit` (the default build's JIT checks). The compiled PTX is cached across the processes of
# one build.
# Usage (after `scripts/gpu.sh build` with LKV_VARIANT_CMAKE set): bench/probes/ptx_jit_ab.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: ptx_jit_ab.sh OUT}
mkdir -p "$out/jit"
export CUDA_FORCE_PTX_JIT=1 CUDA_CACHE_MAXSIZE=4294967296 CUDA_CACHE_PATH=/tmp/lkv-jit-cache
specs=("decode v32_b128_h128" "decode tp_v32_b128_h16" "decode v4_b64_h64_topk128_extra512p64" "dense fp8_b128_sk4096_h16_sq1")
for rep in a b; do
  for v in default variant; do
    bin=./build-gpu/latentkv
    [ "$v" = variant ] && bin=./build-gpu-variant/latentkv
    for s in "${specs[@]}"; do
      read -r op filter <<<"$s"
      timeout 150 "$bin" bench "$op" --device cuda --kernel portable --filter "$filter" \
        --json "$out/jit/$op-$filter-$v-$rep.json" >>"$out/jit/bench.log" 2>&1 || echo "failed: $v $rep $s"
    done
  done
done
python3 - "$out/jit" <<'PY'
import json, sys, glob, os, collections
t = collections.defaultdict(dict)
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    v, rep = os.path.basename(f)[:-5].rsplit("-", 2)[1:]
    for c in json.load(open(f))["cases"]:
        t[c["name"]][f"{v}-{rep}"] = c["time_us"]
cols = ["default-a", "variant-a", "default-b", "variant-b"]
print(f"{'case (us, compute_80 PTX JIT)':44s}" + "".join(f"{c:>11s}" for c in cols) + "   variant/default")
for name, r in t.items():
    vals = [r.get(c, float("nan")) for c in cols]
    print(f"{name:44s}" + "".join(f"{x:11.1f}" for x in vals) + f"   {vals[1] / vals[0]:.3f} {vals[3] / vals[2]:.3f}")
PY
# The JIT checks themselves: scripts/gpu.sh's test_jit stage (the portable suites and the
# dequantization primitive with the portable kernel forced, then the `auto` choice).
OUT="$out/jit" bash scripts/gpu.sh test_jit | tail -3
