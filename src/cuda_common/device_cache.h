// cuda_common/device_cache.h: what the CUDA backends keep per device (declarations only, no CUDA
// headers): the multiprocessor count, and grow-only device buffers cached per (purpose, device,
// stream) so that steady-state calls allocate nothing.
#pragma once

#include <cstddef>

#include "latentkv/tensor.h"

namespace latentkv::cuda_common {

// The device's multiprocessor count (queried once per device).
int sm_count(int device);

// The most shared memory one block may opt in to, in bytes (queried once per device).
int max_smem_per_block(int device);

// 10 * major + minor (90 for H100/H200), queried once per device.
int compute_capability(int device);

// The PTX architecture of the code the driver runs on `device` for kernels built with the library's
// -gencode flags (90 for the sm_90a machine code; 80 when it compiles the compute_80 PTX instead, as
// under CUDA_FORCE_PTX_JIT=1, on GPUs newer than Hopper, or with a build whose LKV_CUDA_GENCODE has
// no sm_90a), queried once per device. Code that needs sm_90 instructions (griddepcontrol, wgmma)
// asks this, not the compute capability.
int ptx_version(int device);

// What a cached buffer is for; each purpose has its own buffer per (device, stream).
enum class BufferPurpose { kCompressScratch, kCompressCounters, kDecodeScratch };

// At least `bytes` of device memory for (purpose, device, stream). A buffer grows by reallocation
// (after waiting for the stream, which may still use the old one) and is zero-filled whenever it is
// (re)allocated; callers that need it zero later keep it so themselves.
void* cached_buffer(BufferPurpose purpose, size_t bytes, int device, Stream stream);

}  // namespace latentkv::cuda_common
