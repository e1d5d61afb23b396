"""latentkv's ops as torch custom ops (``torch.ops.latentkv.*``), each with a fake implementation.

Imported lazily by the public functions of ``latentkv`` when they are given torch tensors while
torch.compile or torch.jit.trace traces the call (eager calls go straight to the binding), so torch
is never needed otherwise. A custom op is opaque to torch.compile: Dynamo records the call, the
fake implementation gives the output shapes and dtypes (no device data is read, every output shape
follows from the input shapes), and ``torch.compile(fullgraph=True)`` traces through it.

The ops run on the current CUDA stream of the tensors' device (or on the CPU). Ops that write
their arguments declare them in ``mutates_args``:

    latentkv::quantize            mutates cache
    latentkv::dequantize          -> bf16 [n, d_qk]
    latentkv::positions_to_slots  -> i32 [b, n]
    latentkv::compress_kv_        mutates kv_cache (in place)
    latentkv::compress_kv         -> u8, kv_cache's shape (functional)
    latentkv::compress_kv_ws      the same with a caller workspace (mutated)
    latentkv::sparse_decode       -> (bf16 [b, s_q, h_q, 512], f32 [b, h_q, s_q])
    latentkv::sparse_prefill      -> (bf16 [s_q, h_q, d_v], f32 [s_q, h_q], f32 [s_q, h_q])
    latentkv::sparse_prefill_batched  the same, over packed sequences
    latentkv::dense_decode        -> (q's dtype [b, s_q, h_q, 512], f32 [b, h_q, s_q])

Schemas cannot carry a DecodePlan object, so sparse_decode takes the plan as a list of its eight
fields (num_splits, keys_per_split, b, s_q, h_q, topk, extra_topk, unsplit_b), empty for none.
"""

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _arrays, _native

_D_QK = {name: _native.format_info(name)["d_qk"] for name in _native.format_names()}


@torch.library.custom_op("latentkv::quantize", mutates_args=("cache",))
def quantize(latents: Tensor, slots: Tensor, cache: Tensor, format: str, page_size: int,
             check_slots: bool = True) -> None:
    _native.quantize(format, _arrays.native(latents), _arrays.native(slots),
                     _arrays.native_bytes(cache), page_size, _arrays.stream_of(cache), check_slots)


@quantize.register_fake
def _quantize_fake(latents, slots, cache, format, page_size, check_slots=True):
    return None


@torch.library.custom_op("latentkv::dequantize", mutates_args=())
def dequantize(cache: Tensor, slots: Tensor, format: str, page_size: int,
               check_slots: bool = True) -> Tensor:
    out = torch.empty((slots.shape[0], _D_QK[format]), dtype=torch.bfloat16, device=cache.device)
    _native.dequantize(format, _arrays.native_bytes(cache), _arrays.native(slots),
                       _arrays.native(out), page_size, _arrays.stream_of(cache), check_slots)
    return out


@dequantize.register_fake
def _dequantize_fake(cache, slots, format, page_size, check_slots=True):
    return cache.new_empty((slots.shape[0], _D_QK[format]), dtype=torch.bfloat16)


@torch.library.custom_op("latentkv::positions_to_slots", mutates_args=())
def positions_to_slots(block_table: Tensor, positions: Tensor, page_size: int) -> Tensor:
    out = torch.empty(positions.shape, dtype=torch.int32, device=positions.device)
    _native.positions_to_slots(_arrays.native(block_table), _arrays.native(positions), page_size,
                               _arrays.native(out), _arrays.stream_of(positions))
    return out


@positions_to_slots.register_fake
def _positions_to_slots_fake(block_table, positions, page_size):
    return positions.new_empty(positions.shape, dtype=torch.int32)


def _compress(state_cache, token_to_req, positions, boundary_token_indices, block_table,
              rms_norm_weight, cos_sin_cache, kv_slot_mapping, target, block_size, compress_ratio,
              page_size, rms_norm_eps, format, mode, check_indices, impl, workspace,
              overlap_prologue=False):
    _native.compress_kv(
        _arrays.native(state_cache), _arrays.native(token_to_req), _arrays.native(positions),
        _arrays.native(boundary_token_indices), _arrays.native(block_table),
        _arrays.native(rms_norm_weight), _arrays.native(cos_sin_cache),
        _arrays.native(kv_slot_mapping), _arrays.native_bytes(target), block_size,
        compress_ratio, page_size, rms_norm_eps, format, mode, check_indices, impl,
        _arrays.native_bytes(workspace), _arrays.stream_of(state_cache), overlap_prologue)


@torch.library.custom_op("latentkv::compress_kv_", mutates_args=("kv_cache", "workspace"))
def compress_kv_(state_cache: Tensor, token_to_req: Tensor, positions: Tensor,
                 boundary_token_indices: Tensor, block_table: Tensor, rms_norm_weight: Tensor,
                 cos_sin_cache: Tensor, kv_slot_mapping: Tensor, kv_cache: Tensor,
                 block_size: int, compress_ratio: int, page_size: int, rms_norm_eps: float,
                 format: str, check_indices: bool, impl: str,
                 workspace: Optional[Tensor], overlap_prologue: bool = False) -> None:
    _compress(state_cache, token_to_req, positions, boundary_token_indices, block_table,
              rms_norm_weight, cos_sin_cache, kv_slot_mapping, kv_cache, block_size,
              compress_ratio, page_size, rms_norm_eps, format, "inplace", check_indices, impl,
              workspace, overlap_prologue)


@compress_kv_.register_fake
def _compress_kv__fake(*args):
    return None


# The functional form comes as two ops, without and with a caller workspace: an op that returns a
# tensor and declares an Optional argument mutated cannot be lowered by inductor (torch 2.11) when
# that argument is None.
@torch.library.custom_op("latentkv::compress_kv", mutates_args=())
def compress_kv(state_cache: Tensor, token_to_req: Tensor, positions: Tensor,
                boundary_token_indices: Tensor, block_table: Tensor, rms_norm_weight: Tensor,
                cos_sin_cache: Tensor, kv_slot_mapping: Tensor, kv_cache: Tensor,
                block_size: int, compress_ratio: int, page_size: int, rms_norm_eps: float,
                format: str, check_indices: bool, impl: str,
                overlap_prologue: bool = False) -> Tensor:
    # The core zeroes the new cache before writing (functional mode), so empty is enough.
    out = torch.empty(kv_cache.shape, dtype=torch.uint8, device=kv_cache.device)
    _compress(state_cache, token_to_req, positions, boundary_token_indices, block_table,
              rms_norm_weight, cos_sin_cache, kv_slot_mapping, out, block_size, compress_ratio,
              page_size, rms_norm_eps, format, "functional", check_indices, impl, None,
              overlap_prologue)
    return out


@compress_kv.register_fake
def _compress_kv_fake(state_cache, token_to_req, positions, boundary_token_indices, block_table,
                      rms_norm_weight, cos_sin_cache, kv_slot_mapping, kv_cache, *rest):
    return kv_cache.new_empty(kv_cache.shape, dtype=torch.uint8)


@torch.library.custom_op("latentkv::compress_kv_ws", mutates_args=("workspace",))
def compress_kv_ws(state_cache: Tensor, token_to_req: Tensor, positions: Tensor,
                   boundary_token_indices: Tensor, block_table: Tensor, rms_norm_weight: Tensor,
                   cos_sin_cache: Tensor, kv_slot_mapping: Tensor, kv_cache: Tensor,
                   block_size: int, compress_ratio: int, page_size: int, rms_norm_eps: float,
                   format: str, check_indices: bool, impl: str, workspace: Tensor,
                   overlap_prologue: bool = False) -> Tensor:
    out = torch.empty(kv_cache.shape, dtype=torch.uint8, device=kv_cache.device)
    _compress(state_cache, token_to_req, positions, boundary_token_indices, block_table,
              rms_norm_weight, cos_sin_cache, kv_slot_mapping, out, block_size, compress_ratio,
              page_size, rms_norm_eps, format, "functional", check_indices, impl, workspace,
              overlap_prologue)
    return out


@compress_kv_ws.register_fake
def _compress_kv_ws_fake(state_cache, token_to_req, positions, boundary_token_indices, block_table,
                         rms_norm_weight, cos_sin_cache, kv_slot_mapping, kv_cache, *rest):
    return kv_cache.new_empty(kv_cache.shape, dtype=torch.uint8)


@torch.library.custom_op("latentkv::sparse_decode", mutates_args=("workspace",))
def sparse_decode(q: Tensor, k_cache: Tensor, indices: Tensor, format: str, page_size: int,
                  topk_length: Optional[Tensor], attn_sink: Optional[Tensor],
                  extra_k_cache: Optional[Tensor], extra_page_size: int,
                  extra_indices: Optional[Tensor], extra_topk_length: Optional[Tensor],
                  softmax_scale: float, plan: List[int], impl: str,
                  workspace: Optional[Tensor],
                  extra_format: Optional[str] = None) -> Tuple[Tensor, Tensor]:
    # (extra_format: None or "" means format. A None default, not a string one: torch releases
    # before string defaults in custom-op schemas refuse those when the op is defined.)
    b, s_q, h_q = q.shape[0], q.shape[1], q.shape[2]
    out = torch.empty((b, s_q, h_q, 512), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((b, h_q, s_q), dtype=torch.float32, device=q.device)
    plan_obj = _native.DecodePlan(*plan) if plan else None
    _native.sparse_decode(
        _arrays.native(q), _arrays.native_bytes(k_cache), format, page_size,
        _arrays.native(indices), _arrays.native(topk_length), _arrays.native(attn_sink),
        _arrays.native_bytes(extra_k_cache), extra_page_size, _arrays.native(extra_indices),
        _arrays.native(extra_topk_length), softmax_scale, _arrays.native(out),
        _arrays.native(lse), plan_obj, impl, _arrays.native_bytes(workspace),
        _arrays.stream_of(q), extra_format or "")
    return out, lse


@sparse_decode.register_fake
def _sparse_decode_fake(q, k_cache, indices, *rest):
    b, s_q, h_q = q.shape[0], q.shape[1], q.shape[2]
    return (q.new_empty((b, s_q, h_q, 512), dtype=torch.bfloat16),
            q.new_empty((b, h_q, s_q), dtype=torch.float32))


def _prefill_outputs(q, d_v):
    s_q, h_q = q.shape[0], q.shape[1]
    return (torch.empty((s_q, h_q, d_v), dtype=torch.bfloat16, device=q.device),
            torch.empty((s_q, h_q), dtype=torch.float32, device=q.device),
            torch.empty((s_q, h_q), dtype=torch.float32, device=q.device))


def _prefill_fake_outputs(q, d_v):
    s_q, h_q = q.shape[0], q.shape[1]
    return (q.new_empty((s_q, h_q, d_v), dtype=torch.bfloat16),
            q.new_empty((s_q, h_q), dtype=torch.float32),
            q.new_empty((s_q, h_q), dtype=torch.float32))


@torch.library.custom_op("latentkv::sparse_prefill", mutates_args=())
def sparse_prefill(q: Tensor, kv: Tensor, indices: Tensor, sm_scale: float, d_v: int,
                   attn_sink: Optional[Tensor], topk_length: Optional[Tensor],
                   impl: str) -> Tuple[Tensor, Tensor, Tensor]:
    out, max_logits, lse = _prefill_outputs(q, d_v)
    _native.sparse_prefill(
        _arrays.native(q), _arrays.native(kv), _arrays.native(indices), sm_scale, d_v,
        _arrays.native(attn_sink), _arrays.native(topk_length), _arrays.native(out),
        _arrays.native(max_logits), _arrays.native(lse), impl, _arrays.stream_of(q))
    return out, max_logits, lse


@sparse_prefill.register_fake
def _sparse_prefill_fake(q, kv, indices, sm_scale, d_v, *rest):
    return _prefill_fake_outputs(q, d_v)


@torch.library.custom_op("latentkv::sparse_prefill_batched", mutates_args=())
def sparse_prefill_batched(q: Tensor, kv: Tensor, indices: Tensor, sm_scale: float, d_v: int,
                           attn_sink: Optional[Tensor], topk_length: Optional[Tensor],
                           seq_offsets_q: Tensor, seq_offsets_kv: Tensor,
                           impl: str) -> Tuple[Tensor, Tensor, Tensor]:
    out, max_logits, lse = _prefill_outputs(q, d_v)
    _native.sparse_prefill_batched(
        _arrays.native(q), _arrays.native(kv), _arrays.native(indices), sm_scale, d_v,
        _arrays.native(attn_sink), _arrays.native(topk_length), _arrays.native(seq_offsets_q),
        _arrays.native(seq_offsets_kv), _arrays.native(out), _arrays.native(max_logits),
        _arrays.native(lse), impl, _arrays.stream_of(q))
    return out, max_logits, lse


@sparse_prefill_batched.register_fake
def _sparse_prefill_batched_fake(q, kv, indices, sm_scale, d_v, *rest):
    return _prefill_fake_outputs(q, d_v)


@torch.library.custom_op("latentkv::dense_decode", mutates_args=())
def dense_decode(q: Tensor, k_cache: Tensor, block_table: Tensor, cache_seqlens: Tensor,
                 causal: bool, softmax_scale: float, fp8: bool,
                 impl: str) -> Tuple[Tensor, Tensor]:
    b, s_q, h_q = q.shape[0], q.shape[1], q.shape[2]
    out = torch.empty((b, s_q, h_q, 512), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, h_q, s_q), dtype=torch.float32, device=q.device)
    _native.dense_decode(
        _arrays.native(q), _arrays.native(_arrays.native_bytes(k_cache) if fp8 else k_cache), fp8,
        _arrays.native(block_table), _arrays.native(cache_seqlens), causal, softmax_scale, 512,
        _arrays.native(out), _arrays.native(lse), impl, _arrays.stream_of(q))
    return out, lse


@dense_decode.register_fake
def _dense_decode_fake(q, *rest):
    b, s_q, h_q = q.shape[0], q.shape[1], q.shape[2]
    return (q.new_empty((b, s_q, h_q, 512)),
            q.new_empty((b, h_q, s_q), dtype=torch.float32))
