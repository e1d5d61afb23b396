#!/usr/bin/env bash
# The GPU workflow, run on the device machine (H200) in one call:
#   bash scripts/gpu.sh [build] [test] [sanitize] [reference] [bench] [decode] [decode_portable] [profile] [prefill] [dense]
#   [racecheck] [bench_cluster] [bench_slices] [profile_sass] [profile_pipes] [profile_compress] [splits] [prefill_portable] [dense_portable] [test_ws] [decode_ws] [prefill_ws] [dense_ws]
#   [test_ws_pairs] [decode_ws_pairs] [test_pairs] [decode_pairs] [dense_nopack] [dense_portable_nopack]
#   [racecheck_portable] [decode_portable_nogroups] [dense_portable_nogroups] [prefill_portable_narrow]
#   [dense_portable_narrow] [dense_portable_noroles] [copy_warps] [env_ab] [variant_ab] [racecheck_variant] [variant_trace]
#   [initcheck] [synccheck] [flashmla] [decode_stream] [test_jit] (the compute_80 PTX under forced JIT)
#   [decode_compact] [prefill_compact] [dense_compact] [sanitize_compact] (the compact kernel forced)
# (*_ws: the warp-specialised sm90 variant, LKV_SM90_WS=1) [demo] [python]
#   (default: build test sanitize reference bench decode decode_portable prefill dense
#    prefill_portable dense_portable demo python; the other stages only when named)
# build: CMake for sm_80 + sm_90a with the carried GoogleTest sources (.deps/googletest; LKV_CMAKE_EXTRA: more -D flags;
#   LKV_PREBUILT: unpack scripts/gpu_prebuild.sh's archive instead);
# test: the CPU suites and every CUDA suite; sanitize: compute-sanitizer memcheck on the adversarial
# index tests (LKV_MEMCHECK_FILTER: another gtest filter); reference: bench/compress_reference.py (PyTorch reference times and byte comparison);
# bench: `latentkv bench compress` for both payload formats, with the reference times;
# decode / prefill / dense: `latentkv bench decode|prefill|dense` (FlashMLA's cases; decode with the
# kernel chosen for the device, decode_portable with the portable kernel forced); demo: `latentkv demo --device cuda`
# (the production-like size); python: `pip install .` into the system python3 (beside its torch), then
# pytest (the CUDA tests included) and bench/python_overhead.py.
# Logs and JSON results go to $OUT (or ./out); a short table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
stages="${*:-build test sanitize reference bench decode decode_portable prefill dense prefill_portable dense_portable demo python}"
has() { [[ " $stages " == *" $1 "* ]]; }
summary=()
# Each note is also appended to summary.log, so a run cut short still brings its summary back.
note() { summary+=("$1"); echo "== $1"; echo "$1" >>"$OUT/summary.log"; }
# At most 8 files come back from the device machine: the logs travel as one archive.
finish() {
  (cd "$OUT" && tar czf logs.tgz ./*.log ./*.txt && rm -f ./*.log ./gpu.txt ./clocks.txt)
  echo
  echo "==================== summary ===================="
  printf '%s\n' "${summary[@]}"
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
  | tee "$OUT/gpu.txt"
# LKV_CLOCK_LOG=1: sample the SM clock, power and the active clock-event reasons every 100 ms for
# the whole call (a read-only query; nothing about the GPU is changed), into clocks.txt, so that a
# slow case can be checked against the clocks it ran at (stages that time cases stamp their start).
clock_pid=
if [ "${LKV_CLOCK_LOG:-0}" = 1 ]; then
  q=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active
  nvidia-smi --query-gpu=$q --format=csv,noheader >/dev/null 2>&1 ||
    q=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active
  echo "# $q" >"$OUT/clocks.txt"
  nvidia-smi --query-gpu=$q --format=csv,noheader -lms 100 >>"$OUT/clocks.txt" 2>&1 &
  clock_pid=$!
  trap 'kill "$clock_pid" 2>/dev/null' EXIT  # however the call ends, early exits included
fi
stamp() { [ -z "$clock_pid" ] || echo "# $(date '+%Y/%m/%d %H:%M:%S.%3N') $1" >>"$OUT/clocks.txt"; }

# LKV_BUILD_TARGETS: build only these targets (e.g. "latentkv lkv_cuda_tests"), default all.
# With variant_ab, racecheck_variant or variant_trace the LKV_VARIANT_CMAKE build (build-gpu-variant) runs beside the default one, each
# on half the cores.
targets=()
for t in ${LKV_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
# LKV_VARIANT_TARGETS: the variant build's targets (default: LKV_BUILD_TARGETS'), e.g. "latentkv"
# alone when only its benches are compared.
vtargets=()
for t in ${LKV_VARIANT_TARGETS:-${LKV_BUILD_TARGETS:-}}; do vtargets+=(--target "$t"); done
# variant_trace alone builds the variant with the Hopper kernel's phase stamps unless told otherwise.
if has variant_trace && ! has variant_ab && [ -z "${LKV_VARIANT_CMAKE:-}" ]; then
  LKV_VARIANT_CMAKE=-DLKV_SM90_TRACE=ON
fi
# LKV_VARIANT_SRC: the variant's source tree (default: this one). Another revision's tree, for a
# same-run A/B of a change that has no switch (a refactor), e.g. made here with
#   mkdir -p build-ab-base && git archive BASE CMakeLists.txt include src tools tests | tar -x -C build-ab-base
# and carried to the device (build*/ is ignored); its binaries then run as "variant".
# Whether the variant build is configured for racecheck runs (-DLKV_RACECHECK_BARRIERS=ON), or,
# with LKV_PREBUILT_VARIANT, was packed so (scripts/gpu_prebuild.sh with LKV_PREBUILT_RACECHECK=1
# records it in PREBUILT_REV): e.g. LKV_PREBUILT=build-pk/main.tar.xz
# LKV_PREBUILT_VARIANT=build-pk/main-rc.tar.xz bash scripts/gpu.sh build racecheck racecheck_portable.
racecheck_barriers_variant() {
  [[ "${LKV_VARIANT_CMAKE:-}" == *LKV_RACECHECK_BARRIERS=ON* ]] ||
    { [ -n "${LKV_PREBUILT_VARIANT:-}" ] && grep -q LKV_RACECHECK_BARRIERS build-gpu-variant/PREBUILT_REV 2>/dev/null; }
}
variant_key() { printf '%s|%s|%s' "${LKV_VARIANT_SRC:-.}" "${LKV_VARIANT_CMAKE:-}" "${LKV_PREBUILT_VARIANT:-}"; }
# The flags build-gpu-variant's binaries were last built with (written only after a build that
# succeeded); the variant stages run only binaries built with the current LKV_VARIANT_CMAKE.
variant_built() { [ -f build-gpu-variant/lkv-variant-built ] && [ "$(cat build-gpu-variant/lkv-variant-built)" = "$(variant_key)" ]; }
# LKV_PREBUILT=build-pk/bins.tar.xz: the binaries scripts/gpu_prebuild.sh packed on a machine
# without a GPU (carried here) stand in for the build stage. LKV_PREBUILT_VARIANT=ARCHIVE: another
# such archive (e.g. the commit before a change, packed by gpu_prebuild.sh with LKV_PREBUILT_OUT)
# becomes build-gpu-variant, which variant_ab then runs against build-gpu: a same-run A/B of two
# revisions with no compiling here.
if has build && [ -n "${LKV_PREBUILT:-}" ]; then
  mkdir -p build-gpu && tar xJf "$LKV_PREBUILT" -C build-gpu
  note "build: prebuilt binaries of $(cat build-gpu/PREBUILT_REV 2>/dev/null || echo 'an unknown tree')"
  if [ -n "${LKV_PREBUILT_VARIANT:-}" ]; then
    rm -rf build-gpu-variant && mkdir -p build-gpu-variant && tar xJf "$LKV_PREBUILT_VARIANT" -C build-gpu-variant &&
      variant_key >build-gpu-variant/lkv-variant-built
    note "build (variant): prebuilt binaries of $(cat build-gpu-variant/PREBUILT_REV 2>/dev/null || echo 'an unknown tree')"
  fi
elif has build; then
  start=$(date +%s)
  jobs=$(nproc)
  upid=
  if has variant_ab || has variant_trace || has racecheck_variant || { has racecheck_portable && racecheck_barriers_variant; }; then
    jobs=$(( jobs / 2 ))
    # A CMake cache keeps every -D it was ever given, so a directory configured with other flags
    # (or with no record of them) is started afresh.
    if ! { [ -f build-gpu-variant/lkv-variant-flags ] &&
           [ "$(cat build-gpu-variant/lkv-variant-flags)" = "$(variant_key)" ]; }; then
      rm -rf build-gpu-variant
    fi
    mkdir -p build-gpu-variant && variant_key >build-gpu-variant/lkv-variant-flags
    rm -f build-gpu-variant/lkv-variant-built
    (cmake -S "${LKV_VARIANT_SRC:-.}" -B build-gpu-variant -G Ninja -DCMAKE_BUILD_TYPE=Release ${LKV_VARIANT_CMAKE:-} \
       -DLKV_GTEST_SOURCE_DIR="$PWD/.deps/googletest" >"$OUT/build-variant.log" 2>&1 &&
     cmake --build build-gpu-variant -j "$jobs" "${vtargets[@]}" >>"$OUT/build-variant.log" 2>&1 &&
     variant_key >build-gpu-variant/lkv-variant-built) &
    upid=$!
  fi
  # build-gpu takes LKV_CMAKE_EXTRA (e.g. a variant's option, so that the stages which run
  # build-gpu, profile_sass among them, run that variant); started afresh when its flags change.
  if ! { [ -f build-gpu/lkv-flags ] && [ "$(cat build-gpu/lkv-flags)" = "${LKV_CMAKE_EXTRA:-}" ]; }; then
    rm -rf build-gpu
  fi
  mkdir -p build-gpu && printf '%s' "${LKV_CMAKE_EXTRA:-}" >build-gpu/lkv-flags
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release ${LKV_CMAKE_EXTRA:-} \
    -DLKV_GTEST_SOURCE_DIR="$PWD/.deps/googletest" >"$OUT/build.log" 2>&1 &&
    cmake --build build-gpu -j "$jobs" "${targets[@]}" >>"$OUT/build.log" 2>&1
  rc=$?
  if [ -n "$upid" ]; then
    wait "$upid"
    urc=$?
    note "build (variant) rc=$urc"
    [ $urc -eq 0 ] || rc=$urc
  fi
  tail -5 "$OUT/build.log"
  note "build rc=$rc ($(( $(date +%s) - start )) s)"
  [ $rc -eq 0 ] || { printf '%s\n' "${summary[@]}"; exit 1; }
fi

if has test; then
  ./build-gpu/lkv_tests --gtest_brief=1 >"$OUT/cpu_tests.log" 2>&1
  note "cpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cpu_tests.log" | tr '\n' ' ')"
  # One small case per attention op first: a hang costs one minute, not the stage's seven.
  timeout 60 ./build-gpu/lkv_cuda_tests --gtest_filter='DecodeCuda.Sm90AgreesWithPortable:PrefillCuda.SplitsAndDeterminism:DenseCuda.Errors' >"$OUT/cuda_tests_quick.log" 2>&1 &&
  timeout 420 ./build-gpu/lkv_cuda_tests --gtest_filter="${LKV_TEST_FILTER:-*}" >"$OUT/cuda_tests.log" 2>&1
  rc=$?
  [ -f "$OUT/cuda_tests.log" ] || cp "$OUT/cuda_tests_quick.log" "$OUT/cuda_tests.log"
  [ $rc -eq 124 ] && { note "cuda tests timed out: later stages skipped"; finish; exit 1; }
  grep -E '^\[check\]|FAILED|Failure|error' "$OUT/cuda_tests.log" | head -80
  note "cuda tests rc=$rc $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda_tests.log" | tr '\n' ' ')"
  ./build-gpu/latentkv verify --device cuda >"$OUT/verify.log" 2>&1
  note "verify rc=$? $(tail -1 "$OUT/verify.log")"
fi

# guarded_suite LOG LABEL QUICK FILTER [VAR=VALUE...]: the CUDA tests matching FILTER with the given
# environment, after the QUICK case alone (a hang costs one minute, not the stage's seven).
guarded_suite() {
  local log=$1 label=$2 quick=$3 filter=$4
  shift 4
  env "$@" timeout 60 ./build-gpu/lkv_cuda_tests --gtest_filter="$quick" >"$OUT/${log}_quick.log" 2>&1 &&
    env "$@" timeout 420 ./build-gpu/lkv_cuda_tests --gtest_filter="$filter" >"$OUT/$log.log" 2>&1
  local rc=$?
  [ -f "$OUT/$log.log" ] || cp "$OUT/${log}_quick.log" "$OUT/$log.log"
  grep -E 'FAILED|Failure' "$OUT/$log.log" | head -40
  note "cuda tests ($label) rc=$rc $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$log.log" | tr '\n' ' ')"
  [ $rc -eq 124 ] && { note "$label tests timed out: later stages skipped"; finish; exit 1; }
}

# test_jit: the compute_80 PTX (what sm_80 / sm_86 and GPUs newer than Hopper run) on this GPU, the
# driver made to compile it (CUDA_FORCE_PTX_JIT=1; bench/NOTES.md v38): the portable suites and the
# dequantization primitive with the portable kernel forced, then the `auto` choice, which must fall
# back to the portable kernel. The compiled PTX is cached for the stage's processes.
if has test_jit; then
  export_jit=(CUDA_FORCE_PTX_JIT=1 CUDA_CACHE_MAXSIZE=4294967296 CUDA_CACHE_PATH=/tmp/lkv-jit-cache)
  guarded_suite cuda_tests_jit "compute_80 PTX, portable" 'DecodeCuda.CornerCases' \
    'Sm90Primitives.DequantizationMatchesReference:DecodeCuda.FlashMlaStyleGrid:DecodeCuda.CornerCases:DenseCuda.ShapeGrid:DenseCuda.CornerCasesAndDeterminism' \
    "${export_jit[@]}" LKV_DECODE_KERNEL=portable
  guarded_suite cuda_tests_jit_auto "compute_80 PTX, auto" 'DecodeCuda.CornerCases' \
    'DecodeCuda.CornerCases:DecodeCuda.Sm90AgreesWithPortable' "${export_jit[@]}"
fi

# test_ws: the attention suites again with the warp-specialised sm90 variant (LKV_SM90_WS=1); the
# pairs case runs in test_ws_pairs.
has test_ws && guarded_suite cuda_tests_ws "sm90 warp-specialised" \
  'DecodeCuda.Sm90AgreesWithPortable:PrefillCuda.SplitsAndDeterminism:DenseCuda.Errors' \
  'DecodeCuda*:PrefillCuda*:DenseCuda*:-DecodeCuda.Sm90PairsAgreeBitwiseWithSingleCtas' LKV_SM90_WS=1
# test_ws_pairs: the decode and dense suites with the warp-specialised variant's CTA pairs (every
# even number of 64-head blocks runs as pairs).
has test_ws_pairs && guarded_suite cuda_tests_ws_pairs "warp-specialised, CTA pairs" \
  'DecodeCuda.Sm90PairsAgreeBitwiseWithSingleCtas' 'DecodeCuda*:DenseCuda*' LKV_SM90_WS=1 LKV_SM90_PAIR=1
# test_pairs: the same with the two-warpgroup kernel's CTA pairs.
has test_pairs && guarded_suite cuda_tests_pairs "CTA pairs" \
  'DecodeCuda.Sm90PairsAgreeBitwiseWithSingleCtas' 'DecodeCuda*:DenseCuda*' LKV_SM90_PAIR=1

if has sanitize; then
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 ./build-gpu/lkv_cuda_tests \
    --gtest_filter="${LKV_MEMCHECK_FILTER:-*Unchecked*:*Errors*:FormatCuda*:DecodeCuda.CornerCases:DecodeCuda.Fp4ExtraCacheAgainstTheOracle:PrefillCuda.CornerCasesAndBatched:DenseCuda.CornerCasesAndDeterminism:DenseCuda.PackedQueryTokens:DenseCuda.BadDeviceValuesAreClampedOrSkipped}" >"$OUT/memcheck.log" 2>&1
  note "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
fi

# initcheck / synccheck: compute-sanitizer's other two tools on the tests that exercise the
# corner cases, split partials, both narrow forms and the compressor's modes. initcheck reports a
# read of device memory nothing has written (a partial the combine reads but no split stored, an
# unwritten workspace or padding byte); synccheck reports a barrier used against its rules (e.g. an
# aligned `bar.sync` that participants reach from different instructions, which stops the kernel,
# so a report in one test fails the tests after it: bench/probes/synccheck_run.sh runs one kernel
# family per process). LKV_INITCHECK_FILTER / LKV_SYNCCHECK_FILTER: another gtest filter;
# LKV_SANITIZER_SECONDS: each tool's limit (default 280).
sanitizer_filter_default='*Unchecked*:DecodeCuda.CornerCases:DecodeCuda.PlanReuseSplitsAndDeterminism:DecodeCuda.Sm90NarrowRowsAgreeWithWideRows:DecodeCuda.Sm90Narrow32RowsAgreeWith64RowKernel:PrefillCuda.CornerCasesAndBatched:DenseCuda.CornerCasesAndDeterminism:DenseCuda.PackedQueryTokens:DenseCuda.Sm90NarrowBothForms:CompressCuda.FunctionalModeAndDeterminism'
for tool in initcheck synccheck; do
  has $tool || continue
  var=LKV_$(echo $tool | tr a-z A-Z)_FILTER
  timeout "${LKV_SANITIZER_SECONDS:-280}" compute-sanitizer --tool $tool --error-exitcode 9 ./build-gpu/lkv_cuda_tests \
    --gtest_filter="${!var:-$sanitizer_filter_default}" >"$OUT/$tool.log" 2>&1
  note "$tool rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/$tool.log" | tr '\n' ' ')"
done

# sanitize_compact: memcheck on the adversarial index tests and racecheck on the corner cases, both
# with the compact kernel alone (LKV_TEST_KERNELS=compact; the suites loop over the kernels).
if has sanitize_compact; then
  LKV_TEST_KERNELS=compact timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 ./build-gpu/lkv_cuda_tests \
    --gtest_filter="${LKV_MEMCHECK_FILTER:-DecodeCuda.CornerCases:PrefillCuda.CornerCasesAndBatched:DenseCuda.CornerCasesAndDeterminism:DenseCuda.PackedQueryTokens:DenseCuda.BadDeviceValuesAreClampedOrSkipped}" >"$OUT/memcheck-compact.log" 2>&1
  note "memcheck (compact) rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-compact.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/memcheck-compact.log" | tr '\n' ' ')"
  LKV_TEST_KERNELS=compact timeout 240 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 ./build-gpu/lkv_cuda_tests \
    --gtest_filter="${LKV_RACECHECK_FILTER:-DecodeCuda.CornerCases:DenseCuda.PackedQueryTokens}" >"$OUT/racecheck-compact.log" 2>&1
  note "racecheck (compact) rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck-compact.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED)' "$OUT/racecheck-compact.log" | tr '\n' ' ')"
fi

# racecheck: compute-sanitizer's shared-memory hazard check on the sm90 kernel (single CTAs and
# CTA pairs) with small cases. The default filter runs the narrow Hopper kernel too, whose
# warpgroup 1 only arrives at barrier 1; racecheck counts barriers per warp and reports hazards
# there that barrier 2 orders (docs/decode.md, "Named barriers and synccheck"), so, as
# racecheck_portable below, this stage runs the variant build when that was configured with
# -DLKV_RACECHECK_BARRIERS=ON.
if has racecheck; then
  rc_bin=./build-gpu/lkv_cuda_tests
  if variant_built && racecheck_barriers_variant; then rc_bin=./build-gpu-variant/lkv_cuda_tests; fi
  note "racecheck: $rc_bin"
  timeout 200 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 $rc_bin \
    --gtest_filter="${LKV_RACECHECK_FILTER:-DecodeCuda.CornerCases:DecodeCuda.Sm90PairsAgreeBitwiseWithSingleCtas}" >"$OUT/racecheck.log" 2>&1
  note "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck.log" | tail -1)"
fi

# racecheck_portable: the same check on the portable kernel alone, both shared-memory layouts
# (wide: dequantization overlapped with the products; narrow: the A100 one), sparse decode's
# v32_fp8 / v4_fp8 records and dense decode's bf16 / v32_fp8 pages, with token groups and without,
# score and value warps, and each copy-issuer count against the default;
# these tests run no sm90 kernel (LKV_RACECHECK_PORTABLE_FILTER: another gtest filter).
# The 16-row kernels with value sharing give racecheck hazards that are the tool's (its warps meet
# different numbers of barriers, kernel.cuh LKV_RACECHECK_BARRIERS), so this stage runs the
# variant build when that was configured with -DLKV_RACECHECK_BARRIERS=ON (LKV_VARIANT_CMAKE, with
# the build stage), else the default build, where those hazards show.
if has racecheck_portable; then
  rc_bin=./build-gpu/lkv_cuda_tests
  if variant_built && racecheck_barriers_variant; then rc_bin=./build-gpu-variant/lkv_cuda_tests; fi
  note "racecheck (portable): $rc_bin"
  timeout 420 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 $rc_bin \
    --gtest_filter="${LKV_RACECHECK_PORTABLE_FILTER:-DecodeCuda.WideAndNarrowLayoutsAgreeBitwise:AttentionCuda.WideAndNarrowLayoutsAgreeBitwise:DecodeCuda.TokenGroups:AttentionCuda.TokenGroups:AttentionCuda.ScoreAndValueWarps:*CopyWarpsAgreeBitwise}" >"$OUT/racecheck-portable.log" 2>&1
  note "racecheck (portable) rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck-portable.log" | tail -1)"
fi

if has reference; then
  PYTHONUNBUFFERED=1 python3 bench/compress_reference.py --device cuda --out "$OUT/reference.json" \
    --latentkv ./build-gpu/latentkv --dump-dir /tmp/lkv_dump >"$OUT/reference.log" 2>&1
  rc=$?
  tail -40 "$OUT/reference.log"
  note "reference rc=$rc"
fi

if has bench; then
  ref=()
  [ -f "$OUT/reference.json" ] && ref=(--reference "$OUT/reference.json")
  for fmt in ${LKV_COMPRESS_FORMATS:-v4_int8 v4_fp8}; do
    stamp "bench compress $fmt"
    ./build-gpu/latentkv bench compress --device cuda --format $fmt --shuffled "${ref[@]}" \
      --json "$OUT/compress-$fmt-h200.json" 2>&1 | tee "$OUT/bench-$fmt.log"
    note "bench $fmt: $(tail -1 "$OUT/bench-$fmt.log")"
  done
fi

# bench_cluster: the int8 compressor bench again with split outputs merged inside thread-block
# clusters (LKV_COMPRESS_CLUSTER=1, opt-in), to compare with the global merge of the bench stage.
if has bench_cluster; then
  LKV_COMPRESS_CLUSTER=1 ./build-gpu/latentkv bench compress --device cuda --format v4_int8 \
    --json "$OUT/compress-v4_int8-cluster-h200.json" 2>&1 | tee "$OUT/bench-v4_int8-cluster.log"
  note "bench v4_int8 (cluster merge): $(tail -1 "$OUT/bench-v4_int8-cluster.log")"
fi

# bench_slices: the int8 compressor bench with phase traces (--trace), with dimension slices (the
# default) and with window splits only (LKV_COMPRESS_MAX_SLICES=1), side by side.
if has bench_slices; then
  for ms in 8 1; do
    LKV_COMPRESS_MAX_SLICES=$ms ./build-gpu/latentkv bench compress --device cuda --format v4_int8 --trace \
      --json "$OUT/compress-v4_int8-slices$ms-h200.json" 2>&1 | tee "$OUT/bench-slices$ms.log"
    note "bench v4_int8 max slices $ms: $(grep -E '^r1_t8192' "$OUT/bench-slices$ms.log" | awk '{printf "%s %s us; ", $1, $2}')$(tail -1 "$OUT/bench-slices$ms.log")"
  done
fi

# LKV_DECODE_FILTER: only the decode cases whose names contain it (decode and decode_portable).
dfilter=(); [ -z "${LKV_DECODE_FILTER:-}" ] || dfilter=(--filter "$LKV_DECODE_FILTER")
if has decode; then
  ./build-gpu/latentkv bench decode --device cuda ${dfilter[@]+"${dfilter[@]}"} --json "$OUT/decode-h200.json" 2>&1 | tee "$OUT/bench-decode.log"
  note "bench decode: $(grep -E 'v32_b128_h128|peak' "$OUT/bench-decode.log" | tr -s ' ' | tr '\n' ';')"
fi

# decode_stream: the decode bench with --stream (each case also timed as calls back to back, the
# first launch of each call with PDL and without; docs/benchmarks.md) for the filters in
# LKV_STREAM_FILTERS (';'-separated; default: every case, one JSON).
if has decode_stream; then
  IFS=';' read -r -a sfilters <<<"${LKV_STREAM_FILTERS:-all}"
  for f in "${sfilters[@]}"; do
    tag=$(echo "$f" | tr -c 'A-Za-z0-9_\n' '_')
    fl=(); [ "$f" = all ] || fl=(--filter "$f")
    stamp "decode_stream $f"
    ./build-gpu/latentkv bench decode --device cuda --stream "${fl[@]}" --json "$OUT/decode-stream-$tag-h200.json" 2>&1 \
      | tee "$OUT/bench-decode-stream-$tag.log"
    note "bench decode --stream $f: $(grep -E 'back to back' "$OUT/bench-decode-stream-$tag.log" | sed 's/ back to back://' | tr -s ' ' | tr '\n' ';' | cut -c1-900)"
  done
fi

# decode_pairs: the decode bench with the two-warpgroup kernel's CTA pairs where h_q allows.
if has decode_pairs; then
  LKV_SM90_PAIR=1 ./build-gpu/latentkv bench decode --device cuda --json "$OUT/decode-pairs-h200.json" 2>&1 | tee "$OUT/bench-decode-pairs.log"
  note "bench decode (pairs): $(grep -E 'v32_b128_h128|peak' "$OUT/bench-decode-pairs.log" | tr -s ' ' | tr '\n' ';')"
fi

# decode_ws_pairs: the decode bench with the warp-specialised variant and CTA pairs where h_q allows.
if has decode_ws_pairs; then
  LKV_SM90_WS=1 LKV_SM90_PAIR=1 ./build-gpu/latentkv bench decode --device cuda --json "$OUT/decode-ws-pairs-h200.json" 2>&1 | tee "$OUT/bench-decode-ws-pairs.log"
  note "bench decode (ws pairs): $(grep -E 'v32_b128_h128|peak' "$OUT/bench-decode-ws-pairs.log" | tr -s ' ' | tr '\n' ';')"
fi

# profile: Nsight Compute on one launch of the decode kernel (V3.2 b 128), clocks left alone.
if has profile; then
  timeout 300 ncu --clock-control none -k 'regex:attend_kernel|narrow_kernel' -c 1 --section SpeedOfLight \
    --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section Occupancy --section LaunchStats \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    ./build-gpu/latentkv bench decode --device cuda \
    --filter v32_b128_h128 --reps 1 >"$OUT/ncu-decode.log" 2>&1
  rc=$?
  grep -E "Throughput|Duration|stalled|Issued|Pipe|Warp Cycles|Eligible|Active" "$OUT/ncu-decode.log" | head -60
  note "profile rc=$rc"
fi

# profile_pipes: the same launch's pipe and L1 data-path utilisation (ncu's breakdown of the L1/TEX
# and SM throughputs, the shared-memory wavefronts of the LSU data pipe, which also count wgmma's
# shared-memory operand reads, and the L1 data-bank reads and writes); LKV_PROFILE_KERNEL as above.
if has profile_pipes; then
  timeout 120 ncu --clock-control none -k 'regex:attend_kernel|narrow_kernel' -c 1 \
    --metrics breakdown:l1tex__throughput.avg.pct_of_peak_sustained_elapsed,breakdown:sm__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_tensor_op_gmma.sum,sm__cycles_elapsed.avg \
    ./build-gpu/latentkv bench decode --device cuda --kernel "${LKV_PROFILE_KERNEL:-auto}" \
    --filter "${LKV_PROFILE_FILTER:-v32_b128_h128}" --reps 1 >"$OUT/ncu-pipes.log" 2>&1
  rc=$?
  grep -E "data_pipe_lsu_wavefronts|pipe_tensor_cycles|issue_active|data_bank|cycles_elapsed" "$OUT/ncu-pipes.log" | head -12
  note "profile_pipes rc=$rc"
fi

# profile_sass: per-instruction warp-stall samples of the same launch (SourceCounters), exported
# as CSV (prof_sass.csv.gz) to read against the SASS; LKV_PROFILE_KERNEL=portable profiles the
# portable kernel instead of the one chosen for the device. LKV_PROFILE_OP=prefill (the s_q 4096,
# topk 2048, h_q 128, d_qk 576 case) or dense (bf16, h_q 128, s_q 2, s_k 8192) profiles that op's
# headline case instead of sparse decode's V3.2 b 128; LKV_PROFILE_FILTER names another case of
# that op's bench.
# LKV_PROFILE_FILTER: one case, or several separated by ';' (one profile each, prof_sass-N.csv.gz).
if has profile_sass; then
  case "${LKV_PROFILE_OP:-decode}" in
    prefill) prof_op=prefill; prof_filter=sq4096_skv65536_topk2048_h128_d576 ;;
    dense) prof_op=dense; prof_filter=bf16_b128_sk8192_h128_sq2 ;;
    *) prof_op=decode; prof_filter=v32_b128_h128 ;;
  esac
  IFS=';' read -r -a pfilters <<<"${LKV_PROFILE_FILTER:-$prof_filter}"
  for i in "${!pfilters[@]}"; do
    suffix=""; [ ${#pfilters[@]} -eq 1 ] || suffix="-$i"
    timeout 300 ncu --clock-control none -k 'regex:attend_kernel|narrow_kernel' -c 1 --section SourceCounters \
      --section WarpStateStats -f -o "$OUT/prof" ./build-gpu/latentkv bench "$prof_op" --device cuda \
      --kernel "${LKV_PROFILE_KERNEL:-auto}" --filter "${pfilters[$i]}" --reps 1 >"$OUT/ncu-sass$suffix.log" 2>&1
    rc=$?
    ncu --import "$OUT/prof.ncu-rep" --page source --print-source sass --csv 2>>"$OUT/ncu-sass$suffix.log" | gzip >"$OUT/prof_sass$suffix.csv.gz"
    ncu --import "$OUT/prof.ncu-rep" --page details 2>>"$OUT/ncu-sass$suffix.log" | grep -E "Duration|Warp Cycles|Stall|Issued|Eligible" | head -20
    rm -f "$OUT/prof.ncu-rep"
    note "profile_sass ($prof_op ${pfilters[$i]}) rc=$rc ($(zcat "$OUT/prof_sass$suffix.csv.gz" | wc -l) csv lines)"
  done
fi

# splits: the b 74 cases (where the wave-aware planner splits) with 1-4 forced splits beside the
# planner's choice, to check the planner's cost model against the kernel in use.
if has splits; then
  ./build-gpu/latentkv bench decode --device cuda --filter _b74_ --splits 1,2,3,4 \
    --json "$OUT/decode-splits-h200.json" 2>&1 | tee "$OUT/bench-decode-splits.log"
  note "bench decode splits: $(grep -E '^v32_b74' "$OUT/bench-decode-splits.log" | tr -s ' ' | tr '\n' ';')"
fi

# profile_compress: the same per-instruction stall samples for the first compressor launch of
# `bench compress` (the 8192-token, C = 128 case), to see where its latency goes.
if has profile_compress; then
  timeout 300 ncu --clock-control none -k regex:compress_kernel -c 1 --section SourceCounters \
    --section WarpStateStats --section SpeedOfLight --section LaunchStats --section Occupancy \
    -f -o "$OUT/profc" ./build-gpu/latentkv bench compress --device cuda --reps 1 >"$OUT/ncu-compress.log" 2>&1
  rc=$?
  ncu --import "$OUT/profc.ncu-rep" --page source --print-source sass --csv 2>>"$OUT/ncu-compress.log" | gzip >"$OUT/profc_sass.csv.gz"
  ncu --import "$OUT/profc.ncu-rep" --page details 2>>"$OUT/ncu-compress.log" | grep -E "Duration|Throughput|Warp Cycles|Eligible|Grid Size|Registers|Achieved Occupancy" | head -20
  rm -f "$OUT/profc.ncu-rep"
  note "profile_compress rc=$rc"
fi

# copy_warps: the portable kernel's sm_90 bulk-copy issuers compared in one run (LKV_COPY_WARPS
# 1, 2, 4, 8, or LKV_COPY_WARPS_LIST) on a sample of each op's cases: dense s_k 8192, sparse decode
# b 128, prefill h_q 128 / d_qk 576. The JSONs travel as copy-warps.tgz; a table of times per count
# is printed.
if has copy_warps; then
  mkdir -p "$OUT/copy-warps"
  for n in ${LKV_COPY_WARPS_LIST:-1 2 4 8}; do
    for spec in "dense sk8192" "decode b128" "prefill h128_d576"; do
      set -- $spec
      LKV_COPY_WARPS=$n ./build-gpu/latentkv bench "$1" --device cuda --kernel portable --filter "$2" \
        --json "$OUT/copy-warps/$1-portable-copy-warps$n-h200.json" >>"$OUT/bench-copy-warps.log" 2>&1
    done
  done
  python3 - "$OUT/copy-warps" ${LKV_COPY_WARPS_LIST:-1 2 4 8} <<'PY' | tee -a "$OUT/bench-copy-warps.log"
import json, sys
d, counts = sys.argv[1], sys.argv[2:]
for op in ("dense", "decode", "prefill"):
    runs = [{c["name"]: c["time_us"] for c in json.load(open(f"{d}/{op}-portable-copy-warps{n}-h200.json"))["cases"]} for n in counts]
    print(f"{op + ' (us)':44s}" + "".join(f"{'warps ' + n:>12s}" for n in counts))
    for name in runs[0]:
        print(f"{name:44s}" + "".join(f"{r[name]:12.1f}" for r in runs))
PY
  (cd "$OUT" && tar czf copy-warps.tgz copy-warps && rm -rf copy-warps)
  note "copy_warps: see bench-copy-warps.log"
fi

# A/B stages: variants measured alternately in one run (a, b, a, b), so drift shows up as a
# difference between a variant's two repeats; one side-by-side table per bench spec
# (scripts/ab_table.py); LKV_AB_REPS="a" runs each variant once. Specs: LKV_AB_SPECS, ';'-separated "op filter" pairs (default: sparse
# decode b 128, dense s_k 8192, prefill s_kv 65536 h_q 128 d_qk 576); the portable kernel unless
# LKV_AB_KERNEL names another.
IFS=';' read -r -a ab_specs <<<"${LKV_AB_SPECS:-decode b128;dense sk8192;prefill skv65536_topk2048_h128_d576}"
ab_tables() {  # ab_tables DIR TXT LABEL...: tables of DIR/<op>-<filter>-<label>-<a|b>.json
  local dir=$1 txt=$2 spec op filter extra tag rep l
  shift 2
  for spec in "${ab_specs[@]}"; do
    read -r op filter extra <<<"$spec"
    tag=$filter${extra:+$(printf '%s' "$extra" | tr -c 'A-Za-z0-9_.,' '_')}
    local args=()
    for rep in ${LKV_AB_REPS:-a b}; do
      for l in "$@"; do args+=("$l$([ $rep = b ] && echo .2)=$dir/$op-$tag-$l-$rep.json"); done
    done
    { echo "== $op $filter${extra:+ $extra} (repeats: .2)"; python3 scripts/ab_table.py "${args[@]}"; } | tee -a "$txt"
  done
}
ab_bench() {  # ab_bench DIR LABEL BINARY [VAR=VALUE]: every spec once, JSONs named for ab_tables
  # A spec is "OP FILTER [BENCH OPTIONS...]", e.g. "decode _b2_ --splits 8,11,16"; for the
  # compressor "compress FORMAT [OPTIONS...]" (all 12 workloads of that payload format).
  local dir=$1 label=$2 bin=$3 rep=$4 spec op filter extra tag
  local -a extra_args select
  shift 4
  for spec in "${ab_specs[@]}"; do
    read -r op filter extra <<<"$spec"
    read -r -a extra_args <<<"$extra"
    tag=$filter${extra:+$(printf '%s' "$extra" | tr -c 'A-Za-z0-9_.,' '_')}
    if [ "$op" = compress ]; then select=(--format "$filter")
    else select=(--kernel "${LKV_AB_KERNEL:-portable}" --filter "$filter"); fi
    env "$@" "$bin" bench "$op" --device cuda "${select[@]}" "${extra_args[@]}" \
      --json "$dir/$op-$tag-$label-$rep.json" >>"$OUT/bench-ab.log" 2>&1
  done
}

# env_ab: one environment switch (LKV_AB_VAR, e.g. LKV_COPY_WARPS) at each of LKV_AB_VALUES.
if has env_ab; then
  mkdir -p "$OUT/env-ab"
  labels=()
  for v in ${LKV_AB_VALUES:-0 1}; do labels+=("v$v"); done
  for rep in ${LKV_AB_REPS:-a b}; do
    for v in ${LKV_AB_VALUES:-0 1}; do ab_bench "$OUT/env-ab" "v$v" ./build-gpu/latentkv $rep "$LKV_AB_VAR=$v"; done
  done
  ab_tables "$OUT/env-ab" "$OUT/ab-env.txt" "${labels[@]}"
  (cd "$OUT" && tar czf env-ab.tgz env-ab && rm -rf env-ab)
  note "env_ab ($LKV_AB_VAR = ${LKV_AB_VALUES:-0 1}): see ab-env.txt"
fi

# variant_ab: the default build against one configured with the extra CMake flags LKV_VARIANT_CMAKE
# (built into build-gpu-variant by the build stage, beside the default one), after the variant's
# attention suites (LKV_VARIANT_TEST_FILTER).
if has variant_ab && ! variant_built; then
  note "variant_ab skipped: build-gpu-variant was not built with '$(variant_key)' (add the build stage)"
elif has variant_ab; then
  if [ -x build-gpu-variant/lkv_cuda_tests ]; then  # (not built when LKV_VARIANT_TARGETS leaves it out)
    timeout 300 ./build-gpu-variant/lkv_cuda_tests --gtest_filter="${LKV_VARIANT_TEST_FILTER:-Decode*:Prefill*:Dense*:Attention*}" \
      >"$OUT/cuda_tests-variant.log" 2>&1
    note "cuda tests (variant) rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/cuda_tests-variant.log" | tr '\n' ' ')"
  fi
  mkdir -p "$OUT/variant-ab"
  for rep in ${LKV_AB_REPS:-a b}; do
    ab_bench "$OUT/variant-ab" default ./build-gpu/latentkv $rep
    ab_bench "$OUT/variant-ab" variant ./build-gpu-variant/latentkv $rep
  done
  ab_tables "$OUT/variant-ab" "$OUT/ab-variant.txt" default variant
  (cd "$OUT" && tar czf variant-ab.tgz variant-ab && rm -rf variant-ab)
  note "variant_ab ($(variant_key)): see ab-variant.txt"
fi

# racecheck_variant: the racecheck stage's check on the variant build's suites.
if has racecheck_variant && ! variant_built; then
  note "racecheck_variant skipped: build-gpu-variant was not built with '${LKV_VARIANT_CMAKE:-}' (add the build stage)"
elif has racecheck_variant; then
  timeout 200 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 9 ./build-gpu-variant/lkv_cuda_tests \
    --gtest_filter="${LKV_RACECHECK_FILTER:-DecodeCuda.CornerCases:DecodeCuda.Sm90PairsAgreeBitwiseWithSingleCtas}" >"$OUT/racecheck-variant.log" 2>&1
  note "racecheck (variant) rc=$? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$OUT/racecheck-variant.log" | tail -1)"
fi

# variant_trace: the decode bench with the Hopper kernel's phase stamps (bench decode --trace) from
# a variant built with LKV_VARIANT_CMAKE=-DLKV_SM90_TRACE=ON (the default when variant_ab is not
# asked for as well), for each ';'-separated filter of
# LKV_TRACE_FILTERS (default: the V4 b 2 and b 64 cases and V3.2 b 128); LKV_TRACE_ARGS replaces
# --trace (e.g. --trace-warm: the traced call after an unflushed one).
if has variant_trace; then
  if ! variant_built || [[ "${LKV_VARIANT_CMAKE:-}" != *LKV_SM90_TRACE=ON* ]]; then
    note "variant_trace skipped: build-gpu-variant was not built with -DLKV_SM90_TRACE=ON (add the build stage)"
  else
    timeout 120 ./build-gpu-variant/lkv_cuda_tests --gtest_filter='DecodeCuda.Sm90TraceStampsInOrder' \
      >"$OUT/cuda_tests-trace.log" 2>&1
    note "trace test rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' "$OUT/cuda_tests-trace.log" | tr '\n' ' ')"
    IFS=';' read -ra tfilters <<<"${LKV_TRACE_FILTERS:-v4_b2_;v4_b64_;v32_b128_h128}"
    for f in "${tfilters[@]}"; do
      timeout 300 ./build-gpu-variant/latentkv bench decode --device cuda --kernel auto ${LKV_TRACE_ARGS:---trace} --filter "$f" \
        --json "$OUT/trace-decode-$f.json" >"$OUT/trace-decode-$f.log" 2>&1
      note "trace decode $f rc=$?"
      cat "$OUT/trace-decode-$f.log"
    done
  fi
fi

if has decode_portable; then
  ./build-gpu/latentkv bench decode --device cuda --kernel portable ${dfilter[@]+"${dfilter[@]}"} --json "$OUT/decode-portable-h200.json" 2>&1 | tee "$OUT/bench-decode-portable.log"
  note "bench decode (portable): $(grep -E 'v32_b128_h128|peak' "$OUT/bench-decode-portable.log" | tr -s ' ' | tr '\n' ';')"
fi

# decode_compact / prefill_compact / dense_compact: the compact kernel (decode/compact, the 99 KB
# parts' kernel) forced on this GPU.
if has decode_compact; then
  ./build-gpu/latentkv bench decode --device cuda --kernel compact --json "$OUT/decode-compact-h200.json" 2>&1 | tee "$OUT/bench-decode-compact.log"
  note "bench decode (compact): $(grep -E 'v32_b128_h128|tp_|v4_b128_h64' "$OUT/bench-decode-compact.log" | tr -s ' ' | tr '\n' ';')"
fi

# *_nopack: dense decode with one query token per CTA (LKV_DENSE_PACK=0), to compare with packing.
# *_nogroups: the portable kernel without token groups (LKV_TOKEN_GROUPS=0), to compare with them.
# *_narrow: the portable kernel's narrow layouts (LKV_WIDE_LAYOUT=0: two 16-bit key tiles, quantized
# keys dequantized in their own phase), to compare with the wide ones.
# *_noroles: the portable kernel without score and value warps (LKV_ROLES=0), to compare with them.
for op in prefill dense prefill_portable dense_portable prefill_compact dense_compact decode_ws prefill_ws dense_ws dense_nopack dense_portable_nopack \
          decode_portable_nogroups dense_portable_nogroups prefill_portable_narrow dense_portable_narrow \
          dense_portable_noroles; do
  if has $op; then
    kernel=auto ws=0 pack=1 groups=1 wide=1 roles=1
    [[ $op == *_nopack ]] && pack=0
    [[ $op == *_nogroups ]] && groups=0
    [[ $op == *_narrow ]] && wide=0
    [[ $op == *_noroles ]] && roles=0
    base=${op%_nopack}
    base=${base%_nogroups}
    base=${base%_narrow}
    base=${base%_noroles}
    [[ $base == *_portable ]] && kernel=portable
    [[ $base == *_compact ]] && kernel=compact
    [[ $base == *_ws ]] && ws=1
    base=${base%_portable}
    base=${base%_compact}
    base=${base%_ws}
    LKV_SM90_WS=$ws LKV_DENSE_PACK=$pack LKV_TOKEN_GROUPS=$groups LKV_WIDE_LAYOUT=$wide LKV_ROLES=$roles ./build-gpu/latentkv bench $base --device cuda --kernel $kernel --json "$OUT/$op-h200.json" 2>&1 | tee "$OUT/bench-$op.log"
    note "bench $op: $(grep -E '_h128_d576_len$|^sq4096_skv65536_topk2048_h128_d576 |_h16_sq[12]|_h128_sq2|v32_b128_h128|peak' "$OUT/bench-$op.log" | tr -s ' ' | tr '\n' ';')"
  fi
done

# flashmla: FlashMLA's Hopper kernels timed beside this run's decode / dense / prefill results
# (bench/flashmla/side_by_side.py, method in docs/benchmarks.md); needs .deps/flashmla from
# bench/flashmla/fetch.sh, carried with .deps. Its ratios need the decode, dense and prefill stages
# named in the same call (this stage runs after them whatever the order named). LKV_FLASHMLA_ARGS:
# more options for side_by_side.py (e.g. "--ops decode --filter _b2_").
if has flashmla; then
  if [ ! -f .deps/flashmla/_flashmla_C.abi3.so ]; then
    note "flashmla skipped: .deps/flashmla missing (run bash bench/flashmla/fetch.sh where PyPI is reachable, carry .deps)"
  else
    ours=$(ls "$OUT/decode-h200.json" "$OUT/dense-h200.json" "$OUT/prefill-h200.json" 2>/dev/null | paste -sd, -)
    [ -n "$ours" ] || note "flashmla: no latentkv JSON from this call (name decode, dense, prefill too): FlashMLA times only, no ratios"
    read -r -a fargs <<<"${LKV_FLASHMLA_ARGS:-}"
    timeout 400 python3 bench/flashmla/side_by_side.py --latentkv "$ours" --json "$OUT/flashmla-h200.json" "${fargs[@]}" \
      >"$OUT/flashmla.log" 2>&1
    rc=$?
    grep -E '^(check|op|decode|dense|prefill) ' "$OUT/flashmla.log" | head -120
    note "flashmla rc=$rc (FlashMLA time / latentkv time per case: flashmla.log, flashmla-h200.json)"
  fi
fi

if has demo; then
  ./build-gpu/latentkv demo --device cuda --json "$OUT/demo-h200.json" >"$OUT/demo.log" 2>&1
  rc=$?
  tail -25 "$OUT/demo.log"
  note "demo rc=$rc"
fi

if has python; then
  bash scripts/gpu_python.sh >"$OUT/python.log" 2>&1
  rc=$?
  grep -E 'passed|failed|error|overhead' "$OUT/python.log" | tail -20
  note "python rc=$rc $(grep -E '[0-9]+ (passed|failed)' "$OUT/python.log" | tail -1)"
fi

finish

