#!/usr/bin/env bash
# The Python package on the device machine (run from the repository root, after scripts/gpu.sh has
# built build-gpu; `bash scripts/gpu.sh python` runs it):
#   1. pip install . into the system python3, which holds torch, nanobind, scikit-build-core,
#      ml_dtypes and pytest (no network there: no build isolation, no dependencies), with the CUDA
#      backend (CMake's default -gencode list, sm_80 + sm_90a, the same as build-gpu);
#   2. pytest tests/python, the CUDA tests (tests/python/test_cuda.py) included;
#   3. bench/python_overhead.py against the C++ bench of the same session (build-gpu/latentkv, or
#      $OUT/compress-v4_int8-h200.json when the CLI is missing), JSON to $OUT.
# Exits non-zero when the install, the CUDA checks or pytest fail (or the benchmark fails to run).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT="${OUT:-$PWD/out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-16}"
# The system interpreter may be marked externally managed (PEP 668); this is a throwaway machine.
export PIP_BREAK_SYSTEM_PACKAGES=1
# scikit-build-core runs CMake with this PATH; CUDACXX makes CMake use exactly this nvcc.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
if command -v nvcc >/dev/null; then
  export CUDACXX="${CUDACXX:-$(command -v nvcc)}"
else
  echo "python: error: nvcc not found, the CUDA backend cannot be built"
  exit 1
fi

start=$(date +%s)
python3 -m pip install -q --no-build-isolation --no-deps \
  --config-settings=cmake.define.LKV_WITH_CUDA=ON . \
  >"$OUT/python-pip.log" 2>&1
rc=$?
echo "python: pip install rc=$rc ($(( $(date +%s) - start )) s)"
if [ $rc -ne 0 ]; then
  tail -40 "$OUT/python-pip.log"
  echo "python: error: the package failed to build or install (log: python-pip.log)"
  exit 1
fi

# What the extension links (a libstdc++ copied into the module would show up as defined locale
# symbols): recorded for diagnosis.
so=$(python3 -c "import importlib.util as u; print(u.find_spec('latentkv._native').origin)" 2>/dev/null)
if [ -n "$so" ]; then
  echo "python: $so links: $(ldd "$so" | awk '{print $1}' | tr '\n' ' ')"
  echo "python: std::locale symbols defined in the module: $(nm -DC --defined-only "$so" 2>/dev/null | grep -c 'std::locale')"
fi

# Without a GPU, or with a CPU-only build, the CUDA tests would only be skipped: refuse instead.
if ! python3 - <<'EOF'
import sys
import torch
import latentkv
ok = torch.cuda.is_available() and latentkv.built_with_cuda()
print(f"python: latentkv {latentkv.__version__} from {latentkv.__file__}, built_with_cuda="
      f"{latentkv.built_with_cuda()}; torch {torch.__version__}, cuda available="
      f"{torch.cuda.is_available()}" + (f" ({torch.cuda.get_device_name()})" if ok else ""))
if not ok:
    print("python: error: the CUDA tests need torch with a visible GPU and a CUDA build of latentkv")
sys.exit(0 if ok else 1)
EOF
then
  exit 1
fi

# -rsxP: reasons for skips and xfails, and the printed byte-comparison counts of passing tests.
# The CLI tests run the CLI that scripts/gpu.sh built (build-gpu/latentkv), when there is one.
if [ -z "${LKV_CLI:-}" ] && [ -x build-gpu/latentkv ]; then export LKV_CLI="$PWD/build-gpu/latentkv"; fi
start=$(date +%s)
python3 -m pytest tests/python -q -p no:cacheprovider -rsxP --durations=15
test_rc=$?
echo "python: pytest rc=$test_rc ($(( $(date +%s) - start )) s): $([ $test_rc -eq 0 ] && echo passed || echo failed)"

cpp=()
if [ -x ./build-gpu/latentkv ]; then
  cpp=(--cli ./build-gpu/latentkv)
elif [ -f "$OUT/compress-v4_int8-h200.json" ]; then
  cpp=(--cpp-json "$OUT/compress-v4_int8-h200.json")
fi
python3 bench/python_overhead.py --out "$OUT/python-overhead-h200.json" ${cpp[@]+"${cpp[@]}"}
bench_rc=$?
echo "python: overhead benchmark rc=$bench_rc"

[ $test_rc -ne 0 ] && exit $test_rc
[ $bench_rc -ne 0 ] && exit 1
exit 0
