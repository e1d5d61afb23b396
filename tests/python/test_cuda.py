"""The Python package on a GPU: torch CUDA tensors through latentkv's CUDA backend (impl="auto" on
CUDA tensors, or impl="cuda"). Skipped unless torch is importable, torch sees a CUDA device and
latentkv was built with CUDA.

What is checked:

- compress_kv (in place and functional, v4_int8 and v4_fp8) equals the CPU path's bytes on the
  same inputs, up to the rare ambiguous roundings docs/compress.md describes (every scale byte
  equal, at most 4 NoPE codes off by one, RoPE within 2 bf16 ulps); it runs on torch's current
  stream; bad indices raise the CPU's message and write nothing; a caller workspace gives the same
  bytes as latentkv's cached one.
- quantize / dequantize (every format, bf16 and f32 latents, 4-D and padded 2-D caches) and
  positions_to_slots equal the CPU bytes exactly.
- sparse_decode against the float64 CPU oracle (impl="oracle" on CPU copies) with decode_close's
  tolerance: plain, topk_length, sink, extra cache, all together, long topk (split plans), odd h_q;
  a reused plan and workspace are bitwise equal to a planless call and reruns are bitwise equal;
  formats without a decode kernel are rejected with the core's message, and a v41_fp4 extra cache
  (CPU only) raises NotImplementedError.
- The contest: latentkv.contest.c128_256_512_compress (and compress_kv with v4_fp8) against the
  contest's eager PyTorch reference (bench/compress_reference.py, imported, not copied) on its 12
  workloads built by that file's builder: 0 scale differences, at most 4 NoPE codes off by one.
- latentkv.flash_mla (get_mla_metadata + flash_mla_with_kvcache with indices, fp8 caches) over a
  FlashMLA-style grid against a float64 torch reference written here from docs/decode.md; its
  dense decode (bf16, f16, v32_fp8 pages) and flash_mla_sparse_fwd (sparse prefill) on CUDA
  against the CPU oracle.
- torch.compile(fullgraph=True) (aot_eager; inductor when triton is importable) gives the eager
  bytes for a decode step, an in-place compress and the contest function; CUDA-graph capture + replay of sparse
  decode with the quantize of its new tokens (slot checks off, reused plan, caller workspace) and of compress_kv (checks off, caller workspace) give
  the eager bytes.
"""

import math
import os
import sys

import numpy as np
import pytest

try:
    import torch
except ImportError:
    pytest.skip("torch is not installed", allow_module_level=True)

import latentkv  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)
if not latentkv.built_with_cuda():
    pytest.skip("latentkv was built without CUDA", allow_module_level=True)

from conftest import (  # noqa: E402
    ARG_ORDER_COMPRESS, BF16, bf16, compress_inputs, decode_close, decode_inputs)
from latentkv.contest import c128_256_512_compress  # noqa: E402
from latentkv.flash_mla import (  # noqa: E402
    flash_mla_sparse_fwd, flash_mla_with_kvcache, get_mla_metadata)

# The contest's eager reference and its workload builder live in bench/ (a script, not a package).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import compress_reference as cref  # noqa: E402

DEV = torch.device("cuda", torch.cuda.current_device())
FORMATS = ["v32_fp8", "v4_fp8", "v4_int8", "v41_fp8", "v41_fp4"]
COMPRESS_ARGS = ARG_ORDER_COMPRESS + ["block_size", "compress_ratio"]


# ---- conversions -----------------------------------------------------------------------------

def to_dev(a):
    """A NumPy array as a torch tensor on DEV (bf16 through its bits); anything else unchanged."""
    if not isinstance(a, np.ndarray):
        return a
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(DEV)
    return torch.from_numpy(np.ascontiguousarray(a)).to(DEV)


def to_np(t):
    """A torch tensor as a NumPy array (bf16 as ml_dtypes bfloat16, 1-byte dtypes as uint8)."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BF16)
    if t.element_size() == 1 and t.dtype != torch.uint8:
        t = t.view(torch.uint8)
    return t.numpy()


def on_dev(inp):
    return {k: to_dev(v) for k, v in inp.items()}


def compress_call(inp, **kw):
    return latentkv.compress_kv(*[inp[k] for k in COMPRESS_ARGS], **kw)


# ---- compress_kv -----------------------------------------------------------------------------

def boundary_slots(inp):
    """Flat slots of the outputs (NumPy inputs)."""
    return inp["kv_slot_mapping"][inp["boundary_token_indices"]].astype(np.int64)


def check_compress_bytes(got, ref, slots, fmt, what, P=64):
    """got and ref are 2-D page-split caches from two fp32 computations of the same records: equal
    except where an honest fp32 result may round either way (docs/compress.md, "Exactness")."""
    d = cref.compare_bytes(ref, got, slots, P, fp8=fmt == "v4_fp8")
    assert "error" not in d, d
    codes = d["nope_diff_pm1"] + d.get("nope_diff_signed_zero", 0)
    print(f"{what}: {d['diff_bytes']} of {d['total_bytes']} bytes differ (NoPE +-1: {codes}, "
          f"scale: {d['scale_diff']}, RoPE values: {d['rope_value_diff']} up to "
          f"{d['rope_max_ulp']} ulp, pad: {d['pad_diff']}, unwritten: {d['unwritten_diff']})")
    assert d["scale_diff"] == 0 and d["pad_diff"] == 0 and d["unwritten_diff"] == 0, d
    assert d["nope_diff"] == codes, f"a NoPE byte differs by more than one code: {d}"
    assert codes <= 4, d
    assert d["rope_max_ulp"] <= 2 and d["rope_value_diff"] <= 4, d
    return d


COMPRESS_CONFIGS = {
    "C16": dict(num_reqs=2, tokens_per_req=256, C=16),
    "C4": dict(num_reqs=2, tokens_per_req=256, C=4),
    "C128": dict(num_reqs=2, tokens_per_req=1024, C=128),  # few outputs: the window is split
    "C512_bs16": dict(num_reqs=1, tokens_per_req=4096, C=512, block_size=16),
}


@pytest.mark.parametrize("mode", ["inplace", "functional"])
@pytest.mark.parametrize("fmt", ["v4_int8", "v4_fp8"])
@pytest.mark.parametrize("config", list(COMPRESS_CONFIGS))
def test_compress_matches_cpu(config, fmt, mode):
    inp = compress_inputs(seed=list(COMPRESS_CONFIGS).index(config) * 2 + (fmt == "v4_fp8"),
                          cache_fill=0xAB, **COMPRESS_CONFIGS[config])
    cpu_cache = inp["kv_cache"].copy()
    cpu = compress_call(dict(inp, kv_cache=cpu_cache), format=fmt, mode=mode)
    dev = on_dev(inp)
    before = dev["kv_cache"].clone()
    got = compress_call(dev, format=fmt, mode=mode)
    assert got.is_cuda and got.dtype == torch.uint8 and got.shape == dev["kv_cache"].shape
    if mode == "inplace":
        assert got is dev["kv_cache"]
    else:
        assert got is not dev["kv_cache"] and torch.equal(dev["kv_cache"], before)
    # In place, the bytes outside the records keep 0xAB; functional mode zeroes them. Both sides
    # must agree on that too (compare_bytes counts those bytes as "unwritten").
    check_compress_bytes(to_np(got), cpu, boundary_slots(inp), fmt, f"{config} {fmt} {mode}")
    if mode == "functional":
        again = compress_call(dev, format=fmt, mode=mode, impl="cuda")
        assert torch.equal(again, got), "reruns are bitwise identical"


@pytest.mark.parametrize("check_indices", [False, True])
@pytest.mark.parametrize("mode", ["inplace", "functional"])
def test_compress_runs_on_current_stream(mode, check_indices):
    inp = on_dev(compress_inputs(num_reqs=2, tokens_per_req=1024, C=128, seed=41, cache_fill=0x11))
    expected = compress_call(dict(inp, kv_cache=inp["kv_cache"].clone()), mode=mode)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    # Keep the default stream busy for a while: had latentkv enqueued its work on the default
    # stream instead of torch's current stream, the snapshot taken on the side stream would not
    # see it. (torch.cuda._sleep is private; without it only the final bytes are checked.)
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(20_000_000)
    with torch.cuda.stream(side):
        got = compress_call(inp, mode=mode, check_indices=check_indices)
        snapshot = got.clone()
    side.synchronize()
    torch.cuda.synchronize()
    assert torch.equal(snapshot, expected)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("mode", ["inplace", "functional"])
def test_compress_overlap_prologue_same_bytes(mode):
    # overlap_prologue only moves the kernel's wait for the kernel ahead (programmatic dependent
    # launch); with nothing ahead writing the inputs the bytes are the same.
    inp = on_dev(compress_inputs(num_reqs=2, tokens_per_req=1024, C=128, seed=43, cache_fill=0x11))
    expected = compress_call(dict(inp, kv_cache=inp["kv_cache"].clone()), mode=mode, check_indices=False)
    got = compress_call(dict(inp, kv_cache=inp["kv_cache"].clone()), mode=mode, check_indices=False,
                        overlap_prologue=True)
    torch.cuda.synchronize()
    assert torch.equal(got, expected)


def test_compress_errors_on_cuda_write_nothing():
    inp = on_dev(compress_inputs(C=16, seed=5, cache_fill=0x22))
    before = inp["kv_cache"].clone()
    bad = dict(inp, boundary_token_indices=inp["boundary_token_indices"].clone())
    bad["boundary_token_indices"][1] = 5000
    with pytest.raises(ValueError, match=r"boundary_token_indices\[1\] = 5000 is outside "
                                         r"\[0, num_tokens = 512\)"):
        compress_call(bad)
    dup = dict(inp, kv_slot_mapping=inp["kv_slot_mapping"].clone())
    b = inp["boundary_token_indices"]
    dup["kv_slot_mapping"][b[2]] = dup["kv_slot_mapping"][b[1]]
    with pytest.raises(ValueError, match=r"slot 1 is written by outputs 1 and 2"):
        compress_call(dup)
    with pytest.raises(TypeError, match=r"implementation cpu cannot run on tensors on cuda"):
        compress_call(inp, impl="fast")
    torch.cuda.synchronize()
    assert torch.equal(inp["kv_cache"], before), "nothing is written on failure"


def test_compress_caller_workspace():
    inp = on_dev(compress_inputs(num_reqs=2, tokens_per_req=1024, C=128, seed=6))
    args = [inp[k] for k in COMPRESS_ARGS]
    need = latentkv.compress_workspace_bytes(*args, format="v4_fp8")
    assert need > 0
    ws = torch.empty(need, dtype=torch.uint8, device=DEV)  # garbage: the call clears its counters
    ws.fill_(0x7F)
    cached = latentkv.compress_kv(*args, format="v4_fp8", mode="functional")
    own = latentkv.compress_kv(*args, format="v4_fp8", mode="functional", workspace=ws,
                               check_indices=False)
    assert torch.equal(own, cached)
    with pytest.raises(ValueError, match=r"workspace of 16 bytes is too small"):
        latentkv.compress_kv(*args, format="v4_fp8", mode="functional", workspace=ws[:16])
    wide = torch.empty(need + 256, dtype=torch.uint8, device=DEV)
    with pytest.raises(ValueError, match=r"workspace must be 256-byte aligned, got address % 256 = 16"):
        latentkv.compress_kv(*args, format="v4_fp8", mode="functional", workspace=wide[16:16 + need])


# ---- cache formats ---------------------------------------------------------------------------

@pytest.mark.parametrize("form", ["4d", "2d_padded"])
@pytest.mark.parametrize("latent_dtype", ["bf16", "f32"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_formats_match_cpu(fmt, latent_dtype, form):
    rng = np.random.default_rng(FORMATS.index(fmt) * 4 + len(latent_dtype) + len(form))
    info = latentkv.format_info(fmt)
    d_qk, bpt = info["d_qk"], info["bytes_per_token"]
    n, P, num_pages = 40, 8, 6
    x = (rng.standard_normal((n, d_qk)) * rng.choice([1e-3, 1.0, 50.0], (n, 1))).astype(np.float32)
    x[3] = 0.0
    latents = bf16(x) if latent_dtype == "bf16" else x
    slots = rng.permutation(P * num_pages)[:n].astype(np.int64 if form == "4d" else np.int32)
    slots[5] = -1  # skipped
    if form == "4d":
        cache, page_size = np.full((num_pages, P, 1, bpt), 0xAB, np.uint8), None
    else:  # FlashMLA-style padded pages (the stride stays a multiple of 16 bytes)
        cache, page_size = np.full((num_pages, P * bpt + 32), 0xAB, np.uint8), P

    cpu = cache.copy()
    latentkv.quantize(latents, slots, cpu, fmt, page_size=page_size)
    gpu = to_dev(cache)
    assert latentkv.quantize(to_dev(latents), to_dev(slots), gpu, fmt, page_size=page_size) is gpu
    np.testing.assert_array_equal(to_np(gpu), cpu)

    read = np.concatenate([slots, np.array([-1, slots[0]], slots.dtype)])  # repeats are fine
    back_cpu = latentkv.dequantize(cpu, read, fmt, page_size=page_size)
    back = latentkv.dequantize(gpu, to_dev(read), fmt, page_size=page_size)
    assert back.is_cuda and back.dtype == torch.bfloat16 and tuple(back.shape) == (n + 2, d_qk)
    np.testing.assert_array_equal(to_np(back).view(np.uint16), back_cpu.view(np.uint16))
    out = torch.full((n + 2, d_qk), float("nan"), dtype=torch.bfloat16, device=DEV)
    assert latentkv.dequantize(gpu, to_dev(read), fmt, page_size=page_size, out=out) is out
    np.testing.assert_array_equal(to_np(out).view(np.uint16), back_cpu.view(np.uint16))


def test_format_errors_on_cuda():
    cache = torch.zeros(1, 4, 1, 584, dtype=torch.uint8, device=DEV)
    x = torch.randn(2, 512, device=DEV).to(torch.bfloat16)
    with pytest.raises(ValueError,
                       match=r"slot 4 \(slots\[1\]\) is outside the cache, which has 4 slots"):
        latentkv.quantize(x, torch.tensor([0, 4], device=DEV), cache, "v4_fp8")
    with pytest.raises(ValueError, match=r"slot 2 is written twice"):
        latentkv.quantize(x, torch.tensor([2, 2], device=DEV), cache, "v4_fp8")
    with pytest.raises(TypeError, match=r"slots is on cpu, expected cuda"):
        latentkv.quantize(x, torch.tensor([0, 1]), cache, "v4_fp8")
    torch.cuda.synchronize()
    assert not cache.any(), "nothing is written on failure"


def test_positions_to_slots_matches_cpu():
    rng = np.random.default_rng(8)
    table = rng.integers(-1, 50, (3, 7), dtype=np.int32)
    pos = rng.integers(-3, 7 * 16 + 5, (3, 33), dtype=np.int32)
    cpu = latentkv.positions_to_slots(table, pos, 16)
    got = latentkv.positions_to_slots(to_dev(table), to_dev(pos), 16)
    assert got.is_cuda and got.dtype == torch.int32
    np.testing.assert_array_equal(to_np(got), cpu)


# ---- sparse decode against the CPU oracle ----------------------------------------------------

def check_decode(out, lse, ref_out, ref_lse):
    """CUDA (out, lse) against a reference (NumPy or torch, float): decode_close on out, lse within
    1e-4 * max(1, |ref|), lonely queries exactly (out 0, lse +inf)."""
    out = to_np(out).astype(np.float32)
    lse = to_np(lse)
    ref_out = (to_np(ref_out) if isinstance(ref_out, torch.Tensor) else ref_out).astype(np.float64)
    ref_lse = (to_np(ref_lse) if isinstance(ref_lse, torch.Tensor) else ref_lse).astype(np.float64)
    assert out.shape == ref_out.shape and lse.shape == ref_lse.shape
    assert not np.isnan(out).any() and not np.isnan(lse).any()
    rel, cos = decode_close(out, ref_out)
    lonely = np.isposinf(ref_lse)
    np.testing.assert_array_equal(np.isposinf(lse), lonely)
    finite = np.isfinite(ref_lse)
    assert np.isfinite(lse[finite]).all()
    err = np.abs(lse[finite] - ref_lse[finite])
    assert (err <= 1e-4 * np.maximum(1.0, np.abs(ref_lse[finite]))).all(), \
        f"lse error {err.max():.3g}"
    # out is [b, s_q, h_q, 512], lse [b, h_q, s_q]: a lonely row's output is exactly zero.
    assert not out[lonely.transpose(0, 2, 1)].any()
    return rel, cos


def decode_numpy(inp, impl, **kw):
    args = dict(inp)
    return latentkv.sparse_decode(args.pop("q"), args.pop("k_cache"), args.pop("indices"),
                                  impl=impl, **args, **kw)


DECODE_CASES = {
    "plain": dict(),
    "lengths": dict(lengths=True),
    "sink": dict(sink=True, h_q=3),
    "extra": dict(extra=True),
    "all": dict(lengths=True, sink=True, extra=True),
    "h128_topk2048": dict(b=2, s_q=1, h_q=128, topk=2048, num_pages=40, lengths=True, sink=True,
                          extra=True),
    "h70_sq3": dict(b=3, s_q=3, h_q=70, topk=300, lengths=True, sink=True),
}


@pytest.mark.parametrize("case", list(DECODE_CASES))
@pytest.mark.parametrize("fmt", ["v32_fp8", "v4_fp8", "v41_fp8"])
def test_sparse_decode_matches_oracle(fmt, case):
    kw = dict(dict(h_q=16), **DECODE_CASES[case])
    seed = list(DECODE_CASES).index(case) * 2 + (fmt == "v4_fp8") + (100 if fmt == "v41_fp8" else 0)
    inp = decode_inputs(fmt, seed=seed, **kw)
    if "attn_sink" in inp:
        inp["attn_sink"][:2] = [np.inf, -np.inf]  # out 0 for head 0; no effect for head 1
    inp["indices"][0, 0] = -1  # a lonely query
    ref_out, ref_lse = decode_numpy(inp, "oracle")
    dev = on_dev(inp)
    for impl in ("auto", "cuda"):
        out, lse = decode_numpy(dev, impl)
        assert out.is_cuda and out.dtype == torch.bfloat16 and lse.dtype == torch.float32
        check_decode(out, lse, ref_out, ref_lse)
    if "attn_sink" in inp:
        assert not out[:, :, 0].any(), "sink +inf zeroes the output"


def test_sparse_decode_plan_workspace_and_determinism():
    inp = on_dev(decode_inputs("v4_fp8", b=2, s_q=1, h_q=64, topk=2048, num_pages=40, seed=17,
                               lengths=True, extra=True))
    b, s_q, h_q, topk = 2, 1, 64, 2048
    plan = latentkv.plan_decode(b, s_q, h_q, topk, extra_topk=64)
    assert plan.num_splits > 1, "few work items: the candidates are split"
    ws = torch.empty(latentkv.sparse_decode_workspace_bytes(plan), dtype=torch.uint8, device=DEV)
    first = decode_numpy(inp, "auto")
    for _ in range(3):
        again = decode_numpy(inp, "auto", plan=plan, workspace=ws)
        assert torch.equal(again[0], first[0]) and torch.equal(again[1], first[1])
    # Caller-allocated, strided outputs: the same bytes.
    out_big = torch.full((b, s_q, h_q, 2, 512), float("nan"), dtype=torch.bfloat16, device=DEV)
    lse_big = torch.full((b, h_q, 2 * s_q), float("nan"), device=DEV)
    out, lse = decode_numpy(inp, "cuda", plan=plan, workspace=ws, out=out_big[:, :, :, 1],
                            lse=lse_big[:, :, :s_q])
    assert torch.equal(out_big[:, :, :, 1], first[0]) and torch.equal(lse_big[:, :, :s_q], first[1])
    assert out_big[:, :, :, 0].isnan().all(), "nothing outside out is written"
    with pytest.raises(ValueError, match=r"the plan was made for b=1 s_q=1 h_q=64 topk=2048"):
        decode_numpy(inp, "auto", plan=latentkv.plan_decode(1, 1, 64, 2048, 64))
    with pytest.raises(ValueError, match=r"workspace of 16 bytes is too small"):
        decode_numpy(inp, "auto", plan=plan, workspace=ws[:16])
    # torch's allocator starts blocks at multiples of 512 bytes, so 16 bytes in is misaligned.
    wide = torch.empty(ws.numel() + 256, dtype=torch.uint8, device=DEV)
    with pytest.raises(ValueError, match=r"workspace must be 256-byte aligned, got address % 256 = 16"):
        decode_numpy(inp, "auto", plan=plan, workspace=wide[16:16 + ws.numel()])
    # A host workspace for a CUDA call is a device error, not scratch the kernels would write.
    with pytest.raises(TypeError, match=r"workspace is on cpu, expected cuda:0"):
        decode_numpy(inp, "auto", plan=plan, workspace=ws.cpu())


@pytest.mark.parametrize("fmt", ["v4_int8", "v41_fp4"])
def test_sparse_decode_other_formats_rejected(fmt):
    # Every backend takes v32_fp8, v4_fp8 and v41_fp8 caches: the core rejects the rest before
    # choosing one.
    bpt = latentkv.format_info(fmt)["bytes_per_token"]
    q = torch.randn(1, 1, 4, 512, device=DEV).to(torch.bfloat16)
    cache = torch.zeros(1, 64, 1, bpt, dtype=torch.uint8, device=DEV)
    idx = torch.zeros(1, 1, 64, dtype=torch.int32, device=DEV)
    message = (r"sparse_decode supports v32_fp8, v4_fp8 and v41_fp8 caches \(v41_fp4 only as the "
               rf"extra cache of a v41_fp8 one\), got {fmt}")
    with pytest.raises(ValueError, match=message):
        latentkv.sparse_decode(q, cache, idx, format=fmt)
    with pytest.raises(ValueError, match=message):
        latentkv.sparse_decode(q, cache, idx, format=fmt, impl="cuda")


@pytest.mark.parametrize("case", ["plain", "all"])
def test_sparse_decode_fp4_extra_cache_matches_oracle(case):
    # DeepSeek V4.1's v41_fp4 extra cache beside a v41_fp8 cache (every CUDA kernel takes it).
    kw = dict(dict(h_q=16), **DECODE_CASES[case])
    inp = decode_inputs("v41_fp8", seed=23, extra_fmt="v41_fp4", **dict(kw, extra=True))
    inp["indices"][0, 0] = -1
    ref_out, ref_lse = decode_numpy(inp, "oracle")
    out, lse = decode_numpy(on_dev(inp), "auto")
    check_decode(out, lse, ref_out, ref_lse)


def test_sparse_decode_device_mismatch():
    inp = on_dev(decode_inputs("v32_fp8", b=1, s_q=1, h_q=4, seed=19))
    with pytest.raises(TypeError, match=r"implementation cpu cannot run on tensors on cuda"):
        decode_numpy(inp, "oracle")
    with pytest.raises(TypeError, match=r"indices is on cpu, expected cuda"):
        decode_numpy(dict(inp, indices=inp["indices"].cpu()), "auto")


# ---- the contest -----------------------------------------------------------------------------

# compress_reference.main() numbers its identity-table cases 0..11 and seeds case ci with 2 * ci
# (default --seed 0): the same inputs as the committed byte comparison (bench/results/).
CONTEST_CASES = list(enumerate(cref.case_list("all")))


def rope_values(cache, slots, P=64):
    """The 64 RoPE values (bf16, as float64) of each record at slots in a 2-D page-split cache."""
    page_bytes = cache.shape[1]
    base = (slots // P) * page_bytes + (slots % P) * 576 + 448
    raw = cache.reshape(-1)[base[:, None] + np.arange(128)[None, :]]
    return np.ascontiguousarray(raw).view(BF16).astype(np.float64)


@pytest.mark.parametrize("ci,case", CONTEST_CASES,
                         ids=[f"r{r}_t{t}_c{c}" for _, (r, t, c) in CONTEST_CASES])
def test_contest_workload_matches_reference(ci, case):
    reqs, tokens, C = case
    inp = cref.make_contest_inputs(reqs, tokens, C, 2 * ci, DEV)
    args = [inp[k] for k in COMPRESS_ARGS]
    slots = to_np(inp["kv_slot_mapping"][inp["boundary_token_indices"]]).astype(np.int64)
    before = inp["kv_cache"].clone()
    name = f"r{reqs}_t{tokens}_c{C}"
    # The contest's function (v4_int8), then DeepSeek V4's payload (v4_fp8) through compress_kv.
    for fmt in ("v4_int8", "v4_fp8"):
        ref = to_np(cref.run_reference(inp, fp8=fmt == "v4_fp8"))
        if fmt == "v4_int8":
            got = c128_256_512_compress(*args)
        else:
            got = latentkv.compress_kv(*args, page_size=64, format=fmt, mode="functional")
        assert got.is_cuda and got.shape == inp["kv_cache"].shape
        got = to_np(got)
        d = cref.compare_bytes(ref, got, slots, inp["page_size"], fp8=fmt == "v4_fp8")
        assert "error" not in d, d
        codes = d["nope_diff_pm1"] + d.get("nope_diff_signed_zero", 0)
        num_rope = slots.size * cref.ROPE_DIM
        print(f"contest {name} {fmt}: NoPE +-1 codes {codes}, scale diffs {d['scale_diff']}, "
              f"RoPE values {d['rope_value_diff']} of {num_rope} (max {d['rope_max_ulp']} ulp), "
              f"pad {d['pad_diff']}, unwritten {d['unwritten_diff']}")
        # docs/compress.md and bench/results: every scale byte equal, at most 4 NoPE codes off by
        # one per workload, nothing else touched.
        assert d["scale_diff"] == 0 and d["pad_diff"] == 0 and d["unwritten_diff"] == 0, d
        assert d["nope_diff"] == codes and codes <= 4, d
        # RoPE: y is RMS-normalised (|y| ~ 1), so two fp32 computations of it differ by ~1e-6; a
        # rotated value whose two products nearly cancel is tiny, and that difference can be a few
        # of its own bf16 ulps (3 in the committed comparison). A wrong cos/sin row or pair order
        # is off by O(1) in most values.
        ref_rope, got_rope = rope_values(ref, slots), rope_values(got, slots)
        ulp = np.spacing(np.abs(ref_rope).astype(np.float32)).astype(np.float64) * 2.0**16
        err = np.abs(got_rope - ref_rope)
        assert (err <= 2 * ulp + 2.0**-16).all(), f"RoPE error up to {err.max():.3g}"
        assert d["rope_value_diff"] <= num_rope // 100, d
        del ref, got
    assert torch.equal(inp["kv_cache"], before), "the contest function leaves kv_cache alone"
    del inp
    torch.cuda.empty_cache()


# ---- FlashMLA's API against a float64 reference ----------------------------------------------

def dequantized_cache(cache, fmt):
    """Every record of a paged cache, dequantized by latentkv's CPU path (exact, docs/formats.md):
    float64 [num_pages * P, d_qk] on DEV."""
    num_pages, P = int(cache.shape[0]), int(cache.shape[1])
    host = cache.detach().view(torch.uint8).cpu()  # a contiguous copy without the page padding
    rows = latentkv.dequantize(host, torch.arange(num_pages * P), fmt)
    return rows.to(DEV).double()


def reference_decode(q, parts, sink, scale):
    """docs/decode.md in float64. parts: (K float64 [num_slots, d_qk], indices i32 [b, s_q, k],
    length i32 [b] or None) for the main cache, then the extra one. Returns out f64
    [b, s_q, h_q, 512] and lse f64 [b, h_q, s_q]."""
    qd = q.double()
    scores, values = [], []
    for keys, idx, length in parts:
        num_slots, k = keys.shape[0], idx.shape[-1]
        idx = idx.long()
        valid = (idx >= 0) & (idx < num_slots)  # anything else is skipped, never read
        if length is not None:  # clamped to [0, k]
            lim = length.long().clamp(0, k)
            valid &= torch.arange(k, device=idx.device)[None, None, :] < lim[:, None, None]
        rows = keys[idx.clamp(0, num_slots - 1)]  # [b, s_q, k, d_qk]; invalid rows are masked
        s = torch.einsum("bshd,bskd->bshk", qd, rows) * scale
        scores.append(s.masked_fill(~valid[:, :, None, :], -math.inf))
        values.append(rows[..., :512])  # V is the first 512 dims of K
    s, v = torch.cat(scores, -1), torch.cat(values, 2)
    m = s.amax(-1, keepdim=True)
    lonely = torch.isneginf(m)  # no valid key at all
    m = torch.where(lonely, torch.zeros_like(m), m)
    p = torch.exp(s - m)
    total = p.sum(-1, keepdim=True)
    out = torch.einsum("bshk,bskd->bshd", p, v) / torch.where(lonely, torch.ones_like(total), total)
    lse = torch.where(lonely, torch.full_like(m, math.inf), m + torch.log(total))
    if sink is not None:
        # out *= 1 / (1 + exp(sink - lse)); lse unchanged; -inf: factor 1, +inf: factor 0.
        factor = 1.0 / (1.0 + torch.exp(sink.double()[None, None, :, None] - lse))
        out = out * torch.where(lonely, torch.zeros_like(factor), factor)
    out = torch.where(lonely, torch.zeros_like(out), out)
    return out, lse[..., 0].permute(0, 2, 1)


def paged_cache(fmt, num_pages, P, gen):
    """A paged cache on DEV filled by latentkv.quantize from random latents; v4_fp8 pages are padded
    to a multiple of 576 bytes as FlashMLA's tests do (any page stride works)."""
    info = latentkv.format_info(fmt)
    bpt = info["bytes_per_token"]
    page_bytes = P * bpt if fmt != "v4_fp8" else -(-P * bpt // 576) * 576
    base = torch.zeros(num_pages, page_bytes, dtype=torch.uint8, device=DEV)
    cache = base.as_strided((num_pages, P, 1, bpt), (page_bytes, bpt, bpt, 1))
    n = num_pages * P
    latents = torch.randn(n, info["d_qk"], generator=gen, device=DEV).to(torch.bfloat16)
    latentkv.quantize(latents, torch.arange(n, device=DEV), cache, fmt)
    return cache


def random_indices(b, s_q, k, num_slots, gen):
    """Random flat slots with about 10% -1 and a few other invalid values (skipped by latentkv)."""
    idx = torch.randint(0, num_slots, (b, s_q, k), generator=gen, device=DEV, dtype=torch.int32)
    idx[torch.rand(b, s_q, k, generator=gen, device=DEV) < 0.1] = -1
    flat = idx.view(-1)
    flat[7 % flat.numel()] = num_slots
    flat[11 % flat.numel()] = 2**31 - 1
    flat[13 % flat.numel()] = -5
    return idx


FLASH_GRID = [(fmt, b, s_q, h_q, topk, P)
              for fmt in ("v32_fp8", "v4_fp8")
              for b in (2, 5)
              for s_q in (1, 2)
              for h_q in (16, 64, 128)
              for topk, P in ((64, 64), (576, 61))] + [
    # The rest of the issue's grid, sampled: h_q 1, s_q 3, the pairs (64, 2), (64, 69), (2048, 64),
    # (2048, 576), and 74 requests.
    ("v32_fp8", 5, 3, 1, 64, 2), ("v4_fp8", 2, 3, 16, 64, 69), ("v32_fp8", 2, 1, 64, 2048, 64),
    ("v4_fp8", 5, 2, 16, 2048, 576), ("v32_fp8", 74, 1, 16, 64, 69), ("v4_fp8", 74, 3, 1, 64, 2),
    ("v4_fp8", 2, 2, 128, 2048, 64)]


@pytest.mark.parametrize("fmt,b,s_q,h_q,topk,P", FLASH_GRID,
                         ids=[f"{f}-b{b}-sq{s}-h{h}-k{k}-P{p}" for f, b, s, h, k, p in FLASH_GRID])
def test_flash_mla_grid(fmt, b, s_q, h_q, topk, P):
    gen = torch.Generator(device=DEV)
    gen.manual_seed(FLASH_GRID.index((fmt, b, s_q, h_q, topk, P)))
    d_qk = latentkv.format_info(fmt)["d_qk"]
    num_pages = -(-2048 // P)
    cache = paged_cache(fmt, num_pages, P, gen)
    keys = dequantized_cache(cache, fmt)
    q = torch.randn(b, s_q, h_q, d_qk, generator=gen, device=DEV).to(torch.bfloat16)
    idx = random_indices(b, s_q, topk, num_pages * P, gen)
    idx[0, 0] = -1  # query 0 of request 0 has no valid key
    lengths = torch.randint(1, topk + 1, (b,), generator=gen, device=DEV, dtype=torch.int32)
    if b > 2:
        lengths[-1] = 0  # the last request attends nothing (with b = 2 one request is left)
    sink = torch.randn(h_q, generator=gen, device=DEV)
    sink[0] = -math.inf
    if h_q > 1:
        sink[1] = math.inf
    k_cache = cache.view(torch.float8_e4m3fn) if b == 5 else cache  # FlashMLA passes fp8 views

    meta, num_splits = get_mla_metadata()
    for use_lengths in (False, True):
        for use_sink in (False, True):
            out, lse = flash_mla_with_kvcache(
                q, k_cache, None, None, 512, meta, num_splits, is_fp8_kvcache=True, indices=idx,
                topk_length=lengths if use_lengths else None,
                attn_sink=sink if use_sink else None)
            assert out.shape == (b, s_q, h_q, 512) and lse.shape == (b, h_q, s_q)
            assert lse.stride() == (s_q * h_q, 1, h_q), "FlashMLA's layout, written by the kernels"
            ref_out, ref_lse = reference_decode(
                q, [(keys, idx, lengths if use_lengths else None)], sink if use_sink else None,
                d_qk ** -0.5)
            check_decode(out, lse, ref_out, ref_lse)
            assert torch.isposinf(lse[0, :, 0]).all() and not out[0, 0].any()
            if use_lengths and b > 2:
                assert torch.isposinf(lse[-1]).all() and not out[-1].any()
            if use_sink:
                assert h_q == 1 or not out[:, :, 1].any(), "sink +inf gives out 0"
                assert torch.equal(torch.isposinf(lse), torch.isposinf(ref_lse))
    # One metadata object served all four calls (same shapes), with a split plan on the GPU.
    assert meta.have_initialized and meta.plan.topk == topk and meta.config.page_block_size == P


@pytest.mark.parametrize("fmt", ["v32_fp8", "v4_fp8"])
def test_flash_mla_extra_cache(fmt):
    gen = torch.Generator(device=DEV)
    gen.manual_seed(99)
    b, s_q, h_q, topk, extra_topk = 3, 2, 64, 256, 128
    d_qk = latentkv.format_info(fmt)["d_qk"]
    main, extra = paged_cache(fmt, 20, 64, gen), paged_cache(fmt, 9, 2, gen)
    q = torch.randn(b, s_q, h_q, d_qk, generator=gen, device=DEV).to(torch.bfloat16)
    idx = random_indices(b, s_q, topk, 20 * 64, gen)
    eidx = random_indices(b, s_q, extra_topk, 9 * 2, gen)
    lengths = torch.tensor([0, 100, 256], dtype=torch.int32, device=DEV)
    elengths = torch.tensor([5, 0, 200], dtype=torch.int32, device=DEV)  # 200 clamps to 128
    sink = torch.randn(h_q, generator=gen, device=DEV)
    meta, _ = get_mla_metadata()
    out, lse = flash_mla_with_kvcache(
        q, main, None, None, 512, meta, is_fp8_kvcache=True, indices=idx, attn_sink=sink,
        extra_k_cache=extra, extra_indices_in_kvcache=eidx, topk_length=lengths,
        extra_topk_length=elengths, softmax_scale=0.05)
    ref_out, ref_lse = reference_decode(
        q, [(dequantized_cache(main, fmt), idx, lengths),
            (dequantized_cache(extra, fmt), eidx, elengths)], sink, 0.05)
    check_decode(out, lse, ref_out, ref_lse)
    assert meta.config.extra_topk == extra_topk and meta.config.extra_page_block_size == 2


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["bf16", "f16", "v32_fp8"])
def test_flash_mla_dense_decode_matches_oracle(kind, causal):
    """flash_mla_with_kvcache without indices (dense decode) on CUDA against the CPU oracle."""
    gen = torch.Generator(device=DEV)
    gen.manual_seed(["bf16", "f16", "v32_fp8"].index(kind) * 2 + causal)
    b, s_q, h_q, P, num_pages, max_pages = 4, 2, 64, 64, 20, 4
    dtype = torch.float16 if kind == "f16" else torch.bfloat16
    q = torch.randn(b, s_q, h_q, 576, generator=gen, device=DEV).to(dtype)
    if kind == "v32_fp8":
        k = paged_cache("v32_fp8", num_pages, P, gen)
    else:
        k = torch.randn(num_pages, P, 1, 576, generator=gen, device=DEV).to(dtype)
    table = torch.randperm(num_pages, generator=gen, device=DEV)[:b * max_pages]
    table = table.to(torch.int32).view(b, max_pages)
    # No key at all, one key (with causal, query row 0 then sees none), part of a page, all pages;
    # table entries past a request's length are garbage and must never be read.
    lens = torch.tensor([0, 1, 100, max_pages * P], dtype=torch.int32, device=DEV)
    table[0] = -7
    table[1, 1:] = 10**6
    meta, _ = get_mla_metadata()
    out, lse = flash_mla_with_kvcache(q, k, table, lens, 512, meta, causal=causal,
                                      is_fp8_kvcache=kind == "v32_fp8")
    assert out.is_cuda and out.dtype == dtype and out.shape == (b, s_q, h_q, 512)
    ref_out, ref_lse = latentkv.dense_decode(q.cpu(), k.cpu(), table.cpu(), lens.cpu(),
                                             causal=causal, fp8=kind == "v32_fp8", impl="oracle")
    check_decode(out, lse, ref_out.float(), ref_lse)
    assert torch.isposinf(lse[0]).all() and not out[0].any()


@pytest.mark.parametrize("d_qk", [512, 576])
def test_flash_mla_sparse_prefill_matches_oracle(d_qk):
    """flash_mla_sparse_fwd (sparse prefill) on CUDA against the CPU oracle: lengths, a sink with
    +inf and -inf heads, invalid indices, a query with no valid index."""
    gen = torch.Generator(device=DEV)
    gen.manual_seed(d_qk)
    s_q, h_q, s_kv, topk = 40, 64, 700, 256
    q = torch.randn(s_q, h_q, d_qk, generator=gen, device=DEV).to(torch.bfloat16)
    kv = torch.randn(s_kv, 1, d_qk, generator=gen, device=DEV).to(torch.bfloat16)
    idx = torch.randint(-1, s_kv, (s_q, 1, topk), generator=gen, device=DEV, dtype=torch.int32)
    idx[1, 0, :3] = torch.tensor([s_kv, 2**31 - 1, -9], dtype=torch.int32)  # skipped, never read
    idx[0] = -1  # query 0 sees nothing
    lengths = torch.randint(0, topk + 1, (s_q,), generator=gen, device=DEV, dtype=torch.int32)
    sink = torch.randn(h_q, generator=gen, device=DEV)
    sink[0], sink[1] = math.inf, -math.inf
    scale = d_qk ** -0.5
    out, max_logits, lse = flash_mla_sparse_fwd(q, kv, idx, scale, attn_sink=sink,
                                                topk_length=lengths)
    ref_out, ref_max, ref_lse = latentkv.sparse_prefill(
        q.cpu(), kv.cpu(), idx.cpu(), scale, attn_sink=sink.cpu(), topk_length=lengths.cpu(),
        impl="oracle")
    assert out.is_cuda and out.shape == (s_q, h_q, 512) and lse.shape == (s_q, h_q)
    out_np = to_np(out).astype(np.float32)
    assert not np.isnan(out_np).any()
    decode_close(out_np, to_np(ref_out).astype(np.float32))
    for got, ref, empty in ((lse, ref_lse, math.inf), (max_logits, ref_max, -math.inf)):
        got, ref = to_np(got).astype(np.float64), to_np(ref).astype(np.float64)
        np.testing.assert_array_equal(got == empty, ref == empty)
        finite = np.isfinite(ref)
        assert np.isfinite(got[finite]).all()
        assert (np.abs(got - ref)[finite] <= 1e-4 * np.maximum(1.0, np.abs(ref[finite]))).all()
    lonely = to_np(ref_lse) == math.inf  # [s_q, h_q]
    assert lonely[0].all() and not out_np[lonely].any()
    assert not out_np[:, 0].any(), "sink +inf gives out 0"


# ---- torch.compile ---------------------------------------------------------------------------

def decode_step(q, k, idx, lengths, ek, eidx, latents, slots, cache):
    """One decode step of latentkv ops: quantize new latents into a cache (mutation), read them
    back, sparse decode over the main and an extra cache. q * 2 is exact in bf16, so every output is
    a latentkv output over bitwise-equal inputs, whatever the compiler fuses."""
    latentkv.quantize(latents, slots, cache, "v4_fp8")
    back = latentkv.dequantize(cache, slots, "v4_fp8")
    out, lse = latentkv.sparse_decode(q * 2, k, idx, topk_length=lengths, extra_k_cache=ek,
                                      extra_indices=eidx)
    return out, lse, back


def compress_inplace_step(*tensors):
    """compress_kv in place on the 9 tensors of ARG_ORDER_COMPRESS (C = 16, block_size 8), with the
    index checks off (they wait for the device's verdict, a host synchronisation)."""
    latentkv.compress_kv(*tensors, 8, 16, format="v4_fp8", check_indices=False)


def compile_inputs():
    inp = on_dev(decode_inputs("v4_fp8", b=2, s_q=2, h_q=16, seed=33, extra=True, lengths=True))
    latents = torch.randn(3, 512, device=DEV).to(torch.bfloat16)
    slots = torch.tensor([5, 0, 9], device=DEV)
    return [inp["q"], inp["k_cache"], inp["indices"], inp["topk_length"], inp["extra_k_cache"],
            inp["extra_indices"], latents, slots]


def compiled_matches_eager(fn, backend, make_args):
    """fn compiled with fullgraph=True gives eager's outputs and leaves eager's bytes in every
    argument it mutates. make_args() returns fresh copies of the arguments."""
    torch._dynamo.reset()
    eager_args, compiled_args = make_args(), make_args()
    eager = fn(*eager_args)
    traced = torch.compile(fn, fullgraph=True, backend=backend)(*compiled_args)
    eager = () if eager is None else eager if isinstance(eager, tuple) else (eager,)
    traced = () if traced is None else traced if isinstance(traced, tuple) else (traced,)
    assert len(eager) == len(traced)
    for a, b in zip(eager, traced):
        assert a.is_cuda and b.is_cuda and torch.equal(a, b)
    for a, b in zip(eager_args, compiled_args):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b), "a mutated argument differs"
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_decode_step_and_inplace_compress(backend):
    if backend == "inductor":
        pytest.importorskip("triton", reason="inductor's CUDA code generation needs triton")
    args = compile_inputs()
    cache = lambda: torch.zeros(1, 16, 1, 584, dtype=torch.uint8, device=DEV)  # noqa: E731
    compiled_matches_eager(decode_step, backend, lambda: args + [cache()])
    inp = on_dev(compress_inputs(C=16, seed=34, cache_fill=0x3C))
    tensors = [inp[k] for k in ARG_ORDER_COMPRESS]
    compiled_matches_eager(compress_inplace_step, backend,
                           lambda: tensors[:-1] + [tensors[-1].clone()])


def contest_inputs_small():
    inp = on_dev(compress_inputs(num_reqs=2, tokens_per_req=1024, C=128, seed=35))
    return [inp[k] for k in COMPRESS_ARGS]


def test_compile_contest_function_aot_eager():
    compiled_matches_eager(c128_256_512_compress, "aot_eager", contest_inputs_small)


def test_compile_contest_function_inductor():
    pytest.importorskip("triton", reason="inductor's CUDA code generation needs triton")
    compiled_matches_eager(c128_256_512_compress, "inductor", contest_inputs_small)


# ---- CUDA graphs -----------------------------------------------------------------------------

def capture(fn):
    """torch's recipe: warm up on a side stream, then capture fn into a CUDAGraph. Returns
    (graph, fn's outputs as static tensors)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fn()
    return graph, static_out


def test_cuda_graph_decode_step():
    """A decode step: new latents quantized into the cache (slot checks off: they would read the
    slots on the host), then sparse decode through a reused plan and a caller workspace, captured
    once and replayed with new inputs; each replay equals the eager step (with checks) bitwise."""
    gen = torch.Generator(device=DEV)
    gen.manual_seed(61)
    fmt, b, s_q, h_q, topk, P, num_pages = "v32_fp8", 2, 1, 64, 2048, 64, 64
    cache = paged_cache(fmt, num_pages, P, gen)
    plan = latentkv.plan_decode(b, s_q, h_q, topk)
    assert plan.num_splits > 1, "the combine step and the workspace are in the graph"
    ws = torch.empty(max(1, latentkv.sparse_decode_workspace_bytes(plan)), dtype=torch.uint8,
                     device=DEV)
    q = torch.zeros(b, s_q, h_q, 576, dtype=torch.bfloat16, device=DEV)
    idx = torch.zeros(b, s_q, topk, dtype=torch.int32, device=DEV)
    lengths = torch.full((b,), topk, dtype=torch.int32, device=DEV)
    sink = torch.randn(h_q, generator=gen, device=DEV)
    latents = torch.zeros(8, 576, dtype=torch.bfloat16, device=DEV)
    new_slots = torch.arange(8, dtype=torch.int64, device=DEV)

    def attend():
        latentkv.quantize(latents, new_slots, cache, fmt, check_slots=False)
        return latentkv.sparse_decode(q * 2, cache, idx, topk_length=lengths, attn_sink=sink,
                                      plan=plan, workspace=ws)

    graph, (out, lse) = capture(attend)
    eager_ws = torch.empty_like(ws)
    for step in range(3):
        latents.copy_(torch.randn(8, 576, generator=gen, device=DEV).to(torch.bfloat16))
        new_slots.copy_(torch.randperm(num_pages * P, generator=gen, device=DEV)[:8])
        before = cache.clone()
        q.copy_(torch.randn(q.shape, generator=gen, device=DEV).to(torch.bfloat16))
        idx.copy_(random_indices(b, s_q, topk, num_pages * P, gen))
        idx[:, :, :8] = new_slots.to(torch.int32)  # attend the tokens just written
        lengths.copy_(torch.tensor([topk - 100 * step, 600], dtype=torch.int32))
        graph.replay()
        # The eager step, with the slot checks, on the cache as it was before the replay.
        latentkv.quantize(latents, new_slots, before, fmt)
        ref_out, ref_lse = latentkv.sparse_decode(q * 2, before, idx, topk_length=lengths,
                                                  attn_sink=sink, plan=plan, workspace=eager_ws)
        torch.cuda.synchronize()
        assert torch.equal(cache, before), f"replay {step}: the captured quantize"
        assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse), f"replay {step}"
    # The replayed bytes are right, not only repeatable: the float64 reference on the last step.
    check_decode(out, lse, *reference_decode(q * 2, [(dequantized_cache(cache, fmt), idx, lengths)],
                                             sink, 576 ** -0.5))


def test_cuda_graph_compress_inplace():
    """compress_kv in place (and functional) with a caller workspace and the index checks off (the
    checks wait for the device's verdict, which a graph cannot), replayed on new state."""
    inp = on_dev(compress_inputs(num_reqs=2, tokens_per_req=1024, C=128, seed=71))
    args = [inp[k] for k in COMPRESS_ARGS]
    state, kv = inp["state_cache"], inp["kv_cache"]
    need = max(latentkv.compress_workspace_bytes(*args, format=f) for f in ("v4_int8", "v4_fp8"))
    ws = torch.empty(need, dtype=torch.uint8, device=DEV)

    def compress():
        latentkv.compress_kv(*args, check_indices=False, workspace=ws)
        return latentkv.compress_kv(*args, mode="functional", format="v4_fp8",
                                    check_indices=False, workspace=ws)

    graph, fresh = capture(compress)
    gen = torch.Generator(device=DEV)
    gen.manual_seed(72)
    for step in range(3):
        state.copy_(torch.randn(state.shape, generator=gen, device=DEV) * (1 + step))
        kv.fill_(0x5A)  # in place keeps the bytes outside the records
        graph.replay()
        expected_kv = torch.full_like(kv, 0x5A)
        latentkv.compress_kv(*args[:8], expected_kv, *args[9:])
        expected_fresh = latentkv.compress_kv(*args, mode="functional", format="v4_fp8")
        torch.cuda.synchronize()
        assert torch.equal(kv, expected_kv), f"replay {step}: in place"
        assert torch.equal(fresh, expected_fresh), f"replay {step}: functional"
