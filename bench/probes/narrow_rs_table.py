#!/usr/bin/env python3
"""The narrow_rs probe's output as a table: per form and workload, the mean of its medians and its
time over the `ss` form's (bench/probes/narrow_rs.cu).
  python3 bench/probes/narrow_rs_table.py narrow_rs.txt"""
import collections
import re
import sys

times = collections.defaultdict(list)
checks = {}
for line in open(sys.argv[1]):
    m = re.match(r"^(random|consecutive), (.+?)\s+\d CTA\(s\) per SM: ([\d.]+) us", line)
    if m:
        times[(m.group(1), m.group(2).strip())].append(float(m.group(3)))
    m = re.match(r"^check (random|consecutive), (.+?)\s+max .* = ([\d.e+-]+) \((\w+)\)", line)
    if m:
        checks[(m.group(1), m.group(2).strip())] = f"{m.group(3)} {m.group(4)}"
forms = list(dict.fromkeys(f for _, f in times))
print(f"{'form':32s} {'random us':>10s} {'/ ss':>6s} {'consec. us':>10s} {'/ ss':>6s}  check (random)")
for f in forms:
    row = f"{f:32s}"
    for mode in ("random", "consecutive"):
        t = times.get((mode, f))
        base = times.get((mode, "ss"))
        if t and base:
            mean = sum(t) / len(t)
            row += f" {mean:10.1f} {mean / (sum(base) / len(base)):6.3f}"
        else:
            row += f" {'-':>10s} {'-':>6s}"
    print(row + "  " + checks.get(("random", f), ""))
