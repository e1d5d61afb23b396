"""bench/flashmla/summary.py: the family geomeans of the side-by-side files. Needs neither torch nor
the library: it reads committed JSON (bench/results/flashmla/) and made-up cases."""

import importlib.util
import json
import math
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
FILES = ROOT / "bench" / "results" / "flashmla"


def load_summary():
    spec = importlib.util.spec_from_file_location("flashmla_summary", ROOT / "bench" / "flashmla" / "summary.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def case(op, name, fl_us, lk_us, fl_tf, lk_tf):
    return {"op": op, "name": name, "flashmla_us": fl_us, "latentkv_us": lk_us,
            "flashmla_TFLOPS": fl_tf, "latentkv_TFLOPS": lk_tf}


def rows_by_group(rows):
    return {r["group"]: r for r in rows}


def test_len_prefill_cases_compare_tflops_not_times():
    s = load_summary()
    # With topk_length each side draws its own lengths: here FlashMLA's call is shorter because it
    # drew less work, and latentkv's TFLOPS are higher. The ratio must say latentkv is faster.
    c = case("prefill", "sq4096_skv8192_topk2048_h128_d576_len", 900.0, 1000.0, 400.0, 500.0)
    ratio, kind = s.metric(c)
    assert kind == "TFLOPS" and math.isclose(ratio, 1.25)
    same = case("prefill", "sq4096_skv8192_topk2048_h128_d576", 900.0, 1000.0, 400.0, 360.0)
    ratio, kind = s.metric(same)
    assert kind == "time" and math.isclose(ratio, 0.9)
    g = rows_by_group(s.summarize([c, same]))
    assert g["prefill with topk_length"]["metric"] == "TFLOPS"
    assert g["prefill"]["metric"] == "time"
    assert g["prefill, all cases"]["metric"] == "TFLOPS+time"
    assert math.isclose(g["prefill, all cases"]["geomean"], round(math.sqrt(1.25 * 0.9), 4))


def test_refused_and_unjoined_cases_are_not_ratios():
    s = load_summary()
    refused = {"op": "decode", "name": "tp_v32_b128_h16_topk2048", "error": "Unsupported h_q: 16"}
    unjoined = {"op": "decode", "name": "v32_b2_h128_topk2048", "flashmla_us": 25.0, "flashmla_TFLOPS": 90.0}
    g = rows_by_group(s.summarize([refused, unjoined]))
    assert g["decode tensor-parallel"] == {"group": "decode tensor-parallel", "n": 0, "metric": "-",
                                           "geomean": None, "min": None, "max": None, "refused": 1}
    assert g["decode v32 h_q 128 b 2"]["n"] == 0 and g["decode v32 h_q 128 b 2"]["refused"] == 0
    assert "decode tensor-parallel" in s.table(s.summarize([refused]))


def test_families_of_a_committed_run():
    s = load_summary()
    cases = []
    for op in ("decode", "dense", "prefill"):
        cases += json.loads((FILES / f"flashmla-{op}-v74-h100.json").read_text())["cases"]
    g = rows_by_group(s.summarize(cases))
    # Every case lands in exactly one family of its op, and the op rows count them all.
    for op, total, refused in (("decode", 56, 2), ("dense", 16, 0), ("prefill", 24, 0)):
        fams = [r for k, r in g.items() if k.startswith(op) and not k.endswith("all cases")]
        assert sum(r["n"] for r in fams) == total == g[f"{op}, all cases"]["n"]
        assert sum(r["refused"] for r in fams) == refused == g[f"{op}, all cases"]["refused"]
    assert g["decode v32 h_q 128 b >= 64"]["n"] == 3 and g["decode peaks (b 148, topk 16384)"]["n"] == 4
    assert g["dense bf16 <= 64 rows"]["n"] == 10 and g["dense bf16 > 64 rows"]["n"] == 6
    # The decode geomean from the times themselves, not from the rounded stored ratios.
    dec = [c for c in cases if c["op"] == "decode" and "error" not in c]
    want = math.exp(sum(math.log(c["flashmla_us"] / c["latentkv_us"]) for c in dec) / len(dec))
    assert math.isclose(g["decode, all cases"]["geomean"], want, abs_tol=1e-4)
