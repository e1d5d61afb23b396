#!/usr/bin/env bash
# The Python package's tests: a venv in build/pyvenv, `pip install .` (CMake through
# scikit-build-core and nanobind; the CUDA backend too whenever nvcc exists), then pytest on the
# CPU with NumPy and ml_dtypes (torch tests skip unless torch is installed). The build requirements
# are installed first so pip can build without isolation into build/python/ (incremental reruns).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv
fi
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"

[ -x build/pyvenv/bin/python ] || python3 -m venv build/pyvenv
py=build/pyvenv/bin/python
$py -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10" "nanobind>=2.4" \
  numpy ml_dtypes pytest
start=$(date +%s)
$py -m pip install -q --disable-pip-version-check --no-build-isolation .
echo "test_python: package built and installed in $(( $(date +%s) - start )) s"
# The sources live in python/latentkv, so `import latentkv` finds the installed package.
$py -m pytest tests/python -q -p no:cacheprovider
