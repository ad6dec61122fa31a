"""Lab `kv-cache`: exact decoding on both implementations, FLOPs by count, the RoPE-offset fault.

Faulty clean rooms are written into tmp_path; evidence goes under tmp_path too.
"""

from __future__ import annotations

import pytest
from labtools import CACHE_REPEATED, at_seed_5, cli_run_json, faulty_room, passed, rows, run, values

from labctl import faults
from labctl.labs.kv_cache import LAB, LENGTHS, flops

ROOM = faults.project_clean_room()
STEP = "decode_token_by_token_max_error"
CHUNK = "decode_chunked_max_error"
BYTES = "decode_kv_bytes_per_token_error"
GIVEN = "decode_given_cache_max_error"


seed5 = at_seed_5(LAB)


def test_passes_on_both_implementations_at_seed_5(seed5):
    got = passed(seed5)
    for impl in ("reference", "clean-room"):
        # float64, GQA and RoPE: decode and full recompute differ by rounding only (~1e-15).
        assert got[(STEP, impl)].actual <= 1e-13
        assert got[(CHUNK, impl)].actual <= 1e-13
        assert got[(BYTES, impl)].actual == 0.0
        # 2 (K and V) x Hkv 2 x D 8 x 8 bytes (float64), said beside the row
        assert got[(BYTES, impl)].note == "256 B per token and layer"
        assert got[(GIVEN, impl)].actual <= 1e-13  # positions reversed: only rounding moves
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


# A decode that keeps its own copy of the prefix and recomputes it all at every step: outputs
# and caches are right, so a FLOP count from the returned cache's shape alone would credit it
# with the cache's T-fold saving.
RECOMPUTES_LAST_PREFIX = faults.Fault(
    name="decode-recomputes-the-prefix",
    function="attention_decode",
    module="transformer_block",
    description="attention_decode keeps the tokens it was fed and recomputes the whole prefix",
    course="手撕 §07.1",
    source="""
    _seen_tokens = []
    _correct_decode = attention_decode

    def attention_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None, window=None, rope_theta=None):
        if past_k is None:
            _seen_tokens.clear()
        _seen_tokens.append(x_new)
        x = np.concatenate(_seen_tokens, axis=1)
        out, k_all, v_all = _correct_decode(x, None, None, wq, wk, wv, wo, n_heads, n_kv_heads, window, rope_theta)
        return out[:, -x_new.shape[1]:], k_all, v_all
    """,
)

# The same, smarter: the prefix is looked up by the bytes of the cache it is handed, so
# interleaved sequences do not confuse it; a cache it never returned leaves it only the new
# tokens to recompute.
RECOMPUTES_KEYED_PREFIX = faults.Fault(
    name="decode-recomputes-a-keyed-prefix",
    function="attention_decode",
    module="transformer_block",
    description="attention_decode finds the prefix's tokens by the cache's bytes and recomputes",
    course="手撕 §07.1",
    source="""
    _prefix_of = {}
    _correct_decode = attention_decode

    def attention_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None, window=None, rope_theta=None):
        if past_k is None:
            x = x_new
        else:
            known = _prefix_of.get(past_k.tobytes(), x_new[:, :0])
            x = np.concatenate([known, x_new], axis=1)
        out, k_all, v_all = _correct_decode(x, None, None, wq, wk, wv, wo, n_heads, n_kv_heads, window, rope_theta)
        _prefix_of[k_all.tobytes()] = x
        return out[:, -x_new.shape[1]:], k_all, v_all
    """,
)

# A cache kept in pages of 256 positions, the unused ones NaN (stripped before attending): the
# answers are right, but every step returns, and is counted as attending, a 256-long cache.
CACHE_PAGED = faults.Fault(
    name="kv-cache-paged",
    function="attention_decode",
    module="transformer_block",
    description="the KV cache is returned in pages of 256 positions, unused ones NaN",
    course="手撕 §07.4",
    source="""
    _correct_decode = attention_decode

    def _pad(a):
        pages = -(-a.shape[2] // 256)
        padded = np.full(a.shape[:2] + (pages * 256, a.shape[3]), np.nan)
        padded[:, :, : a.shape[2]] = a
        return padded

    def attention_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None, window=None, rope_theta=None):
        if past_k is not None:
            used = ~np.isnan(past_k[0, 0, :, 0])
            past_k, past_v = past_k[:, :, used], past_v[:, :, used]
        out, k_all, v_all = _correct_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads, window, rope_theta)
        return out, _pad(k_all), _pad(v_all)
    """,
)


def test_a_decode_that_recomputes_its_own_prefix_fails_the_flop_ratio(tmp_path):
    result = run(LAB, faulty_room(tmp_path, RECOMPUTES_LAST_PREFIX), impl="clean-room")
    got = rows(result)
    assert got[(STEP, "clean-room")].passed  # fed one sequence only, it answers right...
    assert got[(CHUNK, "clean-room")].passed
    assert got[(BYTES, "clean-room")].passed  # ...and returns a cache of the right size
    # Handed the first prefix's cache after the second was decoded, it answers for the second.
    assert got[(GIVEN, "clean-room")].actual > 1e-3 and not got[(GIVEN, "clean-room")].passed
    for T in LENGTHS:
        ratio = got[(f"decode_flops_ratio[T={T}]", "clean-room")]
        assert ratio.actual == 1.0 and not ratio.passed  # counted as the recompute it is


def test_a_decode_that_finds_its_prefix_by_the_cache_fails_too(tmp_path):
    result = run(LAB, faulty_room(tmp_path, RECOMPUTES_KEYED_PREFIX), impl="clean-room")
    got = rows(result)
    assert got[(STEP, "clean-room")].passed and got[(CHUNK, "clean-room")].passed
    # Handed its cache with the positions reversed, it finds no prefix: a wrong answer.
    assert not got[(GIVEN, "clean-room")].passed
    assert all(got[(f"decode_flops_ratio[T={T}]", "clean-room")].actual == 1 for T in LENGTHS)


def test_the_flop_ratio_is_counted_from_the_cache_returned(tmp_path):
    result = run(LAB, faulty_room(tmp_path, CACHE_PAGED), impl="clean-room")
    got = rows(result)
    assert got[(STEP, "clean-room")].passed and got[(GIVEN, "clean-room")].passed
    C, H, Hkv, D = 64, 8, 2, 8
    for T in LENGTHS:
        ratio = got[(f"decode_flops_ratio[T={T}]", "clean-room")]
        Tk = -(-T // 256) * 256  # the step's cache: T positions, in pages of 256
        assert ratio.actual == flops(T, T, C, H, Hkv, D) / flops(1, Tk, C, H, Hkv, D)
    # At T = 64 the step attends a 256-long page: 27.4, below the 32 asked.
    assert not got[("decode_flops_ratio[T=64]", "clean-room")].passed


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


def test_the_inputs_keep_attention_unsaturated_and_outputs_of_unit_size():
    """A one-hot softmax hides a wrong cache (only the largest key counts): the lab's weights
    keep scores O(1). Measured at seed 5: mean largest weight 0.23 (0.98 with q or k 64x too
    large), output std 0.53 (4.2 with the output projection 8x too large)."""
    import numpy as np

    from labctl import reference
    from labctl.labs import kv_cache as lab_module

    p = LAB.params()
    rng = np.random.default_rng(5)
    x = rng.standard_normal((p.B, p.T, p.C))  # (B, T, C)
    wq, wk, wv, wo = lab_module._weights(rng, p)
    D = p.C // p.H
    q = (x @ wq).reshape(p.B, p.T, p.H, D).transpose(0, 2, 1, 3)  # (B, H, T, D)
    k = (x @ wk).reshape(p.B, p.T, p.Hkv, D).transpose(0, 2, 1, 3)  # (B, Hkv, T, D)
    _, weights = reference.scaled_dot_product_attention(q, k, k)
    assert 0.1 < float(np.mean(weights.max(axis=-1))) < 0.7  # one-hot rows would give ≈1
    out = reference.multi_head_attention(x, wq, wk, wv, wo, p.H, p.Hkv)  # (B, T, C)
    assert 0.25 < float(np.std(out)) < 1.5  # a mis-scaled output projection leaves this band


@pytest.mark.parametrize(
    ("Tn", "Tk", "C", "H", "Hkv", "D"),
    [(1, 4, 8, 2, 1, 4), (3, 7, 64, 8, 2, 8), (5, 5, 12, 3, 3, 5)],
)
def test_flops_are_the_sum_of_every_matmul_of_attention(Tn, Tk, C, H, Hkv, D):
    """2 m k n per (m, k) @ (k, n), counted matmul by matmul: the table shows these numbers."""

    def mm(m, k, n):
        return 2 * m * k * n

    projections = mm(Tn, C, H * D) + 2 * mm(Tn, C, Hkv * D)  # q; k and v
    per_head = mm(Tn, D, Tk) + mm(Tn, Tk, D)  # q kᵀ, then weights @ v
    expected = projections + H * per_head + mm(Tn, H * D, C)  # and the output projection
    assert flops(Tn, Tk, C, H, Hkv, D) == expected


def test_the_tables_show_the_counted_numbers():
    """What the learner reads: FLOPs, their ratio, the cache's bytes and the timed ratio."""
    from labctl.i18n import _
    from labctl.lab import TableFigure

    p = LAB.params()
    D = p.C // p.H
    result = run(LAB)  # its own run: mutmut attributes a module fixture's run to one test only
    flop_table, time_table = [f for f in result.figures if isinstance(f, TableFigure)][:2]
    assert [_(c) for c in flop_table.columns] == [
        "T",
        "FLOPs cached (reference)",
        "FLOPs cached (clean-room)",
        "FLOPs recompute (reference)",
        "FLOPs recompute (clean-room)",
        "ratio (reference)",
        "ratio (clean-room)",
        "KV cache, 1 layer",
    ]
    for row, T in zip(flop_table.rows, LENGTHS, strict=True):
        cached = flops(1, T, p.C, p.H, p.Hkv, D)
        recompute = flops(T, T, p.C, p.H, p.Hkv, D)
        assert row == (
            str(T),
            f"{cached:,}",
            f"{cached:,}",
            f"{recompute:,}",
            f"{recompute:,}",
            T,  # exactly T: every FLOP term is linear in the query count
            T,
            f"{T * 2 * p.Hkv * D * 8:,} B",  # K and V, Hkv heads of D float64
        )
    got = rows(result)
    for T, impl, cached_ms, recompute_ms, ratio in time_table.rows:
        assert ratio == pytest.approx(recompute_ms / cached_ms, rel=1e-12)
        assert got[(f"decode_time_ratio[T={T}]", impl)].actual == pytest.approx(ratio, rel=1e-12)
    assert [(r[0], r[1]) for r in time_table.rows] == [
        (str(T), impl) for T in LENGTHS for impl in ("reference", "clean-room")
    ]
