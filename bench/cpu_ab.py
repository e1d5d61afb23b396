#!/usr/bin/env python3
"""Same-run A/B of two latentkv CLI builds on the CPU attention benches.

Runs `bench decode|prefill|dense --device cpu` of build A and build B alternately (A, B, A, B, ...)
for --rounds rounds, under each LKV_CPU_ISA given, and writes one JSON with every round's median
wall time per case and variant, and per case the median over rounds of B's time over A's. On a
shared machine single runs move by up to 1.4x; alternating and taking medians is what makes the two
builds comparable.

Usage:
  python3 bench/cpu_ab.py --a OLD/latentkv --b build/latentkv [--ops decode,prefill,dense]
                          [--isas avx512,avx2,sse4] [--rounds 5] [--reps 7] --out FILE.json
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import tempfile


def run(cli, op, isa, reps):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        env = dict(os.environ, LKV_CPU_ISA=isa)
        r = subprocess.run([cli, "bench", op, "--device", "cpu", "--reps", str(reps), "--json", f.name],
                           env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"{cli} bench {op} (LKV_CPU_ISA={isa}) failed:\n{r.stdout}{r.stderr}")
        return json.load(open(f.name))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="the baseline CLI")
    ap.add_argument("--b", required=True, help="the CLI under test")
    ap.add_argument("--ops", default="decode,prefill,dense")
    ap.add_argument("--isas", default="avx512")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    cases = {}  # (op, isa, name) -> {"a": [...], "b": [...]}
    for rnd in range(args.rounds):
        for op in args.ops.split(","):
            for isa in args.isas.split(","):
                for side, cli in (("a", args.a), ("b", args.b)):
                    for c in run(cli, op, isa, args.reps)["cases"]:
                        cases.setdefault((op, isa, c["name"]), {"a": [], "b": []})[side].append(c["time_us"])
    out = []
    print(f"{'op':8} {'isa':8} {'case':40} {'A us':>10} {'B us':>10} {'B/A':>6}")
    for (op, isa, name), t in sorted(cases.items()):
        ratios = [b / a for a, b in zip(t["a"], t["b"])]
        row = {"op": op, "isa": isa, "name": name, "a_time_us": t["a"], "b_time_us": t["b"],
               "b_over_a_median": statistics.median(ratios)}
        out.append(row)
        print(f"{op:8} {isa:8} {name:40} {statistics.median(t['a']):10.1f} {statistics.median(t['b']):10.1f} "
              f"{row['b_over_a_median']:6.3f}")
    res = {"op": "CPU attention benches, A/B", "device": "cpu",
           "command": "python3 bench/cpu_ab.py " + " ".join(
               f"--{k} {v}" for k, v in vars(args).items() if k != "out"),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "cases": out,
           "notes": {"timing": "each list: one entry per round, that run's median wall time of --reps calls; "
                               "b_over_a_median: the median over rounds of B's time over A's in the same round"}}
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
