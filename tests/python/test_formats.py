"""Cache formats through the binding: quantize then dequantize for all five formats, judged by
NumPy decoders of the record bytes (conftest.decode_records), NumPy quantizers for the
power-of-two formats (exact bytes), the round-trip error bounds of docs/formats.md, the page
layout, slot handling, positions_to_slots and error messages."""

import ml_dtypes
import numpy as np
import pytest

import latentkv
from conftest import BF16, E4M3, bf16, decode_records

FORMATS = ["v32_fp8", "v4_fp8", "v4_int8", "v41_fp8", "v41_fp4"]


def make_cache(fmt, num_pages=3, P=5):
    return np.zeros((num_pages, P, 1, latentkv.format_info(fmt)["bytes_per_token"]), np.uint8)


def test_format_table():
    assert latentkv.FORMATS == tuple(FORMATS)
    assert [latentkv.format_info(f)["bytes_per_token"] for f in FORMATS] == [656, 584, 584, 528, 288]
    assert latentkv.format_info("v32_fp8")["d_qk"] == 576


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("latent_dtype", ["bf16", "f32"])
def test_round_trip_matches_numpy_decoder(fmt, latent_dtype, rng):
    d_qk = latentkv.format_info(fmt)["d_qk"]
    x = (rng.standard_normal((6, d_qk)) * rng.choice([1e-3, 1.0, 50.0], (6, 1))).astype(np.float32)
    x[2] = 0.0  # an all-zero record uses the floor of the scale rule
    latents = bf16(x) if latent_dtype == "bf16" else x
    cache = make_cache(fmt)
    slots = np.array([3, 0, 14, 7, -1, 9], np.int64)
    latentkv.quantize(latents, slots, cache, fmt)

    got = latentkv.dequantize(cache, slots, fmt)
    assert got.dtype == BF16 and got.shape == (6, d_qk)
    expected = decode_records(cache, slots, fmt)
    # Dequantization is exact (docs/formats.md): bf16(payload * scale) equals the NumPy decode.
    np.testing.assert_array_equal(got.astype(np.float32), expected.astype(BF16).astype(np.float32))
    assert not got[4].astype(np.float32).any(), "slot -1 gives zeros"

    # Round-trip error: within the format's step (loose, relative to each group's scale).
    keep = slots >= 0
    xs = latents.astype(np.float32)[keep]
    err = np.abs(got.astype(np.float32)[keep] - xs)
    bound = {"v41_fp4": 0.5, "v4_int8": 0.02}.get(fmt, 0.07)
    assert (err <= bound * np.abs(xs).max(axis=1, keepdims=True) + 1e-30).all()


def e4m3_rule(x, group, floor_e=-13):
    """The e4m3 cache-quantizer rule: e = ceil(log2(max(amax / 448, 1e-4))), payload = e4m3(x / 2^e)."""
    g = x.reshape(-1, group)
    amax = np.abs(g).max(axis=1).astype(np.float32)
    e = np.ceil(np.log2(np.maximum(amax / np.float32(448), np.float32(1e-4)).astype(np.float64)))
    payload = (g * np.exp2(-e)[:, None]).astype(np.float32).astype(E4M3).view(np.uint8)
    return payload.reshape(-1), e.astype(np.int64)


def test_v4_fp8_bytes_match_numpy_quantizer(rng):
    x = rng.standard_normal((4, 512)).astype(np.float32) * 3
    cache = make_cache("v4_fp8", num_pages=1, P=4)
    latentkv.quantize(x, np.arange(4), cache, "v4_fp8")
    pages = cache.reshape(1, -1)[0]
    for t in range(4):
        payload, e = e4m3_rule(x[t, :448], 64)
        data = pages[t * 576:(t + 1) * 576]
        scale_row = pages[4 * 576 + t * 8:4 * 576 + t * 8 + 8]
        np.testing.assert_array_equal(data[:448], payload)
        np.testing.assert_array_equal(scale_row[:7], e + 127)
        assert scale_row[7] == 0
        np.testing.assert_array_equal(data[448:].view(BF16), bf16(x[t, 448:]))
        # Payload bytes decode to the stored values times 2^e.
        decoded = data[:448].view(E4M3).astype(np.float32) * np.repeat(np.exp2(e), 64)
        assert np.abs(decoded - x[t, :448]).max() <= np.abs(x[t, :448]).max() / 16


def test_v32_fp8_bytes_match_numpy_quantizer(rng):
    x = bf16(rng.standard_normal((2, 576)) * 0.01)
    cache = make_cache("v32_fp8", num_pages=1, P=2)
    latentkv.quantize(x, np.arange(2, dtype=np.int32), cache, "v32_fp8")
    for t in range(2):
        rec = cache[0, t, 0]
        payload, e = e4m3_rule(x[t, :512].astype(np.float32), 128)
        np.testing.assert_array_equal(rec[:512], payload)
        np.testing.assert_array_equal(rec[512:528].view("<f4"), np.exp2(e).astype(np.float32))
        np.testing.assert_array_equal(rec[528:].view(np.uint16), x[t, 512:].view(np.uint16))


def test_v4_int8_bytes_match_contest_rule(rng):
    x = rng.standard_normal((3, 512)).astype(np.float32)
    x[1, :64] = 0.001  # the int8 rule has no 1e-4 floor on amax / QMAX (docs/formats.md)
    cache = make_cache("v4_int8", num_pages=1, P=3)
    latentkv.quantize(x, np.arange(3), cache, "v4_int8")
    page = cache.reshape(-1)
    for t in range(3):
        g = x[t, :448].reshape(7, 64)
        amax = np.maximum(np.abs(g).max(axis=1), np.float32(1e-4))
        e = np.ceil(np.log2((amax * np.float32(1 / 127)).astype(np.float32).astype(np.float64)))
        q = np.trunc(np.clip(g * np.exp2(-e)[:, None], -127, 127)).astype(np.int8)
        np.testing.assert_array_equal(page[t * 576:t * 576 + 448].view(np.int8), q.reshape(-1))
        np.testing.assert_array_equal(page[3 * 576 + t * 8:3 * 576 + t * 8 + 7], e + 127)
    assert page[3 * 576 + 8 + 0] == -16 + 127


def test_quantize_writes_only_target_records(rng):
    cache = np.full((2, 4, 1, 528), 0xAB, np.uint8)
    latentkv.quantize(bf16(rng.standard_normal((1, 512))), np.array([5]), cache, "v41_fp8")
    touched = np.zeros(cache.shape, bool)
    touched[1, 1] = True
    assert (cache[~touched] == 0xAB).all() and (cache[touched] != 0xAB).any()


def test_two_dimensional_cache_form(rng):
    x = bf16(rng.standard_normal((3, 512)))
    four = make_cache("v4_fp8", num_pages=2, P=4)
    two = np.zeros((2, 4 * 584 + 16), np.uint8)  # padded page stride
    latentkv.quantize(x, np.array([1, 6, 3]), four, "v4_fp8")
    latentkv.quantize(x, np.array([1, 6, 3]), two, "v4_fp8", page_size=4)
    np.testing.assert_array_equal(two[:, :4 * 584], four.reshape(2, -1))
    np.testing.assert_array_equal(
        latentkv.dequantize(two, np.array([6]), "v4_fp8", page_size=4).view(np.uint16),
        latentkv.dequantize(four, np.array([6]), "v4_fp8").view(np.uint16))


def test_positions_to_slots():
    table = np.array([[3, 1], [0, -1]], np.int32)
    pos = np.array([[0, 5, 8, -1], [2, 4, 9, 1]], np.int32)
    got = latentkv.positions_to_slots(table, pos, 4)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [[12, 5, -1, -1], [2, -1, -1, 1]])


def test_errors_carry_the_core_message(rng):
    cache = make_cache("v4_fp8", num_pages=1, P=4)
    x = bf16(rng.standard_normal((2, 512)))
    with pytest.raises(ValueError, match=r"slot 4 \(slots\[1\]\) is outside the cache, which has 4 slots"):
        latentkv.quantize(x, np.array([0, 4]), cache, "v4_fp8")
    with pytest.raises(ValueError, match=r"slot 2 is written twice"):
        latentkv.quantize(x, np.array([2, 2]), cache, "v4_fp8")
    with pytest.raises(ValueError, match=r"expected latents of shape \[n, 576\]"):
        latentkv.quantize(x, np.array([0, 1]), make_cache("v32_fp8"), "v32_fp8")
    with pytest.raises(ValueError, match=r"unknown cache format 'v5'"):
        latentkv.quantize(x, np.array([0, 1]), cache, "v5")
    with pytest.raises(TypeError, match=r"expected latents of shape \[n, 512\] bf16 or f32, got \[2, 512\] f16"):
        latentkv.quantize(x.astype(np.float16), np.array([0, 1]), cache, "v4_fp8")
    with pytest.raises(TypeError, match=r"slots"):
        latentkv.quantize(x, np.array([0.0, 1.0], np.float32), cache, "v4_fp8")
    with pytest.raises(ValueError, match=r"page_size must be given"):
        latentkv.dequantize(np.zeros((1, 4 * 584), np.uint8), np.array([0]), "v4_fp8")
    assert not cache.any(), "nothing is written on failure"


def test_check_slots_false_skips_out_of_range_slots(rng):
    x = bf16(rng.standard_normal((2, 512)))
    cache = np.zeros((1, 4, 1, 584), np.uint8)
    ref = np.zeros_like(cache)
    latentkv.quantize(x, np.array([1, 9]), cache, "v4_fp8", check_slots=False)
    latentkv.quantize(x, np.array([1, -1]), ref, "v4_fp8")
    np.testing.assert_array_equal(cache, ref)
    out = latentkv.dequantize(cache, np.array([1, 9]), "v4_fp8", check_slots=False)
    assert not out[1].astype(np.float32).any() and out[0].astype(np.float32).any()
