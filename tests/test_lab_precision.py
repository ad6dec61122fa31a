"""Lab `precision`: float16 softmax, its overflow and underflow, and the float32 upcast."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from labtools import passed, run, values

from labctl import reference
from labctl.lab import Implementation
from labctl.labs.precision import LAB, overflow_logit, underflow_logit
from labctl.runner import run_lab


def test_passes_and_measures_float16s_limits():
    result = run(LAB)
    got = passed(result)
    assert got[("fp16_softmax_max_error", "clean-room")].actual == pytest.approx(5.7e-4, abs=1e-4)
    assert got[("fp16_softmax_max_error", "reference")].actual <= 1e-12  # float64 out
    assert got[("fp16_underflow_gap", "clean-room")].actual == 17.34375
    assert overflow_logit() == 11.09375 and underflow_logit() == 17.34375  # log 65520, 25 ln 2


class Faulty:
    """The reference with one softmax fault, as a clean room would answer."""

    def __init__(self, softmax):
        self.softmax = softmax

    def __getattr__(self, fn):
        return getattr(reference, fn)


def _no_max(x, axis=-1):
    e = np.exp(np.asarray(x))
    return e / e.sum(axis=axis, keepdims=True)


def _epsilon(x, axis=-1):
    return reference.softmax(x, axis) + 1e-7


@pytest.mark.parametrize(
    ("softmax", "caught"),
    [
        (_no_max, {"fp16_softmax_nonfinite", "fp16_softmax_max_error"}),
        (_epsilon, {"fp16_underflow_gap"}),
    ],
)
def test_each_fault_fails_its_metrics(softmax, caught):
    impls = {
        "reference": Implementation("reference", reference),
        "clean-room": Implementation("clean-room", Faulty(softmax)),
    }
    with np.errstate(all="ignore"):
        result = run_lab(LAB, 5, impls)
    failed = {m.name for m in result.metrics if m.impl == "clean-room" and not m.passed}
    assert failed == caught


def test_same_seed_same_values():
    assert values(run(LAB, seed=5, impl="reference")) == values(run(LAB, seed=5, impl="reference"))


def test_the_lab_module_imports_without_torch():
    code = "import sys, labctl.labs.precision; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
