"""Lab `embedding-lookup`: the one-hot product equals the lookup exactly; a lookup that builds
the one-hot matrix is caught by its memory, measured in the worker and in this process."""

from __future__ import annotations

import numpy as np
import pytest
from labtools import at_seed_5, failing, passed, rows, run

from labctl.faults.v2 import FaultV2
from labctl.lab import Implementation
from labctl.labs import embedding_lookup as lab
from labctl.reference import v2 as reference_v2
from labctl.runner import run_lab

ONEHOT_LOOKUP = FaultV2(
    name="learned-positions-one-hot",
    function="learned_positions",
    module="positions",
    description="the lookup written as the chapter's one-hot product",
    course="手撕 §1.2.1",
    source="""
    def learned_positions(positions, table):
        positions = np.asarray(positions)
        table = np.asarray(table)
        onehot = np.zeros(positions.shape + (table.shape[0],), dtype=table.dtype)
        np.put_along_axis(onehot, positions[..., None], 1.0, axis=-1)
        return onehot @ table
    """,
)


seed5 = at_seed_5(lab.LAB)


def test_passes_on_both_implementations_exactly(seed5):
    got = passed(seed5)
    for impl in ("reference", "clean-room"):
        assert got[("onehot_lookup_max_abs_diff", impl)].actual == 0.0
        assert got[("lookup_peak_over_onehot_bytes", impl)].actual < 0.05
        assert got[("embedding_lookup_ms", impl)].timing
    table = seed5.figures[0]
    assert [row[0] for row in table.rows] == ["1,000", "8,000", "32,000"]
    assert [row[1] for row in table.rows] == [256 * V * 8 for V in (1000, 8000, 32000)]


def test_the_chapters_one_hot_product_is_the_row_lookup_to_the_last_bit():
    rng = np.random.default_rng(0)
    for dtype in (np.float64, np.float32):
        W_E = (rng.standard_normal((1000, 64)) * 0.02).astype(dtype)
        ids = np.array(lab.CHAPTER_IDS)
        product = lab.onehot(ids, 1000, dtype) @ W_E
        assert product.dtype == dtype and np.array_equal(product, W_E[ids])


def test_only_a_finite_table_is_exact():
    note = lab._nonfinite_note()
    assert note.text.args == {"spoiled": 2, "n": 3}  # rows 0 and 1 read NaN; row 2 keeps inf


class Faulty:
    def __init__(self, learned_positions):
        self.learned_positions = learned_positions

    def __getattr__(self, fn):
        return getattr(reference_v2, fn)


def _run_faulty(fn):
    impls = {
        "reference": Implementation("reference", reference_v2),
        "clean-room": Implementation("clean-room", Faulty(fn)),
    }
    return run_lab(lab.LAB, 5, impls, lab.Params(vocabs=(1000, 32000)))


def _off_by_one(positions, table):
    return np.asarray(table)[np.asarray(positions) - 1]


def _onehot_product(positions, table):
    table = np.asarray(table)
    return lab.onehot(np.asarray(positions), table.shape[0], table.dtype) @ table


def test_a_row_off_by_one_fails_the_exact_match():
    assert failing(_run_faulty(_off_by_one)) == {
        ("onehot_lookup_max_abs_diff", "clean-room"),
        ("embedding_reference_max_abs_diff", "both"),
        ("lookup_peak_over_onehot_bytes", "clean-room"),  # a wrong lookup is not measured
    }


def test_a_lookup_that_builds_the_one_hot_matrix_fails_its_memory_in_this_process():
    result = _run_faulty(_onehot_product)
    assert failing(result) == {("lookup_peak_over_onehot_bytes", "clean-room")}
    assert rows(result)[("lookup_peak_over_onehot_bytes", "clean-room")].actual > 0.5


def test_a_measured_call_counts_only_when_its_output_is_the_tables_rows():
    # A room that spots the measured call and answers it cheaply is not measured (issue 42).
    rng = np.random.default_rng(5)
    table = rng.standard_normal((1000, 16))
    ids = rng.integers(0, 1000, size=64)

    def cheap(positions, table):
        return np.zeros((len(positions), np.asarray(table).shape[1]))

    right = Implementation("clean-room", Faulty(lambda p, t: np.asarray(t)[np.asarray(p)]))
    assert lab.needs(right, ids, table) is not None
    assert lab.needs(Implementation("clean-room", Faulty(cheap)), ids, table) is None
    assert lab.needs(Implementation("clean-room", Faulty(_off_by_one)), ids, table) is None


def test_a_lookup_that_builds_the_one_hot_matrix_fails_its_memory_in_the_worker(tmp_path):
    room = ONEHOT_LOOKUP.materialize(tmp_path / "room")
    result = run(lab.LAB, room, impl="clean-room")
    assert result.error is None
    assert failing(result) == {("lookup_peak_over_onehot_bytes", "clean-room")}
    # (n - d_model) / n = 0.75 of the one-hot matrix beyond the table, at least
    assert rows(result)[("lookup_peak_over_onehot_bytes", "clean-room")].actual > 0.7


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"vocabs": (4000, 1000)}, "increasing"),
        ({"n": 64, "vocabs": (1000, 32000)}, "40 MiB"),
        ({"n": 1024, "d_model": 1024, "vocabs": (64000,)}, "at least 2 x d_model"),
        ({"n": 4096, "vocabs": (100000,)}, "128 MiB"),
        ({"n": 1024, "d_model": 512, "vocabs": (16000,)}, "multiply-adds"),
    ],
)
def test_sizes_that_cannot_be_measured_or_would_not_fit_are_refused(setting, message):
    with pytest.raises(ValueError, match=message):
        lab.Params(**setting)
