#!/usr/bin/env bash
# One device call on a Hopper GPU: latentkv's attention benches (the kernel the device picks) each
# followed at once by FlashMLA's kernels on the same shapes (bench/flashmla/side_by_side.py, vLLM
# 0.25.0's build of them), op by op while time is left (LKV_SECONDS, call_lib.sh), then the whole
# lkv_cuda_tests with 200 s left, then, with 150 s left, the compressor's record with the byte
# comparison against the PyTorch reference (call_lib.sh's `compressor`). Files are named by the GPU
# (decode-h200.json, flashmla-decode-h200.json). LKV_FLASHMLA_OPS: the ops, in order (default
# "decode dense prefill").
# Here: bash bench/flashmla/fetch.sh (PyPI), and the binaries packed as build-pk/NAME.tar.xz
#   (LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/NAME.tar.xz bash scripts/gpu_prebuild.sh
#   latentkv lkv_cuda_tests);
# there (carry the archive and .deps/flashmla): bash bench/probes/flashmla_run.sh build-pk/NAME.tar.xz
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader)
echo "$gpu"
tag=$(echo "$gpu" | grep -o -E 'H200|H100' | head -1 | tr 'A-Z' 'a-z')
[ -n "$tag" ] || { echo "not a Hopper GPU: nothing run"; exit 0; }
unpack "${1:?archive}" build-gpu-fm || exit 1
for op in ${LKV_FLASHMLA_OPS:-decode dense prefill}; do
  [ "$(left)" -gt 120 ] || { echo "$op: skipped, $(left) s left"; continue; }
  timeout $(( $(left) - 60 )) build-gpu-fm/latentkv bench "$op" --device cuda --kernel auto \
    --json "$OUT/$op-$tag.json" >"$OUT/bench-$op-$tag.log" 2>&1
  echo "bench $op (auto) rc=$? ($(left) s left)"; tail -2 "$OUT/bench-$op-$tag.log"
  [ "$(left)" -gt 40 ] || break
  timeout $(( $(left) - 20 )) python3 bench/flashmla/side_by_side.py --ops "$op" \
    --latentkv "$OUT/$op-$tag.json" --json "$OUT/flashmla-$op-$tag.json" >"$OUT/flashmla-$op-$tag.log" 2>&1
  echo "flashmla $op rc=$? ($(left) s left)"
  grep -E '^check' "$OUT/flashmla-$op-$tag.log" | head -20; sed -n '/^ratio > 1/,$p' "$OUT/flashmla-$op-$tag.log"
done
# The whole CUDA test suite (every kernel against the CPU reference) when 200 s are left.
if [ "$(left)" -gt 200 ]; then
  t0=$(date +%s)
  timeout $(( $(left) - 15 )) build-gpu-fm/lkv_cuda_tests >"$OUT/cuda-tests-$tag.log" 2>&1
  summary "lkv_cuda_tests" $? $(( $(date +%s) - t0 )) "$OUT/cuda-tests-$tag.log"
  grep -E "^\[  FAILED|Failure" "$OUT/cuda-tests-$tag.log" | head -20
fi
[ "$(left)" -gt 150 ] && compressor "$tag" build-gpu-fm
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
echo "left $(left) s"
