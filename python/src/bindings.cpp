// python/src/bindings.cpp: latentkv._native, the nanobind module under the Python package.
//
// The binding only converts and calls: every array argument arrives as a DLPack-capable object
// (NumPy, torch, CuPy, JAX) or as a pair (array, dtype tag), becomes a latentkv::TensorView
// (pointer, dtype, device, shape, strides in elements) and goes to the core unchanged; the core
// validates everything. The dtype tag exists because NumPy cannot export ml_dtypes' bfloat16 or
// float8 arrays through DLPack: the Python layer passes a same-width integer view plus the tag
// ("bf16", "e4m3", "e8m0"), and the view's dtype is set from the tag. A plain torch tensor is read
// through its attributes rather than exported (see torch_view). Arrays are taken without any
// implicit conversion, so an output is always written in place, never into a silent copy.
//
// latentkv::Error becomes ValueError (kValue), TypeError (kType), NotImplementedError (kNotBuilt,
// a RuntimeError subclass) or RuntimeError (kRuntime), with the core's message. The GIL is released
// around every core call; streams arrive as integers (a cudaStream_t, 0 = the default stream).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "latentkv/compress.h"
#include "latentkv/decode.h"
#include "latentkv/dense.h"
#include "latentkv/error.h"
#include "latentkv/formats.h"
#include "latentkv/prefill.h"
#include "latentkv/tensor.h"

#ifdef LKV_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace nb = nanobind;
using namespace latentkv;

namespace {

// Keeps the imported arrays (and so their memory) alive for the duration of one call. Inputs are
// imported read-only (a read-only NumPy array is a valid input); outputs must be writable.
struct Keep {
  std::vector<nb::ndarray<nb::ro>> inputs;
  std::vector<nb::ndarray<>> outputs;
};

enum class Access { kRead, kWrite };

DType dtype_from_dlpack(const nb::dlpack::dtype& t, const char* name) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(t.code);
  if (t.lanes == 1) {
    if (code == Code::Float && t.bits == 32) return DType::f32;
    if (code == Code::Float && t.bits == 16) return DType::f16;
    if (code == Code::Bfloat && t.bits == 16) return DType::bf16;
    if (code == Code::Int && t.bits == 8) return DType::i8;
    if (code == Code::UInt && t.bits == 8) return DType::u8;
    if (code == Code::Int && t.bits == 32) return DType::i32;
    if (code == Code::Int && t.bits == 64) return DType::i64;
  }
  const char* kind = code == Code::Int      ? "int"
                     : code == Code::UInt   ? "uint"
                     : code == Code::Float  ? "float"
                     : code == Code::Bfloat ? "bfloat"
                     : code == Code::Bool   ? "bool"
                                            : "code";
  LKV_FAIL(ErrorKind::kType, name, ": unsupported dtype ", kind, int(t.bits),
           t.lanes == 1 ? "" : " (vector lanes)",
           "; latentkv takes f32, f16, bf16, i8, u8, i32, i64");
}

// A tag names the real dtype of an integer view of the same width.
DType dtype_from_tag(const std::string& tag, const nb::dlpack::dtype& t, const char* name) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(t.code);
  const bool integer = t.lanes == 1 && (code == Code::Int || code == Code::UInt);
  struct Tag {
    const char* name;
    DType dtype;
    int bits;
  };
  for (const Tag& k : {Tag{"bf16", DType::bf16, 16}, Tag{"e4m3", DType::e4m3, 8},
                       Tag{"e8m0", DType::e8m0, 8}})
    if (tag == k.name) {
      LKV_CHECK_TYPE(integer && t.bits == k.bits, name, ": dtype tag '", tag, "' needs a ",
                     k.bits, "-bit integer view, got an array of ", int(t.bits), "-bit ",
                     integer ? "integer" : "non-integer", " elements");
      return k.dtype;
    }
  LKV_FAIL(ErrorKind::kType, name, ": unknown dtype tag '", tag, "' (bf16, e4m3, e8m0)");
}

Device device_from_dlpack(int type, int id, const char* name) {
  // Pinned host memory is host memory; managed memory is used as CUDA memory.
  if (type == nb::device::cpu::value || type == nb::device::cuda_host::value) return Device::cpu();
  if (type == nb::device::cuda::value || type == nb::device::cuda_managed::value)
    return Device::cuda(id);
  LKV_FAIL(ErrorKind::kType, name, ": unsupported DLPack device type ", type,
           " (latentkv takes CPU and CUDA memory)");
}

template <typename Array>
TensorView view_of(const Array& arr, const std::string& tag, const char* name) {
  LKV_CHECK(arr.ndim() <= static_cast<size_t>(TensorView::kMaxDims), name, ": ", arr.ndim(),
            " dimensions, latentkv takes at most ", TensorView::kMaxDims);
  std::vector<int64_t> shape(arr.ndim()), strides(arr.ndim());
  for (size_t i = 0; i < arr.ndim(); ++i) {
    shape[i] = static_cast<int64_t>(arr.shape(i));
    strides[i] = arr.stride(i);
  }
  const DType dtype = tag.empty() ? dtype_from_dlpack(arr.dtype(), name)
                                  : dtype_from_tag(tag, arr.dtype(), name);
  const Device dev = device_from_dlpack(arr.device_type(), arr.device_id(), name);
  // The core takes void* for inputs and outputs alike; inputs are only read.
  return TensorView(const_cast<void*>(static_cast<const void*>(arr.data())), dtype, shape,
                    strides, dev);
}

// torch tensors are read through their attributes, from here: a DLPack export costs a few
// microseconds per tensor in torch, and so does building a description in Python. torch is never
// imported by the binding; its tensor type and dtypes are looked up the first time one arrives.
struct TorchTypes {
  PyTypeObject* tensor = nullptr;
  nb::object strided;
  std::vector<std::pair<nb::object, DType>> dtypes;
};

TorchTypes& torch_types() {
  static TorchTypes t;
  return t;
}

bool is_torch_tensor(nb::handle obj) {
  TorchTypes& t = torch_types();
  PyTypeObject* type = Py_TYPE(obj.ptr());
  if (t.tensor) return type == t.tensor;
  if (std::string_view(type->tp_name) != "Tensor") return false;
  nb::object module = nb::getattr(nb::handle(reinterpret_cast<PyObject*>(type)), "__module__", nb::none());
  if (module.is_none() || nb::cast<std::string>(nb::str(module)) != "torch") return false;
  nb::module_ torch = nb::module_::import_("torch");
  t.tensor = type;
  t.strided = torch.attr("strided");
  for (const auto& [attr, dtype] :
       {std::pair{"float32", DType::f32}, {"float16", DType::f16}, {"bfloat16", DType::bf16},
        {"int8", DType::i8}, {"uint8", DType::u8}, {"int32", DType::i32}, {"int64", DType::i64},
        {"float8_e4m3fn", DType::e4m3}, {"float8_e8m0fnu", DType::e8m0}})
    if (nb::hasattr(torch, attr)) t.dtypes.emplace_back(torch.attr(attr), dtype);
  return true;
}

// A strided CPU or CUDA torch tensor of a dtype latentkv knows, as a view; false for anything else
// (which then takes the DLPack path and its errors). The caller keeps the tensor alive.
bool torch_view(nb::handle obj, TensorView* v) {
  const TorchTypes& t = torch_types();
  nb::object dt = obj.attr("dtype");
  const DType* dtype = nullptr;
  for (const auto& [o, d] : t.dtypes)
    if (o.is(dt)) dtype = &d;
  if (!dtype || !obj.attr("layout").is(t.strided)) return false;
  const int index = nb::cast<int>(obj.attr("get_device")());
  if (index >= 0 && !nb::cast<bool>(obj.attr("is_cuda"))) return false;
  const auto ptr = static_cast<uintptr_t>(nb::cast<uint64_t>(obj.attr("data_ptr")()));
  if (ptr == 0) return false;
  const nb::tuple shape = nb::borrow<nb::tuple>(obj.attr("shape"));
  const nb::tuple strides = nb::borrow<nb::tuple>(obj.attr("stride")());
  const size_t nd = nb::len(shape);
  if (nd > static_cast<size_t>(TensorView::kMaxDims)) return false;
  std::vector<int64_t> sh(nd), st(nd);
  for (size_t i = 0; i < nd; ++i) {
    sh[i] = nb::cast<int64_t>(shape[i]);
    st[i] = nb::cast<int64_t>(strides[i]);
  }
  *v = TensorView(reinterpret_cast<void*>(ptr), *dtype, sh, st,
                  index < 0 ? Device::cpu() : Device::cuda(index));
  return true;
}

// Converts obj (None, a torch tensor, an array, or (array, tag)) to a view. None gives an absent
// view (null data).
TensorView to_view(nb::handle obj, const char* name, Keep& keep, Access access = Access::kRead) {
  if (obj.is_none()) return TensorView{};
  if (is_torch_tensor(obj)) {
    TensorView v;
    if (torch_view(obj, &v)) return v;
  }
  nb::handle arr_obj = obj;
  std::string tag;
  if (nb::isinstance<nb::tuple>(obj)) {
    nb::tuple pair = nb::borrow<nb::tuple>(obj);
    LKV_CHECK_TYPE(pair.size() == 2, name, ": expected an array or (array, dtype tag)");
    arr_obj = pair[0];
    tag = nb::cast<std::string>(pair[1]);
  }
  const auto type_name = [&] {
    return nb::cast<std::string>(nb::str(nb::handle(reinterpret_cast<PyObject*>(Py_TYPE(arr_obj.ptr())))));
  };
  if (access == Access::kWrite) {
    nb::ndarray<> arr;
    LKV_CHECK_TYPE(nb::try_cast(arr_obj, arr, /*convert=*/false), name,
                   ": expected a writable array supporting DLPack (NumPy, torch, CuPy), got ",
                   type_name());
    TensorView v = view_of(arr, tag, name);
    keep.outputs.push_back(std::move(arr));
    return v;
  }
  nb::ndarray<nb::ro> arr;
  LKV_CHECK_TYPE(nb::try_cast(arr_obj, arr, /*convert=*/false), name,
                 ": expected an array supporting DLPack (NumPy, torch, CuPy, JAX), got ",
                 type_name());
  TensorView v = view_of(arr, tag, name);
  keep.inputs.push_back(std::move(arr));
  return v;
}

Stream to_stream(uintptr_t stream) { return reinterpret_cast<Stream>(stream); }

CompressImpl parse_compress_impl(const std::string& s) {
  if (s == "auto") return CompressImpl::kAuto;
  if (s == "oracle") return CompressImpl::kCpuOracle;
  if (s == "fast") return CompressImpl::kCpuFast;
  if (s == "cuda") return CompressImpl::kCuda;
  LKV_FAIL(ErrorKind::kValue, "unknown impl '", s, "'; valid: auto, oracle, fast, cuda");
}

DecodeImpl parse_decode_impl(const std::string& s) {
  if (s == "auto") return DecodeImpl::kAuto;
  if (s == "oracle") return DecodeImpl::kCpuOracle;
  if (s == "fast") return DecodeImpl::kCpuFast;
  if (s == "cuda") return DecodeImpl::kCuda;
  LKV_FAIL(ErrorKind::kValue, "unknown impl '", s, "'; valid: auto, oracle, fast, cuda");
}

PrefillImpl parse_prefill_impl(const std::string& s) {
  if (s == "auto") return PrefillImpl::kAuto;
  if (s == "oracle") return PrefillImpl::kCpuOracle;
  if (s == "fast") return PrefillImpl::kCpuFast;
  if (s == "cuda") return PrefillImpl::kCuda;
  LKV_FAIL(ErrorKind::kValue, "unknown impl '", s, "'; valid: auto, oracle, fast, cuda");
}

DecodePlanKernel parse_plan_kernel(const std::string& s) {
  if (s == "auto") return DecodePlanKernel::kAuto;
  if (s == "portable") return DecodePlanKernel::kPortable;
  if (s == "sm90") return DecodePlanKernel::kSm90;
  LKV_FAIL(ErrorKind::kValue, "plan_decode: unknown kernel '", s, "'; valid: auto, portable, sm90");
}

DenseImpl parse_dense_impl(const std::string& s) {
  if (s == "auto") return DenseImpl::kAuto;
  if (s == "oracle") return DenseImpl::kCpuOracle;
  if (s == "fast") return DenseImpl::kCpuFast;
  if (s == "cuda") return DenseImpl::kCuda;
  LKV_FAIL(ErrorKind::kValue, "unknown impl '", s, "'; valid: auto, oracle, fast, cuda");
}

CompressMode parse_mode(const std::string& s) {
  if (s == "inplace") return CompressMode::kInPlace;
  if (s == "functional") return CompressMode::kFunctional;
  LKV_FAIL(ErrorKind::kValue, "unknown compress mode '", s, "'; valid: inplace, functional");
}

// The workspace is a byte array on the tensors' device (`device`: the op's output's); its size is
// its byte count. The ops see only a pointer, so the device is checked here (a host array handed to
// a CUDA op would be written by the kernels as device scratch).
void set_workspace(nb::handle ws, Keep& keep, void*& ptr, size_t& bytes, const Device& device) {
  const TensorView w = to_view(ws, "workspace", keep, Access::kWrite);
  if (!w.data) return;
  check_device(w, "workspace", device);
  LKV_CHECK(w.is_contiguous(), "workspace must be contiguous, got a strided view of shape ", w.shape_str());
  ptr = w.data;
  bytes = static_cast<size_t>(w.numel()) * dtype_size(w.dtype);
}

CompressArgs compress_args(nb::handle state_cache, nb::handle token_to_req, nb::handle positions,
                           nb::handle boundary_token_indices, nb::handle block_table,
                           nb::handle rms_norm_weight, nb::handle cos_sin_cache,
                           nb::handle kv_slot_mapping, nb::handle kv_cache, int64_t block_size,
                           int64_t compress_ratio, int64_t page_size, float rms_norm_eps,
                           const std::string& format, const std::string& mode,
                           bool check_indices, bool overlap_prologue, nb::handle workspace,
                           Keep& keep) {
  CompressArgs a{
      .state_cache = to_view(state_cache, "state_cache", keep),
      .token_to_req = to_view(token_to_req, "token_to_req", keep),
      .positions = to_view(positions, "positions", keep),
      .boundary_token_indices = to_view(boundary_token_indices, "boundary_token_indices", keep),
      .block_table = to_view(block_table, "block_table", keep),
      .rms_norm_weight = to_view(rms_norm_weight, "rms_norm_weight", keep),
      .cos_sin_cache = to_view(cos_sin_cache, "cos_sin_cache", keep),
      .kv_slot_mapping = to_view(kv_slot_mapping, "kv_slot_mapping", keep),
      .kv_cache = to_view(kv_cache, "kv_cache", keep, Access::kWrite),
      .block_size = block_size,
      .compress_ratio = compress_ratio,
      .page_size = page_size,
      .rms_norm_eps = rms_norm_eps,
      .format = parse_format(format),
      .mode = parse_mode(mode),
      .check_indices = check_indices,
      .overlap_prologue = overlap_prologue,
  };
  set_workspace(workspace, keep, a.workspace, a.workspace_bytes, a.kv_cache.device);
  return a;
}

SparsePrefillArgs prefill_args(nb::handle q, nb::handle kv, nb::handle indices, float sm_scale,
                               int64_t d_v, nb::handle attn_sink, nb::handle topk_length,
                               nb::handle out, nb::handle max_logits, nb::handle lse, Keep& keep) {
  return SparsePrefillArgs{
      .q = to_view(q, "q", keep),
      .kv = to_view(kv, "kv", keep),
      .indices = to_view(indices, "indices", keep),
      .sm_scale = sm_scale,
      .d_v = d_v,
      .attn_sink = to_view(attn_sink, "attn_sink", keep),
      .topk_length = to_view(topk_length, "topk_length", keep),
      .out = to_view(out, "out", keep, Access::kWrite),
      .max_logits = to_view(max_logits, "max_logits", keep, Access::kWrite),
      .lse = to_view(lse, "lse", keep, Access::kWrite),
  };
}

int cuda_sm_count(int device) {
#ifdef LKV_WITH_CUDA
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are not confused by it
    return 0;
  }
  return n;
#else
  (void)device;
  return 0;
#endif
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    PyObject* type = PyExc_RuntimeError;
    if (e.kind() == ErrorKind::kValue) type = PyExc_ValueError;
    else if (e.kind() == ErrorKind::kType) type = PyExc_TypeError;
    else if (e.kind() == ErrorKind::kNotBuilt) type = PyExc_NotImplementedError;
    PyErr_SetString(type, e.what());
  }
}

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "latentkv's native binding: DLPack arrays to TensorViews, then the C++ core.";
  nb::register_exception_translator(translate);

  m.def("built_with_cuda", [] {
#ifdef LKV_WITH_CUDA
    return true;
#else
    return false;
#endif
  });
  m.def("cuda_sm_count", &cuda_sm_count, nb::arg("device") = 0);

  m.def("format_names", [] {
    std::vector<std::string> names;
    for (CacheFormat f : {CacheFormat::v32_fp8, CacheFormat::v4_fp8, CacheFormat::v4_int8,
                          CacheFormat::v41_fp8, CacheFormat::v41_fp4})
      names.emplace_back(format_info(f).name);
    return names;
  });
  m.def("format_info", [](const std::string& name) {
    const FormatInfo& fi = format_info(parse_format(name));
    nb::dict d;
    d["name"] = fi.name;
    d["d_qk"] = fi.d_qk;
    d["bytes_per_token"] = fi.bytes_per_token;
    d["page_split"] = fi.page_split;
    d["data_bytes"] = fi.data_bytes;
    d["scale_bytes"] = fi.scale_bytes;
    return d;
  }, nb::arg("format"));

  m.def("quantize", [](const std::string& format, nb::handle latents, nb::handle slots,
                       nb::handle cache, int64_t page_size, uintptr_t stream, bool check_slots) {
    Keep keep;
    const CacheFormat f = parse_format(format);
    const TensorView l = to_view(latents, "latents", keep), s = to_view(slots, "slots", keep),
                     c = to_view(cache, "cache", keep, Access::kWrite);
    nb::gil_scoped_release release;
    quantize(f, l, s, c, page_size, to_stream(stream), check_slots);
  }, nb::arg("format"), nb::arg("latents"), nb::arg("slots"), nb::arg("cache"),
     nb::arg("page_size") = -1, nb::arg("stream") = 0, nb::arg("check_slots") = true);

  m.def("dequantize", [](const std::string& format, nb::handle cache, nb::handle slots,
                         nb::handle out, int64_t page_size, uintptr_t stream, bool check_slots) {
    Keep keep;
    const CacheFormat f = parse_format(format);
    const TensorView c = to_view(cache, "cache", keep), s = to_view(slots, "slots", keep),
                     o = to_view(out, "out", keep, Access::kWrite);
    nb::gil_scoped_release release;
    dequantize(f, c, s, o, page_size, to_stream(stream), check_slots);
  }, nb::arg("format"), nb::arg("cache"), nb::arg("slots"), nb::arg("out"),
     nb::arg("page_size") = -1, nb::arg("stream") = 0, nb::arg("check_slots") = true);

  m.def("positions_to_slots", [](nb::handle block_table, nb::handle positions, int64_t page_size,
                                 nb::handle slots, uintptr_t stream) {
    Keep keep;
    const TensorView bt = to_view(block_table, "block_table", keep),
                     pos = to_view(positions, "positions", keep),
                     s = to_view(slots, "slots", keep, Access::kWrite);
    nb::gil_scoped_release release;
    positions_to_slots(bt, pos, page_size, s, to_stream(stream));
  }, nb::arg("block_table"), nb::arg("positions"), nb::arg("page_size"), nb::arg("slots"),
     nb::arg("stream") = 0);

  m.def("compress_kv", [](nb::handle state_cache, nb::handle token_to_req, nb::handle positions,
                          nb::handle boundary_token_indices, nb::handle block_table,
                          nb::handle rms_norm_weight, nb::handle cos_sin_cache,
                          nb::handle kv_slot_mapping, nb::handle kv_cache, int64_t block_size,
                          int64_t compress_ratio, int64_t page_size, float rms_norm_eps,
                          const std::string& format, const std::string& mode, bool check_indices,
                          const std::string& impl, nb::handle workspace, uintptr_t stream,
                          bool overlap_prologue) {
    Keep keep;
    const CompressArgs a = compress_args(
        state_cache, token_to_req, positions, boundary_token_indices, block_table,
        rms_norm_weight, cos_sin_cache, kv_slot_mapping, kv_cache, block_size, compress_ratio,
        page_size, rms_norm_eps, format, mode, check_indices, overlap_prologue, workspace, keep);
    const CompressImpl i = parse_compress_impl(impl);
    nb::gil_scoped_release release;
    compress_kv(a, to_stream(stream), i);
  }, nb::arg("state_cache"), nb::arg("token_to_req"), nb::arg("positions"),
     nb::arg("boundary_token_indices"), nb::arg("block_table"), nb::arg("rms_norm_weight"),
     nb::arg("cos_sin_cache"), nb::arg("kv_slot_mapping"), nb::arg("kv_cache"),
     nb::arg("block_size"), nb::arg("compress_ratio"), nb::arg("page_size") = -1,
     nb::arg("rms_norm_eps") = 1.0e-6f, nb::arg("format") = "v4_int8",
     nb::arg("mode") = "inplace", nb::arg("check_indices") = true, nb::arg("impl") = "auto",
     nb::arg("workspace").none() = nb::none(), nb::arg("stream") = 0,
     nb::arg("overlap_prologue") = false);

  m.def("compress_workspace_bytes", [](nb::handle state_cache, nb::handle token_to_req,
                                       nb::handle positions, nb::handle boundary_token_indices,
                                       nb::handle block_table, nb::handle rms_norm_weight,
                                       nb::handle cos_sin_cache, nb::handle kv_slot_mapping,
                                       nb::handle kv_cache, int64_t block_size,
                                       int64_t compress_ratio, int64_t page_size,
                                       const std::string& format) {
    Keep keep;
    const CompressArgs a = compress_args(
        state_cache, token_to_req, positions, boundary_token_indices, block_table,
        rms_norm_weight, cos_sin_cache, kv_slot_mapping, kv_cache, block_size, compress_ratio,
        page_size, 1.0e-6f, format, "inplace", true, false, nb::none(), keep);
    return compress_workspace_bytes(a);
  }, nb::arg("state_cache"), nb::arg("token_to_req"), nb::arg("positions"),
     nb::arg("boundary_token_indices"), nb::arg("block_table"), nb::arg("rms_norm_weight"),
     nb::arg("cos_sin_cache"), nb::arg("kv_slot_mapping"), nb::arg("kv_cache"),
     nb::arg("block_size"), nb::arg("compress_ratio"), nb::arg("page_size") = -1,
     nb::arg("format") = "v4_int8");

  nb::class_<DecodePlan>(m, "DecodePlan")
      .def("__init__",
           [](DecodePlan* p, int64_t num_splits, int64_t keys_per_split, int64_t b, int64_t s_q,
              int64_t h_q, int64_t topk, int64_t extra_topk, int64_t unsplit_b) {
             new (p) DecodePlan{.num_splits = num_splits, .keys_per_split = keys_per_split,
                                .unsplit_b = unsplit_b, .b = b, .s_q = s_q, .h_q = h_q, .topk = topk,
                                .extra_topk = extra_topk};
           },
           nb::arg("num_splits") = 1, nb::arg("keys_per_split") = 1, nb::arg("b") = 0,
           nb::arg("s_q") = 0, nb::arg("h_q") = 0, nb::arg("topk") = 0,
           nb::arg("extra_topk") = 0, nb::arg("unsplit_b") = 0)
      .def_ro("num_splits", &DecodePlan::num_splits)
      .def_ro("keys_per_split", &DecodePlan::keys_per_split)
      .def_ro("b", &DecodePlan::b)
      .def_ro("s_q", &DecodePlan::s_q)
      .def_ro("h_q", &DecodePlan::h_q)
      .def_ro("topk", &DecodePlan::topk)
      .def_ro("extra_topk", &DecodePlan::extra_topk)
      .def_ro("unsplit_b", &DecodePlan::unsplit_b)
      .def("__eq__", [](const DecodePlan& x, const DecodePlan& y) {
        return x.num_splits == y.num_splits && x.keys_per_split == y.keys_per_split &&
               x.b == y.b && x.s_q == y.s_q && x.h_q == y.h_q && x.topk == y.topk &&
               x.extra_topk == y.extra_topk && x.unsplit_b == y.unsplit_b;
      })
      .def("__repr__", [](const DecodePlan& p) {
        return "DecodePlan(num_splits=" + std::to_string(p.num_splits) +
               ", keys_per_split=" + std::to_string(p.keys_per_split) +
               ", b=" + std::to_string(p.b) + ", s_q=" + std::to_string(p.s_q) +
               ", h_q=" + std::to_string(p.h_q) + ", topk=" + std::to_string(p.topk) +
               ", extra_topk=" + std::to_string(p.extra_topk) +
               ", unsplit_b=" + std::to_string(p.unsplit_b) + ")";
      });

  m.def("plan_decode",
        [](int64_t b, int64_t s_q, int64_t h_q, int64_t topk, int64_t extra_topk, int num_sms,
           const std::string& kernel) {
          return plan_decode(b, s_q, h_q, topk, extra_topk, num_sms, parse_plan_kernel(kernel));
        },
        nb::arg("b"), nb::arg("s_q"), nb::arg("h_q"), nb::arg("topk"), nb::arg("extra_topk"),
        nb::arg("num_sms"), nb::arg("kernel") = "auto");
  m.def("sparse_decode_workspace_bytes", &sparse_decode_workspace_bytes, nb::arg("plan"));

  m.def("sparse_decode", [](nb::handle q, nb::handle k_cache, const std::string& format,
                            int64_t page_size, nb::handle indices, nb::handle topk_length,
                            nb::handle attn_sink, nb::handle extra_k_cache, int64_t extra_page_size,
                            nb::handle extra_indices, nb::handle extra_topk_length,
                            float softmax_scale, nb::handle out, nb::handle lse,
                            const DecodePlan* plan, const std::string& impl, nb::handle workspace,
                            uintptr_t stream, const std::string& extra_format) {
    Keep keep;
    SparseDecodeArgs a{
        .q = to_view(q, "q", keep),
        .k_cache = to_view(k_cache, "k_cache", keep),
        .format = parse_format(format),
        .page_size = page_size,
        .indices = to_view(indices, "indices", keep),
        .topk_length = to_view(topk_length, "topk_length", keep),
        .attn_sink = to_view(attn_sink, "attn_sink", keep),
        .extra_k_cache = to_view(extra_k_cache, "extra_k_cache", keep),
        // "": the extra cache is in `format`.
        .extra_format = extra_format.empty() ? std::nullopt : std::optional(parse_format(extra_format)),
        .extra_page_size = extra_page_size,
        .extra_indices = to_view(extra_indices, "extra_indices", keep),
        .extra_topk_length = to_view(extra_topk_length, "extra_topk_length", keep),
        .softmax_scale = softmax_scale,
        .out = to_view(out, "out", keep, Access::kWrite),
        .lse = to_view(lse, "lse", keep, Access::kWrite),
        .plan = plan,
    };
    set_workspace(workspace, keep, a.workspace, a.workspace_bytes, a.out.device);
    const DecodeImpl i = parse_decode_impl(impl);
    nb::gil_scoped_release release;
    sparse_decode(a, to_stream(stream), i);
  }, nb::arg("q"), nb::arg("k_cache"), nb::arg("format"), nb::arg("page_size"),
     nb::arg("indices"), nb::arg("topk_length").none(), nb::arg("attn_sink").none(),
     nb::arg("extra_k_cache").none(), nb::arg("extra_page_size"),
     nb::arg("extra_indices").none(), nb::arg("extra_topk_length").none(),
     nb::arg("softmax_scale"), nb::arg("out"), nb::arg("lse"), nb::arg("plan").none(),
     nb::arg("impl") = "auto", nb::arg("workspace").none() = nb::none(), nb::arg("stream") = 0,
     nb::arg("extra_format") = "");
  m.def("sparse_prefill", [](nb::handle q, nb::handle kv, nb::handle indices, float sm_scale,
                             int64_t d_v, nb::handle attn_sink, nb::handle topk_length,
                             nb::handle out, nb::handle max_logits, nb::handle lse,
                             const std::string& impl, uintptr_t stream) {
    Keep keep;
    const SparsePrefillArgs a = prefill_args(q, kv, indices, sm_scale, d_v, attn_sink, topk_length,
                                             out, max_logits, lse, keep);
    const PrefillImpl i = parse_prefill_impl(impl);
    nb::gil_scoped_release release;
    sparse_prefill(a, to_stream(stream), i);
  }, nb::arg("q"), nb::arg("kv"), nb::arg("indices"), nb::arg("sm_scale"), nb::arg("d_v"),
     nb::arg("attn_sink").none(), nb::arg("topk_length").none(), nb::arg("out"),
     nb::arg("max_logits"), nb::arg("lse"), nb::arg("impl") = "auto", nb::arg("stream") = 0);

  m.def("sparse_prefill_batched", [](nb::handle q, nb::handle kv, nb::handle indices,
                                     float sm_scale, int64_t d_v, nb::handle attn_sink,
                                     nb::handle topk_length, nb::handle seq_offsets_q,
                                     nb::handle seq_offsets_kv, nb::handle out,
                                     nb::handle max_logits, nb::handle lse,
                                     const std::string& impl, uintptr_t stream) {
    Keep keep;
    const SparsePrefillArgs a = prefill_args(q, kv, indices, sm_scale, d_v, attn_sink, topk_length,
                                             out, max_logits, lse, keep);
    const TensorView oq = to_view(seq_offsets_q, "seq_offsets_q", keep),
                     okv = to_view(seq_offsets_kv, "seq_offsets_kv", keep);
    const PrefillImpl i = parse_prefill_impl(impl);
    nb::gil_scoped_release release;
    sparse_prefill_batched(a, oq, okv, to_stream(stream), i);
  }, nb::arg("q"), nb::arg("kv"), nb::arg("indices"), nb::arg("sm_scale"), nb::arg("d_v"),
     nb::arg("attn_sink").none(), nb::arg("topk_length").none(), nb::arg("seq_offsets_q"),
     nb::arg("seq_offsets_kv"), nb::arg("out"), nb::arg("max_logits"), nb::arg("lse"),
     nb::arg("impl") = "auto", nb::arg("stream") = 0);

  m.def("dense_decode", [](nb::handle q, nb::handle k_cache, bool fp8, nb::handle block_table,
                           nb::handle cache_seqlens, bool causal, float softmax_scale,
                           int64_t d_v, nb::handle out, nb::handle lse, const std::string& impl,
                           uintptr_t stream) {
    Keep keep;
    const DenseDecodeArgs a{
        .q = to_view(q, "q", keep),
        .k_cache = to_view(k_cache, "k_cache", keep),
        .fp8 = fp8,
        .block_table = to_view(block_table, "block_table", keep),
        .cache_seqlens = to_view(cache_seqlens, "cache_seqlens", keep),
        .causal = causal,
        .softmax_scale = softmax_scale,
        .d_v = d_v,
        .out = to_view(out, "out", keep, Access::kWrite),
        .lse = to_view(lse, "lse", keep, Access::kWrite),
    };
    const DenseImpl i = parse_dense_impl(impl);
    nb::gil_scoped_release release;
    dense_decode(a, to_stream(stream), i);
  }, nb::arg("q"), nb::arg("k_cache"), nb::arg("fp8"), nb::arg("block_table"),
     nb::arg("cache_seqlens"), nb::arg("causal"), nb::arg("softmax_scale"), nb::arg("d_v"),
     nb::arg("out"), nb::arg("lse"), nb::arg("impl") = "auto", nb::arg("stream") = 0);
}
