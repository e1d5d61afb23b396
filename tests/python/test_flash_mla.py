"""latentkv.flash_mla, FlashMLA's decode API (sparse case; dense decode and flash_mla_sparse_fwd are
in test_prefill_dense.py): signatures and defaults, lazy scheduling metadata (made on the first
call, checked on reuse), output shapes and units, the inputs FlashMLA rejects that latentkv
computes (other h_q, other topk), and the inputs latentkv rejects."""

import inspect

import numpy as np
import pytest

import latentkv
from conftest import decode_inputs
from latentkv.flash_mla import SchedMeta, flash_mla_sparse_fwd, flash_mla_with_kvcache, get_mla_metadata
from test_prefill_dense import dense_inputs, prefill_inputs


def test_signatures_and_defaults():
    params = inspect.signature(flash_mla_with_kvcache).parameters
    assert list(params) == [
        "q", "k_cache", "block_table", "cache_seqlens", "head_dim_v", "tile_scheduler_metadata",
        "num_splits", "softmax_scale", "causal", "is_fp8_kvcache", "indices", "attn_sink",
        "extra_k_cache", "extra_indices_in_kvcache", "topk_length", "extra_topk_length"]
    defaults = {k: p.default for k, p in params.items() if p.default is not inspect.Parameter.empty}
    assert defaults == dict(num_splits=None, softmax_scale=None, causal=False, is_fp8_kvcache=False,
                            indices=None, attn_sink=None, extra_k_cache=None,
                            extra_indices_in_kvcache=None, topk_length=None, extra_topk_length=None)
    meta, placeholder = get_mla_metadata(np.zeros(4, np.int32), 64, 1, topk=2048)  # old arguments
    assert isinstance(meta, SchedMeta) and placeholder is None and not meta.have_initialized


@pytest.mark.parametrize("fmt,h_q,topk", [("v32_fp8", 128, 128), ("v4_fp8", 3, 100),
                                          ("v32_fp8", 1, 7)])
def test_matches_sparse_decode(fmt, h_q, topk):
    inp = decode_inputs(fmt, b=2, s_q=2, h_q=h_q, topk=topk, seed=h_q, extra=True, lengths=True,
                        sink=True)
    meta, num_splits = get_mla_metadata()
    out, lse = flash_mla_with_kvcache(
        inp["q"], inp["k_cache"], None, None, 512, meta, num_splits, is_fp8_kvcache=True,
        indices=inp["indices"], attn_sink=inp["attn_sink"], extra_k_cache=inp["extra_k_cache"],
        extra_indices_in_kvcache=inp["extra_indices"], topk_length=inp["topk_length"],
        extra_topk_length=inp["extra_topk_length"])
    assert out.shape == (2, 2, h_q, 512) and lse.shape == (2, h_q, 2)
    ref_out, ref_lse = latentkv.sparse_decode(
        inp["q"], inp["k_cache"], inp["indices"], attn_sink=inp["attn_sink"],
        extra_k_cache=inp["extra_k_cache"], extra_indices=inp["extra_indices"],
        topk_length=inp["topk_length"], extra_topk_length=inp["extra_topk_length"])
    np.testing.assert_array_equal(out.view(np.uint16), ref_out.view(np.uint16))
    np.testing.assert_array_equal(lse, ref_lse)
    # FlashMLA's strides: lse is a [b, s_q, h_q] buffer seen as [b, h_q, s_q].
    assert lse.strides == (2 * h_q * 4, 4, h_q * 4), lse.strides
    assert meta.have_initialized and meta.config.h_q == h_q and meta.config.topk == topk
    assert meta.config.extra_topk == 64 and meta.config.page_block_size == 64
    assert meta.plan.topk == topk and meta.plan.extra_topk == 64


def test_lse_in_any_layout_through_sparse_decode():
    # latentkv.sparse_decode writes into a caller's lse of any strides whose elements are distinct
    # (FlashMLA's, and a padded one); the values are the contiguous run's, bit for bit. An lse
    # whose elements would share addresses is refused, naming its strides, with nothing written.
    inp = decode_inputs("v4_fp8", b=3, s_q=2, h_q=5, topk=40, seed=11, lengths=True, sink=True)
    args = dict(topk_length=inp["topk_length"], attn_sink=inp["attn_sink"])
    for impl in ("oracle", "fast"):
        ref_out, ref_lse = latentkv.sparse_decode(inp["q"], inp["k_cache"], inp["indices"], impl=impl,
                                                  **args)
        for lse in (np.full((3, 2, 5), np.nan, np.float32).transpose(0, 2, 1),
                    np.full((3, 7, 4), np.nan, np.float32)[:, :5, ::2]):
            out, got = latentkv.sparse_decode(inp["q"], inp["k_cache"], inp["indices"], lse=lse,
                                              impl=impl, **args)
            assert got is lse
            np.testing.assert_array_equal(out.view(np.uint16), ref_out.view(np.uint16))
            np.testing.assert_array_equal(lse, ref_lse)
    lse = np.full((3, 5, 2), np.nan, np.float32)
    bad = np.lib.stride_tricks.as_strided(lse, (3, 5, 2), (40, 4, 4))
    with pytest.raises(ValueError, match=r"lse \[3, 5, 2\] f32 has strides \[10, 1, 1\] under which two"):
        latentkv.sparse_decode(inp["q"], inp["k_cache"], inp["indices"], lse=bad, **args)
    assert np.isnan(lse).all()


def test_metadata_reuse_is_checked():
    inp = decode_inputs("v32_fp8", h_q=16, seed=3)
    meta, _ = get_mla_metadata()
    args = dict(is_fp8_kvcache=True, indices=inp["indices"])
    first = flash_mla_with_kvcache(inp["q"], inp["k_cache"], None, None, 512, meta, **args)
    again = flash_mla_with_kvcache(inp["q"], inp["k_cache"], None, None, 512, meta, **args)
    np.testing.assert_array_equal(first[1], again[1])
    with pytest.raises(ValueError, match=r"h_q is 8, but the scheduling metadata was made for h_q=16"):
        flash_mla_with_kvcache(inp["q"][:, :, :8], inp["k_cache"], None, None, 512, meta, **args)
    with pytest.raises(ValueError, match=r"topk is 64"):
        flash_mla_with_kvcache(inp["q"], inp["k_cache"], None, None, 512, meta,
                               is_fp8_kvcache=True, indices=inp["indices"][..., :64].copy())


def test_rejections():
    inp = decode_inputs("v32_fp8", seed=4)
    q, k = inp["q"], inp["k_cache"]
    meta, _ = get_mla_metadata()
    with pytest.raises(ValueError, match="attn_sink must be None when indices is None"):
        flash_mla_with_kvcache(q, k, np.zeros((2, 1), np.int32), np.ones(2, np.int32), 512, meta,
                               attn_sink=np.zeros(16, np.float32))
    with pytest.raises(ValueError, match="head_dim_v must be 512"):
        flash_mla_with_kvcache(q, k, None, None, 576, meta, is_fp8_kvcache=True, indices=inp["indices"])
    with pytest.raises(ValueError, match="is_fp8_kvcache must be True"):
        flash_mla_with_kvcache(q, k, None, None, 512, meta, indices=inp["indices"])
    with pytest.raises(ValueError, match="causal must be False"):
        flash_mla_with_kvcache(q, k, None, None, 512, meta, causal=True, is_fp8_kvcache=True,
                               indices=inp["indices"])
    with pytest.raises(ValueError, match=r"num_splits must be None .*, got array"):
        flash_mla_with_kvcache(q, k, None, None, 512, meta, np.zeros(3), is_fp8_kvcache=True,
                               indices=inp["indices"])
    with pytest.raises(TypeError, match="tile_scheduler_metadata"):
        flash_mla_with_kvcache(q, k, None, None, 512, None, is_fp8_kvcache=True, indices=inp["indices"])
    assert not meta.have_initialized, "a rejected call leaves the metadata untouched"


@pytest.mark.parametrize("extra_fmt", [None, "v41_fp4"])
def test_v41_caches_told_by_bytes_per_token(extra_fmt):
    # FlashMLA tells V4.1's caches by their bytes per token: 528 (v41_fp8), and 288 (v41_fp4) for
    # the extra cache of a V4.1 k_cache.
    inp = decode_inputs("v41_fp8", b=2, s_q=2, h_q=6, topk=64, seed=41, extra=True, lengths=True,
                        sink=True, extra_fmt=extra_fmt)
    meta, _ = get_mla_metadata()
    out, lse = flash_mla_with_kvcache(
        inp["q"], inp["k_cache"], None, None, 512, meta, is_fp8_kvcache=True,
        indices=inp["indices"], attn_sink=inp["attn_sink"], extra_k_cache=inp["extra_k_cache"],
        extra_indices_in_kvcache=inp["extra_indices"], topk_length=inp["topk_length"],
        extra_topk_length=inp["extra_topk_length"])
    args = dict(inp)
    ref_out, ref_lse = latentkv.sparse_decode(args.pop("q"), args.pop("k_cache"), args.pop("indices"),
                                              **args)
    np.testing.assert_array_equal(out.view(np.uint16), ref_out.view(np.uint16))
    np.testing.assert_array_equal(lse, ref_lse)


def test_unknown_bytes_per_token_is_named():
    inp = decode_inputs("v4_fp8", b=1, s_q=1, h_q=2, seed=42, extra=True)
    meta, _ = get_mla_metadata()
    with pytest.raises(ValueError, match=r"k_cache: 600 bytes per token is no sparse cache format; "
                                         r"expected one of 656 \(v32_fp8\), 584 \(v4_fp8\), 528 \(v41_fp8\)$"):
        flash_mla_with_kvcache(inp["q"], np.zeros((2, 64, 1, 600), np.uint8), None, None, 512, meta,
                               is_fp8_kvcache=True, indices=inp["indices"])
    with pytest.raises(ValueError, match=r"extra_k_cache: 100 bytes per token .* 288 \(v41_fp4\)$"):
        flash_mla_with_kvcache(inp["q"], inp["k_cache"], None, None, 512, meta, is_fp8_kvcache=True,
                               indices=inp["indices"], extra_k_cache=np.zeros((2, 64, 1, 100), np.uint8),
                               extra_indices_in_kvcache=inp["extra_indices"])
    # A V4 k_cache with V4.1's fp4 extra cache: the core names the pairing.
    with pytest.raises(ValueError, match=r"the extra cache's format must be k_cache's \(v4_fp8\)"):
        flash_mla_with_kvcache(inp["q"], inp["k_cache"], None, None, 512, meta, is_fp8_kvcache=True,
                               indices=inp["indices"], extra_k_cache=np.zeros((2, 64, 1, 288), np.uint8),
                               extra_indices_in_kvcache=inp["extra_indices"])


def test_float8_view_of_cache_and_lonely_query():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    inp = decode_inputs("v32_fp8", b=1, s_q=1, h_q=2, seed=5)
    inp["indices"][:] = -1
    meta, _ = get_mla_metadata()
    out, lse = flash_mla_with_kvcache(inp["q"], inp["k_cache"].view(ml_dtypes.float8_e4m3fn), None,
                                      None, 512, meta, is_fp8_kvcache=True, indices=inp["indices"])
    assert np.isposinf(lse).all() and not out.astype(np.float32).any()


def test_flash_mla_metadata_checks_the_extra_cache():
    inp = decode_inputs("v4_fp8", b=2, s_q=1, h_q=4, seed=64, extra=True)
    meta, _ = get_mla_metadata()
    args = dict(is_fp8_kvcache=True, indices=inp["indices"])
    flash_mla_with_kvcache(inp["q"], inp["k_cache"], None, None, 512, meta, **args,
                           extra_k_cache=inp["extra_k_cache"],
                           extra_indices_in_kvcache=inp["extra_indices"])
    assert meta.config.extra_page_block_size == 32 and meta.config.h_k == 1
    with pytest.raises(ValueError, match=r"extra_topk is 16, but the scheduling metadata was made "
                                         r"for extra_topk=64"):
        flash_mla_with_kvcache(inp["q"], inp["k_cache"], None, None, 512, meta, **args,
                               extra_k_cache=inp["extra_k_cache"],
                               extra_indices_in_kvcache=inp["extra_indices"][..., :16].copy())
    with pytest.raises(ValueError, match=r"extra_page_block_size is 16, but the scheduling "
                                         r"metadata was made for extra_page_block_size=32"):
        flash_mla_with_kvcache(inp["q"], inp["k_cache"], None, None, 512, meta, **args,
                               extra_k_cache=inp["extra_k_cache"].reshape(4, 16, 1, 584),
                               extra_indices_in_kvcache=inp["extra_indices"])


def test_flash_mla_sparse_explicit_scale():
    inp = decode_inputs("v32_fp8", b=2, s_q=1, h_q=4, seed=65)
    meta, _ = get_mla_metadata()
    got = flash_mla_with_kvcache(inp["q"], inp["k_cache"], None, None, 512, meta, softmax_scale=0.3,
                                 is_fp8_kvcache=True, indices=inp["indices"])
    ref = latentkv.sparse_decode(inp["q"], inp["k_cache"], inp["indices"], softmax_scale=0.3)
    np.testing.assert_array_equal(got[0].view(np.uint16), ref[0].view(np.uint16))
    np.testing.assert_array_equal(got[1], ref[1])


def test_flash_mla_shape_rejections():
    sp = decode_inputs("v32_fp8", b=2, s_q=1, h_q=4, seed=66)
    meta, _ = get_mla_metadata()
    k2 = sp["k_cache"].reshape(sp["k_cache"].shape[0], -1)
    with pytest.raises(ValueError, match=r"k_cache must be \[num_blocks, page_block_size, 1, bytes_per_token\]"):
        flash_mla_with_kvcache(sp["q"], k2, None, None, 512, meta, is_fp8_kvcache=True,
                               indices=sp["indices"])
    with pytest.raises(ValueError, match=r"extra_k_cache must be \[num_blocks, page_block_size, 1"):
        flash_mla_with_kvcache(sp["q"], sp["k_cache"], None, None, 512, meta, is_fp8_kvcache=True,
                               indices=sp["indices"], extra_k_cache=k2,
                               extra_indices_in_kvcache=sp["indices"])
    d = dense_inputs("bf16", b=2, s_q=1, h_q=4, P=16, seed=67)
    with pytest.raises(ValueError, match=r"block_table and cache_seqlens must be given"):
        flash_mla_with_kvcache(d["q"], d["k_cache"], d["block_table"], None, 512, meta)
    with pytest.raises(ValueError, match=r"k_cache must be \[num_blocks, page_block_size, h_k, head_dim\]"):
        flash_mla_with_kvcache(d["q"], d["k_cache"][:, :, 0], d["block_table"], d["cache_seqlens"],
                               512, meta)
    fp8_two_heads = np.zeros((4, 16, 2, 656), np.uint8)
    with pytest.raises(ValueError, match=r"is_fp8_kvcache=True with dense decode needs the v32_fp8"):
        flash_mla_with_kvcache(d["q"], fp8_two_heads, d["block_table"], d["cache_seqlens"], 512,
                               meta, is_fp8_kvcache=True)
    assert not meta.have_initialized
    p = prefill_inputs(s_q=2, h_q=2, s_kv=10, topk=4, seed=68)
    with pytest.raises(NotImplementedError, match=r"indexer_topk=-1"):
        flash_mla_sparse_fwd(p["q"], p["kv"], p["indices"], p["sm_scale"], indexer_topk=-1)
