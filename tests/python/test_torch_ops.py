"""torch integration (skipped without torch): every op is a torch custom op whose fake
implementation passes torch.library.opcheck, results equal the NumPy path, and
torch.compile(fullgraph=True) traces through the ops."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import latentkv  # noqa: E402
from latentkv import torch_ops  # noqa: E402
from conftest import ARG_ORDER_COMPRESS, compress_inputs, decode_inputs  # noqa: E402
from test_prefill_dense import dense_inputs, prefill_inputs  # noqa: E402


def t(a):
    """A NumPy array as a torch CPU tensor (bf16 through its bits)."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def test_opcheck_every_op():
    inp = decode_inputs("v32_fp8", b=2, s_q=1, h_q=4, seed=31, sink=True)
    q, k, idx, sink = t(inp["q"]), t(inp["k_cache"]), t(inp["indices"]), t(inp["attn_sink"])
    torch.library.opcheck(torch_ops.sparse_decode,
                          (q, k, idx, "v32_fp8", -1, None, sink, None, -1, None, None, 0.0, [],
                           "auto", None))
    # DeepSeek V4.1's v41_fp4 extra cache (the op's last argument).
    v41 = decode_inputs("v41_fp8", b=2, s_q=1, h_q=3, topk=16, seed=34, extra=True, extra_fmt="v41_fp4")
    torch.library.opcheck(torch_ops.sparse_decode,
                          (t(v41["q"]), t(v41["k_cache"]), t(v41["indices"]), "v41_fp8", -1, None, None,
                           t(v41["extra_k_cache"]), -1, t(v41["extra_indices"]), None, 0.0, [], "auto", None,
                           "v41_fp4"))
    x = torch.randn(3, 512, dtype=torch.bfloat16)
    cache = torch.zeros(1, 4, 1, 584, dtype=torch.uint8)
    torch.library.opcheck(torch_ops.quantize, (x, torch.tensor([0, 1, 3]), cache, "v4_fp8", -1))
    torch.library.opcheck(torch_ops.dequantize, (cache, torch.tensor([0, 3]), "v4_fp8", -1))
    torch.library.opcheck(torch_ops.positions_to_slots,
                          (torch.tensor([[1, 0]], dtype=torch.int32),
                           torch.tensor([[0, 5]], dtype=torch.int32), 4))
    c = {k: (t(v) if isinstance(v, np.ndarray) else v) for k, v in compress_inputs(C=16).items()}
    args = [c[k] for k in ARG_ORDER_COMPRESS]
    rest = (c["block_size"], c["compress_ratio"], 64, 1e-6, "v4_int8", True, "auto", None)
    torch.library.opcheck(torch_ops.compress_kv, (*args, *rest[:-1]))
    torch.library.opcheck(torch_ops.compress_kv_ws,
                          (*args, *rest[:-1], torch.empty(1 << 16, dtype=torch.uint8)))
    torch.library.opcheck(torch_ops.compress_kv_, (*args, *rest))


def test_torch_results_equal_numpy():
    inp = compress_inputs(C=16, seed=32)
    ref = latentkv.compress_kv(*[inp[k] for k in ARG_ORDER_COMPRESS + ["block_size", "compress_ratio"]],
                               mode="functional")
    tin = {k: (t(v) if isinstance(v, np.ndarray) else v) for k, v in inp.items()}
    got = latentkv.compress_kv(*[tin[k] for k in ARG_ORDER_COMPRESS + ["block_size", "compress_ratio"]],
                               mode="functional")
    np.testing.assert_array_equal(got.numpy(), ref)
    latentkv.compress_kv(*[tin[k] for k in ARG_ORDER_COMPRESS + ["block_size", "compress_ratio"]])
    np.testing.assert_array_equal(tin["kv_cache"].numpy(), ref)


def test_compile_fullgraph():
    inp = decode_inputs("v4_fp8", b=2, s_q=1, h_q=4, seed=33, extra=True)
    q, k, idx = t(inp["q"]), t(inp["k_cache"]), t(inp["indices"])
    ek, eidx = t(inp["extra_k_cache"]), t(inp["extra_indices"])

    def step(q, k, idx, ek, eidx, latents, cache):
        latentkv.quantize(latents, torch.tensor([0, 1]), cache, "v4_fp8")
        back = latentkv.dequantize(cache, torch.tensor([1, 0]), "v4_fp8")
        out, lse = latentkv.sparse_decode(q * 2, k, idx, extra_k_cache=ek, extra_indices=eidx)
        return out.float().sum(-1) + back.float().sum(), lse

    latents = torch.randn(2, 512, dtype=torch.bfloat16)
    eager = step(q, k, idx, ek, eidx, latents, torch.zeros(1, 2, 1, 584, dtype=torch.uint8))
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    traced = compiled(q, k, idx, ek, eidx, latents, torch.zeros(1, 2, 1, 584, dtype=torch.uint8))
    torch.testing.assert_close(traced[0], eager[0], rtol=0, atol=0)
    torch.testing.assert_close(traced[1], eager[1], rtol=0, atol=0)


def test_eager_writes_bump_the_version_counter():
    """Eager calls skip the custom op; tensors they write in place still get their version bumped,
    so autograd would notice a saved tensor being overwritten."""
    cache = torch.zeros(1, 4, 1, 584, dtype=torch.uint8)
    before = cache._version
    latentkv.quantize(torch.randn(2, 512, dtype=torch.bfloat16), torch.tensor([0, 3]), cache,
                      "v4_fp8")
    assert cache._version > before
    inp = compress_inputs(C=16, seed=34)
    tin = {k: (t(v) if isinstance(v, np.ndarray) else v) for k, v in inp.items()}
    kv = tin["kv_cache"]
    before = kv._version
    latentkv.compress_kv(*[tin[k] for k in ARG_ORDER_COMPRESS + ["block_size", "compress_ratio"]])
    assert kv._version > before


def test_jit_trace_records_the_op():
    """torch.jit.trace goes through the custom op (eager calls do not), so the trace contains it."""
    x = torch.randn(3, 512, dtype=torch.bfloat16)
    slots = torch.tensor([0, 1, 3])

    def roundtrip(x):
        cache = torch.zeros(1, 4, 1, 584, dtype=torch.uint8)
        latentkv.quantize(x, slots, cache, "v4_fp8")
        return latentkv.dequantize(cache, slots, "v4_fp8")

    traced = torch.jit.trace(roundtrip, (x,), check_trace=False)
    assert "latentkv::dequantize" in str(traced.graph)
    y = torch.randn(3, 512, dtype=torch.bfloat16)
    torch.testing.assert_close(traced(y), roundtrip(y), rtol=0, atol=0)


def test_torch_parameter_inputs():
    inp = compress_inputs(C=16, seed=69)
    ref = latentkv.compress_kv(*[inp[k] for k in ARG_ORDER_COMPRESS + ["block_size", "compress_ratio"]], mode="functional")
    tin = {k: (t(v) if isinstance(v, np.ndarray) else v) for k, v in inp.items()}
    tin["rms_norm_weight"] = torch.nn.Parameter(tin["rms_norm_weight"])  # requires grad, a subclass
    got = latentkv.compress_kv(*[tin[k] for k in ARG_ORDER_COMPRESS + ["block_size", "compress_ratio"]], mode="functional")
    np.testing.assert_array_equal(got.numpy(), ref)


def test_torch_compile_argument_plumbing():
    # compress in place into a 0xAB-filled 2-D cache of 16-slot pages (page_size given).
    inp = compress_inputs(C=16, P=16, seed=70)
    inp["kv_cache"] = np.full((inp["kv_cache"].shape[0] + 1, 16 * 584 + 32), 0xAB, np.uint8)  # spare page, padded
    ref_np = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inp.items()}
    latentkv.compress_kv(*[ref_np[k] for k in ARG_ORDER_COMPRESS + ["block_size", "compress_ratio"]], page_size=16)
    tin = {k: (t(v.copy()) if isinstance(v, np.ndarray) else v) for k, v in inp.items()}

    def comp(*a):
        latentkv.compress_kv(*a, page_size=16)
        return a[8].clone()

    got = torch.compile(comp, fullgraph=True, backend="aot_eager")(*[tin[k] for k in ARG_ORDER_COMPRESS + ["block_size", "compress_ratio"]])
    np.testing.assert_array_equal(got.numpy(), ref_np["kv_cache"])
    # dequantize from a 2-D cache with page_size.
    cache = ref_np["kv_cache"]
    slots = torch.tensor([0, 5, 17])
    deq = torch.compile(lambda c, s: latentkv.dequantize(c, s, "v4_int8", page_size=16),
                        fullgraph=True, backend="aot_eager")(t(cache), slots)
    np.testing.assert_array_equal(deq.view(torch.int16).numpy().view(np.uint16),
                                  latentkv.dequantize(cache, slots.numpy(), "v4_int8", page_size=16).view(np.uint16))
    # prefill with a sink, dense decode causal with s_q = 2.
    p = prefill_inputs(s_q=3, h_q=4, s_kv=40, topk=8, seed=71, sink=True)
    pre = torch.compile(lambda q, kv, i, s: latentkv.sparse_prefill(q, kv, i, 0.05, attn_sink=s),
                        fullgraph=True, backend="aot_eager")(t(p["q"]), t(p["kv"]), t(p["indices"]), t(p["attn_sink"]))
    ref = latentkv.sparse_prefill(p["q"], p["kv"], p["indices"], 0.05, attn_sink=p["attn_sink"])
    np.testing.assert_array_equal(pre[0].view(torch.int16).numpy().view(np.uint16), ref[0].view(np.uint16))
    d = dense_inputs("bf16", b=2, s_q=2, h_q=4, P=8, seed=72, lengths=[3, 9])
    den = torch.compile(lambda q, k, bt, n: latentkv.dense_decode(q, k, bt, n, causal=True),
                        fullgraph=True, backend="aot_eager")(*(t(d[k]) for k in ("q", "k_cache", "block_table", "cache_seqlens")))
    ref = latentkv.dense_decode(d["q"], d["k_cache"], d["block_table"], d["cache_seqlens"], causal=True)
    np.testing.assert_array_equal(den[1].numpy(), ref[1])
    # sparse_decode given a plan traces whole (the plan's fields reach the op as a plain tuple),
    # equals the NumPy path, and a plan for other shapes is refused through the custom op too.
    s = decode_inputs("v32_fp8", b=2, s_q=1, h_q=4, seed=73)
    plan = latentkv.plan_decode(2, 1, 4, s["indices"].shape[-1])
    dec = torch.compile(lambda q, k, i: latentkv.sparse_decode(q, k, i, plan=plan), fullgraph=True,
                        backend="aot_eager")(t(s["q"]), t(s["k_cache"]), t(s["indices"]))
    ref = latentkv.sparse_decode(s["q"], s["k_cache"], s["indices"], plan=plan)
    np.testing.assert_array_equal(dec[0].view(torch.int16).numpy().view(np.uint16), ref[0].view(np.uint16))
    np.testing.assert_array_equal(dec[1].numpy(), ref[1])
    bad_plan = latentkv.plan_decode(1, 1, 64, 2048)
    with pytest.raises(Exception, match=r"the plan was made for b=1"):
        torch.compile(lambda q, k, i: latentkv.sparse_decode(q, k, i, plan=bad_plan), fullgraph=True,
                      backend="aot_eager")(t(s["q"]), t(s["k_cache"]), t(s["indices"]))


def test_flash_mla_sparse_lse_has_flashmla_strides():
    # latentkv.flash_mla returns sparse decode's lse as FlashMLA does: [b, h_q, s_q] over a
    # [b, s_q, h_q] buffer, so lse.transpose(1, 2) is contiguous; eager calls (the kernels write
    # that layout) and torch.jit.trace (the custom op's lse, moved into it) alike, with the values
    # of latentkv.sparse_decode's contiguous lse.
    from latentkv.flash_mla import flash_mla_with_kvcache, get_mla_metadata

    inp = decode_inputs("v32_fp8", b=2, s_q=3, h_q=5, topk=64, seed=35, sink=True)
    q, k, idx, sink = t(inp["q"]), t(inp["k_cache"]), t(inp["indices"]), t(inp["attn_sink"])
    ref_out, ref_lse = latentkv.sparse_decode(q, k, idx, attn_sink=sink)
    assert ref_lse.is_contiguous()

    meta, _ = get_mla_metadata()

    def call(q, k, idx, sink):
        return flash_mla_with_kvcache(q, k, None, None, 512, meta, None, is_fp8_kvcache=True,
                                      indices=idx, attn_sink=sink)

    traced = torch.jit.trace(call, (q, k, idx, sink), check_trace=False)
    assert "latentkv::sparse_decode" in str(traced.graph)
    for fn in (call, traced):
        out, lse = fn(q, k, idx, sink)
        assert lse.shape == (2, 5, 3) and lse.stride() == (15, 1, 5), lse.stride()
        assert lse.transpose(1, 2).is_contiguous()
        torch.testing.assert_close(out, ref_out, rtol=0, atol=0)
        torch.testing.assert_close(lse, ref_lse, rtol=0, atol=0)
