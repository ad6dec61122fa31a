"""Lab `kv-cache`: exact decoding on both implementations, FLOPs by count, the RoPE-offset fault.

Faulty clean rooms are written into tmp_path; evidence goes under tmp_path too.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from labctl import faults
from labctl.cli.main import app
from labctl.lab import satisfies
from labctl.runner import implementations, run_lab
from labs.kv_cache import LAB, LENGTHS, flops

ROOM = faults.project_clean_room()
STEP = "decode_token_by_token_max_error"
CHUNK = "decode_chunked_max_error"
BYTES = "decode_kv_bytes_per_token_error"

# Not in the catalogue: a decode that keeps the H repeated K/V heads in its cache instead of
# the Hkv shared ones (repeat_kv before the cache update). Outputs stay right; memory does not.
CACHE_REPEATED = faults.Fault(
    name="kv-cache-repeated-heads",
    function="attention_decode",
    module="transformer_block",
    description="the KV cache holds the H repeated heads, not the Hkv shared ones",
    course="004 §05.5, §07.4",
    source="""
    from .primitives import repeat_kv as _repeat_kv

    _correct_decode = attention_decode

    def attention_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None, window=None, rope_theta=None):
        n_rep = n_heads // (n_heads if n_kv_heads is None else n_kv_heads)
        if past_k is not None:
            past_k, past_v = past_k[:, ::n_rep], past_v[:, ::n_rep]
        out, k_all, v_all = _correct_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads, window, rope_theta)
        return out, _repeat_kv(k_all, n_rep), _repeat_kv(v_all, n_rep)
    """,
)


def rows(result) -> dict:
    return {(m.name, m.impl): m for m in result.metrics}


@pytest.fixture(scope="module")
def seed5():
    with implementations("both", ROOM) as impls:
        return run_lab(LAB, 5, impls)


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
    room = faults.get(fault).materialize(tmp_path / "room")
    with implementations("both", room) as impls:
        result = run_lab(LAB, 5, impls)
    assert result.error is None and not result.passed
    got = rows(result)
    for name in (STEP, CHUNK):
        assert not got[(name, "clean-room")].passed, name
        assert got[(name, "reference")].passed, name
        assert got[(name, "clean-room")].actual > 1e-3  # O(0.1) and more: not rounding


def test_a_cache_of_repeated_heads_fails_the_bytes_per_token(tmp_path):
    room = CACHE_REPEATED.materialize(tmp_path / "room")
    with implementations("clean-room", room) as impls:
        result = run_lab(LAB, 5, impls)
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
    with implementations("both", ROOM) as impls:

        def values(seed: int) -> dict:
            result = run_lab(LAB, seed, impls)
            return {(m.name, m.impl): m.actual for m in result.metrics if not m.timing}

        first, again, other = values(5), values(5), values(6)
    assert first == again
    assert set(first) == set(other)
    # Every non-timing metric here is a rounding error (~1e-15, quantised in ulps, so equal
    # values on two seeds are legitimate) or a count from shapes, the same on any seed.
    assert max(other[(STEP, impl)] for impl in ("reference", "clean-room")) <= 1e-13
    assert first[(BYTES, "clean-room")] == other[(BYTES, "clean-room")] == 0.0
    assert first[("decode_flops_ratio[T=512]", "clean-room")] == 512


def test_cli_run_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "evidence" / "runs"
    result = CliRunner().invoke(
        app, ["run", "kv-cache", "--json", "--out", str(out), "--clean-room", str(ROOM)]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["passed"] is True
    (lab,) = document["labs"]
    assert lab["id"] == "kv-cache"
    timing = [m for m in lab["metrics"] if m["timing"]]
    assert {m["name"] for m in timing} == {f"decode_time_ratio[T={T}]" for T in LENGTHS}
    assert sorted(out.glob("kv-cache/*.json"))
