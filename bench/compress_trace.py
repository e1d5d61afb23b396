#!/usr/bin/env python3
"""Per-output reading of `latentkv bench compress --trace --trace-dir DIR` stamps.

Each CSV row is one CTA: output, split, slice, then the ns after the first CTA started at which
thread 0 reached each phase (entry, header, rows, streamed, groups, ticket, loaded, merged, norm,
written; -1 if never). The bench's own printout gives medians over CTAs; this script follows each output's
critical path instead:

  last_streamed  the output's latest CTA to finish streaming (warp 0's view),
  last_ticket    the latest ticket of the output (the finisher's),
  peer_ticket    the latest ticket among the output's other CTAs,
  written        the finisher's record written,

and prints, over the outputs, the median and maximum of each step between them, plus the same for
the output that finished last (the call's critical path). Outputs without one finishing CTA (one
CTA, or slice clusters, where every CTA finishes its own dims) are left out. Usage:
  python3 bench/compress_trace.py DIR [DIR ...]
"""
import csv
import statistics
import sys
from pathlib import Path

PHASES = ["entry", "header", "rows", "streamed", "groups", "ticket", "loaded", "merged", "norm", "written"]


def read(path):
    outputs = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            stamps = {p: int(row[p]) / 1000.0 for p in PHASES}
            outputs.setdefault(int(row["output"]), []).append(stamps)
    return outputs


def spans(ctas):
    """The steps of one output's critical path, in microseconds (None where they do not apply)."""
    if len(ctas) < 2:
        return None
    fin = [c for c in ctas if c["merged"] >= 0]
    if len(fin) != 1:
        return None
    f = fin[0]
    peers = [c for c in ctas if c is not f]
    streamed = max(c["streamed"] for c in ctas)
    groups = max(c["groups"] for c in ctas)
    peer_ticket = max(c["ticket"] for c in peers)
    return {
        "rows(latest)": max(c["rows"] for c in ctas),
        "streamed(latest)": streamed,
        "fin: streamed->groups": f["groups"] - f["streamed"],
        "fin: groups->ticket": f["ticket"] - f["groups"],
        "fin: ticket->loaded": f["loaded"] - f["ticket"],
        "fin: loaded->merged": f["merged"] - f["loaded"],
        "fin: merged->norm": f["norm"] - f["merged"],
        "fin: norm->written": f["written"] - f["norm"],
        "latest groups->fin ticket": f["ticket"] - groups,
        "fin ticket - peer ticket": f["ticket"] - peer_ticket,
        "fin was latest streamer": 1.0 if f["streamed"] >= streamed else 0.0,
        "written": f["written"],
    }


def main():
    for d in sys.argv[1:]:
        for path in sorted(Path(d).glob("*.csv")):
            per = [s for s in (spans(c) for c in read(path).values()) if s is not None]
            if not per:
                continue
            crit = max(per, key=lambda s: s["written"])
            print(f"{path.parent.name}/{path.stem}: {len(per)} outputs; median / max over outputs; "
                  f"the output written last")
            for k in per[0]:
                v = [s[k] for s in per]
                print(f"  {k:28s} {statistics.median(v):7.2f} {max(v):7.2f}   {crit[k]:7.2f}")


if __name__ == "__main__":
    main()
