"""latentkv: KV-cache compression, quantized paged KV caches, sparse MLA decode and prefill and
dense MLA decode for DeepSeek-class attention, over DLPack arrays (NumPy, torch, CuPy; JAX as inputs).

Every op runs the C++ core through ``latentkv._native`` on the device of its arrays (CPU or CUDA),
on the caller framework's current stream (torch's current stream for torch tensors). Arguments are
validated by the core before anything is written; bad input raises ValueError (a shape, size or
index) or TypeError (a dtype or device) with the core's message; NotImplementedError (a
RuntimeError) means this build lacks the CUDA backend; RuntimeError reports CUDA failures.

Dtypes: "bf16" arrays are NumPy ``ml_dtypes.bfloat16`` arrays or ``torch.bfloat16`` tensors; caches
are byte arrays (uint8, or any 1-byte dtype, viewed as uint8). With torch tensors, an op traced by
torch.compile or torch.jit.trace goes through a torch custom op (``torch.ops.latentkv.*``) with a
fake implementation, so ``torch.compile(fullgraph=True)`` traces through it; eager calls go
straight to the binding (the custom-op dispatch costs more host time than a small kernel takes).

Ops:
    quantize, dequantize, positions_to_slots      cache formats (docs/formats.md)
    compress_kv, compress_workspace_bytes          the KV compressor (docs/compress.md)
    plan_decode, sparse_decode, sparse_decode_workspace_bytes   sparse MLA decode (docs/decode.md)
    sparse_prefill, sparse_prefill_batched         sparse MLA prefill (docs/prefill.md)
    dense_decode                                   dense MLA decode, paged cache (docs/dense.md)
Modules: ``latentkv.flash_mla`` (FlashMLA's Python API), ``latentkv.contest``
(``c128_256_512_compress``).
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from . import _arrays
from . import _native

__all__ = [
    "DecodePlan", "FORMATS", "built_with_cuda", "format_info", "quantize", "dequantize",
    "positions_to_slots", "compress_kv", "compress_workspace_bytes", "plan_decode",
    "sparse_decode", "sparse_decode_workspace_bytes", "sparse_prefill", "sparse_prefill_batched",
    "dense_decode",
]
__version__ = "0.1.0"

FORMATS: Tuple[str, ...] = tuple(_native.format_names())
"""The cache formats: v32_fp8, v4_fp8, v4_int8, v41_fp8, v41_fp4."""


def built_with_cuda() -> bool:
    """Whether this build contains the CUDA backend."""
    return _native.built_with_cuda()


def format_info(format: str) -> dict:
    """Geometry of a cache format: name, d_qk, bytes_per_token, page_split, data_bytes, scale_bytes."""
    return _native.format_info(format)


def _torch_ops(x: Any) -> Any:
    """The torch custom ops while torch.compile or torch.jit.trace traces a call on torch tensors
    (imported on first use), else None. Eager calls on torch tensors go straight to the binding,
    which reads the tensors' attributes: the custom-op dispatch costs tens of microseconds per call,
    more than a small kernel takes. Tensors written in place get their version counters bumped
    (_arrays.mark_written); outputs carry no autograd history either way (latentkv computes no
    gradients)."""
    if _arrays.framework(x) != "torch":
        return None
    import torch

    if not (torch.compiler.is_compiling() or torch.jit.is_tracing()):
        return None
    from . import torch_ops

    return torch_ops


# ---- cache formats ---------------------------------------------------------------------------

def quantize(latents: Any, slots: Any, cache: Any, format: str, *,
             page_size: Optional[int] = None, check_slots: bool = True) -> Any:
    """Quantizes latents into their cache records, in place; returns ``cache``.

    latents: bf16 or f32 [n, d_qk] (d_qk 576 for v32_fp8, else 512), inner dim contiguous.
    slots:   i64 or i32 [n], flat slots (page * P + offset); a slot < 0 is skipped.
    cache:   u8 [num_pages, P, 1, bytes_per_token] or [num_pages, page_bytes] (then page_size).
    Only the target records' bytes are written. Two tokens may not write one slot.
    check_slots: the slot checks read GPU slots on the host (a synchronisation, so no CUDA-graph
    capture); with False the caller guarantees unique in-range slots: out-of-range ones are still
    skipped, never followed, and duplicates race.
    """
    ps = -1 if page_size is None else page_size
    ops = _torch_ops(cache)
    if ops is not None:
        ops.quantize(latents, slots, cache, format, ps, check_slots)
        return cache
    _native.quantize(format, _arrays.native(latents), _arrays.native(slots),
                     _arrays.native_bytes(cache), ps, _arrays.stream_of(cache), check_slots)
    _arrays.mark_written(cache)
    return cache


def dequantize(cache: Any, slots: Any, format: str, *, page_size: Optional[int] = None,
               out: Any = None, check_slots: bool = True) -> Any:
    """Dequantizes the records at slots; returns bf16 [n, d_qk] (``out`` when given).

    cache: u8 paged cache of ``format``; slots: i64 or i32 [n] (a slot < 0 gives a row of zeros).
    The result is exact: bf16(payload * scale), RoPE dims copied.
    check_slots: as for quantize (without it, a slot past the cache also gives zeros).
    """
    ps = -1 if page_size is None else page_size
    ops = _torch_ops(cache)
    if ops is not None and out is None:
        return ops.dequantize(cache, slots, format, ps, check_slots)
    if out is None:
        n = int(slots.shape[0])
        out = _arrays.empty(cache, (n, format_info(format)["d_qk"]), "bf16")
    _native.dequantize(format, _arrays.native_bytes(cache), _arrays.native(slots),
                       _arrays.native(out, bf16=True), ps, _arrays.stream_of(cache), check_slots)
    _arrays.mark_written(out)
    return out


def positions_to_slots(block_table: Any, positions: Any, page_size: int, *,
                       out: Any = None) -> Any:
    """Flat slots of logical positions through a block table: i32 [b, n] (``out`` when given).

    block_table: i32 [b, max_blocks]; positions: i32 [b, n]. A position of -1 or outside
    [0, max_blocks * page_size), or a negative table entry, gives -1 (never an error).
    """
    ops = _torch_ops(positions)
    if ops is not None and out is None:
        return ops.positions_to_slots(block_table, positions, page_size)
    given = out
    if out is None:
        out = _arrays.empty(positions, tuple(positions.shape), "i32")
    _native.positions_to_slots(_arrays.native(block_table), _arrays.native(positions), page_size,
                               _arrays.native(out), _arrays.stream_of(positions))
    _arrays.mark_written(given)
    return out


# ---- the compressor --------------------------------------------------------------------------

def compress_kv(state_cache: Any, token_to_req: Any, positions: Any, boundary_token_indices: Any,
                block_table: Any, rms_norm_weight: Any, cos_sin_cache: Any,
                kv_slot_mapping: Any, kv_cache: Any, block_size: int, compress_ratio: int,
                rms_norm_eps: float = 1.0e-6, *, page_size: int = -1, format: str = "v4_int8",
                mode: str = "inplace", check_indices: bool = True, impl: str = "auto",
                workspace: Any = None, overlap_prologue: bool = False) -> Any:
    """The KV compressor (DeepSeek V4): one 584-byte record per boundary token.

    state_cache:            f32 [num_blocks, block_size, 1024] (512 values, then 512 scores)
    token_to_req:           i32 [num_tokens]
    positions:              i64 [num_tokens]
    boundary_token_indices: i64 [num_outputs]
    block_table:            i32 [num_reqs, blocks_per_req]
    rms_norm_weight:        bf16 [512]
    cos_sin_cache:          f32 [max_pos, 64] (32 cos, then 32 sin)
    kv_slot_mapping:        i64 [num_tokens] (a slot < 0 skips its output)
    kv_cache:               u8 [num_pages, P * 584 (+pad)] or [num_pages, P, 1, 584]
    format: "v4_int8" (the contest) or "v4_fp8" (DeepSeek V4). page_size: P; -1 (default) takes the
    4-D form's shape[1], or 64 (the contest's page) for the 2-D form.

    mode="inplace" writes exactly the target records into ``kv_cache`` and returns it;
    mode="functional" leaves ``kv_cache`` untouched and returns a new cache of its shape that is
    zero except the written records (the contest reference's result).
    impl: "auto" (the device's default), "oracle" (float64 CPU), "fast" (CPU), "cuda".
    check_indices=False skips the GPU's index checks (and their stream synchronisation).
    workspace: optional u8 scratch on the tensors' device of at least compress_workspace_bytes(...)
    bytes; with it a GPU call allocates nothing (CUDA-graph capturable).
    overlap_prologue=True (GPU, sm_90 code): the kernel reads every argument except state_cache and
    kv_cache while the kernel queued just before it is still running (programmatic dependent
    launch) and waits for that kernel only before reading the state. Set it only when that kernel
    writes none of those arguments (in a model step: the indices, tables, weight and cos/sin are
    written once per step, the state by the layer's projection just before).
    """
    if mode not in ("inplace", "functional"):
        raise ValueError(f"unknown compress mode '{mode}'; valid: inplace, functional")
    ops = _torch_ops(kv_cache)
    if ops is not None:
        args = (state_cache, token_to_req, positions, boundary_token_indices, block_table,
                rms_norm_weight, cos_sin_cache, kv_slot_mapping)
        rest = (block_size, compress_ratio, page_size, float(rms_norm_eps), format,
                check_indices, impl)
        if mode == "inplace":
            ops.compress_kv_(*args, kv_cache, *rest, workspace, overlap_prologue)
            return kv_cache
        if workspace is None:
            return ops.compress_kv(*args, kv_cache, *rest, overlap_prologue)
        return ops.compress_kv_ws(*args, kv_cache, *rest, workspace, overlap_prologue)
    target = kv_cache
    if mode == "functional":
        # The core zeroes the target first, so a fresh array of the same shape is enough.
        target = _arrays.empty(kv_cache, tuple(kv_cache.shape), "u8")
    _native.compress_kv(
        _arrays.native(state_cache), _arrays.native(token_to_req), _arrays.native(positions),
        _arrays.native(boundary_token_indices), _arrays.native(block_table),
        _arrays.native(rms_norm_weight, bf16=True), _arrays.native(cos_sin_cache),
        _arrays.native(kv_slot_mapping), _arrays.native_bytes(target), block_size,
        compress_ratio, page_size, float(rms_norm_eps), format, mode, check_indices, impl,
        _arrays.native_bytes(workspace), _arrays.stream_of(state_cache), overlap_prologue)
    if mode == "inplace":
        _arrays.mark_written(kv_cache)
    return target


def compress_workspace_bytes(state_cache: Any, token_to_req: Any, positions: Any,
                             boundary_token_indices: Any, block_table: Any, rms_norm_weight: Any,
                             cos_sin_cache: Any, kv_slot_mapping: Any, kv_cache: Any,
                             block_size: int, compress_ratio: int, *, page_size: int = -1,
                             format: str = "v4_int8") -> int:
    """Bytes of caller-provided workspace compress_kv needs for these arguments (0 on the CPU);
    page_size as compress_kv takes it."""
    return _native.compress_workspace_bytes(
        _arrays.native(state_cache), _arrays.native(token_to_req), _arrays.native(positions),
        _arrays.native(boundary_token_indices), _arrays.native(block_table),
        _arrays.native(rms_norm_weight, bf16=True), _arrays.native(cos_sin_cache),
        _arrays.native(kv_slot_mapping), _arrays.native_bytes(kv_cache), block_size,
        compress_ratio, page_size, format)


# ---- sparse decode ---------------------------------------------------------------------------

def default_num_sms(device_index: int = 0) -> int:
    """SM count of a CUDA device for the planner; 1 without a CUDA device (CPU paths ignore plans)."""
    return max(1, _native.cuda_sm_count(device_index))


class DecodePlan(_native.DecodePlan):
    """The split-KV plan of sparse_decode (plan_decode makes it): num_splits, keys_per_split, b,
    s_q, h_q, topk, extra_topk, unsplit_b, read-only. Its ``fields`` holds the same eight values as
    a plain tuple, which torch.compile can read where it cannot read the native fields, so a call
    given a plan traces with ``fullgraph=True``."""

    def __init__(self, num_splits: int = 1, keys_per_split: int = 1, b: int = 0, s_q: int = 0,
                 h_q: int = 0, topk: int = 0, extra_topk: int = 0, unsplit_b: int = 0):
        super().__init__(num_splits, keys_per_split, b, s_q, h_q, topk, extra_topk, unsplit_b)
        self.fields = (self.num_splits, self.keys_per_split, self.b, self.s_q, self.h_q, self.topk,
                       self.extra_topk, self.unsplit_b)


def _plan_fields(p) -> list:
    """A plan's eight fields as a list (a DecodePlan's tuple, or a native plan's attributes)."""
    f = getattr(p, "fields", None)
    if f is not None:
        return list(f)
    return [p.num_splits, p.keys_per_split, p.b, p.s_q, p.h_q, p.topk, p.extra_topk, p.unsplit_b]


def plan_decode(b: int, s_q: int, h_q: int, topk: int, extra_topk: int = 0,
                num_sms: Optional[int] = None, kernel: str = "auto") -> DecodePlan:
    """The split-KV plan of sparse_decode (FlashMLA's get_mla_metadata): shape-only, no device data,
    reusable across layers and steps with the same shapes. num_sms defaults to CUDA device 0's.
    kernel: the CUDA kernel the split costs are weighed for ("auto": the one sparse_decode runs on
    the current device; "portable"; "sm90"); any plan is correct with either kernel."""
    p = _native.plan_decode(b, s_q, h_q, topk, extra_topk,
                            default_num_sms() if num_sms is None else num_sms, kernel)
    return DecodePlan(*_plan_fields(p))


def sparse_decode_workspace_bytes(plan: DecodePlan) -> int:
    """Bytes of caller-provided workspace sparse_decode needs with this plan (0 for one split)."""
    return _native.sparse_decode_workspace_bytes(plan)


# A 4-D cache's format by its bytes per token (its last dimension), as FlashMLA tells them apart:
# a k_cache's, and an extra cache's (v41_fp4 only beside v41_fp8; sparse_decode checks the pairing).
_MAIN_FORMAT_BY_BPT = {656: "v32_fp8", 584: "v4_fp8", 528: "v41_fp8"}
_EXTRA_FORMAT_BY_BPT = {**_MAIN_FORMAT_BY_BPT, 288: "v41_fp4"}


def _decode_format(q: Any, k_cache: Any, format: Optional[str]) -> str:
    if format is not None:
        return format
    if len(k_cache.shape) == 4 and int(k_cache.shape[-1]) in _MAIN_FORMAT_BY_BPT:
        return _MAIN_FORMAT_BY_BPT[int(k_cache.shape[-1])]
    d_qk = int(q.shape[-1])
    if d_qk == 576:
        return "v32_fp8"
    if d_qk == 512:
        return "v4_fp8"
    raise ValueError(f"sparse_decode: cannot infer the cache format from d_qk={d_qk} "
                     "(576: v32_fp8, 512: v4_fp8; a 4-D cache of 528 bytes per token: v41_fp8); "
                     "pass format=")


def _extra_format(fmt: str, extra_k_cache: Any, extra_format: Optional[str]) -> str:
    """The extra cache's format for the binding: given, or V4.1's v41_fp4 told by a 4-D cache of 288
    bytes per token with a v41_fp8 k_cache, or "" (the same as k_cache's)."""
    if extra_format is not None:
        return extra_format
    if (fmt == "v41_fp8" and extra_k_cache is not None and len(extra_k_cache.shape) == 4
            and _EXTRA_FORMAT_BY_BPT.get(int(extra_k_cache.shape[-1])) == "v41_fp4"):
        return "v41_fp4"
    return ""


def sparse_decode(q: Any, k_cache: Any, indices: Any, *, format: Optional[str] = None,
                  page_size: Optional[int] = None, topk_length: Any = None,
                  attn_sink: Any = None, extra_k_cache: Any = None, extra_indices: Any = None,
                  extra_topk_length: Any = None, extra_page_size: Optional[int] = None,
                  extra_format: Optional[str] = None,
                  softmax_scale: Optional[float] = None, plan: Optional[DecodePlan] = None,
                  out: Any = None, lse: Any = None, impl: str = "auto",
                  workspace: Any = None) -> Tuple[Any, Any]:
    """Sparse MLA decode over a quantized paged cache; returns (out, lse).

    q:        bf16 [b, s_q, h_q, d_qk]; d_qk 576 (v32_fp8) or 512 (v4_fp8, v41_fp8)
    format:   None tells it by a 4-D k_cache's bytes per token (656 v32_fp8, 584 v4_fp8, 528
              v41_fp8), else by d_qk (576 v32_fp8, 512 v4_fp8)
    k_cache:  u8 [num_pages, P, 1, bytes_per_token], or [num_pages, page_bytes] with page_size
    indices:  i32 [b, s_q, topk], flat slots; any value outside the cache is skipped
    topk_length, extra_topk_length: i32 [b] or None; attn_sink: f32 [h_q] or None
    extra_k_cache / extra_indices (i32 [b, s_q, extra_topk]): a second cache, given together;
              extra_page_size for a 2-D extra cache, as page_size for k_cache
    extra_format: None means format, or "v41_fp4" for a 4-D extra cache of 288 bytes per token
              with a v41_fp8 k_cache (DeepSeek V4.1's pairing; on CUDA on every kernel)
    softmax_scale: None means d_qk ** -0.5
    Returns out bf16 [b, s_q, h_q, 512] and lse f32 [b, h_q, s_q] (natural log; +inf and a zero
    output row for a query with no valid key; the sink scales out, never lse).
    plan: from plan_decode (GPU; None plans per call; CPU paths only check its shapes).
    impl: "auto", "oracle" (float64 CPU), "fast" (CPU), "cuda".
    """
    fmt = _decode_format(q, k_cache, format)
    efmt = _extra_format(fmt, extra_k_cache, extra_format)
    ps = -1 if page_size is None else page_size
    eps = -1 if extra_page_size is None else extra_page_size
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    ops = _torch_ops(q)
    if ops is not None and out is None and lse is None:
        p = plan
        return ops.sparse_decode(
            q, k_cache, indices, fmt, ps, topk_length, attn_sink, extra_k_cache, eps,
            extra_indices, extra_topk_length, scale,
            [] if p is None else _plan_fields(p),
            impl, workspace, efmt)
    b, s_q, h_q = (int(s) for s in q.shape[:3])
    given = (out, lse, workspace)
    if out is None:
        out = _arrays.empty(q, (b, s_q, h_q, 512), "bf16")
    if lse is None:
        lse = _arrays.empty(q, (b, h_q, s_q), "f32")
    _native.sparse_decode(
        _arrays.native(q, bf16=True), _arrays.native_bytes(k_cache), fmt, ps,
        _arrays.native(indices), _arrays.native(topk_length), _arrays.native(attn_sink),
        _arrays.native_bytes(extra_k_cache), eps, _arrays.native(extra_indices),
        _arrays.native(extra_topk_length), scale, _arrays.native(out, bf16=True),
        _arrays.native(lse), plan, impl, _arrays.native_bytes(workspace), _arrays.stream_of(q),
        efmt)
    _arrays.mark_written(*given)
    return out, lse


# ---- sparse prefill --------------------------------------------------------------------------

def _prefill_outputs(q: Any, d_v: int, out: Any, max_logits: Any, lse: Any) -> Tuple[Any, Any, Any]:
    s_q, h_q = int(q.shape[0]), int(q.shape[1])
    if out is None:
        out = _arrays.empty(q, (s_q, h_q, d_v), "bf16")
    if max_logits is None:
        max_logits = _arrays.empty(q, (s_q, h_q), "f32")
    if lse is None:
        lse = _arrays.empty(q, (s_q, h_q), "f32")
    return out, max_logits, lse


def sparse_prefill(q: Any, kv: Any, indices: Any, sm_scale: float, *, d_v: int = 512,
                   attn_sink: Any = None, topk_length: Any = None, out: Any = None,
                   max_logits: Any = None, lse: Any = None,
                   impl: str = "auto") -> Tuple[Any, Any, Any]:
    """Sparse MLA prefill over a flat KV tensor (FlashMLA's flash_mla_sparse_fwd); returns
    (out, max_logits, lse).

    q:           bf16 [s_q, h_q, d_qk]; d_qk 512 (V4) or 576 (V3.2), at least d_v
    kv:          bf16 [s_kv, 1, d_qk]; K is a row, V its first 512 dims
    indices:     i32 [s_q, 1, topk]; an entry outside [0, s_kv) is skipped, never read
    sm_scale:    required, finite and > 0 (natural-log domain); d_v: must be 512
    attn_sink:   f32 [h_q] or None (scales out by 1 / (1 + exp(sink - lse)); never lse, max_logits)
    topk_length: i32 [s_q] or None (per query token)
    Returns out bf16 [s_q, h_q, d_v], max_logits f32 [s_q, h_q] and lse f32 [s_q, h_q] (natural log;
    a query with no valid key gets out 0, max_logits -inf, lse +inf). Note [s_q, h_q], not decode's
    [b, h_q, s_q]. impl: "auto", "oracle" (float64 CPU), "fast" (CPU), "cuda".
    """
    ops = _torch_ops(q)
    if ops is not None and out is None and max_logits is None and lse is None:
        return ops.sparse_prefill(q, kv, indices, float(sm_scale), d_v, attn_sink, topk_length,
                                  impl)
    given = (out, max_logits, lse)
    out, max_logits, lse = _prefill_outputs(q, d_v, out, max_logits, lse)
    _native.sparse_prefill(
        _arrays.native(q, bf16=True), _arrays.native(kv, bf16=True), _arrays.native(indices),
        float(sm_scale), d_v, _arrays.native(attn_sink), _arrays.native(topk_length),
        _arrays.native(out, bf16=True), _arrays.native(max_logits), _arrays.native(lse), impl,
        _arrays.stream_of(q))
    _arrays.mark_written(*given)
    return out, max_logits, lse


def sparse_prefill_batched(q: Any, kv: Any, indices: Any, sm_scale: float, seq_offsets_q: Any,
                           seq_offsets_kv: Any, *, d_v: int = 512, attn_sink: Any = None,
                           topk_length: Any = None, out: Any = None, max_logits: Any = None,
                           lse: Any = None, impl: str = "auto") -> Tuple[Any, Any, Any]:
    """sparse_prefill over several sequences packed along s_q and s_kv; returns
    (out, max_logits, lse) as sparse_prefill does.

    seq_offsets_q, seq_offsets_kv: i64 [num_seqs + 1] on the tensors' device, starting at 0,
    non-decreasing, ending at s_q and s_kv. Sequence n owns query rows
    [seq_offsets_q[n], seq_offsets_q[n + 1]) and kv rows [seq_offsets_kv[n], seq_offsets_kv[n + 1]);
    its indices count from the start of its own kv segment (valid iff in [0, segment length)).
    Every other argument is sparse_prefill's.
    """
    ops = _torch_ops(q)
    if ops is not None and out is None and max_logits is None and lse is None:
        return ops.sparse_prefill_batched(q, kv, indices, float(sm_scale), d_v, attn_sink,
                                          topk_length, seq_offsets_q, seq_offsets_kv, impl)
    given = (out, max_logits, lse)
    out, max_logits, lse = _prefill_outputs(q, d_v, out, max_logits, lse)
    _native.sparse_prefill_batched(
        _arrays.native(q, bf16=True), _arrays.native(kv, bf16=True), _arrays.native(indices),
        float(sm_scale), d_v, _arrays.native(attn_sink), _arrays.native(topk_length),
        _arrays.native(seq_offsets_q), _arrays.native(seq_offsets_kv),
        _arrays.native(out, bf16=True), _arrays.native(max_logits), _arrays.native(lse), impl,
        _arrays.stream_of(q))
    _arrays.mark_written(*given)
    return out, max_logits, lse


# ---- dense decode ----------------------------------------------------------------------------

def dense_decode(q: Any, k_cache: Any, block_table: Any, cache_seqlens: Any, *,
                 causal: bool = False, softmax_scale: Optional[float] = None, fp8: bool = False,
                 out: Any = None, lse: Any = None, impl: str = "auto") -> Tuple[Any, Any]:
    """Dense MLA decode over a paged cache (FlashMLA's flash_mla_with_kvcache without indices);
    returns (out, lse).

    q:             bf16 or f16 [b, s_q, h_q, d_qk] (NumPy float16 for f16); d_qk 576 with fp8
    k_cache:       q's dtype [num_pages, P, h_kv, d_qk] (h_q a multiple of h_kv), or with fp8=True
                   v32_fp8 records u8 [num_pages, P, 1, 656] (any 1-byte dtype; any page stride)
    block_table:   i32 [b, max_pages]; entries past a request's length are never read
    cache_seqlens: i32 [b], each in [0, max_pages * P]
    causal:        bottom-right aligned (query row j of s_q sees len - (s_q - 1 - j) keys)
    softmax_scale: None means d_qk ** -0.5
    Returns out of q's dtype [b, s_q, h_q, 512] and lse f32 [b, h_q, s_q] (natural log; a row that
    sees no key gets out 0 and lse +inf). impl: "auto", "oracle" (float64 CPU), "fast" (CPU), "cuda".
    """
    scale = 0.0 if softmax_scale is None else float(softmax_scale)
    ops = _torch_ops(q)
    if ops is not None and out is None and lse is None:
        return ops.dense_decode(q, k_cache, block_table, cache_seqlens, causal, scale, fp8, impl)
    b, s_q, h_q = (int(s) for s in q.shape[:3])
    given = (out, lse)
    if out is None:
        out = _arrays.empty(q, (b, s_q, h_q, 512), _arrays.half_dtype(q))
    if lse is None:
        lse = _arrays.empty(q, (b, h_q, s_q), "f32")
    _native.dense_decode(
        _arrays.native(q, bf16=True),
        # fp8: the v32_fp8 bytes (any 1-byte dtype); a 16-bit cache still goes through so the
        # core names it in its error.
        _arrays.native(_arrays.native_bytes(k_cache) if fp8 else k_cache, bf16=True), fp8,
        _arrays.native(block_table), _arrays.native(cache_seqlens), causal, scale, 512,
        _arrays.native(out, bf16=True), _arrays.native(lse), impl, _arrays.stream_of(q))
    _arrays.mark_written(*given)
    return out, lse
