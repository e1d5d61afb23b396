"""Sparse prefill (one sequence and batched) and dense decode through the binding: the fast CPU path
against the float64 oracle (max_rel <= 1e-2 of max |ref|, cosine >= 0.9999, lse and max_logits
close and in the same class), the oracle against a small NumPy reference (argument plumbing),
lonely queries exactly (out 0, lse +inf, max_logits -inf), f16 dense decode, strided outputs,
errors as ValueError/TypeError with the core's message (nothing written), latentkv.flash_mla's
flash_mla_sparse_fwd and dense flash_mla_with_kvcache against the native calls, and the torch
custom ops (skipped without torch)."""

import inspect

import numpy as np
import pytest

import latentkv
from conftest import BF16, bf16, decode_close
from latentkv.flash_mla import flash_mla_sparse_fwd, flash_mla_with_kvcache, get_mla_metadata

F16 = np.float16


# ---- workloads -------------------------------------------------------------------------------

def prefill_inputs(s_q=5, h_q=6, d_qk=576, s_kv=200, topk=64, seed=0, lengths=False, sink=False):
    """Sparse-prefill inputs: random bf16 q and kv, indices with -1, s_kv and INT_MAX entries."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, s_kv, (s_q, 1, topk), dtype=np.int32)
    bad = rng.random(idx.shape)
    idx[bad < 0.05] = -1
    idx[(bad >= 0.05) & (bad < 0.08)] = s_kv
    idx[(bad >= 0.08) & (bad < 0.1)] = np.iinfo(np.int32).max
    inp = dict(q=bf16(rng.standard_normal((s_q, h_q, d_qk))),
               kv=bf16(rng.standard_normal((s_kv, 1, d_qk))), indices=idx,
               sm_scale=float(d_qk) ** -0.5)
    if lengths:
        inp["topk_length"] = rng.integers(0, topk + 1, s_q, dtype=np.int32)
    if sink:
        inp["attn_sink"] = rng.standard_normal(h_q).astype(np.float32)
    return inp


def dense_inputs(dtype="bf16", b=3, s_q=2, h_q=8, h_kv=1, P=16, max_pages=6, seed=0,
                 lengths=None):
    """Dense-decode inputs: a paged cache (bf16, f16, or v32_fp8 records from latentkv.quantize),
    a shuffled block table with garbage past each request's pages, and lengths."""
    rng = np.random.default_rng(seed)
    d_qk = 576
    num_pages = b * max_pages
    if lengths is None:
        lengths = rng.integers(0, max_pages * P + 1, b)
    lengths = np.asarray(lengths, np.int32)
    table = rng.permutation(num_pages).astype(np.int32).reshape(b, max_pages)
    for i, n in enumerate(lengths):  # entries past the needed pages are never read
        table[i, (int(n) + P - 1) // P:] = rng.choice([-1, num_pages, np.iinfo(np.int32).max])
    half = F16 if dtype == "f16" else BF16
    q = rng.standard_normal((b, s_q, h_q, d_qk)).astype(np.float32).astype(half)
    if dtype == "v32_fp8":
        cache = np.zeros((num_pages, P, 1, 656), np.uint8)
        n = num_pages * P
        latentkv.quantize(bf16(rng.standard_normal((n, d_qk))), np.arange(n), cache, "v32_fp8")
    else:
        cache = rng.standard_normal((num_pages, P, h_kv, d_qk)).astype(np.float32).astype(half)
    return dict(q=q, k_cache=cache, block_table=table, cache_seqlens=lengths,
                fp8=dtype == "v32_fp8")


def prefill(inp, impl="auto", **kw):
    a = dict(inp)
    return latentkv.sparse_prefill(a.pop("q"), a.pop("kv"), a.pop("indices"), a.pop("sm_scale"),
                                   impl=impl, **a, **kw)


def dense(inp, impl="auto", **kw):
    a = dict(inp)
    return latentkv.dense_decode(a.pop("q"), a.pop("k_cache"), a.pop("block_table"),
                                 a.pop("cache_seqlens"), impl=impl, **a, **kw)


def f32(a):
    return np.asarray(a).astype(np.float32)


def bits(a):
    return np.asarray(a).view(np.uint16)


def assert_stats_close(got, ref):
    """lse / max_logits: the same class (finite, +inf, -inf) everywhere, close where finite."""
    for cls in (np.isfinite, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(cls(got), cls(ref))
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-5, atol=1e-5)


# ---- NumPy references (float64), small shapes: they check what the binding passes ------------

def prefill_reference(inp, seq_offsets_q=None, seq_offsets_kv=None):
    q, kv, idx = f32(inp["q"]).astype(np.float64), f32(inp["kv"]).astype(np.float64), inp["indices"]
    s_q, h_q, _ = q.shape
    s_kv, topk = kv.shape[0], idx.shape[-1]
    oq = [0, s_q] if seq_offsets_q is None else list(seq_offsets_q)
    okv = [0, s_kv] if seq_offsets_kv is None else list(seq_offsets_kv)
    out = np.zeros((s_q, h_q, 512))
    ml = np.full((s_q, h_q), -np.inf)
    lse = np.full((s_q, h_q), np.inf)
    for n in range(len(oq) - 1):
        base, seg = okv[n], okv[n + 1] - okv[n]
        for t in range(oq[n], oq[n + 1]):
            k = topk if inp.get("topk_length") is None else max(0, min(topk, inp["topk_length"][t]))
            rows = [base + int(i) for i in idx[t, 0, :k] if 0 <= i < seg]
            if not rows:
                continue
            keys = kv[rows, 0]
            s = inp["sm_scale"] * (q[t] @ keys.T)  # [h_q, n]
            m = s.max(axis=1)
            e = np.exp(s - m[:, None])
            ml[t], lse[t] = m, m + np.log(e.sum(axis=1))
            o = (e / e.sum(axis=1, keepdims=True)) @ keys[:, :512]
            if inp.get("attn_sink") is not None:
                o *= (1.0 / (1.0 + np.exp(inp["attn_sink"].astype(np.float64) - lse[t])))[:, None]
            out[t] = o
    return out, ml, lse


def dense_reference(inp, causal, scale):
    q = f32(inp["q"]).astype(np.float64)
    b, s_q, h_q, d_qk = q.shape
    if inp["fp8"]:
        flat = inp["k_cache"].shape[0] * inp["k_cache"].shape[1]
        from conftest import decode_records
        cache = decode_records(inp["k_cache"], np.arange(flat), "v32_fp8").reshape(
            inp["k_cache"].shape[0], inp["k_cache"].shape[1], 1, d_qk).astype(np.float64)
    else:
        cache = f32(inp["k_cache"]).astype(np.float64)
    P, h_kv = cache.shape[1], cache.shape[2]
    out = np.zeros((b, s_q, h_q, 512))
    lse = np.full((b, h_q, s_q), np.inf)
    for i in range(b):
        n_all = int(inp["cache_seqlens"][i])
        keys_all = np.stack([cache[inp["block_table"][i, t // P], t % P] for t in range(n_all)]) \
            if n_all else np.zeros((0, h_kv, d_qk))
        for j in range(s_q):
            n = max(0, n_all - (s_q - 1 - j)) if causal else n_all
            if n == 0:
                continue
            for h in range(h_q):
                keys = keys_all[:n, h // (h_q // h_kv)]
                s = scale * (keys @ q[i, j, h])
                m = s.max()
                e = np.exp(s - m)
                lse[i, h, j] = m + np.log(e.sum())
                out[i, j, h] = (e / e.sum()) @ keys[:, :512]
    return out, lse


# ---- sparse prefill --------------------------------------------------------------------------

@pytest.mark.parametrize("d_qk", [512, 576])
@pytest.mark.parametrize("case", ["plain", "lengths", "sink", "all"])
def test_prefill_fast_matches_oracle(d_qk, case):
    inp = prefill_inputs(d_qk=d_qk, h_q=3 if case == "sink" else 16, seed=d_qk + len(case),
                         lengths=case in ("lengths", "all"), sink=case in ("sink", "all"))
    out, ml, lse = prefill(inp, "fast")
    ref_out, ref_ml, ref_lse = prefill(inp, "oracle")
    s_q, h_q = inp["q"].shape[:2]
    assert out.dtype == BF16 and out.shape == (s_q, h_q, 512)
    assert ml.dtype == lse.dtype == np.float32 and ml.shape == lse.shape == (s_q, h_q)
    decode_close(f32(out), f32(ref_out))
    assert_stats_close(ml, ref_ml)
    assert_stats_close(lse, ref_lse)
    auto = prefill(inp)  # auto is the fast path on the host
    np.testing.assert_array_equal(bits(auto[0]), bits(out))


def test_prefill_oracle_matches_numpy_reference():
    inp = prefill_inputs(s_q=4, h_q=3, d_qk=576, s_kv=40, topk=16, seed=7, lengths=True, sink=True)
    inp["sm_scale"] = 0.07
    out, ml, lse = prefill(inp, "oracle")
    ref_out, ref_ml, ref_lse = prefill_reference(inp)
    decode_close(f32(out), ref_out)
    assert_stats_close(ml, ref_ml)
    assert_stats_close(lse, ref_lse)


def test_prefill_lonely_queries_and_infinite_sink():
    inp = prefill_inputs(s_q=4, h_q=4, s_kv=50, topk=8, seed=8)
    inp["indices"][0] = -1                    # no valid index
    inp["indices"][1] = [[50, -2, 1 << 30, np.iinfo(np.int32).min, 50, 51, -1, 99]]  # all outside
    inp["topk_length"] = np.array([8, 8, 0, 8], np.int32)  # row 2: length 0
    inp["attn_sink"] = np.array([np.inf, -np.inf, 0.0, 1.0], np.float32)
    for impl in ("fast", "oracle"):
        out, ml, lse = prefill(inp, impl)
        for t in (0, 1, 2):
            assert not f32(out[t]).any() and np.isposinf(lse[t]).all() and np.isneginf(ml[t]).all()
        assert not f32(out[3, 0]).any(), "sink +inf zeroes the output"
        no_sink = prefill(dict(inp, attn_sink=None), impl)
        np.testing.assert_array_equal(bits(out[3, 1]), bits(no_sink[0][3, 1]))  # -inf: no effect
        np.testing.assert_array_equal(lse, no_sink[2])   # the sink never changes lse
        np.testing.assert_array_equal(ml, no_sink[1])    # nor max_logits


def test_prefill_strided_outputs_and_views():
    inp = prefill_inputs(s_q=3, h_q=4, seed=9)
    out_big = np.zeros((3, 4, 2, 512), BF16)
    ml_big = np.zeros((3, 8), np.float32)
    lse_big = np.zeros((3, 2, 4), np.float32)
    out, ml, lse = prefill(inp, "fast", out=out_big[:, :, 1], max_logits=ml_big[:, :4],
                           lse=lse_big[:, 1])
    ref = prefill(inp, "fast")
    np.testing.assert_array_equal(bits(out_big[:, :, 1]), bits(ref[0]))
    np.testing.assert_array_equal(ml_big[:, :4], ref[1])
    np.testing.assert_array_equal(lse_big[:, 1], ref[2])
    assert not f32(out_big[:, :, 0]).any() and not ml_big[:, 4:].any()
    # q and kv as views of larger arrays (free outer strides): the same result bitwise.
    wide_q = np.zeros((3, 4, 2, 576), BF16)
    wide_q[:, :, 1] = inp["q"]
    wide_kv = np.zeros((inp["kv"].shape[0], 1, 1200), BF16)
    wide_kv[:, :, 600:1176] = inp["kv"]
    got = prefill(dict(inp, q=wide_q[:, :, 1], kv=wide_kv[:, :, 600:1176]), "fast")
    np.testing.assert_array_equal(bits(got[0]), bits(ref[0]))


def test_prefill_batched_matches_separate_calls():
    rng = np.random.default_rng(10)
    oq = np.array([0, 3, 3, 7, 9], np.int64)     # sequence 1 has no query rows
    okv = np.array([0, 40, 70, 70, 130], np.int64)  # sequence 2 has no kv rows
    s_q, s_kv, h_q, topk = 9, 130, 5, 24
    inp = dict(q=bf16(rng.standard_normal((s_q, h_q, 512))),
               kv=bf16(rng.standard_normal((s_kv, 1, 512))),
               indices=rng.integers(-2, 65, (s_q, 1, topk), dtype=np.int32), sm_scale=0.05,
               topk_length=rng.integers(0, topk + 1, s_q, dtype=np.int32),
               attn_sink=rng.standard_normal(h_q).astype(np.float32))
    a = dict(inp)
    out, ml, lse = latentkv.sparse_prefill_batched(a.pop("q"), a.pop("kv"), a.pop("indices"),
                                                   a.pop("sm_scale"), oq, okv, impl="fast", **a)
    a = dict(inp)
    ref = latentkv.sparse_prefill_batched(a.pop("q"), a.pop("kv"), a.pop("indices"),
                                          a.pop("sm_scale"), oq, okv, impl="oracle", **a)
    decode_close(f32(out), f32(ref[0]))
    assert_stats_close(ml, ref[1])
    assert_stats_close(lse, ref[2])
    np_out, np_ml, np_lse = prefill_reference(inp, oq, okv)
    decode_close(f32(ref[0]), np_out)
    assert_stats_close(ref[2], np_lse)
    assert np.isposinf(lse[3:7]).all() and np.isneginf(ml[3:7]).all() and not f32(out[3:7]).any()
    for n in (0, 2, 3):  # each sequence alone gives the same rows bitwise
        rows, kvs = slice(oq[n], oq[n + 1]), slice(okv[n], okv[n + 1])
        alone = latentkv.sparse_prefill(
            inp["q"][rows], inp["kv"][kvs], inp["indices"][rows], inp["sm_scale"],
            topk_length=inp["topk_length"][rows], attn_sink=inp["attn_sink"], impl="fast")
        np.testing.assert_array_equal(bits(alone[0]), bits(out[rows]))
        np.testing.assert_array_equal(alone[1], ml[rows])
        np.testing.assert_array_equal(alone[2], lse[rows])


def test_prefill_errors():
    inp = prefill_inputs(s_q=2, h_q=4, s_kv=256, seed=11)
    q, kv, idx = inp["q"], inp["kv"], inp["indices"]
    out = np.full((2, 4, 512), 7, BF16)
    with pytest.raises(ValueError, match=r"sparse_prefill: sm_scale must be finite and > 0, got 0"):
        latentkv.sparse_prefill(q, kv, idx, 0.0, out=out)
    assert (f32(out) == 7).all(), "nothing written on failure"
    with pytest.raises(ValueError, match=r"sparse_prefill supports d_v = 512, got d_v=256"):
        latentkv.sparse_prefill(q, kv, idx, 0.1, d_v=256)
    with pytest.raises(ValueError, match=r"expected kv of shape \[s_kv, 1, d_qk\] bf16, got "
                                         r"\[256, 1, 512\] bf16 \(d_qk is 576 elsewhere\)"):
        latentkv.sparse_prefill(q, kv[..., :512], idx, 0.1)
    with pytest.raises(TypeError, match=r"expected kv of shape \[s_kv, 1, d_qk\] bf16, got "
                                        r"\[256, 1, 576\] f32"):
        latentkv.sparse_prefill(q, f32(kv), idx, 0.1)
    with pytest.raises(TypeError, match=r"expected indices of shape \[s_q, 1, topk\] i32"):
        latentkv.sparse_prefill(q, kv, idx.astype(np.int64), 0.1)
    with pytest.raises(ValueError, match=r"sparse_prefill needs d_v <= d_qk <= 65536"):
        latentkv.sparse_prefill(q[..., :256], kv[..., :256], idx, 0.1)
    with pytest.raises(ValueError, match=r"unknown impl 'gpu'; valid: auto, oracle, fast, cuda"):
        latentkv.sparse_prefill(q, kv, idx, 0.1, impl="gpu")
    with pytest.raises(TypeError, match=r"sparse_prefill: implementation cuda cannot run on "
                                        r"tensors on cpu"):
        latentkv.sparse_prefill(q, kv, idx, 0.1, impl="cuda")
    oq, okv = np.array([0, 1, 2], np.int64), np.array([0, 100, 256], np.int64)
    with pytest.raises(ValueError, match=r"sparse_prefill_batched: seq_offsets_q\[0\] must be 0, got 1"):
        latentkv.sparse_prefill_batched(q, kv, idx, 0.1, np.array([1, 1, 2], np.int64), okv)
    with pytest.raises(ValueError, match=r"seq_offsets_kv must be non-decreasing, got "
                                         r"seq_offsets_kv\[0\]=0 > seq_offsets_kv\[1\]=-1"):
        latentkv.sparse_prefill_batched(q, kv, idx, 0.1, oq, np.array([0, -1, 256], np.int64))
    with pytest.raises(ValueError, match=r"seq_offsets_kv\[2\] must equal s_kv=256, got 257"):
        latentkv.sparse_prefill_batched(q, kv, idx, 0.1, oq, np.array([0, 1, 257], np.int64))
    with pytest.raises(TypeError, match=r"expected seq_offsets_q of shape \[num_seqs \+ 1\] i64"):
        latentkv.sparse_prefill_batched(q, kv, idx, 0.1, oq.astype(np.int32), okv)


# ---- dense decode ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["bf16", "f16", "v32_fp8"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("s_q,h_q,h_kv,P", [(1, 16, 1, 64), (3, 6, 2, 16), (2, 3, 1, 7)])
def test_dense_fast_matches_oracle(dtype, causal, s_q, h_q, h_kv, P):
    if dtype == "v32_fp8":
        h_kv = 1
    inp = dense_inputs(dtype, s_q=s_q, h_q=h_q, h_kv=h_kv, P=P, seed=P + s_q,
                       lengths=[0, 1, 5 * P + 3] if s_q > 1 else None)
    out, lse = dense(inp, "fast", causal=causal)
    ref_out, ref_lse = dense(inp, "oracle", causal=causal)
    b = inp["q"].shape[0]
    assert out.dtype == (F16 if dtype == "f16" else BF16) and out.shape == (b, s_q, h_q, 512)
    assert lse.dtype == np.float32 and lse.shape == (b, h_q, s_q)
    decode_close(f32(out), f32(ref_out))
    assert_stats_close(lse, ref_lse)
    for i, n in enumerate(inp["cache_seqlens"]):  # rows that see no key: out 0, lse +inf
        for j in range(s_q):
            if (max(0, n - (s_q - 1 - j)) if causal else n) == 0:
                assert np.isposinf(lse[i, :, j]).all() and not f32(out[i, j]).any()
                assert np.isposinf(ref_lse[i, :, j]).all() and not f32(ref_out[i, j]).any()


@pytest.mark.parametrize("dtype", ["bf16", "f16", "v32_fp8"])
def test_dense_oracle_matches_numpy_reference(dtype):
    inp = dense_inputs(dtype, b=2, s_q=3, h_q=4, h_kv=1 if dtype == "v32_fp8" else 2, P=5,
                       max_pages=4, seed=21, lengths=[2, 13])
    out, lse = dense(inp, "oracle", causal=True, softmax_scale=0.05)
    ref_out, ref_lse = dense_reference(inp, causal=True, scale=0.05)
    decode_close(f32(out), ref_out)
    assert_stats_close(lse, ref_lse)
    default = dense(inp, "fast")  # softmax_scale None: d_qk ** -0.5
    explicit = dense(inp, "fast", softmax_scale=576 ** -0.5)
    np.testing.assert_array_equal(bits(default[0]), bits(explicit[0]))


def test_dense_f16_numpy_and_strided_outputs():
    inp = dense_inputs("f16", b=2, s_q=2, h_q=4, P=8, seed=22)
    assert inp["q"].dtype == np.float16
    out, lse = dense(inp)
    assert out.dtype == np.float16 and np.isfinite(f32(out)).all()
    out_big = np.zeros((2, 2, 4, 2, 512), F16)
    lse_big = np.zeros((2, 4, 5), np.float32)
    dense(inp, out=out_big[:, :, :, 1], lse=lse_big[:, :, 1:3])
    np.testing.assert_array_equal(bits(out_big[:, :, :, 1]), bits(out))
    np.testing.assert_array_equal(lse_big[:, :, 1:3], lse)
    assert not f32(out_big[:, :, :, 0]).any() and not lse_big[:, :, 3:].any()
    # A float8 view of the v32_fp8 cache is the same bytes.
    import ml_dtypes
    fp8 = dense_inputs("v32_fp8", b=2, s_q=1, h_q=4, P=8, seed=23)
    a = dense(fp8)
    b = dense(dict(fp8, k_cache=fp8["k_cache"].view(ml_dtypes.float8_e4m3fn)))
    np.testing.assert_array_equal(bits(a[0]), bits(b[0]))


def test_dense_errors():
    inp = dense_inputs("bf16", b=2, s_q=1, h_q=4, P=8, max_pages=5, seed=24, lengths=[8, 25])
    q, k, bt, lens = inp["q"], inp["k_cache"], inp["block_table"], inp["cache_seqlens"]
    out = np.full((2, 1, 4, 512), 3, BF16)
    lse = np.full((2, 4, 1), 3, np.float32)
    with pytest.raises(ValueError, match=r"dense_decode: cache_seqlens\[1\]=41 is outside "
                                         r"\[0, max_pages \* P\] = \[0, 40\]"):
        latentkv.dense_decode(q, k, bt, np.array([8, 41], np.int32), out=out, lse=lse)
    assert (f32(out) == 3).all() and (lse == 3).all(), "nothing written on failure"
    bad = bt.copy()
    bad[1, 2] = -1
    with pytest.raises(ValueError, match=r"dense_decode: request 1 logical block 2: "
                                         r"block_table\[1\]\[2\]=-1 is outside \[0, num_pages=10\) "
                                         r"\(cache_seqlens\[1\]=25 needs 4 blocks\)"):
        latentkv.dense_decode(q, k, bad, lens)
    with pytest.raises(TypeError, match=r"dense_decode: q must be bf16 or f16, got .* f32"):
        latentkv.dense_decode(f32(q), k, bt, lens)
    with pytest.raises(TypeError, match=r"expected k_cache of shape \[num_pages, P, h_kv, d_qk\] "
                                        r"f16, got \[10, 8, 1, 576\] bf16"):
        latentkv.dense_decode(q.astype(np.float32).astype(F16), k, bt, lens)
    with pytest.raises(ValueError, match=r"dense_decode: h_q=4 must be a multiple of h_kv=3"):
        latentkv.dense_decode(q, np.repeat(k, 3, axis=2), bt, lens)
    with pytest.raises(ValueError, match=r"expected cache_seqlens of shape \[b\] i32, got \[3\] i32 "
                                         r"\(b is 2 elsewhere\)"):
        latentkv.dense_decode(q, k, bt, np.array([1, 2, 3], np.int32))
    with pytest.raises(TypeError, match=r"expected k_cache of shape \[num_pages, P, 1, 656\] u8, "
                                        r"got \[10, 8, 1, 576\] bf16"):
        latentkv.dense_decode(q, k, bt, lens, fp8=True)
    with pytest.raises(ValueError, match=r"dense_decode: softmax_scale must be finite and >= 0"):
        latentkv.dense_decode(q, k, bt, lens, softmax_scale=-1.0)
    with pytest.raises(ValueError, match=r"unknown impl 'gpu'"):
        latentkv.dense_decode(q, k, bt, lens, impl="gpu")
    with pytest.raises(TypeError, match=r"dense_decode: implementation cuda cannot run on tensors "
                                        r"on cpu"):
        latentkv.dense_decode(q, k, bt, lens, impl="cuda")


def test_native_signatures():
    """The binding's keyword names, as the stubs in _native.pyi give them."""
    from latentkv import _native
    inp = dense_inputs("bf16", b=1, s_q=1, h_q=2, P=4, max_pages=2, seed=25, lengths=[5])
    out = np.zeros((1, 1, 2, 512), BF16)
    lse = np.zeros((1, 2, 1), np.float32)
    _native.dense_decode(q=(inp["q"].view(np.uint16), "bf16"),
                         k_cache=(inp["k_cache"].view(np.uint16), "bf16"), fp8=False,
                         block_table=inp["block_table"], cache_seqlens=inp["cache_seqlens"],
                         causal=False, softmax_scale=0.0, d_v=512,
                         out=(out.view(np.uint16), "bf16"), lse=lse, impl="oracle", stream=0)
    ref = dense(inp, "oracle")
    np.testing.assert_array_equal(bits(out), bits(ref[0]))
    np.testing.assert_array_equal(lse, ref[1])
    p = prefill_inputs(s_q=2, h_q=2, s_kv=10, topk=4, seed=26)
    o = np.zeros((2, 2, 512), BF16)
    ml = np.zeros((2, 2), np.float32)
    ls = np.zeros((2, 2), np.float32)
    _native.sparse_prefill(q=(p["q"].view(np.uint16), "bf16"), kv=(p["kv"].view(np.uint16), "bf16"),
                           indices=p["indices"], sm_scale=p["sm_scale"], d_v=512, attn_sink=None,
                           topk_length=None, out=(o.view(np.uint16), "bf16"), max_logits=ml,
                           lse=ls, impl="oracle", stream=0)
    ref = prefill(p, "oracle")
    np.testing.assert_array_equal(bits(o), bits(ref[0]))
    _native.sparse_prefill_batched(
        q=(p["q"].view(np.uint16), "bf16"), kv=(p["kv"].view(np.uint16), "bf16"),
        indices=p["indices"], sm_scale=p["sm_scale"], d_v=512, attn_sink=None, topk_length=None,
        seq_offsets_q=np.array([0, 2], np.int64), seq_offsets_kv=np.array([0, 10], np.int64),
        out=(o.view(np.uint16), "bf16"), max_logits=ml, lse=ls, impl="oracle")
    np.testing.assert_array_equal(bits(o), bits(ref[0]))


# ---- latentkv.flash_mla ----------------------------------------------------------------------

def test_flash_mla_sparse_fwd_signature_and_result():
    params = inspect.signature(flash_mla_sparse_fwd).parameters
    assert list(params) == ["q", "kv", "indices", "sm_scale", "d_v", "attn_sink", "topk_length",
                            "indexer_topk"]
    defaults = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
    assert defaults == dict(d_v=512, attn_sink=None, topk_length=None, indexer_topk=0)
    inp = prefill_inputs(s_q=4, h_q=8, seed=30, lengths=True, sink=True)
    got = flash_mla_sparse_fwd(inp["q"], inp["kv"], inp["indices"], inp["sm_scale"], 512,
                               inp["attn_sink"], inp["topk_length"])
    ref = prefill(inp)
    assert len(got) == 3
    np.testing.assert_array_equal(bits(got[0]), bits(ref[0]))
    np.testing.assert_array_equal(got[1], ref[1])
    np.testing.assert_array_equal(got[2], ref[2])
    with pytest.raises(NotImplementedError, match=r"indexer_topk=512"):
        flash_mla_sparse_fwd(inp["q"], inp["kv"], inp["indices"], inp["sm_scale"],
                             indexer_topk=512)
    with pytest.raises(ValueError, match=r"sparse_prefill supports d_v = 512, got d_v=256"):
        flash_mla_sparse_fwd(inp["q"], inp["kv"], inp["indices"], inp["sm_scale"], d_v=256)


@pytest.mark.parametrize("dtype", ["bf16", "f16", "v32_fp8"])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_mla_dense_matches_dense_decode(dtype, causal):
    inp = dense_inputs(dtype, b=2, s_q=2, h_q=8, h_kv=1, P=16, seed=31, lengths=[1, 50])
    meta, num_splits = get_mla_metadata()
    k_cache = inp["k_cache"]
    if dtype == "v32_fp8":
        import ml_dtypes
        k_cache = k_cache.view(ml_dtypes.float8_e4m3fn)  # FlashMLA's float8 view of the bytes
    out, lse = flash_mla_with_kvcache(inp["q"], k_cache, inp["block_table"], inp["cache_seqlens"],
                                      512, meta, num_splits, causal=causal,
                                      is_fp8_kvcache=inp["fp8"])
    ref_out, ref_lse = dense(inp, causal=causal)
    assert out.dtype == ref_out.dtype and out.shape == (2, 2, 8, 512) and lse.shape == (2, 8, 2)
    np.testing.assert_array_equal(bits(out), bits(ref_out))
    np.testing.assert_array_equal(lse, ref_lse)
    assert meta.have_initialized and meta.plan is None
    assert (meta.config.topk, meta.config.extra_topk, meta.config.causal) == (None, None, causal)
    assert meta.config.h_k == 1 and meta.config.page_block_size == 16
    assert meta.config.is_fp8_kvcache == inp["fp8"]
    again = flash_mla_with_kvcache(inp["q"], k_cache, inp["block_table"], inp["cache_seqlens"],
                                   512, meta, causal=causal, is_fp8_kvcache=inp["fp8"],
                                   softmax_scale=576 ** -0.5)
    np.testing.assert_array_equal(bits(again[0]), bits(out))
    with pytest.raises(ValueError, match=rf"causal is {not causal}, but the scheduling metadata "
                                         rf"was made for causal={causal}"):
        flash_mla_with_kvcache(inp["q"], k_cache, inp["block_table"], inp["cache_seqlens"], 512,
                               meta, causal=not causal, is_fp8_kvcache=inp["fp8"])


def test_flash_mla_dense_rejections():
    inp = dense_inputs("bf16", b=2, s_q=1, h_q=4, P=16, seed=32)
    q, k, bt, lens = inp["q"], inp["k_cache"], inp["block_table"], inp["cache_seqlens"]
    meta, _ = get_mla_metadata()
    with pytest.raises(ValueError, match=r"attn_sink, topk_length must be None when indices is None"):
        flash_mla_with_kvcache(q, k, bt, lens, 512, meta, attn_sink=np.zeros(4, np.float32),
                               topk_length=np.ones(2, np.int32))
    with pytest.raises(ValueError, match=r"block_table and cache_seqlens must be given"):
        flash_mla_with_kvcache(q, k, None, lens, 512, meta)
    with pytest.raises(ValueError, match=r"is_fp8_kvcache=True with dense decode needs the v32_fp8"):
        flash_mla_with_kvcache(q, k, bt, lens, 512, meta, is_fp8_kvcache=True)
    with pytest.raises(ValueError, match=r"head_dim_v must be 512"):
        flash_mla_with_kvcache(q, k, bt, lens, 576, meta)
    assert not meta.have_initialized, "a rejected call leaves the metadata untouched"
    # A metadata object made by a sparse call refuses a dense one (topk differs).
    from conftest import decode_inputs
    sp = decode_inputs("v32_fp8", b=2, s_q=1, h_q=4, seed=33)
    flash_mla_with_kvcache(sp["q"], sp["k_cache"], None, None, 512, meta, is_fp8_kvcache=True,
                           indices=sp["indices"])
    with pytest.raises(ValueError, match=r"but the scheduling metadata was made for"):
        flash_mla_with_kvcache(q, k, bt, lens, 512, meta)


# ---- torch -----------------------------------------------------------------------------------

def _t(a):
    torch = pytest.importorskip("torch")
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def _np(x):
    import torch
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    if x.dtype == torch.float16:
        return x.numpy().view(np.uint16)
    return x.numpy()


def test_torch_ops_opcheck_and_results():
    torch = pytest.importorskip("torch")
    from latentkv import torch_ops
    p = prefill_inputs(s_q=3, h_q=4, s_kv=40, topk=8, seed=40, lengths=True, sink=True)
    q, kv, idx = _t(p["q"]), _t(p["kv"]), _t(p["indices"])
    sink, lens = _t(p["attn_sink"]), _t(p["topk_length"])
    torch.library.opcheck(torch_ops.sparse_prefill,
                          (q, kv, idx, p["sm_scale"], 512, sink, lens, "auto"))
    oq, okv = torch.tensor([0, 1, 3]), torch.tensor([0, 10, 40])
    torch.library.opcheck(torch_ops.sparse_prefill_batched,
                          (q, kv, idx, p["sm_scale"], 512, sink, lens, oq, okv, "auto"))
    got = latentkv.sparse_prefill(q, kv, idx, p["sm_scale"], attn_sink=sink, topk_length=lens)
    ref = prefill(p)
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(_np(g), np.asarray(r).view(np.uint16) if r.dtype == BF16 else r)
    got_b = latentkv.sparse_prefill_batched(q, kv, idx, p["sm_scale"], oq, okv)
    a = dict(p)
    ref_b = latentkv.sparse_prefill_batched(a.pop("q"), a.pop("kv"), a.pop("indices"),
                                            a.pop("sm_scale"), oq.numpy(), okv.numpy())
    np.testing.assert_array_equal(_np(got_b[0]), bits(ref_b[0]))
    np.testing.assert_array_equal(_np(got_b[2]), ref_b[2])
    for dtype in ("bf16", "f16", "v32_fp8"):
        d = dense_inputs(dtype, b=2, s_q=2, h_q=4, P=8, seed=41)
        args = (_t(d["q"]), _t(d["k_cache"]), _t(d["block_table"]), _t(d["cache_seqlens"]))
        torch.library.opcheck(torch_ops.dense_decode, (*args, True, 0.0, d["fp8"], "auto"))
        out, lse = latentkv.dense_decode(*args, causal=True, fp8=d["fp8"])
        ref_out, ref_lse = dense(d, causal=True)
        assert out.dtype == (torch.float16 if dtype == "f16" else torch.bfloat16)
        np.testing.assert_array_equal(_np(out), bits(ref_out))
        np.testing.assert_array_equal(lse.numpy(), ref_lse)


def test_torch_compile_fullgraph():
    torch = pytest.importorskip("torch")
    p = prefill_inputs(s_q=3, h_q=4, s_kv=40, topk=8, seed=42)
    d = dense_inputs("f16", b=2, s_q=1, h_q=4, P=8, seed=43)
    q, kv, idx = _t(p["q"]), _t(p["kv"]), _t(p["indices"])
    dq, dk, bt, lens = (_t(d[k]) for k in ("q", "k_cache", "block_table", "cache_seqlens"))

    def step(q, kv, idx, dq, dk, bt, lens):
        out, ml, lse = latentkv.sparse_prefill(q * 2, kv, idx, 0.04)
        dout, dlse = latentkv.dense_decode(dq, dk, bt, lens, causal=True)
        return out.float().sum(-1) + ml + lse, dout.float().sum(-1), dlse

    eager = step(q, kv, idx, dq, dk, bt, lens)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    traced = compiled(q, kv, idx, dq, dk, bt, lens)
    for a, b in zip(traced, eager):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
