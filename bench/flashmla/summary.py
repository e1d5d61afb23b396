#!/usr/bin/env python3
"""Geomeans of FlashMLA's time over latentkv's, by case family, from side_by_side.py's JSON.

Used by side_by_side.py (its `summary` key and the table it prints last) and on its own for files
already written:  python3 bench/flashmla/summary.py bench/results/flashmla/flashmla-decode-v74-h100.json ...

Every ratio reads the same way: above 1, latentkv is faster. For a case where both sides do the same
work it is FlashMLA's time over latentkv's. The prefill cases with `topk_length` (names ending in
`_len`) are the exception: each side draws its own lengths (side_by_side.py's inputs come from
torch's RNG, latentkv's from its own), so their times count different work, and the ratio is
latentkv's TFLOPS over FlashMLA's (FLOPs counted from each side's own attended candidates).

Families follow the benches' names (tools/cli/bench_decode.cpp, bench_attention.cpp):
  decode   format and h_q, b 2 apart from b >= 64; the peak cases; the tensor-parallel cases
  dense    query rows per key, h_q x s_q: up to 64 (bandwidth-bound on a Hopper) or more
  prefill  without and with topk_length
Cases FlashMLA refused (an `error` instead of times, e.g. h_q 16 / 32) are counted apart.
No torch needed.
"""
import json
import math
import re
import sys

# The line printed above the table (flashmla_run.sh prints from it to the end of the log).
HEADER = ("ratio > 1: latentkv faster (time: FlashMLA us / latentkv us; TFLOPS, the _len prefill cases: "
          "latentkv / FlashMLA)")


def metric(case):
    """(ratio, kind) for one joined case, or None when it has no latentkv side or was refused."""
    if "error" in case or "latentkv_us" not in case:
        return None
    if case["op"] == "prefill" and case["name"].endswith("_len"):
        return case["latentkv_TFLOPS"] / case["flashmla_TFLOPS"], "TFLOPS"
    return case["flashmla_us"] / case["latentkv_us"], "time"


def family(case):
    op, name = case["op"], case["name"]
    if op == "decode":
        if name.startswith("peak_"):
            return "decode peaks (b 148, topk 16384)"
        if name.startswith("tp_"):
            return "decode tensor-parallel"
        m = re.match(r"(v32|v41|v4)_b(\d+)_h(\d+)", name)
        if m:
            fmt, b, h = m.group(1), int(m.group(2)), int(m.group(3))
            return f"decode {fmt} h_q {h} " + ("b 2" if b <= 2 else "b >= 64")
    elif op == "dense":
        m = re.search(r"_h(\d+)_sq(\d+)", name)
        if m:
            rows = int(m.group(1)) * int(m.group(2))
            kind = name.split("_")[0]
            return f"dense {kind} " + ("<= 64 rows" if rows <= 64 else "> 64 rows")
    elif op == "prefill":
        return "prefill with topk_length" if name.endswith("_len") else "prefill"
    return f"{op} other"


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def summarize(cases):
    """Rows, one per family in first-seen order, then one per op over all its cases:
    {group, n, metric, geomean, min, max, refused}. An op's row mixes metrics only where the op has
    `_len` prefill cases; its `metric` field says so."""
    groups = {}
    for c in cases:
        for key in (family(c), f"{c['op']}, all cases"):
            g = groups.setdefault(key, {"ratios": [], "kinds": set(), "refused": 0})
            m = metric(c)
            if m is None:
                g["refused"] += "error" in c
            else:
                g["ratios"].append(m[0])
                g["kinds"].add(m[1])
    keys = [k for k in groups if not k.endswith(", all cases")]
    keys += [k for k in groups if k.endswith(", all cases")]
    rows = []
    for key in keys:
        g = groups[key]
        r = g["ratios"]
        rows.append({"group": key, "n": len(r), "metric": "+".join(sorted(g["kinds"])) or "-",
                     "geomean": round(geomean(r), 4) if r else None,
                     "min": round(min(r), 4) if r else None, "max": round(max(r), 4) if r else None,
                     "refused": g["refused"]})
    return rows


def table(rows):
    lines = [f"{'family':40s} {'n':>3s} {'ratio':>8s} {'geomean':>8s} {'range':>15s} refused"]
    for r in rows:
        if r["n"]:
            lines.append(f"{r['group']:40s} {r['n']:3d} {r['metric']:>8s} {r['geomean']:8.3f} "
                         f"{r['min']:7.3f}-{r['max']:.3f} {r['refused']:5d}")
        else:
            lines.append(f"{r['group']:40s} {0:3d} {'-':>8s} {'-':>8s} {'-':>15s} {r['refused']:5d}")
    return "\n".join(lines)


def main(paths):
    if not paths:
        print(__doc__.split("\n")[3])
        return 2
    cases = []
    for p in paths:
        with open(p) as f:
            cases += json.load(f)["cases"]
    print(HEADER)
    print(table(summarize(cases)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
