"""Array adapters: what the binding is handed for each framework's arrays, the stream a call runs
on, and how outputs are allocated in the caller's framework.

The binding takes any DLPack-capable array, and reads plain torch tensors (exactly torch.Tensor,
strided, CPU or CUDA, a dtype latentkv knows) through their attributes instead (pointer, shape,
strides, dtype, device): a DLPack export costs a few microseconds per tensor in torch. Everything
else, torch subclasses included, goes through DLPack. Two cases need help first:

* NumPy cannot export ml_dtypes' bfloat16 / float8 dtypes through DLPack. Such arrays are passed as a
  same-width integer view plus a dtype tag, ``(x.view(np.uint16), "bf16")`` or
  ``(x.view(np.uint8), "e4m3" | "e8m0")``; the binding sets the TensorView's dtype from the tag.
  torch exports bfloat16 natively, so torch bf16 tensors go as they are; torch float8 tensors are
  tagged the same way, since DLPack float8 support varies across versions.
* Caches are bytes: a cache of any 1-byte dtype (uint8, int8, float8) is passed as a uint8 view.

Streams: a torch CUDA tensor runs on torch's current stream of its device, a CuPy array on CuPy's
current stream; everything else on the default stream (0).

Outputs latentkv allocates come from the framework of a reference input: NumPy (bfloat16 through
ml_dtypes), torch (same device), CuPy (no bfloat16 dtype there, so bf16 results are uint16 arrays
holding the bf16 bits). JAX arrays are immutable: they are accepted as inputs, but outputs must be
allocated by another framework (pass ``out=``), and calls with JAX reference arrays say so.
"""

from __future__ import annotations

import sys
from typing import Any, Optional, Sequence

import numpy as np

_TAGS_NUMPY = {"bfloat16": "bf16", "float8_e4m3fn": "e4m3", "float8_e8m0fnu": "e8m0"}


def framework(x: Any) -> str:
    """'numpy', 'torch', 'cupy', 'jax' or 'other', from the array's type."""
    if isinstance(x, np.ndarray):
        return "numpy"
    mod = type(x).__module__
    if mod.startswith("torch"):
        return "torch"
    if mod.startswith("cupy"):
        return "cupy"
    if mod.startswith("jax"):
        return "jax"
    return "other"


def _torch_tag(x: Any) -> Optional[str]:
    import torch

    tags = {torch.float8_e4m3fn: "e4m3"}
    e8m0 = getattr(torch, "float8_e8m0fnu", None)
    if e8m0 is not None:
        tags[e8m0] = "e8m0"
    return tags.get(x.dtype)


_TORCH_TENSOR: Any = None
_TORCH_U8: Any = None


def _is_plain_torch_tensor(x: Any) -> bool:
    """x is exactly a torch.Tensor (not a subclass such as a fake tensor); never imports torch."""
    global _TORCH_TENSOR, _TORCH_U8
    if _TORCH_TENSOR is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        _TORCH_TENSOR, _TORCH_U8 = torch.Tensor, torch.uint8
    return type(x) is _TORCH_TENSOR


def mark_written(*xs: Any) -> None:
    """Bumps torch's version counter of the plain torch tensors among xs, which the binding wrote in
    place: autograd then notices if a tensor it saved for backward was overwritten, as it would
    with a torch op. Nothing for other arrays."""
    if _TORCH_TENSOR is None:
        return
    written = [x for x in xs if type(x) is _TORCH_TENSOR]
    if written:
        import torch

        for x in written:
            torch.autograd.graph.increment_version(x)


def native(x: Any, bf16: bool = False) -> Any:
    """What the binding receives for x: the array itself or (integer view, dtype tag).

    bf16=True marks an argument that must be bfloat16: a CuPy uint16/int16 array there is taken as
    bf16 bits (CuPy has no bfloat16 dtype)."""
    if x is None:
        return None
    if _is_plain_torch_tensor(x):
        return x  # the binding reads a plain torch tensor's attributes itself
    fw = framework(x)
    if fw == "cupy" and bf16 and x.dtype.name in ("uint16", "int16"):
        return (x, "bf16")
    if fw == "numpy":
        tag = _TAGS_NUMPY.get(x.dtype.name)
        if tag is not None:
            return (x.view(np.uint16 if tag == "bf16" else np.uint8), tag)
        return x
    if fw == "torch":
        import torch

        x = x.detach()  # DLPack refuses tensors that require grad; latentkv computes no gradients
        tag = _torch_tag(x)
        if tag is not None:
            return (x.view(torch.uint8), tag)
        return x
    return x


def native_bytes(x: Any) -> Any:
    """A cache (any 1-byte dtype) as a uint8 view for the binding."""
    if x is None:
        return None
    if _is_plain_torch_tensor(x) and x.dtype is _TORCH_U8:
        return x
    fw = framework(x)
    if fw == "numpy":
        if x.dtype.itemsize == 1 and x.dtype != np.uint8:
            return x.view(np.uint8)
        return x
    if fw == "torch":
        import torch

        x = x.detach()
        if x.element_size() == 1 and x.dtype != torch.uint8:
            return x.view(torch.uint8)
        return x
    if fw == "cupy" and x.dtype.itemsize == 1 and x.dtype.name != "uint8":
        return x.view("uint8")
    return x


def stream_of(x: Any) -> int:
    """The cudaStream_t (as an int) a call on x runs on: the framework's current stream, else 0."""
    if _is_plain_torch_tensor(x) or framework(x) == "torch":
        if not x.is_cuda:
            return 0
        import torch

        # The raw handle straight from torch's C layer is several times cheaper than building a
        # torch.cuda.Stream object; the public call is the fallback.
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return int(raw(x.get_device()))
        return int(torch.cuda.current_stream(x.device).cuda_stream)
    fw = framework(x)
    if fw == "cupy":
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)
    return 0


def is_cuda(x: Any) -> bool:
    """Whether x lives in CUDA memory (DLPack device type 2 or 13)."""
    fw = framework(x)
    if fw == "numpy":
        return False
    if fw == "torch":
        return bool(x.is_cuda)
    dev = getattr(x, "__dlpack_device__", None)
    return dev is not None and int(dev()[0]) in (2, 13)


def cuda_index(x: Any) -> int:
    """The CUDA device ordinal of x (0 for host memory)."""
    dev = getattr(x, "__dlpack_device__", None)
    if dev is None:
        return 0
    kind, index = dev()
    return int(index) if int(kind) in (2, 13) else 0


def _numpy_dtype(dtype: str) -> Any:
    if dtype == "bf16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return {"f32": np.float32, "f16": np.float16, "u8": np.uint8, "i32": np.int32,
            "i64": np.int64}[dtype]


def half_dtype(x: Any) -> str:
    """'f16' when x holds IEEE half floats (NumPy/CuPy float16, torch.float16), else 'bf16' (what a
    16-bit float argument of latentkv is otherwise taken as)."""
    dt = getattr(x, "dtype", None)
    return "f16" if dt is not None and str(dt).rsplit(".", 1)[-1] == "float16" else "bf16"


def empty(like: Any, shape: Sequence[int], dtype: str, zero: bool = False) -> Any:
    """A new array of shape and dtype ('bf16', 'f16', 'f32', 'u8', 'i32', 'i64') in like's framework
    and on its device."""
    fw = framework(like)
    shape = tuple(int(s) for s in shape)
    if fw == "torch":
        import torch

        tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
               "u8": torch.uint8, "i32": torch.int32, "i64": torch.int64}[dtype]
        make = torch.zeros if zero else torch.empty
        return make(shape, dtype=tdt, device=like.device)
    if fw == "cupy":
        import cupy

        cdt = np.uint16 if dtype == "bf16" else _numpy_dtype(dtype)
        with cupy.cuda.Device(cuda_index(like)):
            return (cupy.zeros if zero else cupy.empty)(shape, dtype=cdt)
    if fw == "jax":
        raise TypeError(
            "latentkv cannot write its results into JAX arrays (they are immutable): pass out= "
            "arrays from NumPy, torch or CuPy")
    if fw == "numpy" or not is_cuda(like):
        return (np.zeros if zero else np.empty)(shape, dtype=_numpy_dtype(dtype))
    raise TypeError(f"latentkv cannot allocate outputs like a {type(like).__name__}: pass out=")
