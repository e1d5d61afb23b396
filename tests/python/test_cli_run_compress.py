"""`latentkv run compress` (the CLI, tools/cli/bench_compress.cpp) on inputs written the way
bench/compress_reference.py writes them: its output file must equal latentkv.compress_kv's
functional result byte for byte. Skipped when the CLI is not built (build/latentkv)."""

import os
import pathlib
import subprocess

import numpy as np
import pytest

import latentkv
from conftest import ARG_ORDER_COMPRESS, compress_inputs

CLI = pathlib.Path(os.environ.get("LKV_CLI", pathlib.Path(__file__).resolve().parents[2] / "build" / "latentkv"))
pytestmark = pytest.mark.skipif(not CLI.exists(), reason="the CLI is not built (build/latentkv)")


def write_inputs(d, inp, P):
    files = {"state.f32": ("state_cache", "<f4"), "token_to_req.i32": ("token_to_req", "<i4"),
             "positions.i64": ("positions", "<i8"), "boundary.i64": ("boundary_token_indices", "<i8"),
             "block_table.i32": ("block_table", "<i4"), "cos_sin.f32": ("cos_sin_cache", "<f4"),
             "slots.i64": ("kv_slot_mapping", "<i8")}
    for name, (key, dt) in files.items():
        np.ascontiguousarray(inp[key]).astype(dt).tofile(d / name)
    inp["rms_norm_weight"].view(np.uint16).astype("<u2").tofile(d / "weight.bf16")
    sc, kv = inp["state_cache"], inp["kv_cache"]
    meta = [sc.shape[0], inp["block_size"], inp["positions"].size, inp["boundary_token_indices"].size,
            inp["block_table"].shape[0], inp["block_table"].shape[1], inp["cos_sin_cache"].shape[0],
            kv.shape[0], kv.shape[1], inp["compress_ratio"], P]
    (d / "meta.txt").write_text(" ".join(str(int(v)) for v in meta) + "\n")


@pytest.mark.parametrize("fmt", ["v4_int8", "v4_fp8"])
@pytest.mark.parametrize("P", [64, 16])
def test_run_compress_matches_compress_kv(tmp_path, fmt, P):
    inp = compress_inputs(num_reqs=2, tokens_per_req=256, C=16, block_size=8, P=P, seed=51)
    # Not every slot in order: shuffle which record each boundary token gets.
    rng = np.random.default_rng(52)
    b = inp["boundary_token_indices"]
    inp["kv_slot_mapping"][b] = rng.permutation(len(b))
    inp["kv_slot_mapping"][b[3]] = -1  # a skipped output
    write_inputs(tmp_path, inp, P)
    out = tmp_path / "out.bin"
    r = subprocess.run([str(CLI), "run", "compress", "--inputs", str(tmp_path), "--out", str(out),
                        "--format", fmt, "--device", "cpu"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"run compress: {len(b) - 1} records" in r.stdout and "ok against the oracle" in r.stdout
    got = np.fromfile(out, np.uint8).reshape(inp["kv_cache"].shape)
    ref = latentkv.compress_kv(*[inp[k] for k in ARG_ORDER_COMPRESS], inp["block_size"],
                               inp["compress_ratio"], page_size=P, format=fmt, mode="functional")
    np.testing.assert_array_equal(got, ref)


def test_run_compress_zero_outputs(tmp_path):
    inp = compress_inputs(num_reqs=1, tokens_per_req=64, C=16, block_size=8, seed=53)
    inp["boundary_token_indices"] = inp["boundary_token_indices"][:0]
    write_inputs(tmp_path, inp, 64)
    out = tmp_path / "out.bin"
    r = subprocess.run([str(CLI), "run", "compress", "--inputs", str(tmp_path), "--out", str(out),
                        "--device", "cpu"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "run compress: 0 records" in r.stdout
    assert not np.fromfile(out, np.uint8).any()


def test_run_compress_short_meta_is_refused(tmp_path):
    (tmp_path / "meta.txt").write_text("1 4 16 1 1 1 4 1 16 4\n")  # 10 integers
    r = subprocess.run([str(CLI), "run", "compress", "--inputs", str(tmp_path), "--out",
                        str(tmp_path / "o.bin"), "--device", "cpu"], capture_output=True, text=True)
    assert r.returncode == 2 and "meta.txt: expected 11 integers" in r.stderr
