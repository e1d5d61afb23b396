# Sourced by this folder's one-call device scripts (groups32_run.sh, dequant_halves_run.sh,
# share_value_third_run.sh, group_half_run.sh, fold_run.sh, fold2_run.sh,
# candidate_run.sh, trace_run.sh, h200_benches.sh, group_stage_run.sh, lengths_run.sh,
# lengths_ab_run.sh, lengths_trace_run.sh, narrow_profile_run.sh, narrow_idx_run.sh,
# final_check_run.sh, prefetch_run.sh, sorted_indices_run.sh, narrow_ws_run.sh, narrow_form_run.sh,
# hopper_benches_run.sh, narrow_ws_racecheck_run.sh, narrow_ws_arrive_ab.sh, narrow32_run.sh, far_run.sh,
# compress_record_run.sh, flashmla_run.sh): the call's time left, archive unpacking, a
# binary run under a switch, a test log's summary line, the portable suites and sanitizer runs, a
# candidate's checks, the portable benches.
call_start=$(date +%s)
# Seconds left of the call (LKV_SECONDS, default 570: the device tool's 600 less the transfers).
left() { echo $(( ${LKV_SECONDS:-570} - ($(date +%s) - call_start) )); }
# unpack ARCHIVE DIR: a scripts/gpu_prebuild.sh archive into DIR, then says what it was built from.
unpack() { mkdir -p "$2" && tar xJf "$1" -C "$2" && echo "$2: $(cat "$2/PREBUILT_REV")"; }
# with_env DIR BINARY VAR=VALUE DESCRIPTION: DIR/latentkv runs BINARY with VAR=VALUE set, DIR/PREBUILT_REV
# says so (a label for bins_ab.sh that runs one build under a switch).
with_env() {
  mkdir -p "$1" && printf '#!/bin/sh\n%s exec %s "$@"\n' "$3" "$2" >"$1/latentkv" && chmod +x "$1/latentkv" &&
    echo "$4 with $3" >"$1/PREBUILT_REV"
}
# summary LABEL RC SECONDS LOG: one line with the GoogleTest verdict and any sanitizer summary.
summary() {
  echo "$1 rc=$2 $3 s: $(grep -E '^\[  (PASSED|FAILED)' "$4" | tr '\n' ' ') $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$4" | tr '\n' ' ')"
}
# suites LABEL DIR [SECONDS]: the portable attention suites of DIR/lkv_cuda_tests, their verdict and
# any failures printed, the log to $OUT/tests-LABEL.log.gz.
suites() {
  local t0 log=$OUT/tests-$1.log
  t0=$(date +%s)
  LKV_TEST_KERNELS=portable timeout "${3:-200}" "$2/lkv_cuda_tests" \
    --gtest_filter='Decode*:Dense*:Attention*:Prefill*:-*Sm90*' >"$log" 2>&1
  summary "portable suites ($1)" $? $(( $(date +%s) - t0 )) "$log"
  grep -E "^\[  FAILED|Failure" "$log" | head -20
  gzip -f "$log"
}
# sanitize TOOL LABEL DIR FILTER [SECONDS]: compute-sanitizer TOOL (memcheck, racecheck) on the tests
# FILTER names, portable kernel; the verdict printed, the log to $OUT/TOOL-LABEL.log.gz.
sanitize() {
  local t0 log=$OUT/$1-$2.log
  t0=$(date +%s)
  LKV_TEST_KERNELS=portable timeout "${5:-120}" compute-sanitizer --tool "$1" "$3/lkv_cuda_tests" \
    --gtest_filter="$4" >"$log" 2>&1
  summary "$1 ($2)" $? $(( $(date +%s) - t0 )) "$log"
  gzip -f "$log"
}
# check LABEL DIR: a candidate build's portable suites, then memcheck of the adversarial-index tests.
check() {
  suites "$1" "$2" 150
  sanitize memcheck "$1" "$2" 'DecodeCuda.CornerCases:DenseCuda.CornerCasesAndDeterminism:AttentionCuda.TokenGroups' 90
}
# benches LABEL DIR OP...: DIR/latentkv's portable benches of each OP while time is left, the JSONs
# to $OUT/OP-portable-LABEL.json, the logs to $OUT/bench-OP-portable-LABEL.log (last lines printed).
benches() {
  local label=$1 dir=$2 op log
  shift 2
  for op in "$@"; do
    [ "$(left)" -gt 60 ] || break
    log=$OUT/bench-$op-portable-$label.log
    timeout $(( $(left) - 20 )) "$dir/latentkv" bench "$op" --device cuda --kernel portable \
      --json "$OUT/$op-portable-$label.json" >"$log" 2>&1
    echo "bench $op ($label, portable) rc=$?"; tail -2 "$log"
  done
}
# compressor TAG DIR: the compressor's record on this GPU: bench/compress_reference.py (the eager
# PyTorch reference of both formats, three rounds, and the byte comparison of DIR/latentkv's output
# with it), then `bench compress` of both formats against it; the three JSONs and the logs packed
# as $OUT/compress-TAG.tgz (the device tool returns at most 8 files).
compressor() {
  local tag=$1 dir=$2 fmt d=$OUT/compress-$1
  mkdir -p "$d"
  timeout $(( $(left) - 20 )) env PYTHONUNBUFFERED=1 python3 bench/compress_reference.py --device cuda \
    --out "$d/compress-reference-$tag.json" --latentkv "$dir/latentkv" --dump-dir /tmp/lkv_dump >"$d/reference.log" 2>&1
  echo "reference rc=$?"; tail -3 "$d/reference.log"
  for fmt in v4_int8 v4_fp8; do
    [ "$(left)" -gt 40 ] || break
    timeout $(( $(left) - 15 )) "$dir/latentkv" bench compress --device cuda --format $fmt --shuffled \
      --reference "$d/compress-reference-$tag.json" --json "$d/compress-$fmt-$tag.json" >"$d/bench-$fmt.log" 2>&1
    echo "bench compress $fmt rc=$?"; tail -1 "$d/bench-$fmt.log"
  done
  (cd "$OUT" && tar czf "compress-$tag.tgz" "compress-$tag" && rm -rf "compress-$tag")
}
# ab_start ROUNDS BASE_LABEL=ARCHIVE NEW_LABEL=ARCHIVE: the A/B scripts' start (narrow_idx_run.sh,
# final_check_run.sh): OUT, the GPU's line, the new build unpacked into build-gpu-new; sets rounds,
# base and new.
ab_start() {
  OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
  rounds=$1 base=$2 new=$3
  nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
  unpack "${new#*=}" build-gpu-new
}
