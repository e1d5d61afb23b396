// tests/cuda/switches.h: restores one of the CUDA kernels' process-wide switches (a getter and a
// setter, e.g. decode::cuda::roles_allowed / set_roles_allowed) when a test ends, so that a test
// that flips it leaves the value it found for the tests after it; and whether the portable
// kernel's overlapped layout runs here (overlapped_quantized_layout).
#pragma once

#include "cuda_common/device_cache.h"
#include "decode/cuda/config.h"
#include "decode/cuda/launch.h"

namespace latentkv::testing {

// Whether the portable kernel takes its overlapped layout for quantized keys on device 0 (the
// switch on, and room for two 576-wide key tiles beside the staging buffers): the only layout in
// which warps 4-7 share the value products (kernel.cuh, kShareV), so tests comparing sharing on
// and off skip elsewhere rather than compare a kernel with itself.
inline bool overlapped_quantized_layout() {
  return decode::cuda::wide_layout_allowed() &&
         cuda_common::max_smem_per_block(0) >= decode::cuda::SmemLayout<576, false, true>::total;
}

template <typename T>
class RestoreSwitch {
 public:
  RestoreSwitch(T (*get)(), void (*set)(T)) : set_(set), was_(get()) {}
  ~RestoreSwitch() { set_(was_); }
  RestoreSwitch(const RestoreSwitch&) = delete;
  RestoreSwitch& operator=(const RestoreSwitch&) = delete;

 private:
  void (*set_)(T);
  T was_;
};

}  // namespace latentkv::testing
