#!/usr/bin/env bash
# Sets up, builds and runs every test that this machine can run: the CLI's oracle verification,
# the C++ suites (CPU) through ctest, the C++ suites again under ASan and UBSan, and the Python
# suite (scripts/test_python.sh, which installs its packages from PyPI). CUDA sources are compiled
# whenever nvcc exists; the CUDA suites run on a GPU machine through scripts/gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/latentkv verify --device cpu
(cd build && ctest --output-on-failure -j "$(nproc)")
# The same C++ suites under AddressSanitizer and UndefinedBehaviorSanitizer (CPU code).
bash scripts/test_sanitize.sh
bash scripts/test_python.sh
