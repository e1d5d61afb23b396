#!/usr/bin/env python3
"""FlashMLA's kernels timed on the same GPU, with the same shapes, index distributions and timing
method as `latentkv bench decode|dense|prefill`, and joined with those benches' JSON.

FlashMLA comes from bench/flashmla/fetch.sh (.deps/flashmla: the extension vLLM 0.25.0 ships, built
for torch 2.11 / CUDA 13 with sm_90a code). What is timed, per case, on its Hopper kernels:
  decode   `sparse_decode_fwd`: V3.2 (656-byte records), V4 (584-byte records, page-split) with its
           extra cache; V4.1 (528-byte records) is tried, and vLLM 0.25.0's build refuses it, as it
           refuses h_q 16 / 32; the scheduler metadata made by a first call outside the timing, as
           latentkv's plan is made once per step;
  dense    `dense_decode_fwd`: bf16 cache, page 64, causal;
  prefill  `sparse_prefill_fwd`, with and without topk_length.
Inputs follow the latentkv benches (tools/cli/bench_decode.cpp, bench_attention.cpp): per request a
context of max(2 topk, 4096) tokens (extra cache: max(2 extra_topk, 4096)), indices uniform within it;
e4m3 payloads of random non-NaN codes, scales 2^-6, bf16 RoPE N(0, 1); dense caches, prefill kv
and queries N(0, 1) in bf16. The generators differ (torch's RNG here); shapes, page sizes and the
index distributions do not.
Timing: per call, a 256 MiB read to flush the L2, then CUDA events around the call; the median of
--reps calls after 3 warm-up calls (src/cuda_common/bench.cu's method); by default --reps is, per op,
the count the joined latentkv JSON states ("median of N"), else 20. FLOPs per SPEC.md section 8.
Before timing, each op's output is checked against a float64 torch computation on one small case
per op and record format (the `checks` below: V3.2 h_q 128; V4 and V4.1 h_q 64 with an extra cache;
dense h_q 16, s_q 2; prefill h_q 128, d_qk 576, with topk_length), so that a misread layout or
argument cannot pass for a fast kernel; the timed shapes beyond those are not checked.
"""
import argparse
import json
import math
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import summary  # noqa: E402  (this folder's family geomeans; no torch)


def load_flashmla(path):
    torch.ops.load_library(os.path.join(path, "_flashmla_C.abi3.so"))
    return torch.ops._flashmla_C


# ---- timing ---------------------------------------------------------------------------------------
_flush = None


def time_us(fn, reps, warmup=3):
    global _flush
    if _flush is None:
        _flush = torch.full(((256 << 20) // 4,), 1.0, dtype=torch.float32, device="cuda")
    for _ in range(warmup):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(reps):
        _flush.sum()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        ms.append(start.elapsed_time(stop))
    ms.sort()
    return 1000.0 * ms[len(ms) // 2]


# ---- records ---------------------------------------------------------------------------------------
# Formats (SPEC.md section 2): bytes per token, and whether a page keeps its tokens' scales apart.
FORMATS = {"v32": (656, False), "v4": (584, True), "v41": (528, False)}


def random_codes(n, width, gen):
    c = torch.randint(0, 256, (n, width), dtype=torch.int32, device="cuda", generator=gen)
    return torch.where((c & 0x7F) == 0x7F, c ^ 1, c).to(torch.uint8)  # no NaN codes


def random_cache(fmt, num_pages, page, gen):
    """A paged cache of random finite records: uint8 [num_pages, page, 1, bytes_per_token]. V4 pages
    are laid out as FlashMLA's tests lay them out (tests/quant.py, MODEL1): each page's bytes padded
    to a multiple of 576, so the tensor's page stride exceeds page x 584."""
    bpt, split = FORMATS[fmt]
    n = num_pages * page
    stride = (page * bpt + 575) // 576 * 576 if split else page * bpt
    buf = torch.zeros(num_pages, stride, dtype=torch.uint8, device="cuda")
    rope = lambda: torch.randn(n, 64, device="cuda", generator=gen).to(torch.bfloat16).view(torch.uint8)
    if fmt == "v32":
        rec = buf.view(n, 656)
        rec[:, :512] = random_codes(n, 512, gen)
        rec[:, 512:528] = torch.full((n, 4), 1.0 / 64, device="cuda").view(torch.uint8)
        rec[:, 528:] = rope()
    elif fmt == "v4":  # per page: page x 576 bytes of data (448 e4m3, 64 bf16), then page x 8 scales
        data = buf[:, :page * 576].reshape(num_pages, page, 576)
        data[:] = torch.cat([random_codes(n, 448, gen), rope()], dim=1).view(num_pages, page, 576)
        scales = buf[:, page * 576:page * 584].reshape(num_pages, page, 8)
        scales[:, :, :7] = 127 - 6
    else:  # v41: 512 e4m3, 16 ue8m0 scales
        rec = buf.view(n, 528)
        rec[:, :512] = random_codes(n, 512, gen)
        rec[:, 512:] = 127 - 6
    return buf[:, :page * bpt].view(num_pages, page, 1, bpt)


def dequant(fmt, cache, slots):
    """Tokens at flat slots of a cache made by random_cache -> [n, d_qk] float64."""
    num_pages, page, _, bpt = cache.shape
    pages = cache.view(num_pages, page * bpt)  # keeps the page stride
    p, o = slots // page, slots % page
    e4m3 = lambda x: x.contiguous().view(torch.float8_e4m3fn).to(torch.float64)
    bf16 = lambda x: x.contiguous().view(torch.bfloat16).to(torch.float64)
    if fmt == "v32":
        rec = pages.reshape(num_pages, page, 656)[p, o]
        sc = rec[:, 512:528].contiguous().view(torch.float32).to(torch.float64)
        nope = (e4m3(rec[:, :512]).view(-1, 4, 128) * sc[:, :, None]).view(-1, 512)
        return torch.cat([nope, bf16(rec[:, 528:])], dim=1)
    if fmt == "v4":
        data = pages[:, :page * 576].reshape(num_pages, page, 576)[p, o]
        sc = torch.exp2(pages[:, page * 576:].reshape(num_pages, page, 8)[p, o, :7].to(torch.float64) - 127)
        nope = (e4m3(data[:, :448]).view(-1, 7, 64) * sc[:, :, None]).view(-1, 448)
        return torch.cat([nope, bf16(data[:, 448:])], dim=1)
    rec = pages.reshape(num_pages, page, 528)[p, o]
    sc = torch.exp2(rec[:, 512:].to(torch.float64) - 127)
    return (e4m3(rec[:, :512]).view(-1, 16, 32) * sc[:, :, None]).view(-1, 512)


def attend_ref(q, k, scale):
    """q [rows, d_qk], k [n, d_qk] float64 -> out [rows, 512], natural-log lse [rows]."""
    s = (q @ k.T) * scale
    lse = torch.logsumexp(s, dim=1)
    return torch.softmax(s, dim=1) @ k[:, :512], lse


def lse_err(lse, l_ref):
    """|lse - ref| with lse read as a natural log or, if that fits better, as a base-2 log; which
    one fitted is counted in LSE_BASE."""
    e_ln = (lse.double() - l_ref).abs().max().item()
    e_2 = (lse.double() * math.log(2.0) - l_ref).abs().max().item()
    LSE_BASE["ln" if e_ln <= e_2 else "log2"] += 1
    return min(e_ln, e_2)


LSE_BASE = {"ln": 0, "log2": 0}


def rel_err(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


# ---- cases (names as the latentkv benches print them) ----------------------------------------------
def decode_cases():
    """(name, fmt, b, h_q, topk, page, extra_topk, extra_page)"""
    c = [(f"v32_b{b}_h128_topk2048", "v32", b, 128, 2048, 64, 0, 0) for b in (2, 64, 74, 128)]
    c += [(f"v4_b{b}_h{h}_topk128_extra{et}p{ep}", "v4", b, h, 128, 256, et, ep)
          for h in (64, 128) for et in (512, 1024) for ep in (64, 2) for b in (2, 64, 74, 128, 148, 256)]
    c += [(f"v41_b{b}_h{h}_topk128_extra512p64", "v41", b, h, 128, 256, 512, 64)
          for h in (64, 128) for b in (2, 64, 128)]
    c += [(f"tp_v32_b128_h{h}_topk2048", "v32", 128, h, 2048, 64, 0, 0) for h in (16, 32)]
    for h in (64, 128):
        c += [(f"peak_{f}_b148_h{h}_topk16384", f, 148, h, 16384, 64, 0, 0) for f in ("v32", "v4", "v41")]
    return c


def dense_cases():
    return [(f"bf16_b128_sk{sk}_h{h}_sq{sq}_causal", 128, sk, h, sq)
            for sk in (4096, 8192) for sq in (1, 2) for h in (16, 32, 64, 128)]


def prefill_cases():
    return [(f"sq4096_skv{skv}_topk2048_h{h}_d{d}" + ("_len" if ln else ""), 4096, skv, 2048, h, d, ln)
            for d in (576, 512) for h in (128, 64) for skv in (8192, 32768, 65536) for ln in (False, True)]


# ---- ops: each returns (the timed call, FLOPs) or, with check, (max rel err of out, max lse err) --
CACHE_DTYPE = [torch.float8_e4m3fn]  # the record bytes' dtype the op accepts (found by the check)


def paged_inputs(fmt, b, s_q, topk, page, gen):
    ctx = max(2 * topk, 4096)
    num_pages = (b * ctx + page - 1) // page
    cache = random_cache(fmt, num_pages, page, gen)
    base = (torch.arange(b, device="cuda", dtype=torch.int64) * ctx)[:, None, None]
    idx = (base + torch.randint(0, ctx, (b, s_q, topk), device="cuda", generator=gen)).to(torch.int32)
    return cache, idx


def run_decode(ops, fmt, b, h_q, topk, page, extra_topk, extra_page, s_q=2, seed=0, check=False):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    d_qk = 576 if fmt == "v32" else 512
    cache, idx = paged_inputs(fmt, b, s_q, topk, page, gen)
    extra, eidx = paged_inputs(fmt, b, s_q, extra_topk, extra_page, gen) if extra_topk else (None, None)
    q = torch.randn(b, s_q, h_q, d_qk, device="cuda", generator=gen).to(torch.bfloat16)
    scale = d_qk ** -0.5
    kc = cache.view(CACHE_DTYPE[0])
    ec = extra.view(CACHE_DTYPE[0]) if extra is not None else None
    out, lse, meta, splits = ops.sparse_decode_fwd(q, kc, idx, None, None, None, None, ec, eidx, None,
                                                   512, scale, None)
    if check:
        torch.cuda.synchronize()
        errs, lerr = [], 0.0
        for i in range(b):
            for j in range(s_q):
                k = dequant(fmt, cache, idx[i, j].long())
                if extra is not None:
                    k = torch.cat([k, dequant(fmt, extra, eidx[i, j].long())])
                o_ref, l_ref = attend_ref(q[i, j].double(), k, scale)
                errs.append(rel_err(out[i, j], o_ref))
                lerr = max(lerr, lse_err(lse[i, :, j], l_ref))
        return max(errs), lerr
    call = lambda: ops.sparse_decode_fwd(q, kc, idx, None, None, meta, splits, ec, eidx, None, 512, scale, out)
    return call, 2.0 * h_q * b * s_q * (topk + extra_topk) * (d_qk + 512)


def run_dense(ops, b, s_k, h_q, s_q, page=64, seed=0, check=False):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    pages_per_req = (s_k + page - 1) // page
    num_pages = b * pages_per_req
    cache = torch.randn(num_pages, page, 1, 576, device="cuda", generator=gen).to(torch.bfloat16)
    q = torch.randn(b, s_q, h_q, 576, device="cuda", generator=gen).to(torch.bfloat16)
    block_table = torch.arange(num_pages, dtype=torch.int32, device="cuda").view(b, pages_per_req)
    seqlens = torch.full((b,), s_k, dtype=torch.int32, device="cuda")
    scale = 576 ** -0.5
    out, lse, meta, splits = ops.dense_decode_fwd(q, cache, 512, seqlens, block_table, scale, True,
                                                  None, None, None)
    if check:
        torch.cuda.synchronize()
        errs, lerr = [], 0.0
        for i in range(b):
            k = cache[i * pages_per_req:(i + 1) * pages_per_req].reshape(-1, 576)[:s_k].double()
            for j in range(s_q):
                visible = s_k - (s_q - 1 - j)  # bottom-right-aligned causal mask
                o_ref, l_ref = attend_ref(q[i, j].double(), k[:visible], scale)
                errs.append(rel_err(out[i, j], o_ref))
                lerr = max(lerr, lse_err(lse[i, :, j], l_ref))
        return max(errs), lerr
    # The op takes `out` in its internal shape [b, h_kv, s_q * h_q, 512] (the same memory order).
    out_internal = out.view(b, 1, s_q * h_q, 512)
    call = lambda: ops.dense_decode_fwd(q, cache, 512, seqlens, block_table, scale, True, meta, splits,
                                        out_internal)
    return call, b * h_q * s_q * 2.0 * s_k * (576 + 512)


def run_prefill(ops, s_q, s_kv, topk, h_q, d, with_len, seed=0, check=False):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(s_q, h_q, d, device="cuda", generator=gen).to(torch.bfloat16)
    kv = torch.randn(s_kv, 1, d, device="cuda", generator=gen).to(torch.bfloat16)
    idx = torch.randint(0, s_kv, (s_q, 1, topk), device="cuda", generator=gen).to(torch.int32)
    lens = (torch.randint(1, topk + 1, (s_q,), device="cuda", generator=gen).to(torch.int32)
            if with_len else None)
    scale = 1.0 / 24.0
    out, max_logits, lse = ops.sparse_prefill_fwd(q, kv, idx, scale, 512, None, lens, None)
    if check:
        torch.cuda.synchronize()
        errs, lerr = [], 0.0
        for t in range(s_q):
            n = int(lens[t]) if with_len else topk
            k = kv[idx[t, 0, :n].long(), 0].double()
            o_ref, l_ref = attend_ref(q[t].double(), k, scale)
            errs.append(rel_err(out[t], o_ref))
            lerr = max(lerr, lse_err(lse[t], l_ref))
        return max(errs), lerr
    attended = float(lens.sum()) if with_len else float(s_q * topk)
    call = lambda: ops.sparse_prefill_fwd(q, kv, idx, scale, 512, None, lens, out)
    return call, 2.0 * h_q * attended * (d + 512)


# ---- main -----------------------------------------------------------------------------------------
def load_latentkv(path):
    """-> (cases by name, the op's repetition count from its timing note or None)."""
    if not path or not os.path.exists(path):
        print(f"latentkv JSON {path!r} not found: no ratios for its cases")
        return {}, None, None
    with open(path) as f:
        d = json.load(f)
    timing = d.get("notes", {}).get("timing", "")
    words = timing.split()
    reps = int(words[2]) if timing.startswith("median of ") and words[2].isdigit() else None
    return {c["name"]: c for c in d["cases"]}, d.get("op"), reps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flashmla", default=os.path.join(ROOT, ".deps", "flashmla"))
    ap.add_argument("--ops", default="decode,dense,prefill")
    ap.add_argument("--reps", type=int, default=0,
                    help="timed calls per case; 0: the joined latentkv JSON's count per op, else 20")
    ap.add_argument("--filter", default="", help="only cases whose name contains this")
    ap.add_argument("--latentkv", default="", help="comma-separated latentkv bench JSON files to join")
    ap.add_argument("--json", default="")
    a = ap.parse_args()

    t0 = time.time()
    try:
        ops = load_flashmla(a.flashmla)
    except Exception as e:  # an ABI mismatch shows up here
        print(f"flashmla: cannot load from {a.flashmla}: {type(e).__name__}: {e}")
        return 2
    dev = torch.cuda.get_device_name()
    print(f"flashmla: loaded (torch {torch.__version__}, {dev})")
    ours, reps_of = {}, {}
    for p in filter(None, a.latentkv.split(",")):
        cases, op, reps = load_latentkv(p)
        ours.update(cases)
        op = {"sparse_decode": "decode", "dense_decode": "dense", "sparse_prefill": "prefill"}.get(op)
        if op and reps:
            reps_of[op] = reps
    reps_for = lambda op: a.reps or reps_of.get(op, 20)

    result = {"device": dev, "torch": torch.__version__, "flashmla": "vLLM 0.25.0 _flashmla_C (FlashMLA, sm_90a)",
              "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "timing": ", ".join(f"{op}: median of {reps_for(op)} calls" for op in ("decode", "dense", "prefill"))
                        + ", each after a 256 MiB L2-flushing read, CUDA events",
              "checks": {}, "cases": []}
    wanted = a.ops.split(",")

    # Correctness first: a small case of each kind against float64 torch.
    def check_decode(fmt, *shape):
        # The dtype the op wants for record bytes is found here once; later formats try the one that
        # worked first. A refusal can be about the format or shape as well as the dtype.
        accepted = CACHE_DTYPE[0]
        tried = []
        for dt in (accepted, torch.float8_e4m3fn, torch.uint8, torch.int8):
            if dt in tried:
                continue
            tried.append(dt)
            CACHE_DTYPE[0] = dt
            try:
                return run_decode(ops, fmt, *shape, check=True)
            except RuntimeError as e:
                print(f"check decode {fmt}: refused with records as {dt}: {str(e).splitlines()[0]}")
        CACHE_DTYPE[0] = accepted
        raise RuntimeError(f"refused with records as any of {tried}")

    checks = {"decode_v32": lambda: check_decode("v32", 2, 128, 2048, 64, 0, 0),
              "decode_v4": lambda: check_decode("v4", 2, 64, 128, 256, 512, 64),
              "decode_v41": lambda: check_decode("v41", 2, 64, 128, 256, 512, 64),
              "dense": lambda: run_dense(ops, 2, 1000, 16, 2, check=True),
              "prefill": lambda: run_prefill(ops, 64, 4096, 2048, 128, 576, True, check=True)}
    ok = {}
    for name, fn in checks.items():
        if name.split("_")[0] not in wanted:
            continue
        try:
            err, lerr = fn()
            ok[name] = err < 2e-2 and lerr < 1e-2
            print(f"check {name}: max relative error of out {err:.2e}, max |lse - ref| {lerr:.2e}: "
                  f"{'ok' if ok[name] else 'FAILED'} (lse as ln / log2 fitted better: {LSE_BASE})")
            result["checks"][name] = {"out_max_rel_err": err, "lse_max_abs_err": lerr, "ok": ok[name],
                                      "lse_base_fits": dict(LSE_BASE)}
        except Exception as e:  # the op refused the input (e.g. a format this build lacks): skipped
            ok[name] = None
            print(f"check {name}: refused, its cases skipped: {type(e).__name__}: "
                  f"{str(e).splitlines()[0] if str(e) else ''}")
            result["checks"][name] = {"error": str(e), "ok": False}
        LSE_BASE.update(ln=0, log2=0)

    def record(op, name, make):
        try:
            fn, flops = make()
            us = time_us(fn, reps_for(op))
        except Exception as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"{op} {name}: error {msg}")
            result["cases"].append({"op": op, "name": name, "error": msg})
            torch.cuda.empty_cache()
            return
        tf = flops / (us * 1e-6) / 1e12
        row = {"op": op, "name": name, "flashmla_us": round(us, 2), "flashmla_TFLOPS": round(tf, 1)}
        if name in ours:
            row["latentkv_us"] = ours[name]["time_us"]
            row["latentkv_TFLOPS"] = ours[name]["TFLOPS"]
            row["flashmla_time_over_latentkv"] = round(us / ours[name]["time_us"], 3)
        result["cases"].append(row)
        torch.cuda.empty_cache()

    if "decode" in wanted:
        for name, fmt, *shape in decode_cases():
            if ok.get("decode_" + fmt) and (not a.filter or a.filter in name):
                record("decode", name, lambda: run_decode(ops, fmt, *shape))
    if "dense" in wanted and ok.get("dense"):
        for name, *shape in dense_cases():
            if not a.filter or a.filter in name:
                record("dense", name, lambda: run_dense(ops, *shape))
    if "prefill" in wanted and ok.get("prefill"):
        for name, *shape in prefill_cases():
            if not a.filter or a.filter in name:
                record("prefill", name, lambda: run_prefill(ops, *shape))

    print(f"\n{'op':8s} {'case':38s} {'FlashMLA us':>11s} {'TFLOPS':>7s} {'latentkv us':>11s} {'TFLOPS':>7s} {'FlashMLA/latentkv time':>22s}")
    for r in result["cases"]:
        if "error" in r:
            continue
        print(f"{r['op']:8s} {r['name']:38s} {r['flashmla_us']:11.1f} {r['flashmla_TFLOPS']:7.1f} "
              f"{r.get('latentkv_us', float('nan')):11.1f} {r.get('latentkv_TFLOPS', float('nan')):7.1f} "
              f"{r.get('flashmla_time_over_latentkv', float('nan')):22.3f}")
    result["summary"] = summary.summarize(result["cases"])
    print("\n" + summary.HEADER)
    print(summary.table(result["summary"]))
    print(f"({time.time() - t0:.0f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    # Non-zero when a check ran and disagreed with float64 torch (not when the op refused an input).
    return 1 if any(v is False for v in ok.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
