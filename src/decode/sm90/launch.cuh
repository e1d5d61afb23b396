// decode/sm90/launch.cuh: the launch of the Hopper sparse decode kernel for one format (included by
// v32_fp8.cu and v4_fp8.cu, one format per file so they compile in parallel).
#pragma once

#include "cuda_common/cuda_check.h"
#include "decode/sm90/kernel.cuh"
#include "decode/sm90/launch.h"
#include "latentkv/error.h"

namespace latentkv::decode::sm90 {

template <CacheFormat F>
void launch_format(const cuda::KernelParams<cuda::SparseArgs>& p, Stream stream) {
  constexpr int kSmem = Layout<SparseSource<F>::kDqk>::total;
  const int64_t rows = p.g.n1 * p.g.n2, blocks = rows * p.g.head_blocks_per_kv;
  LKV_CHECK(blocks <= 0x7fffffff && p.g.num_splits <= 65535,
            "the sm_90 decode kernel's grid takes at most 2^31 - 1 (row, head block) pairs and 65535 "
            "splits, got ", rows, " rows x ", p.g.head_blocks_per_kv, " head blocks, ",
            p.g.num_splits, " splits");
  LKV_CUDA_CHECK(cudaFuncSetAttribute(sparse_decode_kernel<F>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(p.g.num_splits));
  sparse_decode_kernel<F><<<grid, kThreads, kSmem, static_cast<cudaStream_t>(stream)>>>(p);
  LKV_CUDA_CHECK_LAUNCH();
}

}  // namespace latentkv::decode::sm90
