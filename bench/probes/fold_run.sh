#!/usr/bin/env bash
# One device call (bench/NOTES.md v55): pair scores in registers, tested and timed against the token
# groups' d_qk split (wip/group-half, 9785377):
#   gr:     token groups take P from registers (no pair barrier between P and the value product);
#   fold:   gr plus the d_qk split's folded exchange (kernel.cuh kFold: all four n8 tiles, no
#           exchange of maxima, P from registers; one pair barrier per tile);
#   fold32: fold plus the split for 32-row CTAs too (split_dqk_pays; dense h_q 32 s_q 1, 16 x 2).
# Here:
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/gh2.tar.xz bash scripts/gpu_prebuild.sh latentkv lkv_cuda_tests  (at 9785377)
#   LKV_PREBUILT_SM90=1 LKV_PREBUILT_OUT=build-pk/gr.tar.xz ... (45d96bf), fold.tar.xz and foldrc.tar.xz (9ace05c,
#   the second with LKV_PREBUILT_RACECHECK=1, lkv_cuda_tests only), fold32.tar.xz (103473f, latentkv only)
# There (carry those five archives): bash bench/probes/fold_run.sh [ROUNDS]
set -u
source "$(dirname "$0")/call_lib.sh"
unpack build-pk/fold.tar.xz build-gpu-fold || exit 1
for b in gr fold32; do unpack build-pk/$b.tar.xz build-gpu-$b || exit 1; done
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
suites fold build-gpu-fold
sanitize memcheck fold build-gpu-fold 'DecodeCuda.WideAndNarrowLayoutsAgreeBitwise:AttentionCuda.TokenGroups' 100
unpack build-pk/foldrc.tar.xz build-gpu-rc &&
  sanitize racecheck fold build-gpu-rc 'AttentionCuda.TokenGroups:DecodeCuda.WideAndNarrowLayoutsAgreeBitwise'
[ "$(left)" -gt 150 ] && LKV_AB_SPECS="dense fp8_b128_sk8192_h16_sq1;dense fp8_b128_sk8192_h32_sq1;dense fp8_b128_sk8192_h16_sq2;dense fp8_b128_sk8192_h64_sq1;decode tp_v32_b128;decode v32_b128_h128;decode v4_b128_h64_topk128_extra512p64;decode v4_b128_h128_topk128_extra1024p2;decode v41_b128_h64_topk128_extra512p64" \
  bash bench/probes/bins_ab.sh "${1:-2}" base=build-pk/gh2.tar.xz gr=build-gpu-gr fold=build-gpu-fold fold32=build-gpu-fold32
echo "left $(left) s"
