#!/usr/bin/env bash
# One device call on any GPU: the compressor's record (call_lib.sh's `compressor`: the PyTorch
# reference of both formats and `bench compress` against it, named by the GPU: compress-h100.tgz),
# then compute-sanitizer memcheck of scripts/gpu.sh's default filter (the adversarial-index, error
# and unchecked tests) while time is left (memcheck-TAG.log.gz).
# There (carry the archive): bash bench/probes/compress_record_run.sh build-pk/NAME.tar.xz
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader)
echo "$gpu"
tag=$(echo "$gpu" | grep -o -E 'H200|H100|A100|L40S|L4' | head -1 | tr 'A-Z' 'a-z'); tag=${tag:-gpu}
unpack "${1:?archive}" build-gpu-x || exit 1
compressor "$tag" build-gpu-x
if [ "$(left)" -gt 60 ]; then
  t0=$(date +%s)
  timeout $(( $(left) - 10 )) compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu-x/lkv_cuda_tests \
    --gtest_filter="${LKV_MEMCHECK_FILTER:-*Unchecked*:*Errors*:FormatCuda*:DecodeCuda.CornerCases:DecodeCuda.Fp4ExtraCacheAgainstTheOracle:PrefillCuda.CornerCasesAndBatched:DenseCuda.CornerCasesAndDeterminism:DenseCuda.PackedQueryTokens:DenseCuda.BadDeviceValuesAreClampedOrSkipped}" \
    >"$OUT/memcheck-$tag.log" 2>&1
  summary memcheck $? $(( $(date +%s) - t0 )) "$OUT/memcheck-$tag.log"
  grep -E '^\[       OK|^\[  FAILED' "$OUT/memcheck-$tag.log" | tail -40
  gzip -f "$OUT/memcheck-$tag.log"
fi
echo "left $(left) s"
