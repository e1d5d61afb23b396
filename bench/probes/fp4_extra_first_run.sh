#!/usr/bin/env bash
# The first device run of the fp4 extra cache (session 48), with binaries from scripts/gpu_prebuild.sh:
#   bash scripts/gpu_prebuild.sh here, then on the device (carry ["build-pk"]): bash bench/probes/fp4_extra_first_run.sh
# (It ran on an H100; its outputs were renamed *-h100 when committed.)
set -u
t0=$(date +%s)
mkdir -p build-gpu && tar xJf build-pk/bins.tar.xz -C build-gpu
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee $OUT/gpu.txt
cd build-gpu
timeout 100 ./lkv_cuda_tests --gtest_brief=1 --gtest_filter='DecodeCuda.Fp4*:DecodeCuda.Sm90*' > $OUT/cuda-fp4.log 2>&1; echo "fp4+sm90 tests rc=$? $(($(date +%s)-t0))s"
grep -E '^\[  (PASSED|FAILED)|FAILED|Failure' $OUT/cuda-fp4.log | head -30
timeout 40 ./latentkv bench decode --device cuda --filter v41_ --json $OUT/decode-v41-h200.json > $OUT/bench-v41.log 2>&1; echo "bench auto rc=$?"; tail -12 $OUT/bench-v41.log
timeout 40 ./latentkv bench decode --device cuda --kernel portable --filter v41_ --json $OUT/decode-v41-portable-h200.json > $OUT/bench-v41-portable.log 2>&1; echo "bench portable rc=$?"; tail -12 $OUT/bench-v41-portable.log
timeout 100 ./lkv_cuda_tests --gtest_brief=1 --gtest_filter='DecodeCuda.*:-DecodeCuda.Fp4*:DecodeCuda.Sm90*' > $OUT/cuda-decode.log 2>&1; echo "other decode tests rc=$? $(($(date +%s)-t0))s"
grep -E '^\[  (PASSED|FAILED)|FAILED|Failure' $OUT/cuda-decode.log | head -30
