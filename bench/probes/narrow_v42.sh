#!/usr/bin/env bash
# The device work left open since session 42 (bench/NOTES.md v44 Next items 1-2), in one device call:
#  0. the two compressor tests corrected in session 44 (CompressCuda.*, then memcheck of the two),
#     which have not run in their corrected form;
#  1. the narrow Hopper kernel (v41 Next items 1-2): where its time goes, by per-instruction stall
#     samples of the tensor-parallel V3.2 h_q 16 case (gpu.sh profile_sass, which matches
#     narrow_kernel too);
#  2. the block maxima's barrier, same run: the current 256-thread form (default build) against the
#     first form's `bar.sync 1, 128` of warpgroup 0 alone (a patched copy of this tree, built as the
#     variant), on the three cases the kernel takes;
#  3. bench/probes/racecheck_partial_barrier.cu under racecheck, both forms (does racecheck credit a
#     __syncthreads that follows a partial named barrier?).
# Usage (on the device machine, from the repository root; build-ab-base is made here first):
#   bash bench/probes/narrow_v42.sh prepare        # here: writes build-ab-base/ (ignored by git)
#   bash bench/probes/narrow_v42.sh run            # there, with carry [".deps", "build-ab-base"]
set -uo pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in
  prepare)
    rm -rf build-ab-base && mkdir -p build-ab-base
    git archive HEAD CMakeLists.txt include src tools tests | tar -x -C build-ab-base
    python3 - <<'PY'
p = "build-ab-base/src/decode/sm90/narrow.cuh"
s = open(p).read()
maxima = "      named_barrier_sync(1);\n#pragma unroll\n      for (int j = 0; j < 4; ++j) {\n        const int r = narrow_row(q2, j), e = narrow_elem(j);"
other = "    } else {\n      named_barrier_sync(1);  // warpgroup 0's block maxima\n    }"
assert s.count(maxima) == 1 and s.count(other) == 1, "narrow.cuh changed: update the patch"
s = s.replace(maxima, maxima.replace("named_barrier_sync(1);", 'asm volatile("bar.sync 1, 128;\\n" ::: "memory");'))
s = s.replace(other, "    }")
open(p, "w").write(s)
PY
    diff -r src build-ab-base/src
    echo "build-ab-base ready (diff above: the variant's barrier)"
    ;;
  run)
    [ -d build-ab-base ] || { echo "build-ab-base missing: run 'prepare' here and carry it" >&2; exit 2; }
    OUT="${OUT:-$PWD/out}"
    export OUT LKV_BUILD_TARGETS="latentkv lkv_cuda_tests" LKV_VARIANT_TARGETS=latentkv
    export LKV_VARIANT_SRC=build-ab-base LKV_AB_KERNEL=sm90
    export LKV_AB_SPECS="decode tp_v32_b128_h16;dense fp8_b128_sk4096_h16_sq1;dense fp8_b128_sk8192_h16_sq1"
    export LKV_PROFILE_OP=decode LKV_PROFILE_FILTER=tp_v32_b128_h16
    bash scripts/gpu.sh build variant_ab profile_sass
    # Item 0 and item 3's logs travel as one archive (at most 8 files come back from the device).
    extra="$OUT/extra" && mkdir -p "$extra"
    timeout 300 ./build-gpu/lkv_cuda_tests --gtest_filter='CompressCuda.*' >"$extra/compress-tests.log" 2>&1
    echo "== CompressCuda.* rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$extra/compress-tests.log" | tr '\n' ' ')"
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 ./build-gpu/lkv_cuda_tests \
      --gtest_filter='CompressCuda.UncheckedBadIndicesAreSkippedNeverFollowed:CompressCuda.CompressRatioBeyondTheGridIsRefusedFirst' \
      >"$extra/memcheck-compress.log" 2>&1
    echo "== memcheck (the two compressor tests) rc=$? $(grep -E 'ERROR SUMMARY' "$extra/memcheck-compress.log" | tail -1)"
    nvcc -arch=sm_90a -o /tmp/racecheck_probe bench/probes/racecheck_partial_barrier.cu
    for form in partial whole; do
      compute-sanitizer --tool racecheck --racecheck-report hazard /tmp/racecheck_probe "$form" \
        >"$extra/racecheck-probe-$form.txt" 2>&1
      echo "== racecheck probe ($form): $(tail -n 3 "$extra/racecheck-probe-$form.txt" | tr '\n' ' ')"
    done
    tar czf "$OUT/extra.tgz" -C "$OUT" extra && rm -rf "$extra"
    rm -f "$OUT/variant-ab.tgz"  # (ab-variant.txt has the table)
    ;;
  *) echo "usage: $0 prepare|run" >&2; exit 2 ;;
esac
