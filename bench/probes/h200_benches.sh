#!/usr/bin/env bash
# One device call: the portable kernel's decode, dense and prefill benches of main on an H200 only
# (on any other GPU it stops at once, so that a call that lands elsewhere costs only its start).
# Here: main's binaries packed as build-pk/main.tar.xz (LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/main.tar.xz
#   bash scripts/gpu_prebuild.sh latentkv); there (carry build-pk/main.tar.xz): bash bench/probes/h200_benches.sh
set -u
source "$(dirname "$0")/call_lib.sh"
gpu=$(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader)
echo "$gpu"
case "$gpu" in *H200*) ;; *) echo "not an H200: nothing run"; exit 0 ;; esac
unpack build-pk/main.tar.xz build-gpu-main || exit 1
benches h200 build-gpu-main decode dense prefill
echo "left $(left) s"
