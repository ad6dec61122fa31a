"""Lab `sliding-window`: the band, the receptive field by perturbation, the window-sized cache."""

from __future__ import annotations

import pytest
from labtools import faulty_room, rows, run, values

from labctl.faults.inference import DECODE_WINDOW_IGNORED
from labctl.labs.sliding_window import LAB, band

BAND, FIELD, CACHE = "band_mask_mismatches", "receptive_field_error", "window_cache_max_error"


@pytest.fixture(scope="module")
def seed5():
    return run(LAB)


def test_passes_on_both_implementations_at_seed_5(seed5):
    assert seed5.error is None and seed5.passed, seed5.failures()
    got = rows(seed5)
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
