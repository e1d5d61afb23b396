// decode/sm90/launch.h: whether a device runs the Hopper attention kernel (declarations only, no CUDA
// headers). decode/cuda/attend_launch.cuh chooses between it and the portable kernel.
#pragma once

namespace latentkv::decode::sm90 {

// Whether `device` can run the kernel: compute capability 9.0 (the sm_90a code) and room for its
// shared memory.
bool usable(int device);

// Whether the two head blocks of a query row run as a CTA pair (a cluster of two CTAs, each
// dequantizing half of every block for both): on by default wherever the Source dequantizes and
// the row has an even number of 64-head blocks. LKV_SM90_PAIR=0 in the environment or
// set_cta_pairs(false) turns it off, to compare the two (the results are bitwise identical).
bool cta_pairs();
void set_cta_pairs(bool on);

}  // namespace latentkv::decode::sm90
