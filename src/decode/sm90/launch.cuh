// decode/sm90/launch.cuh: the launch of the Hopper attention kernel for one Source (included by
// decode/cuda/attend_launch.cuh, so each op's instantiation file compiles both kernels for its Source).
#pragma once

#include <type_traits>

#include "cuda_common/cuda_check.h"
#include "cuda_common/pdl.cuh"
#include "decode/cuda/launch.h"

#include "decode/sm90/kernel.cuh"
#include "decode/sm90/kernel_ws.cuh"
#include "decode/sm90/narrow.cuh"
#include "decode/sm90/launch.h"
#include "latentkv/error.h"

namespace latentkv::decode::sm90 {

#if defined(LKV_SM90_TRACE)
// trace.cu: this launch's slice of the stamp buffer (zeroed by set_trace) for `ctas` CTAs while
// tracing is on; null otherwise.
unsigned long long* trace_buffer(int64_t ctas);
#endif

// One launch of `kernel` (threads per CTA, dynamic shared memory), pairs of neighbouring CTAs in x
// as clusters of two when kPair.
// With programmatic dependent launch where cuda::second_launch_pdl says so.
template <bool kPair, class Kernel, class Params>
void launch_kernel(Kernel kernel, const Params& p, dim3 grid, int threads, int smem, cudaStream_t stream) {
  LKV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if constexpr (kPair) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = 2;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  int device = 0;
  LKV_CUDA_CHECK(cudaGetDevice(&device));
  if (cuda::attend_launch_pdl(p.g, device)) attr[n++] = cuda_common::pdl_attribute();
  config.attrs = n ? attr : nullptr;
  config.numAttrs = n;
  LKV_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p));
}

template <class Source, bool kPair>
void launch_two_warpgroups(const cuda::KernelParams<typename Source::Args>& p, dim3 grid, cudaStream_t stream) {
  launch_kernel<kPair>(attend_kernel<Source, kPair>, p, grid, kThreads, Layout<Source::kDqk>::total, stream);
}
template <class Source, bool kPair>
void launch_warp_specialised(const cuda::KernelParams<typename Source::Args>& p, dim3 grid, cudaStream_t stream) {
  launch_kernel<kPair>(attend_kernel_ws<Source, kPair>, p, grid, kWsThreads, WsLayout<Source::kDqk>::total, stream);
}

// The main kernel only; the caller runs the combine when p.g.num_splits > 1. No host
// synchronisation.
template <class Source>
void launch_attend(const cuda::KernelParams<typename Source::Args>& p, Stream stream) {
  [[maybe_unused]] const bool ws = warp_specialised();
  const int64_t rows = cuda::row_groups(p.g), blocks = rows * p.g.kv_heads * p.g.head_blocks_per_kv;
  LKV_CHECK(blocks <= 0x7fffffff && p.g.num_splits <= 65535,
            "the sm_90 attention kernel's grid takes at most 2^31 - 1 (row group, head block) pairs and "
            "65535 splits, got ", rows, " row groups x ", p.g.kv_heads * p.g.head_blocks_per_kv,
            " head blocks, ", p.g.num_splits, " splits");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.g.num_splits));
  const auto s = static_cast<cudaStream_t>(stream);
#if defined(LKV_SM90_TRACE)
  cuda::KernelParams<typename Source::Args> traced = p;
  traced.trace = trace_buffer(static_cast<int64_t>(grid.x) * grid.y);
  const auto& q = traced;
#else
  const auto& q = p;
#endif
  // CTAs of at most 16 rows over quantized keys: the narrow kernel (launch.h narrow_rows).
#if !defined(LKV_SM90_TRACE)
  if constexpr (Source::kStorage != cuda::KeyStorage::kDirect16) {
    if (narrow_rows() && cuda::cta_rows(p.g) <= kNarrowRows) {
      if (narrow_ws(Source::kDensePages))
        launch_kernel<false>(narrow_kernel<Source, true>, q, grid, kNarrowWsThreads,
                             NarrowLayout<Source::kDqk, 2>::total, s);
      else
        launch_kernel<false>(narrow_kernel<Source, false>, q, grid, kThreads, NarrowLayout<Source::kDqk>::total, s);
      LKV_CUDA_CHECK_LAUNCH();
      return;
    }
    // CTAs of 17-32 rows: the same kernel with N = 32, warp-specialised only (launch.h narrow_wide_rows).
    if (narrow_rows() && narrow_wide_rows() && cuda::cta_rows(p.g) <= kNarrowWideRows) {
      launch_kernel<false>(narrow_kernel<Source, true, kNarrowWideRows>, q, grid, kNarrowWsThreads,
                           NarrowLayout<Source::kDqk, 2, kNarrowWideRows>::total, s);
      LKV_CUDA_CHECK_LAUNCH();
      return;
    }
  }
#endif
  // Pairs: head blocks 2 k and 2 k + 1 of a row are neighbours in x (head block fastest); only
  // quantized keys are shared (16-bit keys are copied, and have no pair instantiation).
  constexpr bool kCanPair = Source::kStorage != cuda::KeyStorage::kDirect16;
  // The warp-specialised kernel (opt-in) takes v32_fp8 / v4_fp8 records and 16-bit keys; v41_fp8
  // records (with either extra cache) run the two-warpgroup kernel whatever LKV_SM90_WS says.
  constexpr bool kCanWs =
      Source::kStorage != cuda::KeyStorage::kV41Fp8 && Source::kStorage != cuda::KeyStorage::kV41Mixed;
  auto run = [&](auto pair) {
    constexpr bool kPair = decltype(pair)::value && kCanPair;
    if constexpr (kCanWs) {
      if (ws) return launch_warp_specialised<Source, kPair>(q, grid, s);
    }
    launch_two_warpgroups<Source, kPair>(q, grid, s);
  };
  if (kCanPair && cta_pairs() && p.g.head_blocks_per_kv % 2 == 0) run(std::true_type{});
  else run(std::false_type{});
  LKV_CUDA_CHECK_LAUNCH();
}

}  // namespace latentkv::decode::sm90
