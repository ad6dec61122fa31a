"""Lab `sliding-window`: the band, the receptive field by perturbation, the window-sized cache."""

from __future__ import annotations

import numpy as np
import pytest
from labtools import ROOM, at_seed_5, faulty_room, passed, rows, run, values

from labctl.faults.inference import DECODE_WINDOW_IGNORED
from labctl.lab import TableFigure
from labctl.labs.sliding_window import LAB, Params, _block, band
from labctl.runner import implementations, run_lab

BAND, FIELD, CACHE = "band_mask_mismatches", "receptive_field_error", "window_cache_max_error"


TOKEN_BYTES = 2 * 8 * 8  # one token's key and value: Hkv = 1, D = C / H = 8, float64


def run_with(params: Params, impl: str = "reference"):
    """The lab at seed 5 with `params` (the reference alone unless told)."""
    with implementations(impl, ROOM) as impls:
        return run_lab(LAB, 5, impls, params)


def cache_table(result) -> dict[str, tuple[str, ...]]:
    """The KV-cache figure's rows by their T."""
    (table,) = [
        f for f in result.figures if isinstance(f, TableFigure) and "KV cache" in str(f.title)
    ]
    return {row[0]: row[1:] for row in table.rows}


seed5 = at_seed_5(LAB)


def test_passes_on_both_implementations_at_seed_5(seed5):
    got = passed(seed5)
    for impl in ("reference", "clean-room"):
        assert got[(BAND, impl)].actual == 0
        assert got[(FIELD, impl)].actual == 0  # L(W - 1) + 1 = 10 positions move, not L x W = 12
        assert got[(CACHE, impl)].actual <= 1e-14  # the dropped keys had weight exactly 0
    heatmaps = [f for f in seed5.figures if getattr(f, "name", "") == "sliding-window-band"]
    assert {h.impl for h in heatmaps} == {"reference", "clean-room"}


def test_the_band_is_the_chapter_interval():
    blocked = band(6, 6, 3)
    assert [j for j in range(6) if not blocked[4, j]] == [2, 3, 4]  # [i - W + 1, i]


def test_a_window_of_w_plus_one_keys_fails_the_band_and_the_field(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "window-off-by-one"), impl="clean-room")
    got = rows(result)
    assert not got[(BAND, "clean-room")].passed
    assert got[(FIELD, "clean-room")].actual == 3  # each of L = 3 layers reaches one further


def test_attention_that_ignores_the_window_fails_the_field_only(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "mha-window-ignored"), impl="clean-room")
    got = rows(result)
    assert not got[(FIELD, "clean-room")].passed
    assert got[(BAND, "clean-room")].passed and got[(CACHE, "clean-room")].passed


def test_a_decode_that_ignores_the_window_fails_the_cache_row(tmp_path):
    result = run(LAB, faulty_room(tmp_path, DECODE_WINDOW_IGNORED), impl="clean-room")
    got = rows(result)
    assert got[(CACHE, "clean-room")].actual > 1e-3  # it read keys the short cache dropped
    assert got[(BAND, "clean-room")].passed and got[(FIELD, "clean-room")].passed


def test_same_seed_same_values():
    assert values(run(LAB, seed=3)) == values(run(LAB, seed=3))


def test_the_cache_table_shows_the_bytes_the_decode_returned_and_the_band_it_returned():
    """One token a step, B = 1: the whole cache grows by 128 B a token, the window's stops at W."""
    result = run_with(Params())
    assert cache_table(result) == {
        str(t): (f"{TOKEN_BYTES * t:,} B", f"{TOKEN_BYTES * min(t, 4):,} B") for t in (4, 8, 16, 32)
    }
    (heatmap,) = [f for f in result.figures if getattr(f, "name", "") == "sliding-window-band"]
    assert np.array_equal(np.array(heatmap.matrix), ~band(10, 10, 4))  # 1 = sees


def test_a_window_of_one_keeps_one_token_and_each_layer_reaches_no_further():
    result = run_with(Params(W=1, L=1, T=8))  # one block: the decode uses blocks[0]
    assert result.passed, result.failures()
    assert rows(result)[(FIELD, "reference")].actual == 0  # L(W - 1) + 1 = 1: itself
    assert {window for _, window in cache_table(result).values()} == {f"{TOKEN_BYTES} B"}


def test_the_field_is_counted_from_position_0_even_when_it_spans_the_whole_sequence():
    """T = L(W - 1) + 1: every output moves, from position 0; one position later moves T - 1."""
    result = run_with(Params(T=10))
    assert rows(result)[(FIELD, "reference")].actual == 0


@pytest.mark.parametrize("params", [Params(H=3), Params(H=4, Hkv=3)])
def test_heads_that_do_not_divide_are_refused_with_the_reason(params):
    result = run_with(params)
    assert "need C % H == 0 and H % Hkv == 0" in result.error


def test_block_weights_are_drawn_at_one_over_fan_in():
    """Variance 1 / fan-in keeps the stack's outputs O(1), so a move of 1e-12 is rounding."""
    p = Params(C=64, H=4, F=128)
    block = _block(np.random.default_rng(0), p)
    fan_in = {"wq": 64, "wk": 64, "wv": 64, "wo": 64, "w_gate": 64, "w_up": 64, "w_down": 128}
    for name, n in fan_in.items():
        assert np.std(block[name]) * np.sqrt(n) == pytest.approx(1.0, abs=0.15), name
