"""Lab `attention-inspect`: labelled heatmaps, entropy bounds, padding, dilution."""

from __future__ import annotations

import numpy as np
import pytest
from labtools import cli_run_json, faulty_room, rows, run, values

from labctl.faults.inference import PADDING_QUERY_AXIS
from labctl.lab import HeatmapFigure
from labctl.labs.attention_inspect import LAB, SENTENCE, entropy

ENTROPY, PADDED, BLOCKED = (
    "entropy_bound_violations",
    "padded_key_weight_max",
    "blocked_row_max_abs",
)
LEAK, DILUTION = "wrong_axis_leak", "dilution_weight_error"


@pytest.fixture(scope="module")
def seed5():
    return run(LAB)


def test_passes_on_both_implementations_at_seed_5(seed5):
    assert seed5.error is None and seed5.passed, seed5.failures()
    got = rows(seed5)
    assert got[("entropy_vs_reference", "both")].actual <= 1e-13
    for impl in ("reference", "clean-room"):
        assert got[(ENTROPY, impl)].actual == 0
        assert got[(PADDED, impl)].actual == 0.0 and got[(BLOCKED, impl)].actual == 0.0
        assert got[(LEAK, impl)].actual > 0.05  # real tokens read [PAD]
        assert got[(DILUTION, impl)].actual <= 1e-15


def test_heatmaps_per_layer_head_and_implementation_carry_the_tokens(seed5):
    maps = [f for f in seed5.figures if isinstance(f, HeatmapFigure)]
    assert len(maps) == 2 * 2 * 2  # layers x heads x implementations
    for figure in maps:
        assert figure.row_ticks == figure.col_ticks == SENTENCE
        weights = np.array(figure.matrix)
        assert np.allclose(weights.sum(axis=1), 1.0, atol=1e-12)
        assert np.all(np.triu(weights, k=1) == 0.0)  # causal: nothing above the diagonal


def test_entropy_of_uniform_and_one_hot_rows():
    assert entropy(np.array([1.0, 0.0, 0.0])) == 0.0
    assert entropy(np.full(4, 0.25)) == pytest.approx(np.log(4), abs=1e-15)


def test_a_reversed_causal_mask_breaks_the_entropy_bound(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "mask-reversed"))
    got = rows(result)
    assert got[(ENTROPY, "clean-room")].actual > 0 and not got[(ENTROPY, "clean-room")].passed
    assert got[(ENTROPY, "reference")].passed
    assert got[("entropy_vs_reference", "both")].actual > 0.1  # the heads read other keys
    assert got[(DILUTION, "clean-room")].passed


def test_a_padding_mask_on_the_query_axis_fails_padding_and_shows_no_leak(tmp_path):
    result = run(LAB, faulty_room(tmp_path, PADDING_QUERY_AXIS), impl="clean-room")
    got = rows(result)
    assert got[(PADDED, "clean-room")].actual > 0.01 and not got[(PADDED, "clean-room")].passed
    assert not got[(LEAK, "clean-room")].passed  # swapping the wrong axis makes it right
    assert got[(ENTROPY, "clean-room")].passed and got[(DILUTION, "clean-room")].passed


def test_nan_on_a_fully_blocked_row_fails(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "softmax-blocked-nan"), impl="clean-room")
    got = rows(result)
    assert np.isnan(got[(BLOCKED, "clean-room")].actual)
    assert not got[(BLOCKED, "clean-room")].passed


def test_a_missing_scale_fails_the_dilution_row(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "no-sqrt-dk"), impl="clean-room")
    got = rows(result)
    assert got[(DILUTION, "clean-room")].actual > 0.01  # the margin doubles: e^2m, not e^m
    assert got[(PADDED, "clean-room")].passed


def test_same_seed_same_values():
    assert values(run(LAB, seed=2)) == values(run(LAB, seed=2))


def test_cli_run_json(tmp_path, monkeypatch):
    lab, _ = cli_run_json("attention-inspect", tmp_path, monkeypatch)
    assert {m["name"] for m in lab["metrics"]} >= {ENTROPY, PADDED, LEAK}
