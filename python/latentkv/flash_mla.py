"""A drop-in for FlashMLA's Python API: ``get_mla_metadata`` and ``flash_mla_with_kvcache`` (decode:
sparse with ``indices``, computed by latentkv's sparse_decode; dense without them, by dense_decode)
and ``flash_mla_sparse_fwd`` (sparse prefill, by sparse_prefill).

Same signatures, argument defaults and scheduling-metadata semantics as FlashMLA:

* ``get_mla_metadata(*args, **kwargs)`` ignores its arguments (kept for the old interface) and
  returns ``(SchedMeta(), None)``: an uninitialised metadata object and a placeholder.
* The first ``flash_mla_with_kvcache`` call with a metadata object initialises it: it records the
  call's configuration (b, s_q, h_q, page_block_size, h_k, causal, is_fp8_kvcache, topk,
  extra_page_block_size, extra_topk) and, in the sparse case, makes the split plan. Later calls with
  the same object must have the same configuration, else ValueError naming the field and both
  values.

What the metadata holds: FlashMLA's holds device tensors (the tile scheduler metadata and the split
counts) that depend on the lengths. latentkv's plan depends on shapes only, so ``SchedMeta.plan`` is
a ``latentkv.DecodePlan`` (splits of the candidate positions), valid for any lengths and index
values with the same shapes (None for dense decode, which needs no plan);
``tile_scheduler_metadata`` and ``num_splits`` stay None.

Outputs, units and special values are FlashMLA's: out [b, s_q, h_q, 512] (bf16; q's dtype for dense
decode), lse f32 [b, h_q, s_q] in natural log (sparse decode's with FlashMLA's strides: a
[b, s_q, h_q] buffer seen transposed, so ``lse.transpose(1, 2)`` is contiguous; dense decode's
contiguous, as FlashMLA's dense path allocates it); a query with no valid key gets lse = +inf and a zero
output; the sink scales the output, never lse (+inf zeroes the output, -inf has no effect).
``flash_mla_sparse_fwd`` returns (out bf16 [s_q, h_q, 512], max_logits f32 [s_q, h_q], lse f32
[s_q, h_q]); a query with no valid index gets out 0, max_logits -inf, lse +inf.

Where FlashMLA rejects an input latentkv supports, latentkv computes it: any h_q >= 1, any topk >= 1,
any page size, indices of any value (outside the cache means skipped, never read). What latentkv
does not have raises: a bf16 cache with indices (``is_fp8_kvcache=False``), ``causal=True`` with
indices, ``head_dim_v != 512``, sparse-only arguments (attn_sink, extra cache, lengths) without
indices, or an fp8 dense cache that is not v32_fp8 ValueError; ``indexer_topk > 0`` of
``flash_mla_sparse_fwd`` NotImplementedError. FlashMLA signals its own argument errors with
assert; latentkv raises ValueError/TypeError.

Caches: sparse ``k_cache`` is [num_blocks, page_block_size, 1, bytes_per_token] of any 1-byte dtype
(FlashMLA's float8_e4m3fn views included), its format told by bytes_per_token as FlashMLA tells it:
656 with head_dim 576 (V3.2, v32_fp8), 584 with head_dim 512 (V4, v4_fp8, page-split pages; any page
stride), 528 with head_dim 512 (V4.1, v41_fp8). ``extra_k_cache`` is in k_cache's format, or with a
V4.1 k_cache in V4.1's fp4 format, 288 bytes per token (v41_fp4; every CUDA kernel attends it).
Dense ``k_cache`` is q's
dtype (bf16 or f16) [num_blocks, page_block_size, h_k, head_dim], or with ``is_fp8_kvcache=True``
the v32_fp8 records [num_blocks, page_block_size, 1, 656] of any 1-byte dtype (head_dim 576).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

from . import _arrays, _native
from . import dense_decode, plan_decode, sparse_decode, sparse_prefill, DecodePlan, _torch_ops
from . import _EXTRA_FORMAT_BY_BPT, _MAIN_FORMAT_BY_BPT

__all__ = ["SchedMeta", "FlashMLASchedMeta", "get_mla_metadata", "flash_mla_with_kvcache",
           "flash_mla_sparse_fwd"]


@dataclasses.dataclass
class SchedMeta:
    """Scheduling metadata, filled on the first flash_mla_with_kvcache call that uses it."""

    @dataclasses.dataclass
    class Config:
        """The configuration the metadata was made for (FlashMLA's fields)."""

        b: int
        s_q: int
        h_q: int
        page_block_size: int
        h_k: int
        causal: bool
        is_fp8_kvcache: bool
        topk: Optional[int]
        extra_page_block_size: Optional[int]
        extra_topk: Optional[int]

    have_initialized: bool = False
    config: Optional[Config] = None
    plan: Optional[DecodePlan] = None
    # FlashMLA's device-side metadata; latentkv's plan needs none (kept for attribute compatibility).
    tile_scheduler_metadata: Any = None
    num_splits: Any = None


# FlashMLA's name for the same object.
FlashMLASchedMeta = SchedMeta


def get_mla_metadata(*args: Any, **kwargs: Any) -> Tuple[SchedMeta, None]:
    """Returns (an empty SchedMeta, None); the plan is made by the first flash_mla_with_kvcache call.

    Arguments are accepted and ignored, as in FlashMLA's current interface.
    """
    return SchedMeta(), None


def _num_sms(q: Any) -> int:
    if _arrays.framework(q) == "torch" and q.is_cuda:
        import torch

        return int(torch.cuda.get_device_properties(q.device).multi_processor_count)
    return max(1, _native.cuda_sm_count(_arrays.cuda_index(q)))


def _use_metadata(meta: SchedMeta, config: SchedMeta.Config, make_plan: Any) -> None:
    """Initialises meta for config (its plan from make_plan()), or checks config against it."""
    if not meta.have_initialized:
        meta.plan = make_plan()
        meta.config = config
        meta.have_initialized = True
        return
    for field in dataclasses.fields(SchedMeta.Config):
        want, got = getattr(meta.config, field.name), getattr(config, field.name)
        if want != got:
            raise ValueError(
                f"flash_mla_with_kvcache: {field.name} is {got}, but the scheduling metadata "
                f"was made for {field.name}={want}; use one get_mla_metadata() result per "
                "configuration")


def _dense(q: Any, k_cache: Any, block_table: Any, cache_seqlens: Any, meta: SchedMeta,
           softmax_scale: Optional[float], causal: bool, is_fp8_kvcache: bool,
           **sparse_only: Any) -> Tuple[Any, Any]:
    """flash_mla_with_kvcache without indices: dense decode over the whole paged cache."""
    given = [name for name, value in sparse_only.items() if value is not None]
    if given:
        raise ValueError(f"{', '.join(given)} must be None when indices is None (dense decode)")
    if block_table is None or cache_seqlens is None:
        raise ValueError("block_table and cache_seqlens must be given when indices is None "
                         "(dense decode)")
    if k_cache.ndim != 4:
        raise ValueError("k_cache must be [num_blocks, page_block_size, h_k, head_dim], got "
                         f"shape {tuple(k_cache.shape)}")
    if is_fp8_kvcache and (int(k_cache.shape[2]) != 1 or int(k_cache.shape[3]) != 656):
        raise ValueError("is_fp8_kvcache=True with dense decode needs the v32_fp8 cache "
                         "[num_blocks, page_block_size, 1, 656] (head_dim 576), got shape "
                         f"{tuple(k_cache.shape)}")
    config = SchedMeta.Config(
        b=int(q.shape[0]), s_q=int(q.shape[1]), h_q=int(q.shape[2]),
        page_block_size=int(k_cache.shape[1]), h_k=int(k_cache.shape[2]), causal=causal,
        is_fp8_kvcache=is_fp8_kvcache, topk=None, extra_page_block_size=None, extra_topk=None)
    _use_metadata(meta, config, lambda: None)
    return dense_decode(
        q, k_cache, block_table, cache_seqlens, causal=causal, fp8=is_fp8_kvcache,
        softmax_scale=float(q.shape[-1]) ** -0.5 if softmax_scale is None else softmax_scale)


# (A sparse cache's format by its bytes per token: latentkv's tables, as FlashMLA tells them apart;
# sparse_decode then checks the pairing and q's head_dim against the format's.)
def _sparse_format(cache: Any, name: str, formats: dict) -> str:
    bpt = int(cache.shape[-1])
    if bpt not in formats:
        known = ", ".join(f"{n} ({f})" for n, f in formats.items())
        raise ValueError(f"{name}: {bpt} bytes per token is no sparse cache format; expected one of {known}")
    return formats[bpt]


def flash_mla_with_kvcache(
    q: Any,
    k_cache: Any,
    block_table: Optional[Any],
    cache_seqlens: Optional[Any],
    head_dim_v: int,
    tile_scheduler_metadata: SchedMeta,
    num_splits: None = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    is_fp8_kvcache: bool = False,
    indices: Optional[Any] = None,
    attn_sink: Optional[Any] = None,
    extra_k_cache: Optional[Any] = None,
    extra_indices_in_kvcache: Optional[Any] = None,
    topk_length: Optional[Any] = None,
    extra_topk_length: Optional[Any] = None,
) -> Tuple[Any, Any]:
    """MLA decode with FlashMLA's signature, sparse (indices given) or dense; returns (out, lse).

    q:            bf16 [b, s_q, h_q, d_qk], d_qk 576 (V3.2) or 512 (V4, V4.1); dense: bf16 or f16
    k_cache:      sparse: [num_blocks, page_block_size, 1, bytes_per_token], 1-byte dtype;
                  dense: q's dtype [num_blocks, page_block_size, h_k, d_qk], or with
                  is_fp8_kvcache v32_fp8 records [num_blocks, page_block_size, 1, 656]
    block_table:  i32 [b, max_blocks], cache_seqlens: i32 [b]: dense only (unused when sparse)
    head_dim_v:   must be 512
    tile_scheduler_metadata: from get_mla_metadata; num_splits: must be None
    softmax_scale: None means d_qk ** -0.5
    causal:       dense only (bottom-right aligned)
    indices:      i32 [b, s_q, topk], flat slots (page * page_block_size + offset)
    attn_sink:    f32 [h_q] or None
    extra_k_cache, extra_indices_in_kvcache (i32 [b, s_q, extra_topk]): a second cache (288
                  bytes per token: V4.1's fp4 records, with a V4.1 k_cache)
    topk_length, extra_topk_length: i32 [b] or None
    Returns out [b, s_q, h_q, 512] (bf16; dense: q's dtype) and lse f32 [b, h_q, s_q].
    """
    meta = tile_scheduler_metadata
    if not isinstance(meta, SchedMeta):
        raise TypeError("tile_scheduler_metadata must be the object returned by get_mla_metadata, "
                        f"got {type(meta).__name__}")
    if num_splits is not None:
        raise ValueError("num_splits must be None (the second value returned by get_mla_metadata), "
                         f"got {num_splits!r}")
    if head_dim_v != 512:
        raise ValueError(f"head_dim_v must be 512, got {head_dim_v}")
    if indices is None:
        return _dense(q, k_cache, block_table, cache_seqlens, meta, softmax_scale, causal,
                      is_fp8_kvcache, attn_sink=attn_sink, extra_k_cache=extra_k_cache,
                      extra_indices_in_kvcache=extra_indices_in_kvcache,
                      topk_length=topk_length, extra_topk_length=extra_topk_length)
    if causal:
        raise ValueError("causal must be False when indices are given (sparse attention)")
    if not is_fp8_kvcache:
        raise ValueError("is_fp8_kvcache must be True when indices are given: latentkv's sparse "
                         "decode reads quantized caches (v32_fp8, v4_fp8, v41_fp8, and v41_fp4 as "
                         "a V4.1 extra cache)")
    if k_cache.ndim != 4:
        raise ValueError("k_cache must be [num_blocks, page_block_size, 1, bytes_per_token], got "
                         f"shape {tuple(k_cache.shape)}")
    if extra_k_cache is not None and extra_k_cache.ndim != 4:
        raise ValueError("extra_k_cache must be [num_blocks, page_block_size, 1, bytes_per_token], "
                         f"got shape {tuple(extra_k_cache.shape)}")

    config = SchedMeta.Config(
        b=int(q.shape[0]), s_q=int(q.shape[1]), h_q=int(q.shape[2]),
        page_block_size=int(k_cache.shape[1]), h_k=int(k_cache.shape[2]), causal=causal,
        is_fp8_kvcache=is_fp8_kvcache, topk=int(indices.shape[-1]),
        extra_page_block_size=None if extra_k_cache is None else int(extra_k_cache.shape[1]),
        extra_topk=(None if extra_indices_in_kvcache is None
                    else int(extra_indices_in_kvcache.shape[-1])))
    fmt = _sparse_format(k_cache, "k_cache", _MAIN_FORMAT_BY_BPT)
    extra_fmt = (None if extra_k_cache is None
                 else _sparse_format(extra_k_cache, "extra_k_cache", _EXTRA_FORMAT_BY_BPT))
    _use_metadata(meta, config, lambda: plan_decode(
        config.b, config.s_q, config.h_q, config.topk, config.extra_topk or 0, _num_sms(q)))

    kwargs = dict(
        format=fmt, topk_length=topk_length, attn_sink=attn_sink, extra_k_cache=extra_k_cache,
        extra_indices=extra_indices_in_kvcache, extra_topk_length=extra_topk_length,
        extra_format=extra_fmt,
        softmax_scale=float(q.shape[-1]) ** -0.5 if softmax_scale is None else softmax_scale,
        plan=meta.plan)
    if _torch_ops(q) is None:  # eager: the kernels write lse straight into FlashMLA's layout
        return sparse_decode(q, k_cache, indices, lse=_token_major_lse(q, config), **kwargs)
    # Traced (torch.jit.trace records the custom op): the op's lse (s_q contiguous), moved into
    # FlashMLA's layout.
    out, lse = sparse_decode(q, k_cache, indices, **kwargs)
    return out, lse.transpose(1, 2).contiguous().transpose(1, 2)


def _token_major_lse(q: Any, config: "SchedMeta.Config") -> Any:
    """FlashMLA's sparse-decode lse: [b, h_q, s_q] over a [b, s_q, h_q] buffer (heads contiguous,
    as its kernels write it and as callers that view it per token expect)."""
    buf = _arrays.empty(q, (config.b, config.s_q, config.h_q), "f32")
    return buf.permute(0, 2, 1) if _arrays.framework(buf) == "torch" else buf.transpose(0, 2, 1)


def flash_mla_sparse_fwd(
    q: Any,
    kv: Any,
    indices: Any,
    sm_scale: float,
    d_v: int = 512,
    attn_sink: Optional[Any] = None,
    topk_length: Optional[Any] = None,
    indexer_topk: int = 0,
) -> Tuple[Any, Any, Any]:
    """Sparse MLA prefill with FlashMLA's signature; returns (out, max_logits, lse).

    q:           bf16 [s_q, h_q, d_qk], d_qk 576 (V3.2) or 512 (V4)
    kv:          bf16 [s_kv, 1, d_qk] (h_kv = 1)
    indices:     i32 [s_q, 1, topk]; -1 or any value outside [0, s_kv) is skipped
    sm_scale:    the scale of q . k (natural-log domain); d_v: must be 512
    attn_sink:   f32 [h_q] or None; scales out by exp(lse) / (exp(lse) + exp(sink)), never lse or
                 max_logits
    topk_length: i32 [s_q] or None: query t attends indices[t, :, :topk_length[t]]
    indexer_topk: must be 0 (FlashMLA's extra lse over the indexer portion is not in latentkv)
    Returns out bf16 [s_q, h_q, 512], max_logits f32 [s_q, h_q], lse f32 [s_q, h_q].
    """
    if indexer_topk != 0:
        raise NotImplementedError(f"flash_mla_sparse_fwd: indexer_topk={indexer_topk} (the "
                                  "indexer lse) is not in latentkv; only indexer_topk=0")
    return sparse_prefill(q, kv, indices, sm_scale, d_v=d_v, attn_sink=attn_sink,
                          topk_length=topk_length)
