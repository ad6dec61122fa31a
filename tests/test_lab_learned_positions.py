"""Lab `learned-positions`: the table's rows, its refusals past T_max, the decoder that uses it,
and the sinusoid and RoPE past T_max; each metric failed by a real fault."""

from __future__ import annotations

import numpy as np
import pytest
from labtools import at_seed_5, failing, passed, rows

from labctl.lab import Implementation
from labctl.labs import learned_positions as lab
from labctl.reference import v2 as reference_v2
from labctl.runner import run_lab

seed5 = at_seed_5(lab.LAB)


def test_passes_on_both_implementations(seed5):
    got = passed(seed5)
    for impl in ("reference", "clean-room"):
        assert got[("learned_rows_max_abs_diff", impl)].actual == 0.0
        assert got[("learned_past_tmax_not_refused", impl)].actual == 0.0
    schemes, how, *by_position = seed5.figures
    assert len(by_position) == 2  # the reference's, then the clean room's
    for figure in by_position:
        p = [row[0] for row in figure.rows]
        assert [row[1] == "—" for row in figure.rows] == [at + 3 >= 16 for at in p]
        for column in (2, 3):  # the sinusoid and RoPE: the same product at every p
            values = [row[column] for row in figure.rows]
            assert max(values) - min(values) < 1e-12 and max(p) > 16
    assert [row[1:] for row in schemes.rows[1:3]] == [("ValueError", "ValueError")] * 2
    assert all(cell.render(str) == "ValueError, naming positions" for row in how.rows[:4]
               for cell in row[1:])  # fmt: skip
    assert all(cell.render(str) == "ValueError, naming token_ids" for cell in how.rows[4][1:])


class Faulty:
    def __init__(self, **replaced):
        self.replaced = replaced

    def __getattr__(self, fn):
        return self.replaced.get(fn) or getattr(reference_v2, fn)


def _run_faulty(**replaced):
    impls = {
        "reference": Implementation("reference", reference_v2),
        "clean-room": Implementation("clean-room", Faulty(**replaced)),
    }
    return run_lab(lab.LAB, 5, impls)


def _bare_lookup(positions, table):
    return np.asarray(table)[np.asarray(positions)]  # -1 wraps; T_max raises IndexError


def _row_off_by_one(positions, table):
    table = np.asarray(table)
    return table[np.minimum(np.asarray(positions) + 1, len(table) - 1)]


def _decoder_without_positions(token_ids, params, n_heads, n_kv_heads=None, eps=1e-6,
                               positional="sinusoidal", rope_theta=10000.0, window=None):  # fmt: skip
    if positional == "learned":
        T = np.shape(token_ids)[1]
        if len(params["pos_embed"]) < T:
            raise ValueError("token_ids: longer than pos_embed")
        positional = "none"
    return reference_v2.decoder_forward(
        token_ids, params, n_heads, n_kv_heads, eps, positional, rope_theta, window
    )


def _sinusoid_by_length(seq_len, d_model):
    """Positions scaled to the table's length: p / seq_len, a different table for every T."""
    p = np.arange(seq_len)[:, None] / seq_len * 16
    i = np.arange(0, d_model, 2)[None, :]
    pe = np.zeros((seq_len, d_model))
    pe[:, 0::2], pe[:, 1::2] = (
        np.sin(p / 10000 ** (i / d_model)),
        np.cos(p / 10000 ** (i / d_model)),
    )
    return pe


def _rope_absolute(x, positions, theta=10000.0, scaling=None, factor=1.0):
    """Scales the pairs by cos(angle) instead of rotating them: absolute, not relative."""
    rotated = reference_v2.rope(x, positions, theta)
    x = np.asarray(x)
    return (rotated + x) / 2


@pytest.mark.parametrize(
    ("replaced", "caught"),
    [
        (
            {"learned_positions": _row_off_by_one},
            {
                "learned_rows_max_abs_diff",
                "learned_decoder_vs_composed_error",
                "learned_past_tmax_not_refused",
            },
        ),
        ({"decoder_forward": _decoder_without_positions}, {"learned_decoder_vs_composed_error"}),
        (
            {"sinusoidal_positions": _sinusoid_by_length},
            {"sinusoid_prefix_max_abs_diff", "sinusoid_past_tmax_shift_error"},
        ),
        ({"rope": _rope_absolute}, {"rope_past_tmax_relative_error"}),
    ],
)
def test_each_fault_fails_its_metrics_and_the_comparison_with_the_reference(replaced, caught):
    result = _run_faulty(**replaced)
    assert result.error is None
    assert failing(result) == {(name, "clean-room") for name in caught} | {
        ("learned_reference_max_error", "both")
    }


def test_a_bare_lookup_is_shown_wrapping_and_raising_the_wrong_error():
    """Its rows are right (nothing differs from the reference there): only the refusals fail."""
    result = _run_faulty(learned_positions=_bare_lookup)
    assert failing(result) == {("learned_past_tmax_not_refused", "clean-room")}
    assert rows(result)[("learned_past_tmax_not_refused", "clean-room")].actual == 4
    how = {row[0]: row[2].render(str) for row in result.figures[1].rows}
    assert how["learned_positions([-1])"] == "NOT REFUSED: returned an array of shape (1, 16)"
    assert how["learned_positions([16])"] == "NOT REFUSED: IndexError, not naming positions"


def test_refusal_reads_a_worker_exception_and_an_in_process_one():
    from labctl.errors import CallError

    def worker_raises():
        raise CallError("learned_positions", "exception", "positions: out of range",
                        exc_type="ValueError")  # fmt: skip

    def worker_timed_out():
        raise CallError("learned_positions", "timeout", "no answer within 20 s")

    refused, how = lab.refusal(worker_raises, "positions")
    assert refused and how.render(str) == "ValueError, naming positions"
    assert lab.refusal(worker_raises, "token_ids")[1].render(str) == (
        "ValueError, not naming token_ids"
    )
    assert lab.refusal(worker_timed_out, "positions")[0] is False
    assert lab.refusal(lambda: np.zeros(2)[5], "positions")[0] is False  # IndexError


@pytest.mark.parametrize(
    ("setting", "message"),
    [({"C": 10, "H": 2}, "even head widths"), ({"delta": 16, "past": 16}, "below past")],
)
def test_parameters_the_schemes_cannot_take_are_refused(setting, message):
    with pytest.raises(ValueError, match=message):
        lab.Params(**setting)
