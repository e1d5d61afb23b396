#!/usr/bin/env python3
"""Side-by-side table of bench JSONs: ab_table.py LABEL=FILE.json [LABEL=FILE.json ...]

Prints one row per case (time in us per label, then each label's time relative to the first),
so that variants measured in one device run can be compared case by case."""
import json
import sys

runs = []
for arg in sys.argv[1:]:
    label, path = arg.split("=", 1)
    try:
        cases = json.load(open(path))["cases"]
    except (OSError, ValueError, KeyError) as e:
        print(f"{label}: {path} unreadable ({e})")
        continue
    runs.append((label, {c["name"]: c["time_us"] for c in cases}))
if not runs:
    sys.exit(0)
names = [n for n in runs[0][1] if all(n in r for _, r in runs)]
print(f"{'case (us)':44s}" + "".join(f"{l:>12s}" for l, _ in runs) + "".join(f"{l + '/' + runs[0][0]:>14s}" for l, _ in runs[1:]))
for n in names:
    base = runs[0][1][n]
    print(f"{n:44s}" + "".join(f"{r[n]:12.1f}" for _, r in runs) + "".join(f"{r[n] / base:14.3f}" for _, r in runs[1:]))
