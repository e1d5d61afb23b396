#!/usr/bin/env python3
"""Top instructions of an ncu source-page CSV (ncu --import REP --page source --print-source sass
--csv) by warp stall samples, with each one's leading stall reasons: where a kernel waits.
usage: stall_top.py CSV[.gz] [N]"""
import csv, gzip, sys

path = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 25
f = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
rows = list(csv.reader(f))
head = next(i for i, r in enumerate(rows) if "Source" in r and "Address" in r)
h = rows[head]
col = {name: i for i, name in enumerate(h)}
samp = col["Warp Stall Sampling (All Samples)"]
stalls = [name for name in h if name.startswith("stall_") and "Not Issued" not in name]
num = lambda s: float(s.replace(",", "") or 0)
body = [r for r in rows[head + 1:] if len(r) == len(h)]
total = sum(num(r[samp]) for r in body) or 1.0
byreason = {s: sum(num(r[col[s]]) for r in body) for s in stalls}
print("samples", int(total), " ".join(f"{s[6:]} {100 * v / total:.1f}%" for s, v in
                                       sorted(byreason.items(), key=lambda kv: -kv[1])[:8]))
for r in sorted(body, key=lambda r: -num(r[samp]))[:n]:
    why = sorted(((num(r[col[s]]), s[6:]) for s in stalls), reverse=True)[:2]
    print(f"{100 * num(r[samp]) / total:5.1f}% {r[col['Address']]:>6s} {r[col['Source']][:60]:60s} "
          + " ".join(f"{w} {100 * v / total:.1f}%" for v, w in why if v > 0))
