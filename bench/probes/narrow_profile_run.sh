#!/usr/bin/env bash
# One device call: where the narrow Hopper kernel's time goes (bench/NOTES.md v41 Next items 1-2,
# v58), and the benches of the same binaries on the kernel each device picks.
#  1. per-instruction stall samples (ncu SourceCounters + WarpStateStats, the first narrow launch)
#     of the tensor-parallel V3.2 h_q 16 case and of dense v32_fp8 pages h_q 16 s_q 1 s_k 8192,
#     with the SM's pipe and shared-memory throughput (SpeedOfLight, ComputeWorkloadAnalysis,
#     MemoryWorkloadAnalysis);
#  2. (LKV_RACECHECK_PROBE=1) bench/probes/racecheck_partial_barrier.cu under racecheck, three forms
#     (does racecheck credit a __syncthreads that follows a partial named barrier?);
#  3. `bench decode`, `bench dense` and `bench prefill` with --kernel auto while time is left.
# Here: binaries packed by LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/NAME.tar.xz bash
#   scripts/gpu_prebuild.sh latentkv (session 58: call 1 main.tar.xz, main's binaries of 6249e86 with
#   the racecheck probe; call 3 idx.tar.xz, the code landed at fea0fca);
# there (carry the archive): bash bench/probes/narrow_profile_run.sh build-pk/NAME.tar.xz
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
unpack "${1:-build-pk/main.tar.xz}" build-gpu-prof || exit 1
bin=build-gpu-prof/latentkv
profile() {  # NAME OP FILTER
  local t0; t0=$(date +%s)
  timeout 200 ncu --clock-control none -k 'regex:narrow_kernel' -c 1 --section SourceCounters \
    --section WarpStateStats --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
    -f -o "$OUT/prof-$1" "$bin" bench "$2" --device cuda --kernel auto --filter "$3" --reps 1 \
    >"$OUT/ncu-$1.log" 2>&1
  echo "profile $1 rc=$? $(( $(date +%s) - t0 )) s"
  ncu --import "$OUT/prof-$1.ncu-rep" --page source --print-source sass --csv 2>>"$OUT/ncu-$1.log" |
    gzip >"$OUT/prof-$1-sass.csv.gz"
  ncu --import "$OUT/prof-$1.ncu-rep" --page details >"$OUT/details-$1.txt" 2>&1
  grep -E "Duration|Registers|Achieved Occupancy|Shared Memory|Issue Slots|Issued Ipc|Pipe|Warp Cycles|Eligible|Throughput" \
    "$OUT/details-$1.txt" | head -40
  rm -f "$OUT/prof-$1.ncu-rep"
}
profile tp decode tp_v32_b128_h16
profile densefp8 dense fp8_b128_sk8192_h16_sq1
if [ "${LKV_RACECHECK_PROBE:-0}" = 1 ]; then
  probe=/tmp/racecheck_probe
  if nvcc -arch=sm_90a -o "$probe" bench/probes/racecheck_partial_barrier.cu >"$OUT/racecheck-probe.txt" 2>&1; then
    for form in partial whole own; do
      echo "== $form" >>"$OUT/racecheck-probe.txt"
      timeout 60 compute-sanitizer --tool racecheck --racecheck-report hazard "$probe" "$form" \
        >>"$OUT/racecheck-probe.txt" 2>&1
      echo "racecheck probe ($form) rc=$?: $(grep -E 'RACECHECK SUMMARY|mismatch|ok' "$OUT/racecheck-probe.txt" | tail -2 | tr '\n' ' ')"
    done
  fi
fi
# The benches on the kernel the device picks (the Hopper kernels on an H100 / H200).
for op in decode dense prefill; do
  [ "$(left)" -gt 90 ] || break
  timeout $(( $(left) - 30 )) "$bin" bench "$op" --device cuda --kernel auto \
    --json "$OUT/$op-auto.json" >"$OUT/bench-$op-auto.log" 2>&1
  echo "bench $op (auto) rc=$?"; tail -3 "$OUT/bench-$op-auto.log"
done
(cd "$OUT" && tar czf logs.tgz ./*.log ./*.txt && rm -f ./*.log ./*.txt)
echo "left $(left) s"
