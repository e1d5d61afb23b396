// decode/sm90/launch.h: whether a device runs the Hopper attention kernel (declarations only, no CUDA
// headers). decode/cuda/attend_launch.cuh chooses between it and the portable kernel.
#pragma once

namespace latentkv::decode::sm90 {

// Whether `device` can run the kernel: compute capability 9.0 (the sm_90a code) and room for its
// shared memory.
bool usable(int device);

}  // namespace latentkv::decode::sm90
