// Per-device state of the CUDA backends (see device_cache.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "cuda_common/cuda_check.h"
#include "cuda_common/device_cache.h"

namespace latentkv::cuda_common {

namespace {

// A device attribute, queried once per (attribute, device).
int cached_attribute(cudaDeviceAttr attr, int device) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, int> values;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(static_cast<int>(attr), device);
  auto it = values.find(key);
  if (it != values.end()) return it->second;
  int n = 0;
  LKV_CUDA_CHECK(cudaDeviceGetAttribute(&n, attr, device));
  values[key] = n;
  return n;
}

// Built with the same -gencode flags as every kernel of the library: the code the driver picks for
// it on a device is the code it picks for them.
__global__ void probe_kernel() {}

}  // namespace

int ptx_version(int device) {
  static std::mutex mu;
  static std::map<int, int> versions;
  std::lock_guard<std::mutex> lock(mu);
  auto it = versions.find(device);
  if (it != versions.end()) return it->second;
  int current = 0;
  LKV_CUDA_CHECK(cudaGetDevice(&current));
  LKV_CUDA_CHECK(cudaSetDevice(device));
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, probe_kernel);
  LKV_CUDA_CHECK(cudaSetDevice(current));
  LKV_CUDA_CHECK(err);
  versions[device] = attr.ptxVersion;
  return attr.ptxVersion;
}

int sm_count(int device) { return cached_attribute(cudaDevAttrMultiProcessorCount, device); }

int max_smem_per_block(int device) {
  return cached_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
}

int compute_capability(int device) {
  return 10 * cached_attribute(cudaDevAttrComputeCapabilityMajor, device) +
         cached_attribute(cudaDevAttrComputeCapabilityMinor, device);
}

void* cached_buffer(BufferPurpose purpose, size_t bytes, int device, Stream stream) {
  static std::mutex mu;
  static std::map<std::tuple<BufferPurpose, int, Stream>, std::pair<void*, size_t>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& entry = cache[{purpose, device, stream}];
  bytes = std::max<size_t>(bytes, 1);
  if (entry.second < bytes) {
    // Growing allocates (and may synchronise and free), which a stream being captured into a CUDA
    // graph does not allow; say so rather than failing inside the capture with a runtime error.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    LKV_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &capture));
    LKV_CHECK(capture == cudaStreamCaptureStatusNone,
              "latentkv needs ", bytes, " bytes of scratch on this stream and has ", entry.second,
              ", but the stream is being captured into a CUDA graph, where it cannot allocate: run "
              "the same call once on the capturing stream before the capture, or pass a workspace "
              "where the op takes one");
    const size_t grown = std::max(bytes, entry.second * 2);  // doubling: few reallocations
    if (entry.first) {
      LKV_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
      LKV_CUDA_CHECK(cudaFree(entry.first));
      entry = {nullptr, 0};
    }
    LKV_CUDA_CHECK(cudaMalloc(&entry.first, grown));
    // On the caller's stream, so that work it enqueues next sees the zeros (a legacy-stream memset
    // is not ordered with non-blocking streams).
    LKV_CUDA_CHECK(cudaMemsetAsync(entry.first, 0, grown, static_cast<cudaStream_t>(stream)));
    entry.second = grown;
  }
  return entry.first;
}

}  // namespace latentkv::cuda_common
