"""Type stubs of latentkv._native, the nanobind binding (python/src/bindings.cpp).

Array arguments (``Arr``) are DLPack-capable arrays (NumPy, torch, CuPy, JAX) or pairs
``(integer view, tag)`` with tag "bf16" (a 16-bit view), "e4m3" or "e8m0" (8-bit views), which
set the dtype the core sees. Outputs must be writable; nothing is converted or copied. ``None``
means an absent optional tensor. ``stream`` is a cudaStream_t as an int (0: the default stream).
Errors: ValueError (value), TypeError (dtype or device), NotImplementedError (backend not built),
RuntimeError (CUDA), each with the core's message.
"""

from typing import Any, List, Optional, Tuple, Union

Arr = Union[Any, Tuple[Any, str]]

def built_with_cuda() -> bool:
    """Whether this build contains the CUDA backend."""

def cuda_sm_count(device: int = 0) -> int:
    """Multiprocessor count of CUDA device ``device``; 0 without CUDA or without that device."""

def format_names() -> List[str]:
    """['v32_fp8', 'v4_fp8', 'v4_int8', 'v41_fp8', 'v41_fp4']."""

def format_info(format: str) -> dict:
    """{name, d_qk, bytes_per_token, page_split, data_bytes, scale_bytes} of a format."""

def quantize(format: str, latents: Arr, slots: Arr, cache: Arr, page_size: int = -1,
             stream: int = 0, check_slots: bool = True) -> None:
    """latents bf16|f32 [n, d_qk] -> records at slots i64|i32 [n] of cache u8 (written in place).

    cache: [num_pages, P, 1, bytes_per_token] or [num_pages, page_bytes] with page_size = P.
    """

def dequantize(format: str, cache: Arr, slots: Arr, out: Arr, page_size: int = -1,
               stream: int = 0, check_slots: bool = True) -> None:
    """Records at slots i64|i32 [n] -> out bf16 [n, d_qk]; slot < 0 gives zeros."""

def positions_to_slots(block_table: Arr, positions: Arr, page_size: int, slots: Arr,
                       stream: int = 0) -> None:
    """block_table i32 [b, max_blocks], positions i32 [b, n] -> slots i32 [b, n] (-1 if invalid)."""

def compress_kv(state_cache: Arr, token_to_req: Arr, positions: Arr, boundary_token_indices: Arr,
                block_table: Arr, rms_norm_weight: Arr, cos_sin_cache: Arr, kv_slot_mapping: Arr,
                kv_cache: Arr, block_size: int, compress_ratio: int, page_size: int = -1,
                rms_norm_eps: float = 1e-6, format: str = "v4_int8", mode: str = "inplace",
                check_indices: bool = True, impl: str = "auto", workspace: Optional[Arr] = None,
                stream: int = 0, overlap_prologue: bool = False) -> None:
    """The KV compressor, writing kv_cache.

    state_cache f32 [num_blocks, block_size, 1024]; token_to_req i32 [num_tokens]; positions i64
    [num_tokens]; boundary_token_indices i64 [num_outputs]; block_table i32 [num_reqs,
    blocks_per_req]; rms_norm_weight bf16 [512]; cos_sin_cache f32 [max_pos, 64]; kv_slot_mapping
    i64 [num_tokens]; kv_cache u8 [num_pages, P * 584 (+pad)] or [num_pages, P, 1, 584].
    format: v4_int8 | v4_fp8; mode: inplace | functional (zero kv_cache first);
    impl: auto | oracle | fast | cuda; workspace: u8 scratch on the device (GPU).
    """

def compress_workspace_bytes(state_cache: Arr, token_to_req: Arr, positions: Arr,
                             boundary_token_indices: Arr, block_table: Arr, rms_norm_weight: Arr,
                             cos_sin_cache: Arr, kv_slot_mapping: Arr, kv_cache: Arr,
                             block_size: int, compress_ratio: int, page_size: int = -1,
                             format: str = "v4_int8") -> int:
    """Bytes of caller-provided workspace compress_kv needs (0 on the CPU)."""

class DecodePlan:
    """The split-KV plan of sparse_decode: candidates [0, topk + extra_topk) in num_splits splits
    of keys_per_split; made for the shapes b, s_q, h_q, topk, extra_topk. unsplit_b > 0: requests
    [0, unsplit_b) run unsplit in a launch of their own and only the others are split."""

    num_splits: int
    keys_per_split: int
    b: int
    s_q: int
    h_q: int
    topk: int
    extra_topk: int
    unsplit_b: int

    def __init__(self, num_splits: int = 1, keys_per_split: int = 1, b: int = 0, s_q: int = 0,
                 h_q: int = 0, topk: int = 0, extra_topk: int = 0, unsplit_b: int = 0) -> None: ...
    def __eq__(self, other: object) -> bool: ...

def plan_decode(b: int, s_q: int, h_q: int, topk: int, extra_topk: int, num_sms: int,
                kernel: str = "auto") -> DecodePlan:
    """The planner (pure function of the shapes, the SM count and the kernel it is tuned for:
    "auto", "portable" or "sm90")."""

def sparse_decode_workspace_bytes(plan: DecodePlan) -> int:
    """Workspace bytes sparse_decode needs with this plan (0 for one split)."""

def sparse_decode(q: Arr, k_cache: Arr, format: str, page_size: int, indices: Arr,
                  topk_length: Optional[Arr], attn_sink: Optional[Arr],
                  extra_k_cache: Optional[Arr], extra_page_size: int,
                  extra_indices: Optional[Arr], extra_topk_length: Optional[Arr],
                  softmax_scale: float, out: Arr, lse: Arr, plan: Optional[DecodePlan],
                  impl: str = "auto", workspace: Optional[Arr] = None, stream: int = 0,
                  extra_format: str = "") -> None:
    """Sparse MLA decode, writing out and lse.

    q bf16 [b, s_q, h_q, d_qk] (576 v32_fp8, 512 v4_fp8 / v41_fp8); k_cache u8 paged cache; indices i32
    [b, s_q, topk]; topk_length, extra_topk_length i32 [b]; attn_sink f32 [h_q]; extra_indices
    i32 [b, s_q, extra_topk]; extra_format "" = format (or v41_fp4 with a v41_fp8 k_cache);
    softmax_scale 0 = d_qk ** -0.5; out bf16 [b, s_q, h_q, 512];
    lse f32 [b, h_q, s_q]; impl: auto | oracle | fast | cuda.
    """

def sparse_prefill(q: Arr, kv: Arr, indices: Arr, sm_scale: float, d_v: int,
                   attn_sink: Optional[Arr], topk_length: Optional[Arr], out: Arr,
                   max_logits: Arr, lse: Arr, impl: str = "auto", stream: int = 0) -> None:
    """Sparse MLA prefill over a flat KV tensor, writing out, max_logits and lse.

    q bf16 [s_q, h_q, d_qk] (d_v <= d_qk); kv bf16 [s_kv, 1, d_qk]; indices i32 [s_q, 1, topk]
    (outside [0, s_kv) skipped); sm_scale finite > 0; d_v must be 512; attn_sink f32 [h_q];
    topk_length i32 [s_q]; out bf16 [s_q, h_q, d_v]; max_logits f32 [s_q, h_q]; lse f32
    [s_q, h_q]; impl: auto | oracle | fast | cuda.
    """

def sparse_prefill_batched(q: Arr, kv: Arr, indices: Arr, sm_scale: float, d_v: int,
                           attn_sink: Optional[Arr], topk_length: Optional[Arr],
                           seq_offsets_q: Arr, seq_offsets_kv: Arr, out: Arr, max_logits: Arr,
                           lse: Arr, impl: str = "auto", stream: int = 0) -> None:
    """sparse_prefill over packed sequences: seq_offsets_q, seq_offsets_kv i64 [num_seqs + 1]
    (0 first, non-decreasing, s_q / s_kv last); indices count from each sequence's kv segment."""

def dense_decode(q: Arr, k_cache: Arr, fp8: bool, block_table: Arr, cache_seqlens: Arr,
                 causal: bool, softmax_scale: float, d_v: int, out: Arr, lse: Arr,
                 impl: str = "auto", stream: int = 0) -> None:
    """Dense MLA decode over a paged cache, writing out and lse.

    q bf16|f16 [b, s_q, h_q, d_qk]; k_cache q's dtype [num_pages, P, h_kv, d_qk], or with fp8
    u8 v32_fp8 records [num_pages, P, 1, 656] (d_qk 576); block_table i32 [b, max_pages];
    cache_seqlens i32 [b]; causal bottom-right aligned; softmax_scale 0 = d_qk ** -0.5; d_v must
    be 512; out q's dtype [b, s_q, h_q, 512]; lse f32 [b, h_q, s_q]; impl: auto | oracle | fast |
    cuda.
    """
