// decode/cuda/attend_launch.cuh: launching the shared attention kernel for a Source, then (with
// splits) the combine kernel. Included by each op's instantiation files, one Source per file so
// they compile in parallel.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda_common/cuda_check.h"
#include "cuda_common/device_cache.h"
#include "cuda_common/pdl.cuh"
#include "decode/cuda/kernel.cuh"
#include "decode/compact/launch.cuh"
#include "decode/cuda/launch.h"
#include "decode/sm90/launch.cuh"
#include "latentkv/tensor.h"

namespace latentkv::decode::cuda {

// Merges the splits' partial results by LSE (combine.cu). out is f16 when f16, else bf16.
void launch_combine(const Geometry& g, const OutRef& o, bool f16, Stream stream);

template <class Source, bool kWide, int kGroups, bool kRoles = false>
void launch_attend_grouped(const KernelParams<typename Source::Args>& p, Stream stream) {
  // Two token groups cover rows 0..15 of a CTA only (kernel.cuh, kShareV; token_groups_pay asks
  // for <= 16), score and value warps rows 0..31 (roles_pay asks for <= 32).
  LKV_CHECK((kGroups == 1 && !kRoles) || cta_rows(p.g) <= (kGroups == 2 ? 16 : kHeadsPerCta / 2),
            "the attention kernel's token groups take at most 16 rows per CTA and its score/value warps 32, got ",
            cta_rows(p.g));
  constexpr int kSmem =
      SmemLayout<Source::kDqk, Source::kStorage == KeyStorage::kDirect16, kWide, kRoles>::total;
  int device = 0;
  LKV_CUDA_CHECK(cudaGetDevice(&device));
  const int smem_limit = cuda_common::max_smem_per_block(device);
  LKV_CHECK(smem_limit >= kSmem, "the CUDA attention kernel needs ", kSmem,
            " bytes of shared memory per block and device ", device, " allows ", smem_limit,
            " (it runs on A100/H100/H200-class GPUs, not on parts with 99 KB per block)");
  const int64_t rows = row_groups(p.g), head_blocks = p.g.kv_heads * p.g.head_blocks_per_kv;
  LKV_CHECK(rows <= 0x7fffffff && head_blocks <= 65535 && p.g.num_splits <= 65535,
            "the CUDA attention kernel's grid takes at most 2^31 - 1 row groups (query rows, or packed groups of them), 65535 head blocks "
            "and 65535 splits, got ", rows, " row groups (", p.g.n1, " x ", p.g.n2, " / ", p.g.pack, "), ", head_blocks,
            " head blocks, ", p.g.num_splits, " splits");
  // Set on every launch: the attribute belongs to the current device, and setting it is cheap.
  LKV_CUDA_CHECK(cudaFuncSetAttribute(attend_kernel<Source, kWide, kGroups, kRoles>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(head_blocks),
                  static_cast<unsigned>(p.g.num_splits));
  KernelParams<typename Source::Args> kp = p;
#if defined(LKV_SM90_TRACE)
  kp.trace = sm90::trace_buffer(static_cast<int64_t>(grid.x) * grid.y * grid.z);  // null unless tracing
#endif
  kp.g.copy_warps = copy_warps_for(p.g, kRoles, kGroups > 1);
  kp.g.idle_dequant = idle_dequant_for();
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmem;
  config.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[1];
  if (attend_launch_pdl(p.g, device)) {
    attr[0] = cuda_common::pdl_attribute();
    config.attrs = attr;
    config.numAttrs = 1;
  }
  LKV_CUDA_CHECK(cudaLaunchKernelEx(&config, attend_kernel<Source, kWide, kGroups, kRoles>, kp));
  LKV_CUDA_CHECK_LAUNCH();
}

// Two token groups (kernel.cuh, kGroups) where token_groups_pay (CTAs of at most 16 rows) and the
// score product is not split over d_qk.
// Score and value warps (kernel.cuh, kRoles) for 16-bit keys in the deep layout (kWide on sm_90:
// launch_attend chose it) where roles_pay and the device has room for their layout (four key
// tiles: 205,856 bytes at d_qk 576, against the deep layout's 195,104).
template <class Source, bool kWide>
void launch_attend_as(const KernelParams<typename Source::Args>& p, Stream stream) {
  if constexpr (kWide && Source::kStorage == KeyStorage::kDirect16 && !Source::kSplitDqk) {
    if (roles_pay(p.g)) {
      int device = 0;
      LKV_CUDA_CHECK(cudaGetDevice(&device));
      if (cuda_common::max_smem_per_block(device) >= SmemLayout<Source::kDqk, true, true, true>::total)
        return launch_attend_grouped<Source, true, 1, true>(p, stream);
    }
  }
  if constexpr (!Source::kSplitDqk) {
    if (token_groups_pay(p.g)) return launch_attend_grouped<Source, kWide, 2>(p, stream);
  }
  launch_attend_grouped<Source, kWide, 1>(p, stream);
}

// The Hopper kernel (decode/sm90) where use_sm90() picks it and the Source has bf16
// queries (f16 stays on the portable kernel), else the portable one; then the combine.
// PortableSource: the Source the portable kernel runs with, when it differs from the Hopper one
// only in the portable kernel's choices (Source::kSplitDqk), so that the Hopper kernel is not
// compiled twice.
template <class Source, class PortableSource = Source>
void launch_attend_once(const KernelParams<typename Source::Args>& p, Stream stream) {
  int device = 0;
  LKV_CUDA_CHECK(cudaGetDevice(&device));
  if constexpr (!Source::kF16) {
    if (use_sm90(device)) {
      decode::sm90::launch_attend<Source>(p, stream);
      if (p.g.num_splits > 1) launch_combine(p.g, p.o, false, stream);
      return;
    }
  }
  using P = PortableSource;
  static_assert(std::is_same_v<typename P::Args, typename Source::Args> && P::kDqk == Source::kDqk &&
                    P::kF16 == Source::kF16 && P::kStorage == Source::kStorage,
                "the portable kernel's Source differs from the Hopper one only in the portable kernel's choices");
  constexpr bool kDirect = P::kStorage == KeyStorage::kDirect16;
  // The compact kernel where the portable kernel's narrow layout does not fit (or where forced);
  // it takes none of the portable kernel's choices, so it runs with Source (one instantiation where
  // the portable kernel has two).
  if (use_compact(device, SmemLayout<P::kDqk, kDirect>::total)) {
    compact::launch_attend<Source>(p, stream);
    if (p.g.num_splits > 1) launch_combine(p.g, p.o, P::kF16, stream);
    return;
  }
  // The wide layout: quantized keys dequantized while the products run (any device with the
  // room); 16-bit keys three tiles deep, on sm_90 only (there the kernel's bulk copies keep two
  // tiles' copies in flight off the warps; with per-thread copies a third tile measured slower,
  // bench NOTES v6 and v11c) and only where deep_keys_pay (CTAs of fewer than 64 rows); within it,
  // CTAs of at most 32 rows take score and value warps with four key tiles (launch_attend_as,
  // which checks that their larger layout fits).
  const bool wide = wide_layout_allowed() &&
                    cuda_common::max_smem_per_block(device) >= SmemLayout<P::kDqk, kDirect, true>::total &&
                    (!kDirect || (cuda_common::compute_capability(device) / 10 == 9 && deep_keys_pay(p.g)));
  if (wide) launch_attend_as<P, true>(p, stream);
  else launch_attend_as<P, false>(p, stream);
  if (p.g.num_splits > 1) launch_combine(p.g, p.o, P::kF16, stream);
}

// The attention launch (or two) and the combine. With Geometry::unsplit_r1 (a plan's unsplit_b),
// r1 in [0, unsplit_r1) run unsplit in one launch, each CTA over all candidates and writing out and
// lse itself, and the other r1 split in a second launch, which alone has partials and a combine.
// Each r1 gets the same bytes as from a single launch with its split count.
// With first_launch_pdl_on, the call's first launch waits at entry for the kernel ahead of the call
// (Geometry::pdl_first) and the call's last kernel lets the next call's first launch in: an unsplit
// launch as its CTAs start, the combine once its CTAs have passed their wait.
template <class Source, class PortableSource = Source>
void launch_attend(const KernelParams<typename Source::Args>& call, Stream stream) {
  KernelParams<typename Source::Args> p = call;
  int device = 0;
  LKV_CUDA_CHECK(cudaGetDevice(&device));
  p.g.pdl_first = first_launch_pdl_on(device) ? 1 : 0;
  if (p.g.pdl_first && p.g.num_splits <= 1) p.g.early_dependents = 1;  // the call's only kernel
  if (p.g.num_splits <= 1 || p.g.unsplit_r1 <= 0) return launch_attend_once<Source, PortableSource>(p, stream);
  LKV_CHECK(p.g.unsplit_r1 < p.g.n1 && p.g.r1_begin == 0, "the attention launch's unsplit rows (",
            p.g.unsplit_r1, ") must leave some of its ", p.g.n1, " split, and its rows start at 0 (r1_begin=",
            p.g.r1_begin, ")");
  KernelParams<typename Source::Args> whole = p;
  whole.g.n1 = p.g.unsplit_r1;
  whole.g.keys_per_split = p.g.num_splits * p.g.keys_per_split;  // every candidate
  whole.g.num_splits = 1;
  whole.g.unsplit_r1 = 0;
  whole.g.early_dependents = pdl_launches(device) ? 1 : 0;
  // `rest` reads the call's inputs without a wait at entry. With pdl_first, `whole` waits for the
  // kernel ahead of the call before it lets `rest` in, so `rest` is scheduled only after that kernel
  // has completed (PTX promises visibility of its writes to the grid that waited, `whole`; that a
  // grid scheduled after the completion sees them too is the ordering this relies on, tested by
  // DecodeCuda.FirstLaunchWaitsForTheKernelAhead's two-launch plans). Without pdl_first `whole` is
  // an ordinary launch and stream order covers both.
  launch_attend_once<Source, PortableSource>(whole, stream);
  KernelParams<typename Source::Args> rest = p;
  rest.g.r1_begin = p.g.unsplit_r1;
  rest.g.n1 = p.g.n1 - p.g.unsplit_r1;
  rest.g.unsplit_r1 = 0;
  // The kernels index partials by absolute query row, of which the workspace holds the split ones
  // (from r1_begin n2): the pointers move back by the unsplit rows (address arithmetic only; every
  // index the launch uses lands inside the workspace).
  const uintptr_t before = static_cast<uintptr_t>(p.g.unsplit_r1 * p.g.n2 * p.g.h_q * p.g.num_splits);
  const auto back = [](float* ptr, uintptr_t floats) {
    return ptr ? reinterpret_cast<float*>(reinterpret_cast<uintptr_t>(ptr) - floats * sizeof(float)) : ptr;
  };
  rest.g.partial_out = back(p.g.partial_out, before * kDimV);
  rest.g.partial_lse = back(p.g.partial_lse, before);
  rest.g.partial_max = back(p.g.partial_max, before);
  launch_attend_once<Source, PortableSource>(rest, stream);
}

}  // namespace latentkv::decode::cuda
