// decode/compact/launch.cuh: the launch of the compact attention kernel for one Source (included by
// decode/cuda/attend_launch.cuh, so each op's instantiation file compiles it for its Source).
#pragma once

#include "cuda_common/cuda_check.h"
#include "cuda_common/device_cache.h"
#include "cuda_common/pdl.cuh"
#include "decode/compact/kernel.cuh"
#include "decode/cuda/launch.h"
#include "latentkv/error.h"

namespace latentkv::decode::compact {

// The main kernel only; the caller runs the combine when p.g.num_splits > 1 (the partials are laid
// out as the portable kernel's). No host synchronisation.
template <class Source>
void launch_attend(const KernelParams<typename Source::Args>& p, Stream stream) {
  constexpr int kSmem = Layout<Source::kDqk, Source::kStorage == KeyStorage::kDirect16>::total;
  int device = 0;
  LKV_CUDA_CHECK(cudaGetDevice(&device));
  const int smem_limit = cuda_common::max_smem_per_block(device);
  LKV_CHECK(smem_limit >= kSmem, "the compact CUDA attention kernel needs ", kSmem,
            " bytes of shared memory per block and device ", device, " allows ", smem_limit);
  const int64_t rows = cuda::row_groups(p.g);
  const int64_t ys = p.g.kv_heads * p.g.head_blocks_per_kv * slice_count(p.g);
  LKV_CHECK(rows <= 0x7fffffff && ys <= 65535 && p.g.num_splits <= 65535,
            "the compact CUDA attention kernel's grid takes at most 2^31 - 1 row groups, 65535 16-row head "
            "slices and 65535 splits, got ", rows, " row groups, ", ys, " head slices, ", p.g.num_splits, " splits");
  LKV_CUDA_CHECK(cudaFuncSetAttribute(attend_kernel<Source>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(rows), static_cast<unsigned>(ys), static_cast<unsigned>(p.g.num_splits));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmem;
  config.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[1];
  if (cuda::attend_launch_pdl(p.g, device)) {
    attr[0] = cuda_common::pdl_attribute();
    config.attrs = attr;
    config.numAttrs = 1;
  }
  LKV_CUDA_CHECK(cudaLaunchKernelEx(&config, attend_kernel<Source>, p));
  LKV_CUDA_CHECK_LAUNCH();
}

}  // namespace latentkv::decode::compact
