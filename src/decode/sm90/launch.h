// decode/sm90/launch.h: whether a device runs the Hopper attention kernel (declarations only, no CUDA
// headers). decode/cuda/attend_launch.cuh chooses between it and the portable kernel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace latentkv::decode::sm90 {

// Whether `device` can run the kernel: compute capability 9.0, room for its shared memory, and the
// driver running its sm_90a code (not the compute_80 PTX, as under CUDA_FORCE_PTX_JIT=1).
bool usable(int device);

// Whether the warp-specialised variant (kernel_ws.cuh) runs instead of kernel.cuh: LKV_SM90_WS=1,
// read once per process. Opt-in: slower on the H200 (bench/NOTES.md).
bool warp_specialised();

// Whether the two head blocks of a query row run as a CTA pair (a cluster of two CTAs, each
// dequantizing half of every block's tokens into both CTAs' stages): used where the Source
// dequantizes and the row has an even number of 64-head blocks, when turned on with
// LKV_SM90_PAIR=1 or set_cta_pairs(true), for either kernel: the two-warpgroup one (warpgroup 1
// converts, a cluster barrier per block; 1.49-1.57x the time of single CTAs on the H200's h_q 128
// cases, bench/NOTES.md v22) and the warp-specialised one (st.async completing on mbarriers;
// 281.0 against 317.9 TFLOPS). Off by default. Results are bitwise identical either way.
bool cta_pairs();
void set_cta_pairs(bool on);

// Whether CTAs of at most kNarrowRows (16) rows over quantized keys run the narrow kernel
// (narrow.cuh: the tokens as wgmma's M, two CTAs per SM) instead of kernel.cuh's 64-row one: sparse
// decode with h_q <= 16 (per kv head) and dense decode of v32_fp8 pages with heads x packed query
// tokens <= 16. On by default; LKV_SM90_NARROW=0 (read once per process) or set_narrow_rows(false)
// turns it off, so that tests and benchmarks can run both on the same cases. Neither the
// warp-specialised variant nor CTA pairs apply to such CTAs (one head block per row), and the
// narrow kernel has no phase stamps: a build with LKV_SM90_TRACE runs kernel.cuh for them.
bool narrow_rows();
void set_narrow_rows(bool on);

// Whether CTAs of 17-32 rows over quantized keys run the narrow kernel's 32-row warp-specialised
// instance (config.h kNarrowWideRows: wgmma N = 32, one CTA of 512 threads per SM) instead of
// kernel.cuh, which pays for 64 rows: sparse decode with 17-32 heads per kv head (a tensor-parallel
// shard of 32 of V3.2's 128 heads) and dense decode of v32_fp8 pages with heads x packed query
// tokens of 17-32. Needs narrow_rows() as well. On by default (kNarrowWideRowsByDefault: on an H100
// the tensor-parallel h_q 32 case took 0.92x the time of kernel.cuh, dense v32_fp8 pages of 32 rows
// 0.98-1.01x; bench/NOTES.md v68); LKV_SM90_NARROW32=0 / 1 (read once per process) or
// set_narrow_wide_rows override it. The planner counts one CTA per SM either way.
inline constexpr bool kNarrowWideRowsByDefault = true;
bool narrow_wide_rows();
void set_narrow_wide_rows(bool on);

// Which form the narrow kernel runs in: two CTAs of 256 threads per SM, or its warp-specialised form
// (config.h kNarrowWsThreads: one CTA of 512 threads per SM, two key stages, producer warpgroups).
// The same arithmetic in the same order, so the same bytes for the same plan; the planner counts
// one CTA per SM for the warp-specialised form. kAuto (the default) takes the warp-specialised form
// for dense decode's pages, whose keys are consecutive tokens, and two CTAs for sparse lists: on an
// H100 the form took 0.95-0.98x the time on dense v32_fp8 pages in three runs and was level or
// slower on the tensor-parallel sparse case (bench/NOTES.md v60, v62). LKV_SM90_NARROW_WS=1 / 0
// (read once per process) or set_narrow_form force one form for every launch.
enum class NarrowForm { kAuto, kTwoCtas, kWarpSpecialised };
NarrowForm narrow_form();
void set_narrow_form(NarrowForm form);
// Whether a narrow launch runs warp-specialised under `form` (narrow_ws: under narrow_form()):
// dense_pages for dense decode's Source (its candidates are consecutive tokens of a request's
// pages), false for gathered lists. The rule itself is here so that a build without CUDA plans by it.
constexpr bool narrow_ws_under(NarrowForm form, bool dense_pages) {
  return form == NarrowForm::kWarpSpecialised || (form == NarrowForm::kAuto && dense_pages);
}
bool narrow_ws(bool dense_pages);

// The switches above that are set away from their defaults, as one note for benchmark records
// (" (warp-specialised variant, LKV_SM90_WS=1)" and the like; empty at the defaults).
std::string switch_notes();

// Phase stamps of the two-warpgroup kernel, for `latentkv bench decode --trace`: compiled in only
// with the CMake option LKV_SM90_TRACE (off, so the default kernels carry no stamping code). While
// on (set_trace), every launch of the kernel has thread 0 of each CTA write %globaltimer (ns) at
// kTracePhases points, and a one-thread kernel stamps the stream before and after the traced call
// (mark_trace), so the stamps also show the gaps between the kernels of a call. Every attention
// launch of the traced call is kept (a two-launch plan's CTAs follow the first launch's); the
// warp-specialised variant has no stamps.
// entry, indices, block 0, q_wait (quantized keys: the prologue's last resolve done, before waiting
// for Q's copies), prologue, block 0 done, block 1 done, loop, exit
inline constexpr int kTracePhases = 9;
struct KernelTrace {
  int64_t ctas = 0;                       // CTAs of every traced launch (grid x * y each)
  std::vector<int64_t> launches;          // each launch's CTAs, in launch order
  std::vector<unsigned long long> stamps;  // [ctas][kTracePhases]; 0 where a CTA did not reach a phase
  unsigned long long before = 0, after = 0;  // mark_trace(0) and mark_trace(1); 0 if not run
};
bool trace_built();
// Turns the stamps on (for one call: stamps and marks zeroed, launches forgotten) or off (an error
// in a build without LKV_SM90_TRACE).
void set_trace(bool on);
// Stamps the current device's default stream: which 0 before a traced call, 1 after it.
void mark_trace(int which);
// Waits for the device and returns the traced call's stamps.
KernelTrace last_trace();

}  // namespace latentkv::decode::sm90
