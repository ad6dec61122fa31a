"""A mistake no catalogued fault names is said by how its values relate to the reference's.

`labctl.verify.relation` tries a few exact relations (a constant factor, the sign, columns
exchanged in pairs or halves, the last axis reversed, the last two axes transposed, a shift by
one position) and says one only when it holds for every array the function gets wrong.
Tolerance: `relation.RELATIVE` (1e-6 of the reference's largest value); the arrays here are
float64 and exact, so the relations hold to rounding and the near misses miss by ~1e-3.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from checktools import learner_room
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.verify import relation

RNG = np.random.default_rng(7)
REF = RNG.standard_normal((2, 5, 6))  # (B, T, C)


def _said(mine, ref=REF) -> str | None:
    found = relation.said([(mine, ref)])
    return None if found is None else str(found)


def _swap_pairs(x):
    y = x.copy()
    y[..., 0::2], y[..., 1::2] = x[..., 1::2], x[..., 0::2]
    return y


@pytest.mark.parametrize(
    ("mine", "words"),
    [
        (REF * 1.5, "times 1.5:"),
        (-REF, "sign flipped"),
        (_swap_pairs(REF), "neighbouring columns"),
        (np.concatenate([REF[..., 3:], REF[..., :3]], axis=-1), "two halves"),
        (REF[..., ::-1], "reverse order"),
        (np.concatenate([REF[:, :1], REF[:, :-1]], axis=1), "one position forward along axis 1"),
        (np.concatenate([REF[:, 1:], REF[:, -1:]], axis=1), "one position back along axis 1"),
    ],
    ids=["factor", "negated", "pairs", "halves", "reversed", "shift-forward", "shift-back"],
)
def test_each_relation_is_said_when_it_holds(mine, words):
    assert words in (_said(mine) or ""), _said(mine)


def test_transposed_last_axes():
    square = RNG.standard_normal((2, 4, 4))
    assert "transposed" in _said(np.swapaxes(square, -1, -2), square)


def test_nothing_is_said_for_a_difference_that_is_none_of_them():
    assert _said(REF + 1e-3 * RNG.standard_normal(REF.shape)) is None
    assert _said(REF * 1.5 + 1e-3) is None  # nearly a factor is no factor
    assert _said(np.where(REF > 0, REF, 0.0)) is None
    assert _said(np.zeros_like(REF)) is None  # a stub's zeros are not "the reference times 0"


def test_one_relation_must_hold_for_every_wrong_array():
    other = RNG.standard_normal((3, 4))
    assert relation.said([(REF * 2, REF), (other * 2, other)]) is not None
    assert relation.said([(REF * 2, REF), (-other, other)]) is None  # two different mistakes
    said = relation.said([(REF * 2, REF), (other * 3, other)])
    assert "changes from call to call" in str(said)
    # a tuple's element that agrees is not read; one that differs otherwise spoils it
    assert relation.said([((REF, other * 2), (REF, other))]) is not None
    assert relation.said([((REF + 1e-3, other * 2), (REF, other))]) is None


def test_a_reference_constant_along_an_axis_shows_no_shift():
    flat = np.ones((4, 3)) * np.arange(3.0)  # the same row at every position of axis 0
    wrong = flat.copy()
    wrong[0] = 9.0
    assert _said(wrong, flat) is None


def test_masks_and_non_finite_outputs_are_left_to_their_own_checks():
    mask = RNG.random((4, 4)) > 0.5
    assert relation.said([(~mask, mask)]) is None
    nan = REF.copy()
    nan[0, 0, 0] = np.nan
    assert _said(nan) is None


SIN_COS_SWAPPED = """
def sinusoidal_positions(seq_len, d_model):
    p = np.arange(seq_len, dtype=np.float64)[:, None]
    angle = p / 10000.0 ** (np.arange(0, d_model, 2, dtype=np.float64) / d_model)
    pe = np.empty((seq_len, d_model))
    pe[:, 0::2] = np.cos(angle)
    pe[:, 1::2] = np.sin(angle[:, : d_model // 2])
    return pe
"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_verify_says_how_an_uncatalogued_mistake_relates_to_the_reference(tmp_path, lang):
    """sin and cos exchanged (no catalogued fault): the learner reads which columns moved."""
    room = learner_room(tmp_path, "primitives", SIN_COS_SWAPPED)
    args = ["--lang", lang, "verify", "clean-room", "--path", str(room), "--no-metrics"]
    result = CliRunner().invoke(
        app, [*args, "--out", str(tmp_path / "v"), "--json"], env={"NO_COLOR": "1"}
    )
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    (said,) = [d["message"] for d in report["diagnosis"] if d["function"] == "sinusoidal_positions"]
    assert "neighbouring columns of the last axis exchanged" in said  # --json keeps English
    assert "no catalogued fault matches it" in said
    shown = CliRunner().invoke(
        app, [*args, "--out", str(tmp_path / "w")], env={"NO_COLOR": "1", "COLUMNS": "400"}
    )
    words = {"en": "neighbouring columns", "zh": "偶数位和奇数位对调"}[lang]
    assert words in shown.output, shown.output
