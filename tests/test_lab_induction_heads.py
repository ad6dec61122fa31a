"""Lab `induction-heads`: the trained circuit on both implementations, and what breaks it.

The model is trained once per seed and parameters (a cache here: training is deterministic,
which test_the_same_seed_trains_the_same_weights checks); the faults are in the evaluation
(an implementation's mask or head split) or in the training (one step: no circuit).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from labtools import failing, passed, rows, run

from labctl import reference
from labctl.lab import Implementation
from labctl.labs import induction_heads as lab
from labctl.runner import run_lab

TRAINED: dict[tuple, tuple] = {}
_train = lab._train


def _cached_train(init, batches, p):
    digest = hashlib.sha256(b"".join(v.tobytes() for v in init.values()) + batches.tobytes())
    key = (digest.hexdigest(), repr(p))
    if key not in TRAINED:
        TRAINED[key] = _train(init, batches, p)
    return TRAINED[key]


@pytest.fixture(autouse=True)
def trained_once(monkeypatch):
    monkeypatch.setattr(lab, "_train", _cached_train)


@pytest.fixture(scope="module")
def seed5():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lab, "_train", _cached_train)
        return run(lab.LAB)


def test_passes_on_both_implementations_with_a_real_induction_head(seed5):
    got = passed(seed5)
    for impl in ("reference", "clean-room"):
        # margins well inside the bounds (0.5, 0.35, 0.25, 1): a circuit, not a near miss
        assert got[("induction_prefix_matching_score", impl)].actual > 0.8
        assert got[("induction_previous_token_score", impl)].actual > 0.45
        assert got[("induction_second_repeat_loss_over_lnV", impl)].actual < 0.1
        assert got[("induction_layer1_knockout_loss_rise", impl)].actual > 2.0
    assert got[("induction_reference_max_error", "both")].actual < 1e-12
    heads = seed5.figures[0]
    assert [row[0] for row in heads.rows] == ["L1 H0", "L1 H1", "L2 H0", "L2 H1"]


class Faulty:
    """The reference with some functions replaced."""

    def __init__(self, **replaced):
        self.replaced = replaced

    def __getattr__(self, fn):
        return self.replaced.get(fn) or getattr(reference, fn)


def _run_faulty(seed=5, params=None, **replaced):
    impls = {
        "reference": Implementation("reference", reference),
        "clean-room": Implementation("clean-room", Faulty(**replaced)),
    }
    return run_lab(lab.LAB, seed, impls, params)


def _softmax_undivided(x, axis=-1):
    x = np.asarray(x)
    return np.exp(x - x.max(axis=axis, keepdims=True))


def _softmax_across_positions(x, axis=-1):
    return reference.softmax(x, axis=-2)


def _no_mask(t_q, t_k=None):
    return np.zeros((t_q, t_q if t_k is None else t_k), dtype=bool)


def test_a_softmax_that_does_not_normalise_beats_the_entropy_floor():
    result = _run_faulty(softmax=_softmax_undivided)
    assert failing(result) == {
        ("induction_first_repeat_loss_over_floor", "clean-room"),
        ("induction_reference_max_error", "both"),
    }
    got = rows(result)
    assert got[("induction_first_repeat_loss_over_floor", "clean-room")].actual < 0.9


def test_a_softmax_over_positions_differs_from_the_reference():
    result = _run_faulty(softmax=_softmax_across_positions)
    assert ("induction_reference_max_error", "both") in failing(result)


def test_a_mask_that_blocks_nothing_loses_the_previous_token_head_and_the_copy():
    """The weights were trained causal: read with the future visible, layer 1 no longer
    attends to the previous token and the second repeat is no longer predicted."""
    result = _run_faulty(causal_mask=_no_mask)
    assert {
        ("induction_second_repeat_loss_over_lnV", "clean-room"),
        ("induction_previous_token_score", "clean-room"),
        ("induction_reference_max_error", "both"),
    } <= failing(result)


def _split_interleaved(x, n_heads):
    B, T, C = x.shape
    return np.asarray(x).reshape(B, T, C // n_heads, n_heads).transpose(0, 3, 1, 2)


def _merge_interleaved(x):
    B, H, T, D = x.shape
    return np.asarray(x).transpose(0, 2, 3, 1).reshape(B, T, D * H)


def test_a_head_split_of_the_wrong_features_breaks_the_circuit_it_evaluates():
    """Head h taking features h, h + H, ... (merged back the same way): consistent shapes,
    the wrong heads."""
    result = _run_faulty(split_heads=_split_interleaved, merge_heads=_merge_interleaved)
    assert {
        ("induction_second_repeat_loss_over_lnV", "clean-room"),
        ("induction_reference_max_error", "both"),
    } <= failing(result)


def test_one_step_of_training_forms_no_circuit():
    params = lab.Params(steps=1)
    impls = {"reference": Implementation("reference", reference)}
    result = run_lab(lab.LAB, 5, impls, params)
    assert result.error is None
    assert {name for name, _ in failing(result)} == {
        "induction_second_repeat_loss_over_lnV",
        "induction_prefix_matching_score",
        "induction_previous_token_score",
        "induction_layer1_knockout_loss_rise",
        "induction_ov_copying_score",
        "induction_qk_composition_diagonal",
    }


def test_the_same_seed_trains_the_same_weights():
    p = lab.Params(steps=20)
    rng = np.random.default_rng(3)
    init = lab.initial_weights(rng, p)
    batches = lab.sequences(rng, p.steps * p.batch, p, fixed=False).reshape(p.steps, p.batch, -1)
    first, again = _train(init, batches, p), _train(init, batches, p)
    assert first[1] == again[1]
    assert all(np.array_equal(first[0][k], again[0][k]) for k in first[0])


def test_training_sequences_repeat_with_a_period_no_fixed_offset_predicts():
    p = lab.Params()
    ids = lab.sequences(np.random.default_rng(0), 64, p, fixed=False)
    periods = set()
    for row in ids:
        first = next(k for k in range(1, len(row)) if row[k] == row[0])
        assert len(set(row[:first])) == first  # distinct tokens within a period
        assert np.array_equal(row, np.resize(row[:first], len(row)))
        periods.add(first)
    assert periods == set(range(p.period_min, p.n + 1))
    fixed = lab.sequences(np.random.default_rng(0), 4, p, fixed=True)
    assert np.array_equal(fixed[:, : p.n], fixed[:, p.n :])


def test_the_entropy_floor_is_the_first_repeats_least_loss():
    p = lab.Params(V=16, n=8)
    # position t predicts one of V - 1 - t unseen tokens, t = 0 .. n - 2
    assert lab.entropy_floor(p) == pytest.approx(np.mean(np.log(np.arange(9, 16))), abs=1e-15)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"C": 30, "H": 4}, "must divide"),
        ({"V": 6, "n": 8}, "V >= n"),
        ({"period_min": 9, "n": 8}, "must not exceed"),
        ({"steps": 4000, "batch": 256}, "a minute"),
        ({"sequences": 2048, "n": 32, "V": 64, "H": 8}, "fewer sequences"),
    ],
)
def test_parameters_that_cannot_train_or_take_too_long_are_refused(setting, message):
    with pytest.raises(ValueError, match=message):
        lab.Params(**setting)
