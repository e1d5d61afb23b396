"""A drop-in for FlashMLA's Python decode API (``flash_mla.get_mla_metadata`` and
``flash_mla.flash_mla_with_kvcache``), sparse case (``indices`` given), computed by latentkv's
sparse_decode.

Same signatures, argument defaults and scheduling-metadata semantics as FlashMLA:

* ``get_mla_metadata(*args, **kwargs)`` ignores its arguments (kept for the old interface) and
  returns ``(SchedMeta(), None)``: an uninitialised metadata object and a placeholder.
* The first ``flash_mla_with_kvcache`` call with a metadata object initialises it: it records the
  call's configuration (b, s_q, h_q, page_block_size, h_k, causal, is_fp8_kvcache, topk,
  extra_page_block_size, extra_topk) and makes the split plan. Later calls with the same object must
  have the same configuration, else ValueError naming the field and both values.

What the metadata holds: FlashMLA's holds device tensors (the tile scheduler metadata and the split
counts) that depend on the lengths. latentkv's plan depends on shapes only, so ``SchedMeta.plan`` is
a ``latentkv.DecodePlan`` (splits of the candidate positions), valid for any lengths and index
values with the same shapes; ``tile_scheduler_metadata`` and ``num_splits`` stay None.

Outputs, units and special values are FlashMLA's: out bf16 [b, s_q, h_q, 512], lse f32
[b, h_q, s_q] in natural log; a query with no valid index gets lse = +inf and a zero output; the
sink scales the output, never lse (+inf zeroes the output, -inf has no effect).

Where FlashMLA rejects an input latentkv supports, latentkv computes it: any h_q >= 1, any topk >= 1,
any page size, indices of any value (outside the cache means skipped, never read). What latentkv
does not have raises: dense decode (no ``indices``) NotImplementedError; a bf16 cache
(``is_fp8_kvcache=False``), ``causal=True`` with indices, or ``head_dim_v != 512`` ValueError.
FlashMLA signals its own argument errors with assert; latentkv raises ValueError/TypeError.

Caches: ``k_cache`` is [num_blocks, page_block_size, 1, bytes_per_token] of any 1-byte dtype
(FlashMLA's float8_e4m3fn views included): 656 bytes per token with head_dim 576 (V3.2, v32_fp8),
584 with head_dim 512 (V4, v4_fp8, page-split pages; any page stride).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

from . import _arrays, _native
from . import sparse_decode, DecodePlan

__all__ = ["SchedMeta", "FlashMLASchedMeta", "get_mla_metadata", "flash_mla_with_kvcache"]


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
    """Sparse MLA decode with FlashMLA's signature; returns (out, lse).

    q:            bf16 [b, s_q, h_q, d_qk], d_qk 576 (V3.2) or 512 (V4)
    k_cache:      [num_blocks, page_block_size, 1, bytes_per_token], 1-byte dtype
    block_table, cache_seqlens: unused in the sparse case (may be None)
    head_dim_v:   must be 512
    tile_scheduler_metadata: from get_mla_metadata; num_splits: must be None
    softmax_scale: None means d_qk ** -0.5
    indices:      i32 [b, s_q, topk], flat slots (page * page_block_size + offset)
    attn_sink:    f32 [h_q] or None
    extra_k_cache, extra_indices_in_kvcache (i32 [b, s_q, extra_topk]): a second cache
    topk_length, extra_topk_length: i32 [b] or None
    Returns out bf16 [b, s_q, h_q, 512] and lse f32 [b, h_q, s_q].
    """
    meta = tile_scheduler_metadata
    if not isinstance(meta, SchedMeta):
        raise TypeError("tile_scheduler_metadata must be the object returned by get_mla_metadata, "
                        f"got {type(meta).__name__}")
    if num_splits is not None:
        raise ValueError("num_splits must be None (the second value returned by get_mla_metadata)")
    if indices is None:
        raise NotImplementedError("flash_mla_with_kvcache: dense decode (indices=None) is not in "
                                  "latentkv yet; only the sparse case is supported")
    if head_dim_v != 512:
        raise ValueError(f"head_dim_v must be 512, got {head_dim_v}")
    if causal:
        raise ValueError("causal must be False when indices are given (sparse attention)")
    if not is_fp8_kvcache:
        raise ValueError("is_fp8_kvcache must be True when indices are given: latentkv's sparse "
                         "decode reads fp8 caches (v32_fp8, v4_fp8)")
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
    if not meta.have_initialized:
        meta.plan = _native.plan_decode(config.b, config.s_q, config.h_q, config.topk,
                                        config.extra_topk or 0, _num_sms(q))
        meta.config = config
        meta.have_initialized = True
    else:
        for field in dataclasses.fields(SchedMeta.Config):
            want, got = getattr(meta.config, field.name), getattr(config, field.name)
            if want != got:
                raise ValueError(
                    f"flash_mla_with_kvcache: {field.name} is {got}, but the scheduling metadata "
                    f"was made for {field.name}={want}; use one get_mla_metadata() result per "
                    "configuration")

    return sparse_decode(
        q, k_cache, indices, topk_length=topk_length, attn_sink=attn_sink,
        extra_k_cache=extra_k_cache, extra_indices=extra_indices_in_kvcache,
        extra_topk_length=extra_topk_length,
        softmax_scale=float(q.shape[-1]) ** -0.5 if softmax_scale is None else softmax_scale,
        plan=meta.plan)
