// decode/sm90/launch.cuh: the launch of the Hopper attention kernel for one Source (included by
// decode/cuda/attend_launch.cuh, so each op's instantiation file compiles both kernels for its Source).
#pragma once

#include "cuda_common/cuda_check.h"
#include "decode/sm90/kernel.cuh"
#include "decode/sm90/launch.h"
#include "latentkv/error.h"

namespace latentkv::decode::sm90 {

// The main kernel only; the caller runs the combine when p.g.num_splits > 1. No host
// synchronisation.
template <class Source>
void launch_attend(const cuda::KernelParams<typename Source::Args>& p, Stream stream) {
  constexpr int kSmem = Layout<Source::kDqk>::total;
  const int64_t rows = p.g.n1 * p.g.n2, blocks = rows * p.g.kv_heads * p.g.head_blocks_per_kv;
  LKV_CHECK(blocks <= 0x7fffffff && p.g.num_splits <= 65535,
            "the sm_90 attention kernel's grid takes at most 2^31 - 1 (row, head block) pairs and "
            "65535 splits, got ", rows, " rows x ", p.g.kv_heads * p.g.head_blocks_per_kv,
            " head blocks, ", p.g.num_splits, " splits");
  LKV_CUDA_CHECK(cudaFuncSetAttribute(attend_kernel<Source>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.g.num_splits));
  attend_kernel<Source><<<grid, kThreads, kSmem, static_cast<cudaStream_t>(stream)>>>(p);
  LKV_CUDA_CHECK_LAUNCH();
}

}  // namespace latentkv::decode::sm90
