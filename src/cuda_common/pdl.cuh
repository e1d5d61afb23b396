// cuda_common/pdl.cuh: programmatic dependent launch (PDL, compute capability 9.0+).
// A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may be scheduled before
// the kernel ahead of it in the stream has finished: once every CTA of that kernel has executed
// griddepcontrol.launch_dependents or exited, whether or not that kernel was itself launched with the
// attribute. griddepcontrol.wait blocks the calling thread until the kernel ahead has completed and
// its memory operations are visible (PTX ISA, griddepcontrol); in a kernel launched without the
// attribute there is nothing to wait for. Both are compiled out below sm_90 (the instructions do not
// exist there): a kernel built that way must never be launched with the attribute, which is why the
// host asks which code the device runs (cuda_common::ptx_version), not what the device is.
// Observed on the H200 (bench/NOTES.md v30, not a documented rule): the dependent grid's CTAs started
// only on SMs where no CTA of the grid ahead was resident, so an early trigger from a grid that
// occupies every SM lets nothing start before its CTAs exit.
#pragma once

#include <cuda_runtime.h>

namespace latentkv::cuda_common {

// The launch attribute that makes a launch programmatically dependent on the one ahead of it.
inline cudaLaunchAttribute pdl_attribute() {
  cudaLaunchAttribute a = {};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}

// Lets the next kernel in the stream, if it was launched with PDL, be scheduled.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Waits until the kernel ahead in the stream (when this one was launched with PDL) has completed
// and its writes are visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// pdl_wait when the owning scope ends, whichever return ends it: a kernel that reads nothing the
// kernel ahead writes, but must not complete before it (so that stream order holds for whatever
// follows both), declares one of these first.
struct PdlWaitAtExit {
  __device__ __forceinline__ ~PdlWaitAtExit() { pdl_wait(); }
};

}  // namespace latentkv::cuda_common
