#!/usr/bin/env bash
# The main job: set up, build, then show latentkv working on this machine: what was built, every
# backend judged against the float64 oracle, and the compressor and sparse-decode benchmarks (the
# GPU when one is visible, otherwise the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/latentkv info
./build/latentkv verify
./build/latentkv bench compress --cases quick
./build/latentkv bench decode
