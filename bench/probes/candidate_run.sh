#!/usr/bin/env bash
# One device call for a candidate kernel change: its checks (portable suites, memcheck of the
# adversarial-index tests: call_lib.sh check), a same-run A/B against a base build over the specs in
# LKV_AB_SPECS (bins_ab.sh), then the candidate's portable benches of the ops named (JSONs to $OUT),
# the logs in one archive ($OUT/logs.tgz).
#   bash bench/probes/candidate_run.sh ROUNDS BASE_ARCHIVE LABEL=ARCHIVE [OP...]
# (archives from scripts/gpu_prebuild.sh latentkv lkv_cuda_tests, e.g. with LKV_PREBUILT_SM90=1)
set -u
source "$(dirname "$0")/call_lib.sh"
rounds=${1:?"usage: candidate_run.sh ROUNDS BASE_ARCHIVE LABEL=ARCHIVE [OP...]"} base=${2:?} pair=${3:?}
shift 3
label=${pair%%=*}
unpack "$base" build-gpu-base || exit 1
unpack "${pair#*=}" "build-gpu-$label" || exit 1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
check "$label" "build-gpu-$label"
[ "$(left)" -gt 200 ] && bash bench/probes/bins_ab.sh "$rounds" base=build-gpu-base "$label=build-gpu-$label"
benches "$label" "build-gpu-$label" "$@"
(cd "$OUT" && tar czf logs.tgz bench-*.log memcheck-*.log.gz tests-*.log.gz 2>/dev/null &&
  rm -f bench-*.log memcheck-*.log.gz tests-*.log.gz)
echo "left $(left) s"
