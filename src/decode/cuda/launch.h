// decode/cuda/launch.h: the CUDA backend of sparse_decode (declarations only; no CUDA headers).
#pragma once

#include "decode/cuda/attend_params.h"
#include "decode/cuda/config.h"
#include "decode/params.h"
#include "latentkv/tensor.h"

namespace latentkv::decode::cuda {

struct SparseArgs;

// Main kernel, then (with splits) the combine kernel, on `stream`. No host synchronisation.
// p.partial_out / p.partial_lse hold the split scratch when p.num_splits > 1.
void sparse_decode(const Params& p, Stream stream);

// Whether the wide layouts may be used where the device has room for them: quantized keys
// dequantized while the products run; on sm_90, 16-bit keys three tiles deep. Tests turn it off
// to exercise the narrow layouts on such devices; LKV_WIDE_LAYOUT=0 (read once per process)
// starts with it off (combine.cu).
void set_wide_layout_allowed(bool allowed);
bool wide_layout_allowed();

// Which attention kernel runs (sparse decode, sparse prefill, dense decode). kAuto: the Hopper kernel
// (decode/sm90) on compute capability 9.0 devices for bf16 queries, the portable one elsewhere and
// for f16, and the compact one (decode/compact) where the device's shared memory per block cannot
// hold the portable kernel's layout (99 KB parts: sm_86, sm_89, sm_120, sm_121). Tests and
// benchmarks force any of them (a forced kernel that does not fit the device is an error); the
// initial value comes from the environment variable LKV_DECODE_KERNEL (auto, portable, sm90 or
// compact) when it is set.
enum class KernelChoice { kAuto, kPortable, kSm90, kCompact };
void set_kernel_choice(KernelChoice choice);
KernelChoice kernel_choice();
// Whether a launch on `device` uses the Hopper kernel under the current choice; an error when sm90
// is forced on a device that cannot run it.
bool use_sm90(int device);
// Whether a launch that does not use the Hopper kernel runs the compact one: forced, or under
// kAuto where the device allows fewer bytes per block than the portable kernel's layout needs
// (`portable_smem`, the layout it would launch).
bool use_compact(int device, int portable_smem);
// The kernel a launch on `device` runs, as a name for reports: "sm90", "portable" or "compact"
// (for the compact one the test is the portable kernel's largest layout, v32_fp8's).
const char* kernel_for_device(int device);

// Rows of a launch's CTAs that hold a (query, head): the heads of one head block times the packed
// query tokens (the per-launch choices below go by it).
inline int64_t cta_rows(const Geometry& g) {
  return (g.heads_per_kv < kHeadsPerCta ? g.heads_per_kv : kHeadsPerCta) * g.pack;
}

// Whether the portable kernel's score product splits d_qk within a warp pair (kernel.cuh,
// score_dqk_half): only where a CTA's 64 rows are all real (heads_per_kv a multiple of 64, or a
// packed group of query tokens filling them); with 16-32 rows the split's extra pair barrier costs
// more than its loads save (bench/NOTES.md, v11d).
inline bool split_dqk_pays(const Geometry& g) {
  return g.heads_per_kv % 64 == 0 || g.heads_per_kv * g.pack == 64;
}

// Whether the portable kernel runs two token groups per CTA (kernel.cuh, kGroups): where every
// CTA has at most 16 rows (heads per kv head, or a packed group of query tokens), which leaves
// three of the CTA's four head tiles idle otherwise. Measured on the H200 (bench/NOTES.md, v12b):
// with 16 rows 4-6% faster on sparse decode and v32_fp8 pages (flat on bf16 pages, which run
// near their memory rate); with 32 rows 5-11% slower, as the two head tiles already working
// there sit on all four sub-partitions and the groups' second reading of Q costs more than the
// shorter chains save (and again, with the overlapped layout and equal dequantization shares,
// 1.6-2.7% slower on an H100: bench/NOTES.md v54). On unless turned off
// (set_token_groups_allowed, or LKV_TOKEN_GROUPS=0 read once per process: benchmarks measure
// both). 16-bit keys in the deep layout on sm_90 take score and value warps instead (roles_pay,
// checked first).
bool token_groups_allowed();
void set_token_groups_allowed(bool allowed);
inline bool token_groups_pay(const Geometry& g) {
  return token_groups_allowed() && cta_rows(g) <= 16;
}

// Whether 16-bit keys take the deep layout on sm_90 (three key tiles, two in flight by bulk
// copies; kernel.cuh, kDeep): only for CTAs with fewer than 64 rows, where the products are short
// and the kernel waits on its copies. Measured on the H200 against two key tiles (bench/NOTES.md,
// v13): 16-row CTAs (token groups) 15-16% faster on bf16 pages, 32-row ones 0.5-1.3% faster,
// 64-row ones no faster (dense within 0.6%, prefill 1.3-3.2% slower).
inline bool deep_keys_pay(const Geometry& g) {
  return cta_rows(g) < 64;
}

// Whether a launch of 16-bit keys in the deep layout (sm_90) runs score and value warps
// (kernel.cuh, kRoles): CTAs of at most 32 rows, where half the warps would otherwise only wait;
// for 16 rows and fewer they replace token groups. Measured on the H200 (bench/NOTES.md, v13c):
// dense bf16 h_q 16 s_q 1 18-19% faster than token groups, 32-row CTAs 1-3% faster than one role.
// On unless turned off (set_roles_allowed, or LKV_ROLES=0 read once per process: benchmarks
// measure both).
bool roles_allowed();
void set_roles_allowed(bool allowed);
inline bool roles_pay(const Geometry& g) {
  return roles_allowed() && cta_rows(g) <= 32;
}

// Whether warps 4-7 of the portable kernel's overlapped layout (quantized keys on devices with
// more than 163 KB of shared memory per CTA) dequantize each next tile alone in CTAs of at most 16
// rows (token groups), where they have no score products (kernel.cuh, idle_dequant; they take half
// of the value product, kShareV). Measured, before kShareV, on
// the H200 and an H100 (bench/NOTES.md v50): 8-12% less time on those cases (dense v32_fp8 pages
// and sparse decode with h_q 16); the same for 32-row CTAs measured 4-7% slower (H100) and is not
// built. On unless turned off: LKV_IDLE_DEQUANT=0|1 (read once per process) or
// set_idle_dequant_override sets it for every launch, so that benchmarks can compare; -1 removes
// the override.
int idle_dequant_override();
void set_idle_dequant_override(int mode);
inline int idle_dequant_for() {
  const int m = idle_dequant_override();
  return m >= 0 ? m : 1;
}

// How many warps (the last ones) issue a key tile's bulk copies on sm_90 (Geometry::copy_warps;
// kernel.cuh, issue). A warp issues its lanes' bulk copies one lane at a time, so one issuer
// runs a 32-step loop per tile. Measured on the H200 with 1, 2, 4 and 8 issuers (bench/NOTES.md,
// v14): score and value warps take 2 (their row tile 1 score warps; 4 puts the copies on working
// score warps), 21-26% faster on 16-32 rows than 1; CTAs of more than 48 rows, whose last warp
// works, take 4 (+5-11% dense, +7-9% prefill, +9-12% sparse decode against 1; 8 is slower than 1
// everywhere, as it puts the copies on the first warp, which resolves the next tiles); token
// groups (at most 16 rows, quantized keys) take 4 (+1.5-2%); one-role CTAs of 17-48 rows keep the
// last warp alone, which is idle there (2 and 4 measured 1.6-2.1% slower in two of the three
// quantized-key cases, level in the third).
// LKV_COPY_WARPS=1|2|4|8 (read once per process) or set_copy_warps_override overrides the choice
// for every launch, so that benchmarks can compare; 0 removes the override.
int copy_warps_override();
void set_copy_warps_override(int n);
inline int copy_warps_for(const Geometry& g, bool roles, bool groups) {
  const int n = copy_warps_override();
  if (n) return n;
  if (roles) return 2;
  return cta_rows(g) > 48 || groups ? 4 : 1;
}

// Programmatic dependent launch (cuda_common/pdl.cuh) for the combine kernel and for a plan's second
// attention launch. The first launch of a two-launch plan lets the second one in as soon as each of
// its CTAs has started (Geometry::early_dependents), so the second launch's CTAs take SMs as the
// first launch's last wave drains; the second launch reads nothing the first writes and waits for
// it only before it exits, so that its completion implies the first's. Every other attention
// launch lets the combine in only once all of its CTAs have exited (an earlier combine piled its
// CTAs onto the few idle SMs: bench/NOTES.md, v16), and the combine waits for it to complete before
// reading partials; what PDL saves there is the gap between the two grids. The first attention
// launch of a call is programmatically dependent as well, with a wait at entry (first_launch_pdl,
// below), so everything the caller queued before the call is complete before any of it reads its
// inputs.
// Mode: 0 off, 1 on (the default), 2 the combine an ordinary launch (second and first launches with
// PDL), for measuring them apart; LKV_PDL=0|1|2 sets the initial mode (read once per process). Used only
// where the code the device runs was built for sm_90 or newer (pdl_launches), since older targets
// compile the waits out.
int pdl_mode();
void set_pdl_mode(int mode);
bool pdl_launches(int device);
// A plan's second attention launch (r1_begin > 0) goes out with PDL where pdl_launches allows it.
inline bool second_launch_pdl(const Geometry& g, int device) { return g.r1_begin > 0 && pdl_launches(device); }
// The first attention launch of a call with PDL as well (Geometry::pdl_first): its CTAs may be
// scheduled while the kernel the caller queued ahead of the call is still running, and wait for it
// to complete before their first global access (ordinary semantics: what the caller queued before
// the call is complete and visible before any of it is read); the call's last kernel lets whatever
// PDL kernel follows (the next call's first launch, in a model step) be scheduled early, onto the
// SMs this call leaves free, where it waits. What it saves is the launch gap between calls (layers
// back to back, a model step in a CUDA graph), which a flushed single call never shows: calls back
// to back (`bench decode --stream`) measured 1.0-1.3 µs (6-8%) shorter per call on V4 b 2 h_q 64 with
// a 512-token extra cache, in three runs; the other cases moved by less than the first two resolved
// (bench/NOTES.md v31). On by default; LKV_PDL_FIRST=0 (read once per process) or
// set_first_launch_pdl(false) turns it off; it applies where pdl_launches does.
bool first_launch_pdl();
void set_first_launch_pdl(bool on);
inline bool first_launch_pdl_on(int device) { return first_launch_pdl() && pdl_launches(device); }
// Whether an attention launch of geometry g goes out with PDL: a plan's second launch, or a call's
// first one that waits at entry. Both kernels' launch code asks this.
inline bool attend_launch_pdl(const Geometry& g, int device) {
  return second_launch_pdl(g, device) || waits_at_entry(g);
}

// One instantiation per format and score-product shape (instantiations/*.cu).
template <CacheFormat F>
void launch_sparse(const KernelParams<SparseArgs>& p, Stream stream);
// DeepSeek V4.1's pairing: a v41_fp8 main cache with a v41_fp4 extra cache (every kernel;
// instantiations/v41_fp8_fp4_extra.cu).
void launch_sparse_v41_fp4_extra(const KernelParams<SparseArgs>& p, Stream stream);

}  // namespace latentkv::decode::cuda
