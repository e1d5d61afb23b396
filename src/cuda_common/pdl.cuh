// cuda_common/pdl.cuh: programmatic dependent launch (PDL, compute capability 9.0+), device side.
// A kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization may start before the
// kernel ahead of it in the stream has finished: once every CTA of that kernel has executed
// griddepcontrol.launch_dependents (or exited). griddepcontrol.wait then blocks the calling thread
// until the kernel ahead has completed and its memory operations are visible (PTX ISA,
// griddepcontrol). Both instructions are no-ops in a kernel that was launched without the attribute,
// so the kernels call them unconditionally; the host decides per launch (pdl_launches_allowed).
// Compiled out below sm_90 (the instructions do not exist there): a kernel built that way must never
// be launched with the attribute, which is why the host asks the built code, not the device.
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
