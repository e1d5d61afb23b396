# Sourced by this folder's one-call device scripts (groups32_run.sh, dequant_halves_run.sh,
# share_value_third_run.sh): the call's time left, archive unpacking, a test log's summary line.
call_start=$(date +%s)
# Seconds left of the call (LKV_SECONDS, default 570: the device tool's 600 less the transfers).
left() { echo $(( ${LKV_SECONDS:-570} - ($(date +%s) - call_start) )); }
# unpack ARCHIVE DIR: a scripts/gpu_prebuild.sh archive into DIR, then says what it was built from.
unpack() { mkdir -p "$2" && tar xJf "$1" -C "$2" && echo "$2: $(cat "$2/PREBUILT_REV")"; }
# summary LABEL RC SECONDS LOG: one line with the GoogleTest verdict and any sanitizer summary.
summary() {
  echo "$1 rc=$2 $3 s: $(grep -E '^\[  (PASSED|FAILED)' "$4" | tr '\n' ' ') $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$4" | tr '\n' ' ')"
}
