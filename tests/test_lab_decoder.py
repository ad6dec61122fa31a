"""Lab `decoder`: parity, future-token invariance, greedy generation recomputed vs cached."""

from __future__ import annotations

import numpy as np
import pytest
from labtools import cli_run_json, faulty_room, rows, run, values

from labctl.faults.inference import DECODE_WINDOW_IGNORED
from labctl.labs.decoder import LAB, Params, make_model, parameter_counts

PARITY, FUTURE = "decoder_logits_vs_reference", "future_invariance_max_change"
TOKENS, LOGITS = "greedy_tokens_mismatch", "greedy_logits_max_error"


@pytest.fixture(scope="module")
def seed5():
    return run(LAB)


def test_passes_on_both_implementations_at_seed_5(seed5):
    assert seed5.error is None and seed5.passed, seed5.failures()
    got = rows(seed5)
    assert got[(PARITY, "both")].actual <= 1e-13
    assert got[("greedy_tokens_vs_reference", "both")].actual == 0
    for impl in ("reference", "clean-room"):
        assert got[(FUTURE, impl)].actual <= 1e-13
        assert got[(TOKENS, impl)].actual == 0
        assert got[(LOGITS, impl)].actual <= 1e-13  # float64 rounding only
        for path in ("recompute", "cached"):
            timing = got[(f"greedy_ms_per_token[{path}]", impl)]
            assert timing.timing and not timing.decides and timing.actual > 0


def test_parameter_counts_add_up():
    p = Params()
    counts = dict(parameter_counts(make_model(np.random.default_rng(0), p)))
    D = p.C // p.H
    attention = p.L * (p.C * p.H * D * 2 + 2 * p.C * p.Hkv * D)
    assert sum(counts.values()) == p.V * p.C + attention + p.L * 3 * p.C * p.F + (2 * p.L + 1) * p.C


@pytest.mark.parametrize("fault", ["decode-rope-offset", DECODE_WINDOW_IGNORED])
def test_a_faulty_decode_fails_the_cached_generation(tmp_path, fault):
    result = run(LAB, faulty_room(tmp_path, fault))
    got = rows(result)
    assert not got[(LOGITS, "clean-room")].passed
    assert got[(LOGITS, "clean-room")].actual > 1e-6
    assert got[(TOKENS, "clean-room")].actual > 0  # the argmax moves too (3 and 5 of 8 at seed 5)
    assert not got[("greedy_tokens_vs_reference", "both")].passed
    assert got[(LOGITS, "reference")].passed
    assert got[(PARITY, "both")].passed and got[(FUTURE, "clean-room")].passed


def test_a_decoder_without_final_norm_fails_parity(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "decoder-no-final-norm"))
    got = rows(result)
    assert not got[(PARITY, "both")].passed
    assert got[(FUTURE, "clean-room")].passed


def test_a_reversed_mask_fails_future_invariance(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "mask-reversed"), impl="clean-room")
    got = rows(result)
    assert got[(FUTURE, "clean-room")].actual > 1e-6
    assert not got[(FUTURE, "clean-room")].passed


def test_same_seed_same_values():
    assert values(run(LAB, seed=4)) == values(run(LAB, seed=4))


def test_cli_run_json(tmp_path, monkeypatch):
    lab, _ = cli_run_json("decoder", tmp_path, monkeypatch)
    timing = {m["name"] for m in lab["metrics"] if m["timing"]}
    assert timing == {"greedy_ms_per_token[recompute]", "greedy_ms_per_token[cached]"}
