// latentkv/tensor.h: dtypes, devices and the non-owning TensorView every op takes.
//
// A TensorView is a pointer plus dtype, device, shape and strides (in elements). It owns nothing;
// callers keep the memory alive. Ops validate views with check_tensor(), whose messages read
// "expected q of shape [b, s_q, h_q, 576] bf16, got [2, 1, 64, 512] bf16".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace latentkv {

enum class DType : uint8_t { f32, f16, bf16, i8, u8, i32, i64, e4m3, e8m0 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);

struct Device {
  enum class Kind : uint8_t { cpu, cuda } kind = Kind::cpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static Device cpu() { return {}; }
  static Device cuda(int i = 0) { return {Kind::cuda, i}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;  // "cpu" or "cuda:N"
};

// Parses "cpu", "cuda", "cuda:N"; throws on anything else.
Device parse_device(const std::string& s);

// Opaque CUDA stream (cudaStream_t); nullptr is the legacy default stream. Kept as void* so the
// public headers never need the CUDA headers.
using Stream = void*;

struct TensorView {
  static constexpr int kMaxDims = 6;

  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> strides{};  // in elements

  TensorView() = default;
  // Contiguous (row-major) view.
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = {});
  TensorView(void* data, DType dtype, const std::vector<int64_t>& shape, Device device = {});
  // Explicitly strided view.
  TensorView(void* data, DType dtype, const std::vector<int64_t>& shape,
             const std::vector<int64_t>& strides, Device device = {});

  int64_t size(int dim) const { return shape[dim < 0 ? dim + ndim : dim]; }
  int64_t stride(int dim) const { return strides[dim < 0 ? dim + ndim : dim]; }
  int64_t numel() const;  // INT64_MAX where the product does not fit (check_tensor refuses such shapes)
  bool defined() const { return data != nullptr || numel() == 0; }
  bool is_contiguous() const;
  // The start and every outer stride (of dimensions longer than 1; the innermost is not looked at)
  // are multiples of `bytes`: rows can be moved with accesses that wide.
  bool rows_aligned(int64_t bytes) const;
  // "address % bytes = r, strides [..] x e bytes": what rows_aligned looked at, for messages.
  std::string alignment_str(int64_t bytes) const;
  std::string shape_str() const;  // "[2, 1, 64, 512] bf16"

  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
};

// One expected dimension: a fixed size or a named free size. Named sizes that appear twice in one
// call (or across calls sharing a SizeEnv) must agree.
struct Dim {
  int64_t value = -1;    // >= 0: must equal; -1: free
  const char* name = "";  // for messages and binding

  Dim(int64_t v) : value(v) {}  // NOLINT(google-explicit-constructor): lets {b, 576} read naturally
  Dim(const char* n) : name(n) {}  // NOLINT(google-explicit-constructor)
};

// Collects the sizes bound to names while checking several tensors of one call.
class SizeEnv {
 public:
  // Returns the size bound to name, or -1.
  int64_t get(const std::string& name) const;
  void bind(const std::string& name, int64_t v);
  bool has(const std::string& name) const { return get(name) >= 0; }

 private:
  std::vector<std::pair<std::string, int64_t>> sizes_;
};

// Checks rank, sizes, dtype and (when device is given) the device of t; throws Error naming the
// tensor, the expected shape and what was given. Binds free named dims into env.
void check_tensor(const TensorView& t, const char* name, std::initializer_list<Dim> dims,
                  DType dtype, SizeEnv& env);

// Same, for a device that every tensor of the op must share.
void check_device(const TensorView& t, const char* name, const Device& device);

// Throws unless the innermost dimension is contiguous (stride 1) or has size 1.
void check_inner_contiguous(const TensorView& t, const char* name);

// Throws, naming the strides, unless every element of an output has an address of its own: taken
// by increasing |stride|, each dimension of size > 1 must step past everything the smaller ones
// span. (Sufficient, not necessary: a few interleaved layouts with distinct elements are refused
// too.) Two elements at one address would be written by two threads in an unspecified order. For
// a view that check_tensor has passed (its span fits int64).
void check_distinct_elements(const TensorView& t, const char* name);

// Throws, naming both, if an output's byte range meets an input's or another output's on the same
// device (ranges from each view's extreme elements, so interleaved views count as overlapping). The
// ops read their index inputs again while writing: an output over them would redirect the writes.
void check_no_overlap(std::initializer_list<std::pair<const TensorView*, const char*>> outputs,
                      std::initializer_list<std::pair<const TensorView*, const char*>> inputs, const char* op);

}  // namespace latentkv
