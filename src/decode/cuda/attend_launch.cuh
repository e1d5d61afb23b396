// decode/cuda/attend_launch.cuh: launching the shared attention kernel for a Source, then (with
// splits) the combine kernel. Included by each op's instantiation files, one Source per file so
// they compile in parallel.
#pragma once

#include "cuda_common/cuda_check.h"
#include "decode/cuda/kernel.cuh"
#include "latentkv/tensor.h"

namespace latentkv::decode::cuda {

// Merges the splits' partial results by LSE (combine.cu). out is f16 when f16, else bf16.
void launch_combine(const Geometry& g, const OutRef& o, bool f16, Stream stream);

template <class Source>
void launch_attend(const KernelParams<typename Source::Args>& p, Stream stream) {
  constexpr int kSmem = SmemLayout<Source::kDqk, Source::kStorage == KeyStorage::kDirect16>::total;
  // Set on every launch: the attribute belongs to the current device, and setting it is cheap.
  LKV_CUDA_CHECK(cudaFuncSetAttribute(attend_kernel<Source>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(p.g.n1 * p.g.n2),
                  static_cast<unsigned>(p.g.kv_heads * p.g.head_blocks_per_kv),
                  static_cast<unsigned>(p.g.num_splits));
  attend_kernel<Source><<<grid, kThreads, kSmem, static_cast<cudaStream_t>(stream)>>>(p);
  LKV_CUDA_CHECK_LAUNCH();
  if (p.g.num_splits > 1) launch_combine(p.g, p.o, Source::kF16, stream);
}

}  // namespace latentkv::decode::cuda
