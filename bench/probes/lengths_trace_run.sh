#!/usr/bin/env bash
# One device call (bench/NOTES.md v57 item 2): the portable kernel's phase stamps for main and for
# wip/lengths (1cff4ae: index loads ahead of Q, tile 0's copies not waiting for Q, the topk lengths
# loaded behind the index loads), flushed, on V4 b 64 h_q 64 (one wave) with and without lengths
# and on V3.2 b 64 h_q 128.
# Here: LKV_SM90_TRACE=ON builds of both, each packed with its PREBUILT_REV:
#   cmake -S . -B build-trace90 -G Ninja -DCMAKE_BUILD_TYPE=Release "-DLKV_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a" \
#     -DLKV_SM90_TRACE=ON && cmake --build build-trace90 --target latentkv &&
#     (git rev-parse --short HEAD > build-trace90/PREBUILT_REV) && tar cJf build-pk/trace<main|lengths>.tar.xz -C build-trace90 latentkv PREBUILT_REV
#   (tracemain at main 2037fb0, tracelengths at wip/lengths 1cff4ae)
# There (carry build-pk/{tracemain,tracelengths}.tar.xz): bash bench/probes/lengths_trace_run.sh
set -u
source "$(dirname "$0")/call_lib.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for v in main lengths; do
  unpack "build-pk/trace$v.tar.xz" "build-trace-$v" || exit 1
done
for spec in "v4_b64_h64_topk128_extra512p64" "v4_b64_h64_topk128_extra512p64 --lengths" "v32_b64_h128_topk2048"; do
  for v in main lengths; do
    read -r f extra <<<"$spec"
    echo "== $v: $spec" | tee -a "$OUT/trace.txt"
    timeout 60 "build-trace-$v/latentkv" bench decode --device cuda --kernel portable --filter "$f" $extra --trace \
      2>&1 | grep -E "trace|^v" | tee -a "$OUT/trace.txt"
  done
done
echo "left $(left) s"
