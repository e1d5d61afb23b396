// tests/cuda/device_buffer.h: a minimal owning device buffer for the CUDA tests (cudaMalloc only).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "decode/cuda/config.h"
#include "latentkv/tensor.h"
#include "test_util.h"  // kFarOffsetBytes

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

// A device allocation of `bytes` bytes, each set to `fill`, for views whose records lie past 4 GiB
// (the tests that check 64-bit addressing); get() is null when the device lacks the memory.
class DeviceArena {
 public:
  DeviceArena(size_t bytes, uint8_t fill) : n_(bytes) {
    if (cudaMalloc(&ptr_, bytes) != cudaSuccess) {
      ptr_ = nullptr;
      cudaGetLastError();  // clear the allocation error for the calls that follow
      return;
    }
    if (cudaMemset(ptr_, fill, bytes) != cudaSuccess) {
      cudaFree(ptr_);
      ptr_ = nullptr;
    }
  }
  ~DeviceArena() { if (ptr_) cudaFree(ptr_); }
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }
  size_t size() const { return n_; }
  // Whether every byte still holds `fill` (a refused call's outputs).
  bool all(uint8_t fill) const {
    std::vector<uint8_t> h(n_);
    if (!ptr_ || cudaMemcpy(h.data(), ptr_, n_, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
    for (uint8_t x : h)
      if (x != fill) return false;
    return true;
  }

 private:
  void* ptr_ = nullptr;
  size_t n_ = 0;
};

// t's shape and strides over other bytes (a test's own buffer for one argument).
inline TensorView view_at(TensorView t, void* data) {
  t.data = data;
  return t;
}

// `bytes` of host data copied into `arena` after `skip` rows (pages, blocks) of `row_bytes`, and
// `view` (rows along its first dimension) made to cover the arena up to the data's last row.
inline bool place_far(const DeviceArena& arena, const void* host, size_t bytes, int64_t row_bytes, int64_t skip,
                      latentkv::TensorView& view) {
  const size_t at = static_cast<size_t>(skip) * static_cast<size_t>(row_bytes);
  if (!arena.get() || at + bytes > arena.size()) return false;
  if (cudaMemcpy(arena.get() + at, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) return false;
  view.data = arena.get();
  view.device = latentkv::Device::cuda(0);
  view.shape[0] += skip;
  return true;
}

// Rows of a query, output or statistics tensor on the device spread out so that row k starts
// k x kFarOffsetBytes into an arena (filled with 0xff): a first-dimension stride of
// kFarOffsetBytes / sizeof(T) elements. ok() is false when the device lacks the memory.
class DeviceSpreadRows {
 public:
  DeviceSpreadRows(int64_t rows, size_t row_bytes)
      : arena_(static_cast<size_t>(rows - 1) * kFarOffsetBytes + row_bytes, 0xff), rows_(rows), row_bytes_(row_bytes) {}
  bool ok() const { return arena_.get() != nullptr; }
  uint8_t* row(int64_t k) const { return arena_.get() + static_cast<size_t>(k) * kFarOffsetBytes; }
  // Row k from `src` (rows of row_bytes back to back on the host).
  bool put(const void* src) const {
    for (int64_t k = 0; k < rows_; ++k)
      if (cudaMemcpy(row(k), static_cast<const uint8_t*>(src) + k * row_bytes_, row_bytes_, cudaMemcpyHostToDevice) !=
          cudaSuccess)
        return false;
    return true;
  }
  template <typename T>
  std::vector<T> gather() const {
    std::vector<T> v(static_cast<size_t>(rows_) * row_bytes_ / sizeof(T));
    for (int64_t k = 0; k < rows_; ++k)
      cudaMemcpy(reinterpret_cast<uint8_t*>(v.data()) + k * row_bytes_, row(k), row_bytes_, cudaMemcpyDeviceToHost);
    return v;
  }
  // A device view of `shape`: the first dimension strided as above, the rest contiguous.
  template <typename T>
  latentkv::TensorView view(latentkv::DType dtype, std::vector<int64_t> shape) const {
    std::vector<int64_t> strides(shape.size(), 1);
    for (size_t d = shape.size() - 1; d-- > 1;) strides[d] = strides[d + 1] * shape[d + 1];
    strides[0] = static_cast<int64_t>(kFarOffsetBytes / sizeof(T));
    return latentkv::TensorView(arena_.get(), dtype, shape, strides, latentkv::Device::cuda(0));
  }

 private:
  DeviceArena arena_;
  int64_t rows_;
  size_t row_bytes_;
};

inline bool has_cuda_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Whether device 0 can run the portable attention kernel's largest layout (v32_fp8 records, one
// key tile): not on 99 KB parts, which run the compact kernel instead.
inline bool portable_kernel_fits() {
  int bytes = 0;
  return cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) == cudaSuccess &&
         bytes >= latentkv::decode::cuda::SmemLayout<576, false>::total;
}

// The kernels of `all` that LKV_TEST_KERNELS (a comma-separated list of portable, compact, sm90)
// names, or all of them when it is unset: sanitizer runs take one kernel at a time.
template <class Choice>
std::vector<Choice> only_listed_kernels(const std::vector<Choice>& all) {
  const char* env = std::getenv("LKV_TEST_KERNELS");
  if (!env || !*env) return all;
  const std::string list = std::string(",") + env + ",";
  std::vector<Choice> kept;
  for (Choice k : all) {
    const char* name = k == Choice::kSm90 ? "sm90" : k == Choice::kCompact ? "compact" : "portable";
    if (list.find(std::string(",") + name + ",") != std::string::npos) kept.push_back(k);
  }
  return kept;
}

}  // namespace latentkv::testing
