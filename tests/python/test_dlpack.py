"""DLPack round trips through the binding: NumPy arrays of every dtype the core takes, ml_dtypes
views with dtype tags, strided and read-only arrays, what is refused (unsupported dtypes, read-only
outputs, non-arrays, bad tags), and torch CPU tensors when torch is importable."""

import ml_dtypes
import numpy as np
import pytest

import latentkv
from latentkv import _native
from conftest import bf16, decode_inputs


def test_bf16_tag_and_native_bf16_agree(rng):
    x = bf16(rng.standard_normal((2, 512)))
    a = np.zeros((1, 2, 1, 584), np.uint8)
    b = np.zeros_like(a)
    latentkv.quantize(x, np.arange(2), a, "v4_fp8")
    _native.quantize("v4_fp8", (x.view(np.uint16), "bf16"), np.arange(2), b)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match=r"dtype tag 'bf16' needs a 16-bit integer view, got an array of 8-bit integer elements"):
        _native.quantize("v4_fp8", (x.view(np.uint8), "bf16"), np.arange(2), b)
    # A float16 array has the bits but not the kind: the message says which.
    with pytest.raises(TypeError, match=r"got an array of 16-bit non-integer elements"):
        _native.quantize("v4_fp8", (x.view(np.float16), "bf16"), np.arange(2), b)
    with pytest.raises(TypeError, match=r"unknown dtype tag 'fp6'"):
        _native.quantize("v4_fp8", (x.view(np.uint16), "fp6"), np.arange(2), b)


def test_unsupported_inputs_are_type_errors(rng):
    cache = np.zeros((1, 2, 1, 584), np.uint8)
    with pytest.raises(TypeError, match=r"latents: unsupported dtype float64"):
        latentkv.quantize(np.zeros((2, 512)), np.arange(2), cache, "v4_fp8")
    with pytest.raises(TypeError, match=r"latents: expected an array supporting DLPack"):
        _native.quantize("v4_fp8", [[0.0] * 512], np.arange(1), cache)
    with pytest.raises(TypeError, match=r"slots: unsupported dtype bool8"):
        latentkv.quantize(np.zeros((2, 512), np.float32), np.ones(2, bool), cache, "v4_fp8")
    readonly = cache.copy()
    readonly.flags.writeable = False
    with pytest.raises(TypeError, match=r"cache: expected a writable array"):
        latentkv.quantize(np.zeros((2, 512), np.float32), np.arange(2), readonly, "v4_fp8")


def test_read_only_and_strided_inputs(rng):
    x = bf16(rng.standard_normal((4, 1024)))
    strided = x[::2, 256:768]  # row stride 2048 elements, inner contiguous
    strided_ro = strided.copy()
    strided_ro.flags.writeable = False
    a = np.zeros((1, 2, 1, 584), np.uint8)
    b = np.zeros_like(a)
    latentkv.quantize(strided, np.arange(2), a, "v4_fp8")
    latentkv.quantize(strided_ro, np.arange(2), b, "v4_fp8")
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"contiguous"):
        latentkv.quantize(np.asfortranarray(strided.astype(np.float32)), np.arange(2), a, "v4_fp8")


def test_i32_and_i64_slots_agree(rng):
    x = rng.standard_normal((3, 512)).astype(np.float32)
    a = np.zeros((1, 4, 1, 288), np.uint8)
    b = np.zeros_like(a)
    latentkv.quantize(x, np.array([2, 0, 3], np.int32), a, "v41_fp4")
    latentkv.quantize(x, np.array([2, 0, 3], np.int64), b, "v41_fp4")
    np.testing.assert_array_equal(a, b)


def test_torch_cpu_round_trip():
    torch = pytest.importorskip("torch")
    inp = decode_inputs("v4_fp8", b=2, s_q=1, h_q=4, seed=21, lengths=True)
    ref_out, ref_lse = latentkv.sparse_decode(inp["q"], inp["k_cache"], inp["indices"],
                                              topk_length=inp["topk_length"])
    q = torch.from_numpy(inp["q"].view(np.uint16).astype(np.int32)).to(torch.int32)
    q = (q << 16).view(torch.float32).to(torch.bfloat16)  # exact: the bf16 bits, widened
    out, lse = latentkv.sparse_decode(q, torch.from_numpy(inp["k_cache"]),
                                      torch.from_numpy(inp["indices"]),
                                      topk_length=torch.from_numpy(inp["topk_length"]))
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    np.testing.assert_array_equal(out.view(torch.int16).numpy().view(np.uint16),
                                  ref_out.view(np.uint16))
    np.testing.assert_array_equal(lse.numpy(), ref_lse)
    x = torch.randn(3, 512, dtype=torch.bfloat16, requires_grad=True)
    cache = torch.zeros(1, 4, 1, 584, dtype=torch.float8_e4m3fn)
    latentkv.quantize(x, torch.tensor([0, 2, 3]), cache, "v4_fp8")
    back = latentkv.dequantize(cache, torch.tensor([0, 2, 3]), "v4_fp8")
    assert back.dtype == torch.bfloat16 and (back.float() - x.detach().float()).abs().max() < 0.5
    np_back = latentkv.dequantize(cache.view(torch.uint8).numpy(), np.array([0, 2, 3]), "v4_fp8")
    np.testing.assert_array_equal(back.view(torch.int16).numpy().view(np.uint16),
                                  np_back.view(np.uint16))
