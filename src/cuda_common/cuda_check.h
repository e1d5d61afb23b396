// CUDA error checking for the CUDA backend: every runtime call and every launch goes through these.
#pragma once

#include <cuda_runtime.h>

#include "latentkv/error.h"

#define LKV_CUDA_CHECK(expr)                                                                     \
  do {                                                                                           \
    cudaError_t lkv_err_ = (expr);                                                               \
    if (lkv_err_ != cudaSuccess)                                                                 \
      LKV_FAIL(::latentkv::ErrorKind::kRuntime, "CUDA error ", cudaGetErrorName(lkv_err_), " (", \
               cudaGetErrorString(lkv_err_), ") in ", #expr);                                    \
  } while (0)

// After a <<<>>> launch: reports configuration errors at once (asynchronous faults surface at the
// next synchronising call, which is checked too).
#define LKV_CUDA_CHECK_LAUNCH() LKV_CUDA_CHECK(cudaGetLastError())

namespace latentkv::cuda_common {

// Makes `device` current for the scope and restores the caller's device after, so an op runs (and
// allocates) on the device of its tensors whatever device the caller had current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    LKV_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) LKV_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace latentkv::cuda_common
