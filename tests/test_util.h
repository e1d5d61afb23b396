// tests/test_util.h: small helpers shared by the C++ test suites.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "latentkv/error.h"
#include "latentkv/tensor.h"

namespace latentkv::testing {

// The message of the latentkv::Error that f throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// lse [b, h_q, s_q] read from a buffer of any strides (`got`, element (i, h, j) at
// i * strides[0] + h * strides[1] + j * strides[2]) against a contiguous reference: "" when every
// element has the reference's bits, else the first (i, h, j) that differs.
inline std::string lse_layout_mismatch(const std::vector<float>& got, const std::vector<int64_t>& strides,
                                       const std::vector<float>& ref, int64_t b, int64_t h_q, int64_t s_q) {
  for (int64_t i = 0; i < b; ++i)
    for (int64_t h = 0; h < h_q; ++h)
      for (int64_t j = 0; j < s_q; ++j)
        if (std::memcmp(&got[static_cast<size_t>(i * strides[0] + h * strides[1] + j * strides[2])],
                        &ref[static_cast<size_t>((i * h_q + h) * s_q + j)], sizeof(float)) != 0)
          return "request " + std::to_string(i) + " head " + std::to_string(h) + " token " + std::to_string(j);
  return "";
}

// The byte offset past which the far-record tests place their data: beyond 2^32, so that any
// offset computed in 32 bits (signed or not) lands elsewhere.
inline constexpr size_t kFarOffsetBytes = size_t{9} << 29;  // 4.5 GiB

// Rows (pages, blocks) of `row_bytes` bytes to skip so that data placed after them starts past
// kFarOffsetBytes.
inline int64_t far_rows(int64_t row_bytes) { return static_cast<int64_t>(kFarOffsetBytes) / row_bytes + 1; }

// Entries in [0, count) (indices, block-table entries) moved up by `by`; the others stay.
inline void shift_valid(std::vector<int32_t>& v, int64_t count, int64_t by) {
  for (int32_t& x : v)
    if (x >= 0 && x < count) x = static_cast<int32_t>(x + by);
}

// A zero-filled host allocation of `bytes` bytes, for views whose records lie past 4 GiB: calloc
// takes a block this large straight from the system, whose pages are mapped (as zeros) only when
// touched, so only the pages a test writes or a backend reads cost memory. get() is null when the
// allocation fails.
class LazyHostBuffer {
 public:
  explicit LazyHostBuffer(size_t bytes) : p_(static_cast<unsigned char*>(std::calloc(bytes, 1))), n_(bytes) {}
  ~LazyHostBuffer() { std::free(p_); }
  LazyHostBuffer(const LazyHostBuffer&) = delete;
  LazyHostBuffer& operator=(const LazyHostBuffer&) = delete;
  unsigned char* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  unsigned char* p_;
  size_t n_;
};

// The values of the contiguous view t under every stride doubled (the last one 2), in `store`,
// whose bytes between the elements are `fill`: valid memory for the whole view, but not contiguous
// in its last dimension, which the ops refuse by name.
inline TensorView doubled_strides(const TensorView& t, std::vector<uint8_t>& store, uint8_t fill = 0) {
  const size_t elem = dtype_size(t.dtype);
  const int64_t n = t.numel();
  store.assign(static_cast<size_t>(2 * n) * elem, fill);
  for (int64_t k = 0; k < n; ++k)
    std::memcpy(store.data() + 2 * k * elem, static_cast<const uint8_t*>(t.data) + k * elem, elem);
  std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.ndim), strides(t.ndim);
  for (int d = 0; d < t.ndim; ++d) strides[d] = 2 * t.stride(d);
  return TensorView(store.data(), t.dtype, shape, strides, t.device);
}

// Calls `call` with args.*member replaced by its doubled_strides view: "" when the error names it
// ("NAME must be contiguous in its last dimension, got stride 2") and the view's own bytes stay as
// they were, else what happened instead.
template <class Args>
std::string refuses_doubled_strides(Args args, TensorView Args::*member, const std::string& name,
                                    const std::function<void(const Args&)>& call) {
  if (!(args.*member).is_contiguous()) return name + " is not contiguous to begin with";
  std::vector<uint8_t> store;
  args.*member = doubled_strides(args.*member, store, 0xa5);
  const std::vector<uint8_t> before = store;
  const std::string msg = error_of([&] { call(args); });
  if (msg.find(name + " must be contiguous in its last dimension, got stride 2") == std::string::npos)
    return name + ": got \"" + msg + "\"";
  return store == before ? "" : name + ": the strided view was written";
}

}  // namespace latentkv::testing
