"""Lab `worked-examples`: every printed hand calculation, recomputed and judged.

Faulty clean rooms are written into tmp_path; evidence goes under tmp_path too.
"""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import numpy as np
import pytest
from labtools import ROOM, cli_run_json, failing, faulty_room, rows, run, values, wave2_fault
from typer.testing import CliRunner

from labctl import reference
from labctl.cli.main import app
from labctl.lab import Implementation
from labctl.labs.worked_examples import AUDITED as ROWS
from labctl.labs.worked_examples import LAB
from labctl.labs.worked_examples_figures import CH8_MASK_FIGURE, FIGURE_ROWS, nearest_causal
from labctl.runner import run_lab

# The rows the chapters get wrong, by what they compute, with the true value checked by hand
# below (and the one approximation the chapter states as such).
WRONG = {
    'SwiGLU parameters at D = 4096, hidden 11008, over the 4·D ReLU FFN\'s ("完全持平": '
    "exactly equal)",
    "receptive field of L = 32 layers of window W = 4096 (the chapter: L x W)",
    "Step 4: causal softmax, row 退款 (also the diagram and 关键洞察's 4%, 26%, 70%)",
    "Step 5: output[2] = A @ V",
    "KV cache of Llama 2 70B at 4096 tokens: 2 x 4096 x 8 x 128 x 2 B x 80 layers, in GB",
    "the softmax denominator e^2 + e^1 + e^0",
    "softmax([2, 1, 0])",
    # formulas and figures
    "figure: the causal-mask weights of The, cat, sat (0.85 / 0.40 0.60 / 0.10 0.75 0.15) "
    "against the causal softmax rows nearest to them",
    "formula: Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k)·V as printed (no mask), on 我 and "
    "想, against the section's own outputs [0.20, 0.10], [0.40, 0.23]",
}
APPROXIMATE = {"SwiGLU hidden width ≈ 8/3·D at D = 4096 (the chapter takes 11008)"}


def verdicts(impl=None) -> dict[str, str]:
    return {row.what: row.verdict(row.recompute(impl)) for row in ROWS}


def test_passes_on_both_implementations():
    result = run(LAB)
    assert result.error is None
    assert result.passed, result.failures()


def test_the_disagreements_are_exactly_the_known_errors():
    judged = verdicts()
    assert {what for what, v in judged.items() if v == "disagrees"} == WRONG
    assert {what for what, v in judged.items() if v == "approximation"} == APPROXIMATE
    for row in ROWS:
        assert row.rounding and (row.reason or row.what not in WRONG | APPROXIMATE)


def test_the_true_values_by_hand():
    # Each to the rounding the report prints it at.
    assert round(math.e**2 + math.e + 1, 2) == 11.11
    e = np.exp([2.0, 1.0, 0.0])
    assert np.allclose(e / e.sum(), [0.67, 0.24, 0.09], atol=0.005)
    row = np.exp(np.array([1, 3, 4]) / math.sqrt(2))  # the scaled scores of 退款
    weights = row / row.sum()
    assert np.allclose(weights, [0.07, 0.31, 0.62], atol=0.005)
    assert np.allclose(weights @ [[0.2, 0.1], [0.5, 0.3], [0.9, 0.8]], [0.73, 0.60], atol=0.005)
    assert 2 * 4096 * 8 * 128 * 2 * 80 == 1_342_177_280  # bytes: 1.34 GB, not 10.7
    assert 3 * 4096 * 11008 - 2 * 4096 * 16384 == 1_048_576  # 0.78% more than the ReLU FFN
    assert 32 * (4096 - 1) + 1 == 131_041


def test_contract_rows_agree_between_implementations_on_the_project_clean_room():
    from labctl.runner import implementations

    with implementations("both", ROOM) as impls:
        by_impl = {name: verdicts(impl) for name, impl in impls.items()}
    assert by_impl["reference"] == by_impl["clean-room"] == verdicts()


@pytest.mark.parametrize(
    "fault", ["mask-reversed", "sinusoidal-odd-frequency", "tiled-no-rescale", "window-off-by-one"]
)
def test_a_faulty_clean_room_fails_every_metric(tmp_path, fault):
    result = run(LAB, faulty_room(tmp_path, wave2_fault(fault)))
    assert result.error is None
    assert failing(result) == {
        ("worked_arithmetic_max_error", "clean-room"),
        ("worked_impl_max_difference", "both"),
        ("worked_verdicts_differing", "both"),
    }


def test_a_fault_the_examples_do_not_touch_passes(tmp_path):
    # The examples use no GQA order: a tiled repeat_kv still gives 4 query heads per K/V head.
    result = run(LAB, faulty_room(tmp_path, wave2_fault("gqa-tiled")))
    assert result.passed, result.failures()


def test_same_seed_same_values():
    assert values(run(LAB, seed=5)) == values(run(LAB, seed=6))  # no randomness at all


def test_the_lab_module_imports_without_torch():
    code = "import sys, labctl.labs.worked_examples; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_json_carries_every_row(tmp_path, monkeypatch):
    lab, _ = cli_run_json("worked-examples", tmp_path, monkeypatch)
    by_chapter, wrong, every = lab["tables"]
    counts = [sum(row[k] for row in by_chapter["rows"]) for k in (1, 2, 3)]
    assert counts == [len(ROWS) - len(WRONG) - len(APPROXIMATE), len(WRONG), len(APPROXIMATE)]
    assert len(every["rows"]) == len(ROWS)
    assert {row[1] for row in wrong["rows"]} == WRONG | APPROXIMATE
    assert every["columns"][-1] == "verdict"
    assert [row[-1] for row in every["rows"]][: len(WRONG)] == ["disagrees"] * len(WRONG)


def test_terminal_shows_the_disagreements_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "250")
    args = ["run", "worked-examples", "--out", str(tmp_path / "runs"), "--clean-room", str(ROOM)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    text = result.output
    assert text.index("where the chapters' printed numbers are wrong") < text.index("every printed")
    assert text.index("~10.7 GB") < text.index("dot_product([1, 2, 3], [4, 5, 6])")


class LongMask:
    """The reference, with a causal mask one row too long from T = 4 on: (T + 1, T)."""

    def __getattr__(self, fn: str):
        return getattr(reference, fn)

    def causal_mask(self, t_q, t_k=None):
        mask = reference.causal_mask(t_q, t_k)
        return mask if t_q < 4 else np.vstack([mask, mask[-1:]])


def test_a_value_of_the_wrong_shape_is_an_infinite_error_and_a_verdict_apart():
    """The two rows counting visible keys (T = 4, 5) get T + 1 counts from the long mask."""
    impls = {
        "reference": Implementation("reference", reference),
        "clean-room": Implementation("clean-room", LongMask()),
    }
    result = run_lab(LAB, 5, impls)
    assert result.error is None
    got = rows(result)
    assert got[("worked_arithmetic_max_error", "clean-room")].actual == math.inf
    assert got[("worked_arithmetic_max_error", "reference")].actual <= 1e-12
    assert got[("worked_impl_max_difference", "both")].actual == math.inf
    assert got[("worked_verdicts_differing", "both")].actual == 2


def test_a_row_shows_each_recomputed_value_to_its_format():
    (row,) = [row for row in ROWS if row.what == "softmax([2, 1, 0])"]
    assert row.show(row.recompute(None)) == "0.6652, 0.2447, 0.0900"  # {:.4f}, comma-separated


def test_a_value_half_a_unit_off_agrees_and_one_and_a_half_units_off_does_not():
    """Judged at ± tol, the float error of the difference forgiven (0.615 - 0.61 > 0.005)."""
    row = dataclasses.replace(ROWS[0], claimed=(0.61,), tol=0.005, approximation=False)
    assert row.verdict(np.array([0.615])) == "agrees"
    assert row.verdict(np.array([0.6175])) == "disagrees"


def test_figures_and_formulas_flag_the_wrong_ones_only():
    """Both directions: the two wrong ones disagree, the five right ones agree, on every impl."""
    from labctl.runner import implementations

    wrong = {row.what for row in FIGURE_ROWS} & WRONG
    assert len(wrong) == 2 and len(FIGURE_ROWS) == 7
    with implementations("both", ROOM) as impls:
        for impl in (None, *impls.values()):
            judged = {row.what: row.verdict(row.recompute(impl)) for row in FIGURE_ROWS}
            assert {w for w, v in judged.items() if v == "disagrees"} == wrong
            assert sum(v == "agrees" for v in judged.values()) == 5


def test_a_figure_a_causal_softmax_can_make_agrees_and_one_it_cannot_does_not():
    (row,) = [r for r in FIGURE_ROWS if r.what.startswith("figure: the causal-mask")]
    assert nearest_causal(CH8_MASK_FIGURE)[0].tolist() == [1.0, 0.0, 0.0]
    fixed = dataclasses.replace(row, claimed=(1.0, 0, 0, 0.4, 0.6, 0, 0.1, 0.75, 0.15))
    assert fixed.verdict(fixed.recompute(reference)) == "agrees"
    leaky = dataclasses.replace(
        row, arithmetic=lambda: np.array([1.0, 0.1, 0, 0.4, 0.6, 0, 0.1, 0.75, 0.15])
    )
    assert leaky.verdict(leaky.recompute(None)) == "disagrees"  # a weight above the diagonal


def test_the_softmax_widget_row_is_unchecked_with_its_reason():
    from labctl.labs.worked_examples_rows import UNCHECKED

    assert not any("widget at temperature 1" in row.what for row in ROWS)
    assert any("63.1%" in text and "check nothing" in text for text in UNCHECKED)


def test_the_llama_claim_points_at_the_handson_decoder_metric(tmp_path, monkeypatch):
    from labctl.labs.handson_decoder import LAB as HANDSON

    lab, _ = cli_run_json("worked-examples", tmp_path, monkeypatch)
    (note,) = [n for n in lab["notes"] if "完全一致" in n["text"]]
    assert "handson_llama_rope_change" in note["text"] and HANDSON.metric(
        "handson_llama_rope_change"
    )
