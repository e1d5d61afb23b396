#!/usr/bin/env bash
# Builds the CUDA binaries on this machine (nvcc, no GPU needed) exactly as `gpu.sh build` does on
# the device machine, and packs them into build-pk/bins.tar.xz (~10 MB per binary with xz), so that a device
# call spends its minutes running, not compiling:
#   bash scripts/gpu_prebuild.sh [targets]          # default: latentkv lkv_cuda_tests lkv_tests
#   then, with the device tool's carry ["build-pk", ".deps"]:
#   LKV_PREBUILT=build-pk/bins.tar.xz bash scripts/gpu.sh build test sanitize ...  (build unpacks)
# The archive records the tree it was built from (PREBUILT_REV: the commit and whether the tree
# had changes), which gpu.sh prints; rebuild after any change to the sources.
# LKV_PREBUILT_OUT=PATH packs to PATH instead (relative to the repository root), e.g. the base of an
# A/B built in a worktree of the earlier commit and packed into this checkout:
#   out=$PWD/build-pk/base.tar.xz; git worktree add /tmp/lkv-base REV &&
#     (cd /tmp/lkv-base && LKV_PREBUILT_OUT=$out bash scripts/gpu_prebuild.sh latentkv)
# then, there: LKV_PREBUILT=build-pk/bins.tar.xz LKV_PREBUILT_VARIANT=build-pk/base.tar.xz
#   LKV_AB_KERNEL=auto LKV_AB_SPECS="decode v41_" bash scripts/gpu.sh build variant_ab   (variant = the base)
# LKV_PREBUILT_SM90=1 builds in build-gpu90 with sm_90a machine code only (no sm_80 code or PTX):
# about a third of the archive, for carrying several binaries to an H100/H200 in one call; the
# kernels an H100/H200 runs are the same sm_90a code either way.
# LKV_PREBUILT_RACECHECK=1 configures with -DLKV_RACECHECK_BARRIERS=ON (the build racecheck runs on,
# src/decode/cuda/kernel.cuh says why); every other build resets it to OFF in the shared cache.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=("$@")
[ $# -gt 0 ] || targets=(latentkv lkv_cuda_tests lkv_tests)  # gpu.sh's test stage runs all three
# The same GoogleTest sources as the device build (gpu.sh carries .deps/googletest there).
if [ ! -d .deps/googletest ]; then
  bash scripts/setup.sh
  mkdir -p .deps && cp -r /usr/src/googletest .deps/googletest
fi
dir=build-gpu gencode=()
if [ "${LKV_PREBUILT_SM90:-0}" = 1 ]; then
  dir=build-gpu90 gencode=("-DLKV_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a")
fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLKV_GTEST_SOURCE_DIR="$PWD/.deps/googletest" "${gencode[@]}" \
  -DLKV_RACECHECK_BARRIERS="$([ "${LKV_PREBUILT_RACECHECK:-0}" = 1 ] && echo ON || echo OFF)" >/dev/null
cmake --build "$dir" -j "$(nproc)" $(printf -- '--target %s ' "${targets[@]}")
out="${LKV_PREBUILT_OUT:-build-pk/bins.tar.xz}"
mkdir -p "$(dirname "$out")"
rev="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || rev="$rev+changes"
[ -z "${gencode[*]}" ] || rev="$rev (sm_90a only)"
[ "${LKV_PREBUILT_RACECHECK:-0}" != 1 ] || rev="$rev (LKV_RACECHECK_BARRIERS)"
echo "$rev" >"$dir/PREBUILT_REV"
tar cf - -C "$dir" PREBUILT_REV "${targets[@]}" | xz -T0 -6 >"$out.part"
mv "$out.part" "$out"  # never a half-written archive to carry
ls -la "$out"
echo "packed ${targets[*]} from $rev"
