#!/usr/bin/env bash
# One device call (bench/NOTES.md v56): where the portable kernel's fixed cost per CTA goes. Phase
# stamps of the portable kernel (and of the Hopper kernel beside it) on sparse decode cases with 20
# to 64 tiles per CTA, from a build with the CMake option LKV_SM90_TRACE=ON; then main's portable
# decode and dense benches (JSONs to $OUT).
# Here: the trace build of this commit, packed as build-pk/trace.tar.xz:
#   cmake -S . -B build-trace90 -G Ninja -DCMAKE_BUILD_TYPE=Release "-DLKV_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a" \
#     -DLKV_SM90_TRACE=ON && cmake --build build-trace90 --target latentkv &&
#     (git rev-parse --short HEAD > build-trace90/PREBUILT_REV) && tar cJf build-pk/trace.tar.xz -C build-trace90 latentkv PREBUILT_REV
#   and main's binaries: build-pk/prologue.tar.xz (72d2e03, whose sources are main 5b34a3b's).
# There (carry build-pk/{trace,prologue}.tar.xz): bash bench/probes/trace_run.sh
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/trace.tar.xz build-trace || exit 1
unpack build-pk/prologue.tar.xz build-gpu-main || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for kernel in portable auto; do
  for f in v4_b64_h64_topk128_extra512p64 v4_b64_h64_topk128_extra1024p64 v4_b128_h64_topk128_extra512p64 v32_b64_h128_topk2048; do
    timeout 60 build-trace/latentkv bench decode --device cuda --kernel $kernel --filter "$f" --trace \
      --json "$OUT/trace-$kernel-$f.json" 2>&1 | grep -E "trace|^v" | tee -a "$OUT/trace.txt"
    for m in --trace-warm; do
      timeout 60 build-trace/latentkv bench decode --device cuda --kernel $kernel --filter "$f" $m 2>&1 | grep -E "trace" | tee -a "$OUT/trace.txt"
    done
  done
done
(cd "$OUT" && tar czf trace-json.tgz trace-*.json && rm -f trace-*.json)
benches main build-gpu-main decode dense prefill
echo "left $(left) s"
