// Core types: dtype names and sizes, devices, TensorView helpers and the shape checker.
#include "latentkv/error.h"
#include "latentkv/tensor.h"

#include <utility>

namespace latentkv {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::i8: case DType::u8: case DType::e4m3: case DType::e8m0: return 1;
    case DType::i64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::e4m3: return "e4m3";
    case DType::e8m0: return "e8m0";
  }
  return "?";
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    const std::string n = s.substr(5);
    // At most 9 digits, so that std::stoi cannot throw its own out_of_range.
    LKV_CHECK(!n.empty() && n.size() <= 9 && n.find_first_not_of("0123456789") == std::string::npos,
              "bad device '", s, "': expected cpu, cuda or cuda:N");
    return Device::cuda(std::stoi(n));
  }
  LKV_FAIL(ErrorKind::kValue, "bad device '", s, "': expected cpu, cuda or cuda:N");
}

namespace {
// Row-major strides. A stride past int64 (a shape whose element count check_tensor refuses) is
// INT64_MAX rather than a wrapped product, which would be undefined behaviour to form.
void fill_contiguous(TensorView& t) {
  int64_t s = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.strides[i] = s;
    if (i > 0 && __builtin_mul_overflow(s, t.shape[i], &s)) s = INT64_MAX;
  }
}
}  // namespace

TensorView::TensorView(void* d, DType dt, std::initializer_list<int64_t> shp, Device dev)
    : TensorView(d, dt, std::vector<int64_t>(shp), dev) {}

TensorView::TensorView(void* d, DType dt, const std::vector<int64_t>& shp, Device dev)
    : data(d), dtype(dt), device(dev) {
  LKV_CHECK(static_cast<int>(shp.size()) <= kMaxDims, "tensor rank ", shp.size(), " > ", kMaxDims);
  ndim = static_cast<int>(shp.size());
  for (int i = 0; i < ndim; ++i) shape[i] = shp[i];
  fill_contiguous(*this);
}

TensorView::TensorView(void* d, DType dt, const std::vector<int64_t>& shp,
                       const std::vector<int64_t>& str, Device dev)
    : data(d), dtype(dt), device(dev) {
  LKV_CHECK(shp.size() == str.size(), "shape rank ", shp.size(), " != strides rank ", str.size());
  LKV_CHECK(static_cast<int>(shp.size()) <= kMaxDims, "tensor rank ", shp.size(), " > ", kMaxDims);
  ndim = static_cast<int>(shp.size());
  for (int i = 0; i < ndim; ++i) {
    shape[i] = shp[i];
    strides[i] = str[i];
  }
}

int64_t TensorView::numel() const {
  // A zero dimension first: the product of the others may not fit (check_tensor refuses shapes
  // whose element count overflows, but an empty one is fine).
  for (int i = 0; i < ndim; ++i)
    if (shape[i] == 0) return 0;
  // (Saturated, not wrapped, for a shape check_tensor would refuse.)
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i)
    if (__builtin_mul_overflow(n, shape[i], &n)) return INT64_MAX;
  return n;
}

namespace {

// The first and last byte offsets [lo, hi] a non-empty view reaches relative to its data pointer,
// or false when they do not fit in int64 (strides no allocation can have: forming them unchecked
// would be undefined behaviour, and a kernel's 64-bit addressing would wrap).
bool byte_span(const TensorView& t, int64_t& lo, int64_t& hi) {
  const int64_t elem = static_cast<int64_t>(dtype_size(t.dtype));
  lo = 0;
  hi = 0;
  for (int i = 0; i < t.ndim; ++i) {
    int64_t span = 0;
    if (__builtin_mul_overflow(t.shape[i] - 1, t.strides[i], &span) ||
        __builtin_mul_overflow(span, elem, &span) ||
        __builtin_add_overflow(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi))
      return false;
  }
  return !__builtin_add_overflow(hi, elem - 1, &hi);
}

// The bytes [first, last] a view can touch (false for an empty or null view). Views whose span
// overflows are refused by name.
bool byte_extent(const TensorView& t, const char* name, uintptr_t& first, uintptr_t& last) {
  if (t.data == nullptr || t.numel() == 0) return false;
  int64_t lo = 0, hi = 0;
  LKV_CHECK(byte_span(t, lo, hi), name, " ", t.shape_str(), " has strides whose byte span overflows int64");
  first = reinterpret_cast<uintptr_t>(t.data) + static_cast<uintptr_t>(lo);
  last = reinterpret_cast<uintptr_t>(t.data) + static_cast<uintptr_t>(hi);
  return true;
}

}  // namespace

void check_no_overlap(std::initializer_list<std::pair<const TensorView*, const char*>> outputs,
                      std::initializer_list<std::pair<const TensorView*, const char*>> inputs, const char* op) {
  for (auto o = outputs.begin(); o != outputs.end(); ++o) {
    uintptr_t o_first = 0, o_last = 0;
    if (!byte_extent(*o->first, o->second, o_first, o_last)) continue;
    auto clash = [&](const std::pair<const TensorView*, const char*>& other) {
      uintptr_t first = 0, last = 0;
      if (!(other.first->device == o->first->device) || !byte_extent(*other.first, other.second, first, last)) return;
      LKV_CHECK(last < o_first || o_last < first, op, ": ", o->second, " overlaps ", other.second,
                " in memory (", o->second, " bytes [", reinterpret_cast<const void*>(o_first), ", ",
                reinterpret_cast<const void*>(o_last), "], ", other.second, " bytes [",
                reinterpret_cast<const void*>(first), ", ", reinterpret_cast<const void*>(last),
                "]): outputs may not share memory with the inputs or with each other");
    };
    for (const auto& in : inputs) clash(in);
    for (auto later = o + 1; later != outputs.end(); ++later) clash(*later);
  }
}

bool TensorView::rows_aligned(int64_t bytes) const {
  if (reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(bytes) != 0) return false;
  const int64_t elem = static_cast<int64_t>(dtype_size(dtype));
  for (int d = 0; d + 1 < ndim; ++d)
    if (shape[d] > 1 && (strides[d] * elem) % bytes != 0) return false;
  return true;
}

std::string TensorView::alignment_str(int64_t bytes) const {
  std::string s;
  detail::append(s, "address % ", bytes, " = ", reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(bytes),
                 ", strides [");
  for (int d = 0; d < ndim; ++d) detail::append(s, d ? ", " : "", strides[d]);
  detail::append(s, "] x ", dtype_size(dtype), " bytes");
  return s;
}

bool TensorView::is_contiguous() const {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != s) return false;
    s *= shape[i];
  }
  return true;
}

std::string TensorView::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) detail::append(s, i ? ", " : "", shape[i]);
  detail::append(s, "] ", dtype_name(dtype));
  return s;
}

int64_t SizeEnv::get(const std::string& name) const {
  for (const auto& [n, v] : sizes_)
    if (n == name) return v;
  return -1;
}

void SizeEnv::bind(const std::string& name, int64_t v) {
  for (auto& [n, old] : sizes_)
    if (n == name) {
      old = v;
      return;
    }
  sizes_.emplace_back(name, v);
}

void check_tensor(const TensorView& t, const char* name, std::initializer_list<Dim> dims,
                  DType dtype, SizeEnv& env) {
  auto expected = [&] {
    std::string s = "[";
    int i = 0;
    for (const Dim& d : dims) {
      s += i++ ? ", " : "";
      if (d.value >= 0) detail::append(s, d.value);
      else detail::append(s, d.name);
    }
    detail::append(s, "] ", dtype_name(dtype));
    return s;
  };
  auto fail = [&](const std::string& why) {
    LKV_FAIL(ErrorKind::kValue, "expected ", name, " of shape ", expected(), ", got ",
             t.shape_str(), why);
  };
  if (t.dtype != dtype)
    LKV_FAIL(ErrorKind::kType, "expected ", name, " of shape ", expected(), ", got ", t.shape_str());
  if (t.ndim != static_cast<int>(dims.size())) fail("");
  bool empty = false;
  for (int k = 0; k < t.ndim; ++k) {
    if (t.shape[k] < 0) fail(" (dimension " + std::to_string(k) + " is negative)");
    empty = empty || t.shape[k] == 0;
  }
  int64_t count = 1;
  for (int k = 0; k < t.ndim && !empty; ++k)
    if (__builtin_mul_overflow(count, t.shape[k], &count)) fail(" (its element count overflows int64)");
  int i = 0;
  for (const Dim& d : dims) {
    const int64_t got = t.shape[i];
    if (d.value >= 0 && got != d.value) fail("");
    if (d.value < 0 && d.name[0] != '\0') {
      const int64_t bound = env.get(d.name);
      if (bound >= 0 && bound != got)
        fail(std::string(" (") + d.name + " is " + std::to_string(bound) + " elsewhere)");
      env.bind(d.name, got);
    }
    ++i;
  }
  if (!empty && t.data == nullptr) fail(" (null data)");
  int64_t lo = 0, hi = 0;
  if (!empty && !byte_span(t, lo, hi)) fail(" (its strides' byte span overflows int64)");
}

void check_device(const TensorView& t, const char* name, const Device& device) {
  LKV_CHECK_TYPE(t.device == device, name, " is on ", t.device.str(), ", expected ", device.str());
}

void check_distinct_elements(const TensorView& t, const char* name) {
  std::pair<int64_t, int64_t> dims[TensorView::kMaxDims];  // (|stride|, size) of the dimensions of size > 1
  int n = 0;
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] > 1) dims[n++] = {t.strides[i] < 0 ? -t.strides[i] : t.strides[i], t.shape[i]};
  for (int i = 1; i < n; ++i)  // insertion sort of at most kMaxDims (std::sort trips GCC 12's -Warray-bounds here)
    for (int j = i; j > 0 && dims[j] < dims[j - 1]; --j) std::swap(dims[j], dims[j - 1]);
  int64_t span = 1;  // elements from the first to one past the last that the smaller dimensions reach
  for (int i = 0; i < n; ++i) {
    if (dims[i].first < span) {
      std::string strides;
      for (int d = 0; d < t.ndim; ++d) detail::append(strides, d ? ", " : "", t.strides[d]);
      LKV_FAIL(ErrorKind::kValue, name, " ", t.shape_str(), " has strides [", strides,
               "] under which two of its elements share an address");
    }
    span += dims[i].first * (dims[i].second - 1);
  }
}

void check_inner_contiguous(const TensorView& t, const char* name) {
  LKV_CHECK(t.ndim == 0 || t.shape[t.ndim - 1] <= 1 || t.strides[t.ndim - 1] == 1, name,
            " must be contiguous in its last dimension, got stride ", t.strides[t.ndim - 1]);
}

}  // namespace latentkv
