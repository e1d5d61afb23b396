// decode/sm90/launch.h: the Hopper sparse decode kernel's host entry points (declarations only, no
// CUDA headers). decode/cuda/decode.cu chooses between this kernel and the portable one.
#pragma once

#include "decode/cuda/attend_params.h"
#include "latentkv/formats.h"
#include "latentkv/tensor.h"

namespace latentkv::decode::cuda {
struct SparseArgs;
}

namespace latentkv::decode::sm90 {

// Whether `device` can run the kernel: compute capability 9.0 (the sm_90a code) and room for its
// shared memory.
bool usable(int device);

// Launches the kernel for format F (v32_fp8 or v4_fp8) on `stream`; the caller runs the combine when
// p.g.num_splits > 1. No host synchronisation.
template <CacheFormat F>
void launch(const cuda::KernelParams<cuda::SparseArgs>& p, Stream stream);

}  // namespace latentkv::decode::sm90
