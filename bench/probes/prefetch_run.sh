#!/usr/bin/env bash
# One device call: how many bytes the Hopper kernels draw from DRAM against SPEC section 8's count
# (unique tokens read), and whether the records' L2 prefetch form changes it (bench/NOTES.md v59).
# Builds (here; each archive holds latentkv, sm_90a only): c1f1154 with prefetch_variants.patch
# (`git apply bench/probes/prefetch_variants.patch`) and the `#define LKV_SM90_PREFETCH` it adds to
# records.cuh set to 0 (base: one prefetch.global.L2 per 128-byte step and the record's last byte,
# as c1f1154), 1 (nopf: no prefetch, in both Hopper kernels) and 2 (bulk: one
# cp.async.bulk.prefetch.L2 of the record's exact bytes), each packed by
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/LABEL.tar.xz bash scripts/gpu_prebuild.sh latentkv
# there (carry the archives): bash bench/probes/prefetch_run.sh ROUNDS LABEL=ARCHIVE ...
# (session 59: `2 base=build-pk/base.tar.xz nopf=build-pk/nopf.tar.xz bulk=build-pk/bulk.tar.xz`)
#  1. per build and case, ncu counters of the first attention launch: duration, DRAM bytes read,
#     L2 read sectors from L1 and their hits;
#  2. a same-run A/B of the builds (bins_ab.sh) on the same cases.
set -u
source "$(dirname "$0")/call_lib.sh"
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
rounds=${1:-2}; shift
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
cases=("decode tp_v32_b128_h16" "decode v4_b128_h64_topk128_extra512p2" "decode v4_b128_h64_topk128_extra512p64"
       "dense fp8_b128_sk8192_h16_sq1" "decode v32_b128_h128")
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum
for pair in "$@"; do
  label=${pair%%=*}
  unpack "${pair#*=}" "build-pf/$label" || exit 1
  for c in "${cases[@]}"; do
    read -r op filter <<<"$c"
    timeout 100 ncu --clock-control none -k 'regex:narrow_kernel|attend_kernel' -c 1 --metrics "$metrics" --csv \
      "build-pf/$label/latentkv" bench "$op" --device cuda --kernel auto --filter "$filter" --reps 1 \
      >"$OUT/ncu-$label-$filter.log" 2>&1
    echo "$label $filter: $(grep -E '"(gpu__time|dram__bytes|lts__t)' "$OUT/ncu-$label-$filter.log" |
      awk -F'","' '{gsub(/"/,"",$NF); printf "%s=%s %s  ", $(NF-2), $NF, $(NF-1)}')"
  done
done
specs=$(printf '%s;' "${cases[@]}")
LKV_AB_KERNEL=auto LKV_AB_SPECS="${specs%;}" bash bench/probes/bins_ab.sh "$rounds" "$@"
(cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
echo "left $(left) s"
