#!/usr/bin/env bash
# compute-sanitizer synccheck, one kernel family per process (a reported barrier error ends the
# kernel and leaves the context unusable, so one process per family keeps a report in one family
# from hiding the others), plus the named-barrier probe (bench/probes/synccheck_named.cu).
# LKV_SC_SECONDS: each run's limit (default 100); LKV_SC_RUNS: which runs (default: all of
# probe compress portable compact sm90 narrow pairs ws).
#   bash bench/probes/synccheck_run.sh BINARIES.tar.xz PROBE_BINARY
# BINARIES: scripts/gpu_prebuild.sh's archive (latentkv, lkv_cuda_tests); PROBE_BINARY: the probe
# built here with `nvcc -O3 -arch=sm_90a -lineinfo -o PROBE bench/probes/synccheck_named.cu`.
set -uo pipefail
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT" b
tar xJf "$1" -C b
probe=$2
T=${LKV_SC_SECONDS:-100}
sc() { timeout "$T" compute-sanitizer --tool synccheck --print-limit 20 --error-exitcode 9 "$@"; }
runs=" ${LKV_SC_RUNS:-probe compress portable compact sm90 narrow pairs ws} "
[[ "$runs" == *" probe "* ]] && {
  for m in 0 1 2 3; do sc "$probe" $m; echo "probe mode $m rc=$?"; done
} >"$OUT/sc-probe.log" 2>&1
[ -f "$OUT/sc-probe.log" ] && grep -E "^mode|rc=|ERROR SUMMARY" "$OUT/sc-probe.log"
run() {  # NAME FILTER [sanitizer args...]; environment switches as VAR=VALUE before the call
  local name=$1 filter=$2; shift 2
  [[ "$runs" == *" $name "* ]] || return 0
  sc "$@" b/lkv_cuda_tests --gtest_filter="$filter" >"$OUT/sc-$name.log" 2>&1
  echo "$name rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/sc-$name.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/sc-$name.log" | tr '\n' ' ')"
  grep -m3 -A3 "Barrier error\|error detected" "$OUT/sc-$name.log" | grep -E "error|at |by thread" | head -6
}
run compress 'CompressCuda.FunctionalModeAndDeterminism:CompressCuda.UncheckedBadIndicesAreSkippedNeverFollowed:CompressCuda.SliceClustersMatchGlobalMergeBitwise:FormatCuda.QuantizeAndDequantizeMatchCpu'
LKV_TEST_KERNELS=portable run portable 'DecodeCuda.CornerCases:DenseCuda.CornerCasesAndDeterminism:PrefillCuda.CornerCasesAndBatched:DecodeCuda.PlanReuseSplitsAndDeterminism:*TokenGroups:AttentionCuda.ScoreAndValueWarps:*CopyWarpsAgreeBitwise:*IdleWarpsDequantizeBitwise:*WideAndNarrowLayoutsAgreeBitwise'
LKV_TEST_KERNELS=compact run compact 'DecodeCuda.CornerCases:DenseCuda.CornerCasesAndDeterminism:PrefillCuda.CornerCasesAndBatched'
LKV_TEST_KERNELS=sm90 run sm90 'DecodeCuda.CornerCases:PrefillCuda.CornerCasesAndBatched:DenseCuda.CornerCasesAndDeterminism:DenseCuda.PackedQueryTokens:DecodeCuda.PlanReuseSplitsAndDeterminism'
run narrow 'DenseCuda.Sm90NarrowBothForms:DenseCuda.Sm90Narrow32Rows:DecodeCuda.Sm90NarrowRowsAgreeWithWideRows:DecodeCuda.Sm90Narrow32RowsAgreeWith64RowKernel'
run pairs 'DecodeCuda.Sm90PairsAgreeBitwiseWithSingleCtas'
LKV_SM90_WS=1 LKV_TEST_KERNELS=sm90 run ws 'DecodeCuda.CornerCases'
(cd "$OUT" && tar czf sc-logs.tgz sc-*.log && rm -f sc-*.log)
