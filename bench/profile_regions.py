#!/usr/bin/env python3
"""Sums an ncu per-instruction export (`scripts/gpu.sh profile_sass`: `ncu --page source --print-source
sass --csv`, gzipped) over regions of the kernel's SASS, so a profile table in bench/NOTES.md can be
recomputed from the committed CSV.

  python3 bench/profile_regions.py PROFILE.csv.gz --list            # index, per-unit count, samples, SASS
  python3 bench/profile_regions.py PROFILE.csv.gz --unit 65536 \\
      --region "WG1 dequantization:2149:3635" --region "WG1 barrier 1:3635:3637" ...

--unit divides the executed-instruction counts (warp level) so that they read per warp and block:
CTAs x warps that run the region x blocks per CTA (V3.2 b 128: 512 x 4 x 32 = 65536). A region is
NAME:FIRST:END over instruction indices as --list prints them (END exclusive). Stall samples are
attributed by ncu to the instruction that could not issue, so a barrier's wait shows on the
instruction after the BAR.SYNC.
"""
import argparse
import csv
import gzip
import io


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(io.StringIO(f.read())))
    # Line 0 names the kernel; line 1 is the header.
    header = rows[1]
    idx = {k: header.index(k) for k in ("Source", "# Samples", "Instructions Executed")}
    return [(r[idx["Source"]].strip(), int(r[idx["# Samples"]] or 0), int(r[idx["Instructions Executed"]] or 0))
            for r in rows[2:]]


def opcode(sass):
    words = sass.split()
    if not words:
        return "?"
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile")
    ap.add_argument("--unit", type=float, default=1.0, help="divide executed counts by this")
    ap.add_argument("--list", action="store_true", help="print every instruction")
    ap.add_argument("--region", action="append", default=[], help="NAME:FIRST:END (instruction indices)")
    a = ap.parse_args()
    ins = load(a.profile)
    total = sum(s for _, s, _ in ins)
    print(f"{len(ins)} instructions, {total} samples")
    if a.list:
        for k, (sass, samples, executed) in enumerate(ins):
            print(f"{k:5d} {executed / a.unit:8.2f} {samples:6d}  {sass}")
    for spec in a.region:
        name, first, end = spec.rsplit(":", 2)
        part = ins[int(first):int(end)]
        count = sum(e for _, _, e in part) / a.unit
        samples = sum(s for _, s, _ in part)
        ops = {}
        for sass, _, e in part:
            ops[opcode(sass)] = ops.get(opcode(sass), 0) + e / a.unit
        top = " ".join(f"{k}:{v:.0f}" for k, v in sorted(ops.items(), key=lambda x: -x[1])[:8])
        print(f"{name:32s} {count:7.1f} instr {samples:7d} samples ({100 * samples / total:4.1f}%)  {top}")


if __name__ == "__main__":
    main()
