#!/usr/bin/env bash
# The main job: set up, build, then run latentkv's demo, DeepSeek-V4 attention's KV pipeline end to
# end with its built-in checks (on the GPU when one is visible, otherwise on the CPU), after a quick
# judgement of every backend against the float64 oracles.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/latentkv info
./build/latentkv verify
./build/latentkv demo --device auto
