#!/usr/bin/env bash
# Fetches FlashMLA's kernels as vLLM 0.25.0 publishes them (its wheel's `_flashmla_C.abi3.so`, built
# for torch 2.11 and CUDA 13 with sm_90a and sm_100 code) for the side-by-side benchmark
# (bench/flashmla/side_by_side.py). Run on a machine with PyPI access; the device machine has none,
# so the result goes there as a carried ignored path (.deps/flashmla).
#
# Why a wheel: upstream FlashMLA's current release no longer builds for sm_90, and building an older
# one needs its pinned CUTLASS and a matching toolchain. vLLM 0.25.0 requires torch 2.11.0, the
# device machine's torch, so its extension loads there as built. The extension registers
# `torch.ops._flashmla_C.{sparse_decode_fwd, dense_decode_fwd, sparse_prefill_fwd}` (FlashMLA's
# interface with the scheduler metadata computed on the first call; V3.2 and V4 records: it
# refuses V4.1 records and sparse decode with h_q 16 / 32).
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=.deps/flashmla
if [ -f "$dest/_flashmla_C.abi3.so" ]; then
  echo "flashmla: already in $dest"; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$dest"
# The wheel for the device machine (x86-64 Linux, CPython 3.12), whatever this machine runs.
python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
  --python-version 3.12 -d "$tmp" "vllm==0.25.0"
python3 - "$tmp" "$dest" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
want = {"vllm/_flashmla_C.abi3.so": "_flashmla_C.abi3.so",
        "vllm/third_party/flashmla/flash_mla_interface.py": "flash_mla_interface.py"}
for whl in glob.glob(os.path.join(tmp, "*.whl")):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if name in want:
                with z.open(name) as src, open(os.path.join(dest, want[name]), "wb") as dst:
                    shutil.copyfileobj(src, dst)
missing = [v for v in want.values() if not os.path.exists(os.path.join(dest, v))]
if missing:
    sys.exit(f"flashmla: missing from the wheel: {missing}")
PY
echo "flashmla: $(du -sh "$dest" | cut -f1) in $dest"
