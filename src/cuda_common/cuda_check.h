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
