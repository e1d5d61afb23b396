// tests/cuda/device_buffer.h: a minimal owning device buffer for the CUDA tests (cudaMalloc only).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace latentkv::testing {

#define LKV_TEST_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(const std::vector<T>& host) { upload(host); }
  ~DeviceBuffer() { if (ptr_) cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Same size: copies into the existing allocation (pointers captured in a graph stay valid).
  void upload(const std::vector<T>& host) {
    if (ptr_ && n_ == host.size()) {
      if (n_) cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice);
      return;
    }
    if (ptr_) cudaFree(ptr_);
    n_ = host.size();
    ptr_ = nullptr;
    if (cudaMalloc(&ptr_, std::max<size_t>(1, n_) * sizeof(T)) != cudaSuccess) ptr_ = nullptr;
    if (ptr_ && n_) cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    if (n_) cudaMemcpy(h.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
  T* get() const { return ptr_; }
  size_t size() const { return n_; }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

inline bool has_cuda_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace latentkv::testing
