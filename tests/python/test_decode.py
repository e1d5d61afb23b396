"""Sparse decode through the binding: the fast CPU path against the float64 oracle (max_rel <= 1e-2,
cosine >= 0.9999, lse close and exactly +inf for lonely queries), special values, the planner,
strided outputs, and error messages."""

import numpy as np
import pytest

import latentkv
from conftest import BF16, decode_close, decode_inputs


def run(inp, impl, **kw):
    args = dict(inp)
    return latentkv.sparse_decode(args.pop("q"), args.pop("k_cache"), args.pop("indices"),
                                  impl=impl, **args, **kw)


def check_against_oracle(inp, **kw):
    out, lse = run(inp, "fast", **kw)
    ref_out, ref_lse = run(inp, "oracle", **kw)
    assert out.dtype == BF16 and lse.dtype == np.float32
    rel, cos = decode_close(out.astype(np.float32), ref_out.astype(np.float32))
    finite = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isfinite(lse), finite)
    np.testing.assert_allclose(lse[finite], ref_lse[finite], rtol=1e-5, atol=1e-5)
    return out, lse


@pytest.mark.parametrize("fmt", ["v32_fp8", "v4_fp8", "v41_fp8", "v41_fp8+v41_fp4"])
@pytest.mark.parametrize("case", ["plain", "lengths", "sink", "extra", "all"])
def test_fast_matches_oracle(fmt, case):
    fmt, _, extra_fmt = fmt.partition("+")
    flags = dict(lengths=case in ("lengths", "all"), sink=case in ("sink", "all"),
                 extra=case in ("extra", "all") or bool(extra_fmt))
    inp = decode_inputs(fmt, h_q=3 if case == "sink" else 16, seed=hash(case) % 1000,
                        extra_fmt=extra_fmt or None, **flags)
    out, lse = check_against_oracle(inp)
    b, s_q, h_q = inp["q"].shape[:3]
    assert out.shape == (b, s_q, h_q, 512) and lse.shape == (b, h_q, s_q)


def decode_reference(inp, fmt, extra_fmt):
    """sparse_decode per SPEC.md section 4 in float64 NumPy, the keys from latentkv.dequantize (the
    format code, not the decode code): main candidates then extra ones, lengths clamp, indices
    outside a cache skipped, the sink scales out, lonely queries get 0 and +inf."""
    q = inp["q"].astype(np.float64)
    b, s_q, h_q, d_qk = q.shape
    scale = d_qk ** -0.5
    out = np.zeros((b, s_q, h_q, 512))
    lse = np.zeros((b, h_q, s_q))
    caches = [(inp["k_cache"], inp["indices"], inp.get("topk_length"), fmt)]
    if "extra_k_cache" in inp:
        caches.append((inp["extra_k_cache"], inp["extra_indices"], inp.get("extra_topk_length"),
                       extra_fmt))
    for i in range(b):
        for j in range(s_q):
            keys = []
            for cache, idx, length, f in caches:
                n = idx.shape[-1] if length is None else min(max(int(length[i]), 0), idx.shape[-1])
                slots = idx[i, j, :n].astype(np.int64)
                slots = slots[(slots >= 0) & (slots < cache.shape[0] * cache.shape[1])]
                keys.append(latentkv.dequantize(cache, slots, f).astype(np.float64))
            k = np.concatenate(keys)
            if len(k) == 0:
                lse[i, :, j] = np.inf
                continue
            s = q[i, j] @ k.T * scale  # [h_q, n]
            m = s.max(axis=1, keepdims=True)
            e = np.exp(s - m)
            total = e.sum(axis=1, keepdims=True)
            l = (m + np.log(total))[:, 0]
            o = e @ k[:, :512] / total
            if inp.get("attn_sink") is not None:
                o *= 1.0 / (1.0 + np.exp(inp["attn_sink"].astype(np.float64) - l))[:, None]
            out[i, j] = o
            lse[i, :, j] = l
    return out, lse


@pytest.mark.parametrize("lengths,sink", [(False, False), (True, True)])
def test_fp4_extra_cache_against_numpy(lengths, sink):
    """DeepSeek V4.1's pairing: a v41_fp8 cache with a v41_fp4 extra cache, both CPU paths against
    a NumPy reference built on latentkv.dequantize."""
    inp = decode_inputs("v41_fp8", b=3, s_q=2, h_q=5, topk=64, seed=17, extra=True,
                        lengths=lengths, sink=sink, extra_fmt="v41_fp4")
    assert inp["extra_k_cache"].shape[-1] == 288
    ref_out, ref_lse = decode_reference(inp, "v41_fp8", "v41_fp4")
    for impl in ("oracle", "fast"):
        out, lse = run(inp, impl)
        decode_close(out.astype(np.float32), ref_out)
        finite = np.isfinite(ref_lse)
        np.testing.assert_array_equal(np.isfinite(lse), finite)
        np.testing.assert_allclose(lse[finite], ref_lse[finite], rtol=1e-5, atol=1e-5)
    # The extra cache named v41_fp8 (528-byte records) does not fit its 288-byte view.
    with pytest.raises(ValueError, match=r"288"):
        run(dict(inp, extra_format="v41_fp8"), "fast")


def test_formats_told_by_bytes_per_token():
    # Without format / extra_format, 4-D caches name their formats by bytes per token: 528 is
    # v41_fp8 (d_qk 512 alone would mean v4_fp8), and 288 beside it V4.1's v41_fp4 extra cache.
    inp = decode_inputs("v41_fp8", b=2, s_q=1, h_q=3, topk=32, seed=18, extra=True, extra_fmt="v41_fp4")
    explicit = run(inp, "fast")
    told = run({k: v for k, v in inp.items() if k not in ("format", "extra_format")}, "fast")
    np.testing.assert_array_equal(told[0].view(np.uint16), explicit[0].view(np.uint16))
    np.testing.assert_array_equal(told[1], explicit[1])
    # A 2-D cache has no bytes per token: d_qk 512 then means v4_fp8, named in the error.
    k2 = inp["k_cache"].reshape(inp["k_cache"].shape[0], -1)
    with pytest.raises(ValueError, match=r"for format v4_fp8"):
        latentkv.sparse_decode(inp["q"], k2, inp["indices"], page_size=64)


def test_explicit_scale_and_default():
    inp = decode_inputs("v32_fp8", seed=11)
    default = run(inp, "fast")
    explicit = run(inp, "fast", softmax_scale=576 ** -0.5)
    np.testing.assert_array_equal(default[0].view(np.uint16), explicit[0].view(np.uint16))
    check_against_oracle(inp, softmax_scale=0.3)


def test_lonely_queries_and_infinite_sink():
    inp = decode_inputs("v4_fp8", b=2, h_q=4, seed=12)
    inp["indices"][0] = -1  # request 0 has no valid key
    inp["attn_sink"] = np.array([np.inf, -np.inf, 0.0, 1.0], np.float32)
    out, lse = check_against_oracle(inp)
    assert np.isposinf(lse[0]).all() and not out[0].astype(np.float32).any()
    assert not out[1, :, 0].astype(np.float32).any(), "sink +inf zeroes the output"
    no_sink = run(dict(inp, attn_sink=None), "fast")
    np.testing.assert_array_equal(out[1, :, 1].view(np.uint16), no_sink[0][1, :, 1].view(np.uint16))
    np.testing.assert_array_equal(lse, no_sink[1])  # the sink never changes lse


def test_strided_outputs_and_plan():
    inp = decode_inputs("v32_fp8", b=2, s_q=3, h_q=8, seed=13)
    b, s_q, h_q = 2, 3, 8
    out_big = np.zeros((b, s_q, h_q, 2, 512), BF16)
    lse_big = np.zeros((b, h_q, s_q * 2), np.float32)
    plan = latentkv.plan_decode(b, s_q, h_q, inp["indices"].shape[-1])
    out, lse = run(inp, "fast", out=out_big[:, :, :, 1], lse=lse_big[:, :, :s_q], plan=plan)
    ref_out, ref_lse = run(inp, "fast")
    np.testing.assert_array_equal(out_big[:, :, :, 1].view(np.uint16), ref_out.view(np.uint16))
    np.testing.assert_array_equal(lse_big[:, :, :s_q], ref_lse)
    assert not out_big[:, :, :, 0].astype(np.float32).any()


def test_planner():
    plan = latentkv.plan_decode(1, 1, 64, 2048, num_sms=132)
    assert plan.num_splits * plan.keys_per_split >= 2048 and plan.keys_per_split % 64 == 0
    assert (plan.b, plan.s_q, plan.h_q, plan.topk, plan.extra_topk) == (1, 1, 64, 2048, 0)
    assert latentkv.plan_decode(128, 2, 128, 2048, num_sms=132).num_splits == 1
    assert plan == latentkv.plan_decode(1, 1, 64, 2048, num_sms=132)
    assert latentkv.sparse_decode_workspace_bytes(plan) > 0
    assert latentkv.sparse_decode_workspace_bytes(latentkv.DecodePlan(num_splits=1)) == 0
    # The fields also as a plain tuple (what torch.compile reads), equal to the attributes.
    assert plan.fields == (plan.num_splits, plan.keys_per_split, 1, 1, 64, 2048, 0, plan.unsplit_b)
    assert latentkv.DecodePlan(2, 64, b=3).fields == (2, 64, 3, 0, 0, 0, 0, 0)
    with pytest.raises(ValueError, match=r"plan_decode: bad shape b=0"):
        latentkv.plan_decode(0, 1, 1, 1)
    # The split costs per kernel (docs/decode.md): V3.2 b 67 runs 66 requests unsplit and splits the
    # last one 32 ways for the portable kernel, 16 for the Hopper one, whose key steps are shorter
    # against the combine.
    port = latentkv.plan_decode(67, 2, 128, 2048, num_sms=132, kernel="portable")
    assert (port.unsplit_b, port.num_splits, port.keys_per_split) == (66, 32, 64)
    hop = latentkv.plan_decode(67, 2, 128, 2048, num_sms=132, kernel="sm90")
    assert (hop.unsplit_b, hop.num_splits) == (66, 16)
    # A two-launch plan survives DecodePlan's constructor (the torch op's list form) and repr.
    assert latentkv.DecodePlan(32, 64, 67, 2, 128, 2048, 0, 66) == port
    assert latentkv.DecodePlan(32, 64, 67, 2, 128, 2048, 0, 0) != port
    assert "unsplit_b=66" in repr(port)
    # Its workspace holds the one split request's partials only.
    rows = 1 * 2 * 128 * 32
    assert latentkv.sparse_decode_workspace_bytes(port) == (rows * 512 * 4 + 255) // 256 * 256 + rows * 4
    with pytest.raises(ValueError, match=r"plan_decode: unknown kernel 'hopper'; valid: auto, portable, sm90"):
        latentkv.plan_decode(74, 2, 128, 2048, num_sms=132, kernel="hopper")


def test_errors():
    inp = decode_inputs("v32_fp8", b=2, s_q=2, h_q=4, seed=14)
    q = inp["q"]
    with pytest.raises(ValueError, match=r"expected q of shape \[b, s_q, h_q, 576\] bf16, got \[2, 2, 4, 512\] bf16"):
        latentkv.sparse_decode(q[..., :512], inp["k_cache"], inp["indices"], format="v32_fp8")
    with pytest.raises(TypeError, match=r"expected q of shape \[b, s_q, h_q, 576\] bf16, got \[2, 2, 4, 576\] f32"):
        latentkv.sparse_decode(q.astype(np.float32), inp["k_cache"], inp["indices"])
    with pytest.raises(TypeError, match=r"expected indices of shape \[b, s_q, topk\] i32"):
        latentkv.sparse_decode(q, inp["k_cache"], inp["indices"].astype(np.int64))
    with pytest.raises(ValueError, match=r"extra_k_cache and extra_indices must be given together, "
                       r"got extra_k_cache without extra_indices"):
        latentkv.sparse_decode(q, inp["k_cache"], inp["indices"], extra_k_cache=inp["k_cache"])
    with pytest.raises(ValueError, match=r"sparse_decode supports v32_fp8, v4_fp8 and v41_fp8 caches "
                       r"\(v41_fp4 only as the extra cache of a v41_fp8 one\), got v4_int8"):
        latentkv.sparse_decode(q[..., :512], inp["k_cache"], inp["indices"], format="v4_int8")
    with pytest.raises(ValueError, match=r"extra_format \(v41_fp4\) given without extra_k_cache"):
        latentkv.sparse_decode(q, inp["k_cache"], inp["indices"], extra_format="v41_fp4")
    with pytest.raises(ValueError, match=r"the extra cache's format must be k_cache's \(v32_fp8\) or, "
                       r"with a v41_fp8 k_cache, v41_fp4; got extra_format v41_fp4"):
        latentkv.sparse_decode(q, inp["k_cache"], inp["indices"], extra_k_cache=inp["k_cache"],
                               extra_indices=inp["indices"], extra_format="v41_fp4")
    with pytest.raises(ValueError, match=r"softmax_scale must be finite"):
        latentkv.sparse_decode(q, inp["k_cache"], inp["indices"], softmax_scale=float("nan"))
    with pytest.raises(ValueError, match=r"the plan was made for b=1 s_q=1 h_q=64 topk=2048"):
        latentkv.sparse_decode(q, inp["k_cache"], inp["indices"],
                               plan=latentkv.plan_decode(1, 1, 64, 2048))
    with pytest.raises(ValueError, match=r"cannot infer the cache format from d_qk=100"):
        latentkv.sparse_decode(q[..., :100], inp["k_cache"].reshape(8, -1), inp["indices"], page_size=64)
    # (A 4-D cache names its format by bytes per token; q is then checked against it.)
    with pytest.raises(ValueError, match=r"expected q of shape \[b, s_q, h_q, 576\] bf16, got \[2, 2, 4, 100\]"):
        latentkv.sparse_decode(q[..., :100], inp["k_cache"], inp["indices"])
    # Outputs may not share memory with each other or with an input (nothing is written then).
    out = np.full((2, 2, 4, 512), 7, BF16)
    lse = out.reshape(-1).view(np.float32)[:16].reshape(2, 4, 2)
    before = out.copy()
    with pytest.raises(ValueError, match=r"sparse_decode: out overlaps lse in memory"):
        latentkv.sparse_decode(q, inp["k_cache"], inp["indices"], out=out, lse=lse)
    np.testing.assert_array_equal(out.view(np.uint16), before.view(np.uint16))
    # With or without the CUDA backend built, host tensors cannot run on it.
    with pytest.raises(TypeError, match=r"implementation cuda cannot run on tensors on cpu"):
        latentkv.sparse_decode(q, inp["k_cache"], inp["indices"], impl="cuda")


def test_sparse_decode_two_dimensional_caches():
    inp = decode_inputs("v4_fp8", seed=63, extra=True)
    k2 = inp["k_cache"].reshape(inp["k_cache"].shape[0], -1)
    e2 = inp["extra_k_cache"].reshape(inp["extra_k_cache"].shape[0], -1)
    ref = latentkv.sparse_decode(inp["q"], inp["k_cache"], inp["indices"],
                                 extra_k_cache=inp["extra_k_cache"], extra_indices=inp["extra_indices"])
    got = latentkv.sparse_decode(inp["q"], k2, inp["indices"], page_size=64, extra_k_cache=e2,
                                 extra_indices=inp["extra_indices"], extra_page_size=32)
    np.testing.assert_array_equal(got[0].view(np.uint16), ref[0].view(np.uint16))
    np.testing.assert_array_equal(got[1], ref[1])
