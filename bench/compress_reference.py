#!/usr/bin/env python3
"""Eager PyTorch reference for the KV compressor (contest `c128_256_512_compress`) and a
byte-exact comparison harness for latentkv's `compress` CLI.

What it computes
----------------
`c128_256_512_compress(...)` is the contest's baseline written eagerly in torch (SPEC.md section 3):
for every boundary token b (request r, position p) the window positions t = p-C+1 .. p are mapped to
state rows `block_table[r, t // bs] * bs + t % bs`, all rows are gathered into one [N, C, 1024] fp32
tensor, `c = (values * softmax(scores, dim=1)).sum(dim=1)` (softmax over the window, per dimension),
RMSNorm `y = c * rsqrt(mean(c^2) + eps) * w.float()`, then
  * NoPE dims 0..447: z = fp32(bf16(y)); per group of 64: amax = max|z| clamped to >= 1e-4,
    e = ceil(log2(amax * fl32(1/QMAX))), payload = trunc(clamp(z * 2^-e, -127, 127)) as int8
    (QMAX 127, format v4_int8, the contest) or (z * 2^-e).to(float8_e4m3fn) (QMAX 448, format v4_fp8,
    DeepSeek V4); scale byte e + 127;
  * RoPE dims 448..511: GPT-J interleaved pairs rotated by cos_sin_cache[(p // C) * C]
    (32 cos then 32 sin), computed on the fp32 y, stored bf16;
and writes the 584-byte record of slot s into a NEW zeroed cache (functional mode): data
(448 payload bytes + 128 RoPE bytes) at page*page_bytes + (s % P)*576, scales (7 bytes + 1 zero pad)
at page*page_bytes + P*576 + (s % P)*8, page = s // P.

How it times
------------
Like triton.testing.do_bench: 3 warm-up calls, then 20 reps; before each rep a 256 MB buffer is
read (L2 flush; a read rather than do_bench's zeroing, so that the timed call does not also pay for
writing back a cache full of dirty lines, the same flush `latentkv bench` uses) outside the timed
region, a CUDA event is recorded before and after one call of the
reference (including its torch.zeros_like of the output cache: the contest's function returns a new
cache), then the device is synchronised.  The median in microseconds is reported.  (On --device
cpu: perf_counter, no flush.)  Each payload format is timed with its own reference variant
(--formats, default both): `reference_time_us` is the contest's int8 one, `reference_fp8_time_us`
(and its `_rounds`, `reference_fp8_graph_time_us`) the e4m3 one, which `latentkv bench compress
--format v4_fp8 --reference FILE` divides by.
The eager sequence (~40 small ops) is partly host-launch-bound, so as an extra the same measurement
is repeated with the call captured in one CUDA graph and replayed (`reference_graph_time_us`, the
GPU-side time of the same kernels; --no-graph skips it).
Because of that host share, one burst of reps can land on a slow or a fast stretch of the host:
the eager timing is taken in --rounds rounds (default 3) over all cases in turn (each round builds
the same inputs again), `reference_time_us` is the median of the rounds' medians and
`reference_time_us_rounds` lists them, so a run's spread is on record beside its figure.

Comparison
----------
With --latentkv PATH, each identity-table case's inputs are dumped as raw little-endian files into
DIR/<case>/ (state.f32 token_to_req.i32 positions.i64 boundary.i64 block_table.i32 weight.bf16
cos_sin.f32 slots.i64 meta.txt), `PATH run compress --inputs DIR/<case> --format v4_int8|v4_fp8
--device cuda --out DIR/<case>/out.u8` is run, and out.u8 (the whole functional-mode cache,
num_pages*page_bytes bytes) is compared byte by byte with the reference.

Usage
-----
  python3 bench/compress_reference.py --out FILE.json [--device cuda] [--dump-dir DIR]
         [--latentkv PATH_TO_CLI] [--cases all|quick|tiny]

Requires only torch and numpy.
"""

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

HEAD_DIM = 512
NOPE_DIM = 448
ROPE_DIM = 64
GROUP = 64
NUM_GROUPS = NOPE_DIM // GROUP  # 7
DATA_BYTES = NOPE_DIM + 2 * ROPE_DIM  # 576
SCALE_BYTES = 8  # 7 scale bytes + 1 pad
RECORD_BYTES = DATA_BYTES + SCALE_BYTES  # 584
DEFAULT_PAGE = 64


# --------------------------------------------------------------------------------------------
# 1. The reference
# --------------------------------------------------------------------------------------------
def c128_256_512_compress(
    state_cache,
    token_to_req,
    positions,
    boundary_token_indices,
    block_table,
    rms_norm_weight,
    cos_sin_cache,
    kv_slot_mapping,
    kv_cache,
    block_size,
    compress_ratio,
    rms_norm_eps=1.0e-6,
    page_size=DEFAULT_PAGE,
    fp8=False,
):
    """Eager reference. Returns a new uint8 cache [num_pages, page_bytes] (functional mode).

    fp8=False: contest v4_int8 (QMAX 127, int8 payload); fp8=True: DeepSeek V4 v4_fp8 (QMAX 448,
    float8_e4m3fn payload).  Boundary slots are assumed >= 0 (the contest guarantees it; no
    filtering is done so that the timed path has no host synchronisation).
    """
    device = state_cache.device
    C = int(compress_ratio)
    bs = int(block_size)
    P = int(page_size)
    num_outputs = boundary_token_indices.numel()

    # ---- gather the windows: [N, C, 1024] -------------------------------------------------
    b_idx = boundary_token_indices.long()
    b_req = token_to_req[b_idx].long()
    b_pos = positions[b_idx].long()
    offs = torch.arange(C, device=device, dtype=torch.long)
    win_pos = b_pos[:, None] - C + 1 + offs[None, :]  # [N, C]
    block_numbers = block_table[b_req[:, None], win_pos // bs].long()
    block_offsets = win_pos % bs
    flat_idx = (block_numbers * bs + block_offsets).reshape(-1)
    all_rows = state_cache.reshape(-1, 2 * HEAD_DIM)[flat_idx].reshape(num_outputs, C, 2 * HEAD_DIM)

    kv_vals = all_rows[:, :, :HEAD_DIM]
    scores = all_rows[:, :, HEAD_DIM:]
    compressed = (kv_vals * F.softmax(scores, dim=1)).sum(dim=1)  # fp32 [N, 512]
    del all_rows, kv_vals, scores

    # ---- RMSNorm ----------------------------------------------------------------------------
    x = compressed.float()
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + rms_norm_eps) * rms_norm_weight.float()

    # ---- NoPE quantisation ------------------------------------------------------------------
    qmax = 448.0 if fp8 else 127.0
    nope = normed[:, :NOPE_DIM].to(torch.bfloat16).to(torch.float32).reshape(num_outputs, NUM_GROUPS, GROUP)
    amax = nope.abs().amax(dim=-1, keepdim=True).clamp_min(1.0e-4)
    exponent = torch.ceil(torch.log2(amax * (1.0 / qmax)))
    scaled = nope * torch.exp2(-exponent)
    if fp8:
        q_bytes = scaled.to(torch.float8_e4m3fn).view(torch.uint8)
    else:
        q_bytes = torch.trunc(torch.clamp(scaled, -127.0, 127.0)).to(torch.int8).view(torch.uint8)
    q_bytes = q_bytes.reshape(num_outputs, NOPE_DIM)
    scale_bytes = torch.clamp(exponent.reshape(num_outputs, NUM_GROUPS) + 127.0, 0.0, 255.0).to(torch.uint8)

    # ---- RoPE (GPT-J interleaved) -----------------------------------------------------------
    rope = normed[:, NOPE_DIM:]
    even = rope[:, 0::2]
    odd = rope[:, 1::2]
    cs = cos_sin_cache[(b_pos // C) * C].float()
    cos = cs[:, : ROPE_DIM // 2]
    sin = cs[:, ROPE_DIM // 2:]
    rot_even = even * cos - odd * sin
    rot_odd = odd * cos + even * sin
    rotated = torch.stack((rot_even, rot_odd), dim=-1).reshape(num_outputs, ROPE_DIM)
    rope_bytes = rotated.to(torch.bfloat16).contiguous().view(torch.uint8)  # [N, 128] little-endian

    # ---- scatter into a new page-split cache ------------------------------------------------
    out = torch.zeros_like(kv_cache)
    page_bytes = out.shape[1]
    flat = out.view(-1)
    slots = kv_slot_mapping[b_idx].long()
    page = slots // P
    slot_off = slots % P
    data_base = page * page_bytes + slot_off * DATA_BYTES
    scale_base = page * page_bytes + P * DATA_BYTES + slot_off * SCALE_BYTES
    payload = torch.cat((q_bytes, rope_bytes), dim=1)  # [N, 576]
    scale_rec = torch.cat(
        (scale_bytes, torch.zeros(num_outputs, 1, dtype=torch.uint8, device=device)), dim=1
    )  # [N, 8]
    data_idx = data_base[:, None] + torch.arange(DATA_BYTES, device=device, dtype=torch.long)[None, :]
    scale_idx = scale_base[:, None] + torch.arange(SCALE_BYTES, device=device, dtype=torch.long)[None, :]
    flat[data_idx.reshape(-1)] = payload.reshape(-1)
    flat[scale_idx.reshape(-1)] = scale_rec.reshape(-1)
    return out


reference = c128_256_512_compress


# --------------------------------------------------------------------------------------------
# 2. The contest workload
# --------------------------------------------------------------------------------------------
def make_contest_inputs(num_reqs, total_tokens, C, seed, device, shuffled=False, page_size=DEFAULT_PAGE):
    """Contest inputs as a dict of tensors plus ints (block_size 8, equal-length requests)."""
    device = torch.device(device)
    block_size = 8
    assert total_tokens % num_reqs == 0
    L = total_tokens // num_reqs
    assert L % block_size == 0 and L % C == 0
    blocks_per_req = L // block_size
    num_blocks = num_reqs * blocks_per_req
    g = torch.Generator(device=device)
    g.manual_seed(int(seed))

    positions = torch.arange(L, device=device, dtype=torch.int64).repeat(num_reqs)
    token_to_req = torch.arange(num_reqs, device=device, dtype=torch.int32).repeat_interleave(L)
    if shuffled:
        phys = torch.randperm(num_blocks, generator=g, device=device)
    else:
        phys = torch.arange(num_blocks, device=device)
    block_table = phys.to(torch.int32).reshape(num_reqs, blocks_per_req).contiguous()
    boundary = torch.nonzero((positions + 1) % C == 0).reshape(-1).to(torch.int64)
    num_outputs = boundary.numel()
    kv_slot_mapping = torch.full((total_tokens,), -1, device=device, dtype=torch.int64)
    kv_slot_mapping[boundary] = torch.arange(num_outputs, device=device, dtype=torch.int64)
    state_cache = torch.randn(
        (num_blocks, block_size, 2 * HEAD_DIM), generator=g, device=device, dtype=torch.float32
    )
    rms_norm_weight = (
        1.0 + 0.1 * torch.randn((HEAD_DIM,), generator=g, device=device, dtype=torch.float32)
    ).to(torch.bfloat16)
    j = torch.arange(ROPE_DIM // 2, device=device, dtype=torch.float64)
    inv_freq = 10000.0 ** (-2.0 * j / ROPE_DIM)
    angles = torch.arange(L, device=device, dtype=torch.float64)[:, None] * inv_freq[None, :]
    cos_sin_cache = torch.cat((torch.cos(angles), torch.sin(angles)), dim=1).to(torch.float32).contiguous()
    num_pages = (num_outputs + page_size - 1) // page_size
    kv_cache = torch.zeros((num_pages, page_size * RECORD_BYTES), device=device, dtype=torch.uint8)
    return dict(
        state_cache=state_cache,
        token_to_req=token_to_req,
        positions=positions,
        boundary_token_indices=boundary,
        block_table=block_table,
        rms_norm_weight=rms_norm_weight,
        cos_sin_cache=cos_sin_cache,
        kv_slot_mapping=kv_slot_mapping,
        kv_cache=kv_cache,
        block_size=block_size,
        compress_ratio=C,
        page_size=page_size,
        num_reqs=num_reqs,
    )


def time_key(fp8):
    """The JSON key of a case's eager reference time for one payload format (the int8 key is the
    contest's, and what older files hold)."""
    return "reference_fp8_time_us" if fp8 else "reference_time_us"


def graph_key(fp8):
    return "reference_fp8_graph_time_us" if fp8 else "reference_graph_time_us"


def run_reference(inp, fp8=False):
    return c128_256_512_compress(
        inp["state_cache"],
        inp["token_to_req"],
        inp["positions"],
        inp["boundary_token_indices"],
        inp["block_table"],
        inp["rms_norm_weight"],
        inp["cos_sin_cache"],
        inp["kv_slot_mapping"],
        inp["kv_cache"],
        inp["block_size"],
        inp["compress_ratio"],
        1.0e-6,
        page_size=inp["page_size"],
        fp8=fp8,
    )


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------
def bench(fn, device, warmup=3, reps=20):
    """Median time in microseconds, do_bench style (L2 flushed before each rep)."""
    if device.type == "cuda":
        flush = torch.ones(64 * 1024 * 1024, dtype=torch.float32, device=device)  # 256 MB
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize(device)
        times = []
        for _ in range(reps):
            flush.sum()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end) * 1000.0)
        del flush
        return statistics.median(times)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def bench_graph(fn, device, warmup=3, reps=20):
    """Same measurement, but the call is captured once in a CUDA graph and replayed (no host
    launch overhead: the GPU-side time of the eager kernel sequence). Returns None on failure."""
    if device.type != "cuda":
        return None
    graph = None
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return bench(graph.replay, device, warmup, reps)
    except Exception as e:  # capture is an extra; never fail the run for it
        print("    (CUDA-graph timing unavailable: %s)" % e, flush=True)
        return None
    finally:
        del graph
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------------------------
# Dump / CLI / comparison
# --------------------------------------------------------------------------------------------
def _np(t):
    return t.detach().contiguous().cpu().numpy()


def dump_inputs(inp, d):
    os.makedirs(d, exist_ok=True)
    _np(inp["state_cache"]).astype("<f4", copy=False).tofile(os.path.join(d, "state.f32"))
    _np(inp["token_to_req"]).astype("<i4", copy=False).tofile(os.path.join(d, "token_to_req.i32"))
    _np(inp["positions"]).astype("<i8", copy=False).tofile(os.path.join(d, "positions.i64"))
    _np(inp["boundary_token_indices"]).astype("<i8", copy=False).tofile(os.path.join(d, "boundary.i64"))
    _np(inp["block_table"]).astype("<i4", copy=False).tofile(os.path.join(d, "block_table.i32"))
    _np(inp["rms_norm_weight"].view(torch.int16)).view(np.uint16).astype("<u2", copy=False).tofile(
        os.path.join(d, "weight.bf16")
    )
    _np(inp["cos_sin_cache"]).astype("<f4", copy=False).tofile(os.path.join(d, "cos_sin.f32"))
    _np(inp["kv_slot_mapping"]).astype("<i8", copy=False).tofile(os.path.join(d, "slots.i64"))
    sc = inp["state_cache"]
    kv = inp["kv_cache"]
    meta = [
        sc.shape[0],  # num_blocks
        inp["block_size"],
        inp["positions"].numel(),  # num_tokens
        inp["boundary_token_indices"].numel(),  # num_outputs
        inp["block_table"].shape[0],  # num_reqs
        inp["block_table"].shape[1],  # blocks_per_req
        inp["cos_sin_cache"].shape[0],  # max_pos
        kv.shape[0],  # num_pages
        kv.shape[1],  # page_bytes
        inp["compress_ratio"],
        inp["page_size"],
    ]
    with open(os.path.join(d, "meta.txt"), "w") as f:
        f.write(" ".join(str(int(v)) for v in meta) + "\n")


def _byte_classes(slots, num_pages, page_bytes, P):
    """Per-byte class of the cache: 0 unwritten, 1 NoPE payload, 2 RoPE, 3 scale, 4 pad."""
    cls = np.zeros(num_pages * page_bytes, dtype=np.uint8)
    page = slots // P
    off = slots % P
    data_base = page * page_bytes + off * DATA_BYTES
    scale_base = page * page_bytes + P * DATA_BYTES + off * SCALE_BYTES
    cls[(data_base[:, None] + np.arange(NOPE_DIM)[None, :]).reshape(-1)] = 1
    cls[(data_base[:, None] + NOPE_DIM + np.arange(2 * ROPE_DIM)[None, :]).reshape(-1)] = 2
    cls[(scale_base[:, None] + np.arange(NUM_GROUPS)[None, :]).reshape(-1)] = 3
    cls[(scale_base + NUM_GROUPS)] = 4
    return cls


def _fp8_key(b):
    """Monotone integer key of e4m3 bytes (sign-magnitude -> signed); +0 and -0 both map to 0."""
    b = b.astype(np.int32)
    mag = b & 0x7F
    return np.where(b & 0x80, -mag, mag)


def _bf16_key(u):
    u = u.astype(np.int32)
    mag = u & 0x7FFF
    return np.where(u & 0x8000, -mag, mag)


def compare_bytes(ref, got, slots, P, fp8):
    """Byte-by-byte comparison of two whole caches (uint8 [num_pages, page_bytes])."""
    num_pages, page_bytes = ref.shape
    ref = ref.reshape(-1)
    got = got.reshape(-1)
    res = {"total_bytes": int(ref.size)}
    if got.size != ref.size:
        res["error"] = "size mismatch: got %d bytes, expected %d" % (got.size, ref.size)
        return res
    cls = _byte_classes(slots, num_pages, page_bytes, P)
    diff = ref != got
    res["diff_bytes"] = int(diff.sum())
    nope = diff & (cls == 1)
    res["nope_bytes"] = int((cls == 1).sum())
    res["nope_diff"] = int(nope.sum())
    if fp8:
        kr = _fp8_key(ref[nope])
        kg = _fp8_key(got[nope])
        res["nope_diff_pm1"] = int((np.abs(kr - kg) == 1).sum())  # adjacent e4m3 values
        res["nope_diff_signed_zero"] = int((kr == kg).sum())  # +0 vs -0
    else:
        dr = ref[nope].view(np.int8).astype(np.int32)
        dg = got[nope].view(np.int8).astype(np.int32)
        res["nope_diff_pm1"] = int((np.abs(dr - dg) == 1).sum())
    res["nope_diff_max"] = 0
    if res["nope_diff"]:
        if fp8:
            res["nope_diff_max"] = int(np.abs(_fp8_key(ref[nope]) - _fp8_key(got[nope])).max())
        else:
            res["nope_diff_max"] = int(
                np.abs(ref[nope].view(np.int8).astype(np.int32) - got[nope].view(np.int8).astype(np.int32)).max()
            )
    res["scale_diff"] = int((diff & (cls == 3)).sum())
    res["pad_diff"] = int((diff & (cls == 4)).sum())
    res["rope_byte_diff"] = int((diff & (cls == 2)).sum())
    res["unwritten_diff"] = int((diff & (cls == 0)).sum())
    # RoPE as bf16 values: count differing values and the max distance in ulps
    page = slots // P
    off = slots % P
    rope_base = page * page_bytes + off * DATA_BYTES + NOPE_DIM
    idx = (rope_base[:, None] + np.arange(2 * ROPE_DIM)[None, :]).reshape(-1)
    rr = ref[idx].view("<u2")
    rg = got[idx].view("<u2")
    rd = rr != rg
    res["rope_value_diff"] = int(rd.sum())
    res["rope_max_ulp"] = int(np.abs(_bf16_key(rr[rd]) - _bf16_key(rg[rd])).max()) if rd.any() else 0
    # records with any difference
    rec_data = (page * page_bytes + off * DATA_BYTES)[:, None] + np.arange(DATA_BYTES)[None, :]
    rec_scale = (page * page_bytes + P * DATA_BYTES + off * SCALE_BYTES)[:, None] + np.arange(SCALE_BYTES)[None, :]
    res["records"] = int(slots.size)
    res["records_diff"] = int((diff[rec_data].any(axis=1) | diff[rec_scale].any(axis=1)).sum())
    return res


def run_latentkv(cli, case_dir, fmt, device_str):
    out_path = os.path.join(case_dir, "out.u8")
    if os.path.exists(out_path):
        os.remove(out_path)
    cmd = [cli, "run", "compress", "--inputs", case_dir, "--format", fmt, "--device", device_str, "--out", out_path]
    print("    $ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    wall = time.perf_counter() - t0
    return np.fromfile(out_path, dtype=np.uint8), wall


# --------------------------------------------------------------------------------------------
# 3. CLI
# --------------------------------------------------------------------------------------------
SHAPES = [(1, 8192), (4, 32768), (8, 65536), (8, 131072)]
RATIOS = [128, 256, 512]


def case_name_seed(ci, reqs, tokens, C, shuffled, base_seed):
    """A case's name and its inputs' seed (case ci of case_list; the same in every timing round)."""
    name = "r%d_t%d_c%d%s" % (reqs, tokens, C, "_shuffled" if shuffled else "")
    return name, base_seed * 1000 + ci * 2 + int(shuffled)


def case_list(which):
    if which == "tiny":  # CPU smoke test sizes (not contest cases)
        shapes = [(1, 1024), (2, 2048)]
    elif which == "quick":
        shapes = SHAPES[:2]
    else:
        shapes = SHAPES
    cases = []
    for C in RATIOS:
        for reqs, tokens in shapes:
            cases.append((reqs, tokens, C))
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="JSON output file")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dump-dir", default=None, help="where to dump inputs for --latentkv (default: a temp dir)")
    ap.add_argument("--latentkv", default=None, help="path to the latentkv CLI; enables the byte comparison")
    ap.add_argument("--cases", default="all", choices=["all", "quick", "tiny"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--cli-device", default="cuda", help="--device passed to the latentkv CLI")
    ap.add_argument("--no-shuffled", action="store_true", help="skip the shuffled-table timings")
    ap.add_argument("--no-graph", action="store_true", help="skip the extra CUDA-graph timing")
    ap.add_argument("--rounds", type=int, default=3,
                    help="eager timings per case, in rounds over all cases; the median is reported")
    ap.add_argument("--formats", default="int8,fp8",
                    help="which reference variants to time: int8 (the contest's v4_int8, reference_time_us) "
                         "and/or fp8 (DeepSeek V4's v4_fp8, reference_fp8_time_us)")
    args = ap.parse_args()
    names = [f.strip() for f in args.formats.split(",") if f.strip()]
    if not names or any(f not in ("int8", "fp8") for f in names):
        ap.error("--formats takes int8 and/or fp8, got %r" % args.formats)
    formats = [f == "fp8" for f in dict.fromkeys(names)]  # the fp8 flag of each, in the order given

    device = torch.device(args.device)
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(device)
        dev_name = torch.cuda.get_device_name(device)
    else:
        dev_name = "cpu"
    print("compress_reference: device=%s torch=%s" % (dev_name, torch.__version__), flush=True)

    dump_root = None
    own_dump_root = False
    if args.latentkv:
        if args.dump_dir:
            dump_root = args.dump_dir
            os.makedirs(dump_root, exist_ok=True)
        else:
            dump_root = tempfile.mkdtemp(prefix="compress_ref_")
            own_dump_root = True

    results = []
    failures = 0
    variants = [False] if args.no_shuffled else [False, True]
    for ci, (reqs, tokens, C) in enumerate(case_list(args.cases)):
        for shuffled in variants:
            name, seed = case_name_seed(ci, reqs, tokens, C, shuffled, args.seed)
            print("[%s] building inputs" % name, flush=True)
            inp = make_contest_inputs(reqs, tokens, C, seed, device, shuffled=shuffled)
            n_out = inp["boundary_token_indices"].numel()
            entry = {
                "name": name,
                "num_reqs": reqs,
                "total_tokens": tokens,
                "compress_ratio": C,
                "shuffled": shuffled,
                "num_outputs": n_out,
                "seed": seed,
            }
            # SPEC section 8: bytes = state rows read + records written
            nbytes = n_out * C * 4 * 2 * HEAD_DIM + n_out * RECORD_BYTES
            entry["bytes"] = nbytes
            for fp8 in formats:
                key = time_key(fp8)
                t_us = bench(lambda: run_reference(inp, fp8=fp8), device, args.warmup, args.reps)
                entry[key] = t_us
                entry[key + "_rounds"] = [t_us]
                g_us = None if args.no_graph else bench_graph(lambda: run_reference(inp, fp8=fp8), device,
                                                              args.warmup, args.reps)
                entry[graph_key(fp8)] = g_us
                print(
                    "[%s] %s reference %.1f us (%.1f GB/s), in a CUDA graph: %s us"
                    % (name, "fp8" if fp8 else "int8", t_us, nbytes / (t_us * 1e-6) / 1e9,
                       "n/a" if g_us is None else "%.1f" % g_us),
                    flush=True,
                )

            if args.latentkv and not shuffled:
                case_dir = os.path.join(dump_root, name)
                entry["diff"] = {}
                try:
                    dump_inputs(inp, case_dir)
                    slots = _np(inp["kv_slot_mapping"][inp["boundary_token_indices"]]).astype(np.int64)
                    for label, fmt, fp8 in (("int8", "v4_int8", False), ("fp8", "v4_fp8", True)):
                        ref = _np(run_reference(inp, fp8=fp8))
                        try:
                            got, wall = run_latentkv(args.latentkv, case_dir, fmt, args.cli_device)
                        except (subprocess.CalledProcessError, OSError) as e:
                            failures += 1
                            entry["diff"][label] = {"error": str(e)}
                            print("[%s] %s: latentkv failed: %s" % (name, label, e), flush=True)
                            continue
                        d = compare_bytes(ref, got, slots, inp["page_size"], fp8)
                        d["cli_wall_s"] = wall
                        entry["diff"][label] = d
                        if "error" in d:
                            failures += 1
                        print(
                            "[%s] %s: diff_bytes=%s nope=%s (+-1: %s) scale=%s rope_bytes=%s pad=%s unwritten=%s"
                            % (
                                name,
                                label,
                                d.get("diff_bytes"),
                                d.get("nope_diff"),
                                d.get("nope_diff_pm1"),
                                d.get("scale_diff"),
                                d.get("rope_byte_diff"),
                                d.get("pad_diff"),
                                d.get("unwritten_diff"),
                            ),
                            flush=True,
                        )
                        del ref, got
                finally:
                    shutil.rmtree(case_dir, ignore_errors=True)
            results.append(entry)
            del inp
            gc.collect()
            if device.type == "cuda":
                torch.cuda.empty_cache()

    if own_dump_root:
        shutil.rmtree(dump_root, ignore_errors=True)

    # Rounds 2.. of the eager timing: every case again, in the same order, with the same inputs.
    by_name = {e["name"]: e for e in results}
    for rnd in range(1, max(1, args.rounds)):
        for ci, (reqs, tokens, C) in enumerate(case_list(args.cases)):
            for shuffled in variants:
                name, seed = case_name_seed(ci, reqs, tokens, C, shuffled, args.seed)
                inp = make_contest_inputs(reqs, tokens, C, seed, device, shuffled=shuffled)
                for fp8 in formats:
                    t_us = bench(lambda: run_reference(inp, fp8=fp8), device, args.warmup, args.reps)
                    by_name[name][time_key(fp8) + "_rounds"].append(t_us)
                    print("[%s] round %d: %s reference %.1f us" % (name, rnd + 1, "fp8" if fp8 else "int8", t_us),
                          flush=True)
                del inp
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    for e in results:
        for fp8 in formats:
            key = time_key(fp8)
            e[key] = statistics.median(e[key + "_rounds"])
        if False in formats:
            e["reference_gbps"] = e["bytes"] / (e["reference_time_us"] * 1e-6) / 1e9

    doc = {
        "op": "compress_reference",
        "device": dev_name,
        "torch": torch.__version__,
        "timing": "do_bench style: %d warm-up, median of %d reps, 256 MB L2 flush (a read) per rep, CUDA events; "
        "eager: the median of %d such rounds over all cases" % (args.warmup, args.reps, max(1, args.rounds)),
        "rounds": max(1, args.rounds),
        "formats": ["v4_fp8" if fp8 else "v4_int8" for fp8 in formats],
        "cases": results,
    }
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)

    # short table: one row per case and timed format
    print()
    hdr = "%-26s %4s %8s %12s %19s %9s %12s" % ("case", "fmt", "outputs", "ref_us", "rounds min-max", "GB/s",
                                                 "graph_us")
    if args.latentkv:
        hdr += "  %-28s %-28s" % ("int8 diff (all/nope+-1/sc/rope)", "fp8 diff (all/nope+-1/sc/rope)")
    print(hdr)
    for e in results:
        for i, fp8 in enumerate(formats):
            key = time_key(fp8)
            g = e.get(graph_key(fp8))
            rr = e[key + "_rounds"]
            line = "%-26s %4s %8d %12.1f %19s %9.1f %12s" % (
                e["name"] if i == 0 else "",
                "fp8" if fp8 else "int8",
                e["num_outputs"],
                e[key],
                "%.1f-%.1f" % (min(rr), max(rr)),
                e["bytes"] / (e[key] * 1e-6) / 1e9,
                "-" if g is None else "%.1f" % g,
            )
            if "diff" in e and i == 0:
                for label in ("int8", "fp8"):
                    d = e["diff"].get(label, {})
                    if "error" in d:
                        line += "  %-28s" % "ERROR"
                    else:
                        line += "  %-28s" % (
                            "%s/%s/%s/%s"
                            % (d.get("diff_bytes"), d.get("nope_diff_pm1"), d.get("scale_diff"), d.get("rope_byte_diff"))
                        )
            print(line)
    print("wrote %s" % args.out, flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
