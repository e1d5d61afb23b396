#!/usr/bin/env bash
# Builds the CUDA binaries on this machine (nvcc, no GPU needed) exactly as `gpu.sh build` does on
# the device machine, and packs them into build-pk/bins.tar.xz (~10 MB per binary with xz), so that a device
# call spends its minutes running, not compiling:
#   bash scripts/gpu_prebuild.sh [targets]          # default: latentkv lkv_cuda_tests
#   then, with the device tool's carry ["build-pk", ".deps"]:
#   LKV_PREBUILT=build-pk/bins.tar.xz bash scripts/gpu.sh build test sanitize ...  (build unpacks)
# The archive records the tree it was built from (PREBUILT_REV: the commit and whether the tree
# had changes), which gpu.sh prints; rebuild after any change to the sources.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=("$@")
[ $# -gt 0 ] || targets=(latentkv lkv_cuda_tests)
# The same GoogleTest sources as the device build (gpu.sh carries .deps/googletest there).
if [ ! -d .deps/googletest ]; then
  bash scripts/setup.sh
  mkdir -p .deps && cp -r /usr/src/googletest .deps/googletest
fi
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DLKV_GTEST_SOURCE_DIR="$PWD/.deps/googletest" >/dev/null
cmake --build build-gpu -j "$(nproc)" $(printf -- '--target %s ' "${targets[@]}")
mkdir -p build-pk
rev="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || rev="$rev+changes"
echo "$rev" >build-gpu/PREBUILT_REV
tar cf - -C build-gpu PREBUILT_REV "${targets[@]}" | xz -T0 -6 >build-pk/bins.tar.xz.part
mv build-pk/bins.tar.xz.part build-pk/bins.tar.xz  # never a half-written archive to carry
ls -la build-pk/bins.tar.xz
echo "packed ${targets[*]} from $rev"
