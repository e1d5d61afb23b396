#!/usr/bin/env bash
# Sets up, builds and runs every test that this machine can run: the C++ suites (CPU) through
# ctest, and the CLI's oracle verification. CUDA sources are compiled whenever nvcc exists; the CUDA
# suites run on a GPU machine through scripts/gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/latentkv verify --device cpu
cd build
ctest --output-on-failure -j "$(nproc)"
