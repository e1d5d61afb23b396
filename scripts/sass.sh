#!/usr/bin/env bash
# Static checks of compiled CUDA code on a machine without a GPU: the SASS and the register, stack
# and shared-memory use of the kernels in an object file or binary (the build's
# CMakeFiles/latentkv.dir/src/.../*.cu.o, or build-gpu/latentkv), so that a kernel change can be
# checked for spills and compared instruction by instruction before device time is spent on it.
#   bash scripts/sass.sh res  FILE [ARCH] [REGEX]   # REG / STACK / SHARED per kernel (default sm_90a)
#   bash scripts/sass.sh sass FILE [ARCH] [REGEX]   # the SASS of the kernels whose names match REGEX,
#                                                   # addresses and encodings stripped (diffable)
#   bash scripts/sass.sh ops  FILE [ARCH] [REGEX]   # instruction counts by opcode, per kernel
# nvcc ships without cuobjdump and nvdisasm on some installs; NVIDIA's own wheels
# (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) are fetched into .deps/cuda-tools the first time.
set -euo pipefail
mode=${1:?"usage: scripts/sass.sh res|sass|ops FILE [ARCH] [REGEX]"}
file=$(realpath "${2:?"usage: scripts/sass.sh res|sass|ops FILE [ARCH] [REGEX]"}")
cd "$(dirname "$0")/.."
arch=${3:-sm_90a}
regex=${4:-.}

tools=.deps/cuda-tools
if command -v cuobjdump >/dev/null && command -v nvdisasm >/dev/null; then
  :
elif [ -x "$tools/nvidia/cu13/bin/cuobjdump" ] && [ -x "$tools/nvidia/cu13/bin/nvdisasm" ]; then
  export PATH="$PWD/$tools/nvidia/cu13/bin:$PATH"
else
  echo "sass: fetching cuobjdump and nvdisasm (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) into $tools" >&2
  mkdir -p "$tools/wheels"
  python3 -m pip download -q --no-deps -d "$tools/wheels" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
  for w in "$tools"/wheels/*.whl; do python3 -m zipfile -e "$w" "$tools"; done
  chmod +x "$tools"/nvidia/cu13/bin/*
  export PATH="$PWD/$tools/nvidia/cu13/bin:$PATH"
fi

case "$mode" in
  res)
    # One line per kernel: name, then REG, STACK, SHARED, LOCAL.
    cuobjdump -res-usage -arch "$arch" "$file" |
      awk -v re="$regex" '/Function/ {name = $2; sub(/:$/, "", name); next}
                          /REG:/ && name ~ re {print $1, $2, $3, $4, name}'
    ;;
  sass)
    cuobjdump -sass -arch "$arch" "$file" |
      awk -v re="$regex" '/Function :/ {keep = ($3 ~ re)} keep' |
      grep -E '^\s+/\*[0-9a-f]{4,}\*/|Function' |
      sed -E 's@/\* 0x[0-9a-f]+ \*/@@; s@^\s+/\*[0-9a-f]+\*/\s*@  @; s@\s+$@@'
    ;;
  ops)
    cuobjdump -sass -arch "$arch" "$file" |
      awk -v re="$regex" '
        /Function :/ {if (n) report(); name = $3; keep = (name ~ re); split("", count); n = 0; next}
        keep && /^[ \t]+\/\*[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]*\*\// {
          op = $2; if (op ~ /^@/) op = $3; sub(/\..*/, "", op); sub(/;$/, "", op); count[op]++; n++
        }
        function report(   k, line) {
          line = ""
          for (k in count) line = line sprintf(" %s=%d", k, count[k])
          print n, name; print "  " line
        }
        END {if (n) report()}'
    ;;
  *)
    echo "sass: the mode is res, sass or ops, got '$mode'" >&2
    exit 2
    ;;
esac
