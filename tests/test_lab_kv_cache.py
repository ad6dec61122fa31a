"""Lab `kv-cache`: exact decoding on both implementations, FLOPs by count, the RoPE-offset fault.

Faulty clean rooms are written into tmp_path; evidence goes under tmp_path too.
"""

from __future__ import annotations

import pytest
from labtools import CACHE_REPEATED, cli_run_json, faulty_room, rows, run, values

from labctl import faults
from labctl.lab import satisfies
from labctl.labs.kv_cache import LAB, LENGTHS, flops

ROOM = faults.project_clean_room()
STEP = "decode_token_by_token_max_error"
CHUNK = "decode_chunked_max_error"
BYTES = "decode_kv_bytes_per_token_error"


@pytest.fixture(scope="module")
def seed5():
    return run(LAB)


def test_passes_on_both_implementations_at_seed_5(seed5):
    assert seed5.error is None
    assert seed5.passed, seed5.failures()
    got = rows(seed5)
    for impl in ("reference", "clean-room"):
        # float64, GQA and RoPE: decode and full recompute differ by rounding only (~1e-15).
        assert got[(STEP, impl)].actual <= 1e-13
        assert got[(CHUNK, impl)].actual <= 1e-13
        assert got[(BYTES, impl)].actual == 0.0
        for T in LENGTHS:
            # Every FLOP term is linear in the query count: recompute is exactly T cached steps.
            assert got[(f"decode_flops_ratio[T={T}]", impl)].actual == T
            timing = got[(f"decode_time_ratio[T={T}]", impl)]
            assert timing.timing and not timing.decides and timing.actual > 0


@pytest.mark.parametrize("fault", ["decode-rope-offset", "mask-reversed"])
def test_decode_vs_full_fails_on_a_faulty_clean_room(tmp_path, fault):
    result = run(LAB, faulty_room(tmp_path, fault))
    assert result.error is None and not result.passed
    got = rows(result)
    for name in (STEP, CHUNK):
        assert not got[(name, "clean-room")].passed, name
        assert got[(name, "reference")].passed, name
        assert got[(name, "clean-room")].actual > 1e-3  # O(0.1) and more: not rounding


def test_a_cache_of_repeated_heads_fails_the_bytes_per_token(tmp_path):
    result = run(LAB, faulty_room(tmp_path, CACHE_REPEATED), impl="clean-room")
    got = rows(result)
    assert got[(STEP, "clean-room")].passed  # the outputs are still right...
    assert not got[(BYTES, "clean-room")].passed  # ...but the cache is H / Hkv = 4x too big
    assert got[(BYTES, "clean-room")].actual == 3 * 2 * 2 * 8 * 8  # 1024 B instead of 256 B


def test_flop_ratio_threshold_refuses_a_decode_that_recomputes():
    C, H, Hkv, D = 64, 8, 2, 8
    for T in LENGTHS:
        cached, recompute = flops(1, T, C, H, Hkv, D), flops(T, T, C, H, Hkv, D)
        assert recompute == T * cached
        expected = LAB.metric(f"decode_flops_ratio[T={T}]").expected
        assert satisfies(recompute / cached, expected)
        assert not satisfies(recompute / recompute, expected)  # no saving at all: ratio 1


def test_same_seed_same_values_other_seed_other_values():
    first, again, other = (values(run(LAB, seed=seed)) for seed in (5, 5, 6))
    assert first == again
    assert set(first) == set(other)
    # Every non-timing metric here is a rounding error (~1e-15, quantised in ulps, so equal
    # values on two seeds are legitimate) or a count from shapes, the same on any seed.
    assert max(other[(STEP, impl)] for impl in ("reference", "clean-room")) <= 1e-13
    assert first[(BYTES, "clean-room")] == other[(BYTES, "clean-room")] == 0.0
    assert first[("decode_flops_ratio[T=512]", "clean-room")] == 512


def test_cli_run_json(tmp_path, monkeypatch):
    lab, _ = cli_run_json("kv-cache", tmp_path, monkeypatch)
    timing = [m for m in lab["metrics"] if m["timing"]]
    assert {m["name"] for m in timing} == {f"decode_time_ratio[T={T}]" for T in LENGTHS}
