"""Lab `entropy`: the learner's attention_entropy against the formula and its bounds."""

from __future__ import annotations

import numpy as np
import pytest
from labtools import passed, run, values

from labctl.lab import Implementation
from labctl.labs.entropy import LAB
from labctl.reference import v2 as reference_v2
from labctl.runner import run_lab


def test_passes_on_both_implementations():
    result = run(LAB)
    got = passed(result)
    assert got[("entropy_max_error", "clean-room")].actual <= 1e-12
    assert got[("entropy_blocked_row_max_abs", "clean-room")].actual == 0.0
    table = result.figures[0]
    assert table.rows[0][1:] == (0.0,) * len(table.rows[0][1:])  # the first token sees one key
    assert table.rows[1][1] == pytest.approx(np.log(2), abs=1e-15)


class Faulty:
    def __init__(self, attention_entropy):
        self.attention_entropy = attention_entropy

    def __getattr__(self, fn):
        return getattr(reference_v2, fn)


def _bits(weights, axis=-1):
    return reference_v2.attention_entropy(weights, axis) / np.log(2)


def _nan_on_zero(weights, axis=-1):
    w = np.asarray(weights)
    with np.errstate(all="ignore"):
        return -np.sum(w * np.log(w), axis=axis)


def _axis_ignored(weights, axis=-1):
    return reference_v2.attention_entropy(weights)


@pytest.mark.parametrize(
    ("fn", "caught"),
    [
        (_bits, {"entropy_max_error", "entropy_fn_bound_violations", "entropy_reference_max_error"}),
        (_nan_on_zero, {"entropy_max_error", "entropy_blocked_row_max_abs",
                        "entropy_reference_max_error"}),
        (_axis_ignored, {"entropy_max_error"}),
    ],
)  # fmt: skip
def test_each_fault_fails_its_metrics(fn, caught):
    impls = {
        "reference": Implementation("reference", reference_v2),
        "clean-room": Implementation("clean-room", Faulty(fn)),
    }
    result = run_lab(LAB, 5, impls)
    assert {m.name for m in result.metrics if not m.passed} == caught


def test_same_seed_same_values():
    first, again = (values(run(LAB, seed=5, impl="reference")) for _ in range(2))
    assert first == again
