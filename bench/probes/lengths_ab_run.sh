#!/usr/bin/env bash
# One device call (bench/NOTES.md v57, after lengths_run.sh): which part of wip/lengths moves which
# case. Suites of the two partial builds, then a same-run A/B of four binaries: main with the
# `bench decode --lengths` flag (lengthsbase, wip/lengths-base), SparseSource's deferred lengths
# only (lenonly, a7aaebd), plus the prologue's index loads ahead of Q (early, wip/lengths-early),
# plus tile 0's copies not waiting for Q (lengths, 1cff4ae); then racecheck of the last if time
# is left.
# Here: the archives of lengths_run.sh, and
#   (at a7aaebd) LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/lenonly.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
#   (in wip/lengths-early) LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/early.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests
# There (carry build-pk/{lengthsbase,lenonly,early,lengths,lengthsrc}.tar.xz): bash bench/probes/lengths_ab_run.sh [ROUNDS]
set -u
source "$(dirname "$0")/call_lib.sh"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for v in lenonly early; do
  unpack "build-pk/$v.tar.xz" "build-gpu-$v" && suites "$v" "build-gpu-$v" 150
done
LKV_AB_SPECS="decode v32_b128_h128;decode tp_v32_b128_h16;decode v4_b64_h64_topk128_extra512p64;decode v4_b64_h64_topk128_extra512p64 --lengths;decode v4_b128_h64_topk128_extra512p64;decode v4_b128_h64_topk128_extra512p64 --lengths;decode v4_b128_h128_topk128_extra1024p2" \
  bash bench/probes/bins_ab.sh "${1:-2}" base=build-pk/lengthsbase.tar.xz lenonly=build-pk/lenonly.tar.xz \
  early=build-pk/early.tar.xz lengths=build-pk/lengths.tar.xz
if [ "$(left)" -gt 200 ]; then
  unpack build-pk/lengthsrc.tar.xz build-gpu-rc &&
    sanitize racecheck lengths build-gpu-rc '*.WideAndNarrowLayoutsAgreeBitwise' $(( $(left) - 30 ))
fi
(cd "$OUT" && tar czf logs.tgz tests-*.log.gz racecheck-*.log.gz 2>/dev/null && rm -f tests-*.log.gz racecheck-*.log.gz)
echo "left $(left) s"
