"""Shared workloads for the Python tests: seeded NumPy inputs for the formats, the compressor
(contest-shaped, small) and sparse decode, plus NumPy decoders of every cache format.

The decoders are written from docs/formats.md (record bytes, page layout, scale rules) with
ml_dtypes' float8_e4m3fn and bfloat16 doing the element conversions, so they are an independent
reading of the format, not a port of the C++ codec.
"""

import ml_dtypes
import numpy as np
import pytest

import latentkv

BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
E2M1_MAGNITUDE = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)


def page_bytes_view(cache, fmt):
    """The cache as [num_pages, P, page_bytes] is not needed; returns (pages u8 [num_pages, stride],
    P) for a contiguous 4-D cache."""
    num_pages, P = cache.shape[0], cache.shape[1]
    return cache.reshape(num_pages, -1), P


def decode_records(cache, slots, fmt):
    """Dequantizes the records at slots (NumPy, float32 [n, d_qk]); slot < 0 gives zeros."""
    info = latentkv.format_info(fmt)
    pages, P = page_bytes_view(cache, fmt)
    out = np.zeros((len(slots), info["d_qk"]), np.float32)
    for i, slot in enumerate(slots):
        if slot < 0:
            continue
        page, t = divmod(int(slot), P)
        row = pages[page]
        if fmt == "v32_fp8":
            rec = row[t * 656:(t + 1) * 656]
            payload = rec[:512].view(E4M3).astype(np.float32)
            scales = rec[512:528].view("<f4")
            out[i, :512] = payload * np.repeat(scales, 128)
            out[i, 512:] = rec[528:656].view(BF16).astype(np.float32)
        elif fmt in ("v4_fp8", "v4_int8"):
            data = row[t * 576:(t + 1) * 576]
            scale_row = row[P * 576 + t * 8:P * 576 + t * 8 + 8]
            assert scale_row[7] == 0, "pad byte must be 0"
            if fmt == "v4_fp8":
                payload = data[:448].view(E4M3).astype(np.float32)
            else:
                payload = data[:448].view(np.int8).astype(np.float32)
            scales = np.exp2(scale_row[:7].astype(np.float32) - 127)
            out[i, :448] = payload * np.repeat(scales, 64)
            out[i, 448:] = data[448:576].view(BF16).astype(np.float32)
        elif fmt == "v41_fp8":
            rec = row[t * 528:(t + 1) * 528]
            payload = rec[:512].view(E4M3).astype(np.float32)
            scales = np.exp2(rec[512:528].astype(np.float32) - 127)
            out[i] = payload * np.repeat(scales, 32)
        elif fmt == "v41_fp4":
            rec = row[t * 288:(t + 1) * 288]
            nibbles = np.stack([rec[:256] & 0xF, rec[:256] >> 4], axis=1).reshape(-1)
            values = E2M1_MAGNITUDE[nibbles & 7] * np.where(nibbles & 8, -1.0, 1.0)
            scales = rec[256:288].view(E4M3).astype(np.float32)
            out[i] = values * np.repeat(scales, 16)
        else:
            raise AssertionError(fmt)
    return out


def bf16(a):
    return np.asarray(a, np.float32).astype(BF16)


ARG_ORDER_COMPRESS = ["state_cache", "token_to_req", "positions", "boundary_token_indices",
                      "block_table", "rms_norm_weight", "cos_sin_cache", "kv_slot_mapping",
                      "kv_cache"]


def compress_inputs(num_reqs=2, tokens_per_req=256, C=16, block_size=8, P=64, seed=0,
                    shuffled=True, cache_fill=0):
    """Contest-shaped compressor inputs (equal-length requests, boundaries every C tokens)."""
    rng = np.random.default_rng(seed)
    L = tokens_per_req
    blocks_per_req = L // block_size
    num_blocks = num_reqs * blocks_per_req
    positions = np.tile(np.arange(L, dtype=np.int64), num_reqs)
    token_to_req = np.repeat(np.arange(num_reqs, dtype=np.int32), L)
    phys = rng.permutation(num_blocks) if shuffled else np.arange(num_blocks)
    block_table = phys.astype(np.int32).reshape(num_reqs, blocks_per_req)
    boundary = np.nonzero((positions + 1) % C == 0)[0].astype(np.int64)
    num_outputs = len(boundary)
    slots = np.full(num_reqs * L, -1, np.int64)
    slots[boundary] = np.arange(num_outputs, dtype=np.int64)
    state = rng.standard_normal((num_blocks, block_size, 1024), dtype=np.float32)
    weight = bf16(1.0 + 0.1 * rng.standard_normal(512))
    j = np.arange(32, dtype=np.float64)
    angles = np.arange(L, dtype=np.float64)[:, None] * (10000.0 ** (-2.0 * j / 64))[None, :]
    cos_sin = np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)
    num_pages = (num_outputs + P - 1) // P
    kv_cache = np.full((num_pages, P * 584), cache_fill, np.uint8)
    return dict(state_cache=state, token_to_req=token_to_req, positions=positions,
                boundary_token_indices=boundary, block_table=block_table,
                rms_norm_weight=weight, cos_sin_cache=cos_sin, kv_slot_mapping=slots,
                kv_cache=kv_cache, block_size=block_size, compress_ratio=C)


def decode_inputs(fmt="v32_fp8", b=2, s_q=2, h_q=16, topk=128, num_pages=8, P=64, seed=0,
                  extra=False, lengths=False, sink=False, extra_fmt=None):
    """Sparse-decode inputs: a cache filled by latentkv.quantize from random latents, random
    indices with some -1 entries, optional lengths, sink and extra cache (in extra_fmt when given,
    which then appears as the extra_format argument)."""
    rng = np.random.default_rng(seed)
    d_qk = latentkv.format_info(fmt)["d_qk"]

    def cache(pages, page_size, f=fmt):
        c = np.zeros((pages, page_size, 1, latentkv.format_info(f)["bytes_per_token"]), np.uint8)
        n = pages * page_size
        latents = bf16(rng.standard_normal((n, d_qk)))
        latentkv.quantize(latents, np.arange(n, dtype=np.int64), c, f)
        return c

    def index(k, num_slots):
        idx = rng.integers(0, num_slots, (b, s_q, k), dtype=np.int32)
        idx[rng.random((b, s_q, k)) < 0.1] = -1
        return idx

    out = dict(q=bf16(rng.standard_normal((b, s_q, h_q, d_qk))), k_cache=cache(num_pages, P),
               indices=index(topk, num_pages * P))
    if lengths:
        out["topk_length"] = rng.integers(1, topk + 1, b, dtype=np.int32)
    if sink:
        out["attn_sink"] = rng.standard_normal(h_q).astype(np.float32)
    if extra:
        out["extra_k_cache"] = cache(2, 32, extra_fmt or fmt)
        out["extra_indices"] = index(64, 64)
        if lengths:
            out["extra_topk_length"] = rng.integers(0, 65, b, dtype=np.int32)
        if extra_fmt:
            out["extra_format"] = extra_fmt
    if fmt == "v41_fp8":
        out["format"] = fmt  # d_qk 512 alone means v4_fp8
    return out


def decode_close(out, ref, max_rel=1e-2, min_cos=0.9999):
    """latentkv's decode tolerance against the oracle: max |out - ref| / max |ref| and cosine."""
    a = np.asarray(out, np.float32).astype(np.float64).ravel()
    r = np.asarray(ref, np.float32).astype(np.float64).ravel()
    denom = np.abs(r).max()
    rel = np.abs(a - r).max() / denom if denom > 0 else np.abs(a).max()
    cos = 1.0 if denom == 0 else float(a @ r / (np.linalg.norm(a) * np.linalg.norm(r)))
    assert rel <= max_rel and cos >= min_cos, f"max_rel={rel:.3g} cos={cos:.8f}"
    return rel, cos


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
