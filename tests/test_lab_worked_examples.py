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
from labctl.lab import Implementation, Note
from labctl.labs.worked_examples import AUDITED as ROWS
from labctl.labs.worked_examples import LAB
from labctl.labs.worked_examples_figures import CH8_MASK_FIGURE, FIGURE_ROWS, nearest_causal
from labctl.labs.worked_examples_formulas import ELSEWHERE, FORMULAS, expected_verdict, judge
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
    # figures
    "figure: the causal-mask weights of The, cat, sat (0.85 / 0.40 0.60 / 0.10 0.75 0.15) "
    "against the causal softmax rows nearest to them",
    # memory, bandwidth and time from a published configuration (issue 40)
    "KV cache shrink of GQA in the Llama models that use it: Llama 2 70B (64 query heads, 8 "
    "K/V) and Llama 3 8B (32, 8); the chapter: 32 query heads in 8 groups, 4x, 'Llama 2/3 "
    "采用此方案'",
    "KV cache of the last W = 4096 tokens a prefill worker sends (Mistral 7B, fp16: 2 x 4096 x "
    "8 x 128 x 2 B x 32 layers), in MB; the chapter: 数十兆字节以内",
    "time to send that window's KV over one 400 Gb/s RDMA port (InfiniBand NDR), in "
    "microseconds; the chapter: 传输耗时稳定在微秒级",
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


ROW_METRICS = {
    ("worked_arithmetic_max_error", "clean-room"),
    ("worked_impl_max_difference", "both"),
    ("worked_verdicts_differing", "both"),
}
FORMULA_METRICS = {
    ("formula_verdicts_unexpected", "clean-room"),
    ("formula_impl_max_difference", "both"),
}


@pytest.mark.parametrize(
    ("fault", "caught"),
    [
        ("mask-reversed", ROW_METRICS | FORMULA_METRICS),
        ("sinusoidal-odd-frequency", ROW_METRICS | FORMULA_METRICS),
        ("window-off-by-one", ROW_METRICS | FORMULA_METRICS),  # L W + 1 is neither formula
        ("tiled-no-rescale", ROW_METRICS),  # the online-softmax row; no formula is tiled here
    ],
)
def test_a_faulty_clean_room_fails_every_metric_of_what_it_breaks(tmp_path, fault, caught):
    result = run(LAB, faulty_room(tmp_path, wave2_fault(fault)))
    assert result.error is None
    assert failing(result) == caught


@pytest.mark.parametrize(
    "fault",
    [
        "gqa-tiled",  # the rows use no GQA order; 手撕 §05.5's K.repeat(n_groups, axis=0) does
        "mha-always-causal",  # 第8章's MultiHead and 手撕 §5.2's heads have no mask
        "swiglu-swapped",
        "layer-norm-unbiased",
        "rope-half-split",  # at d = 2, the rows' only RoPE, half split is interleaved
        "padding-off-by-one",  # 手撕 §4.3's causal_mask | padding_mask
        "rms-eps-outside-sqrt",  # the pre-norm block, through its RMSNorm
    ],
)
def test_a_fault_the_printed_numbers_miss_breaks_a_printed_formula(tmp_path, fault):
    """Each passed every row of this lab before the formulas were checked (issue 40)."""
    room = faulty_room(tmp_path, wave2_fault(fault))
    result = run(LAB, room)
    assert result.error is None
    assert failing(result) == FORMULA_METRICS


def test_a_fault_the_chapters_do_not_print_passes(tmp_path):
    # No printed formula or number goes through decoder_forward's final norm.
    result = run(LAB, faulty_room(tmp_path, "decoder-no-final-norm"))
    assert result.passed, result.failures()


def test_same_seed_same_values():
    """The rows are the chapters' own numbers; the formulas' inputs are drawn from the seed."""
    first, again = (values(run(LAB, seed=5)) for _ in range(2))
    assert first == again
    drawn = {seed: judge({"reference": reference}, seed) for seed in (5, 6)}
    (index,) = [i for i, f in enumerate(FORMULAS) if f.key == "parts-attention"]
    five, six = (drawn[seed][index].values["reference"] for seed in (5, 6))
    assert five.shape == six.shape and not np.array_equal(five, six)


def test_the_lab_module_imports_without_torch():
    code = "import sys, labctl.labs.worked_examples; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_json_carries_every_row(tmp_path, monkeypatch):
    lab, _ = cli_run_json("worked-examples", tmp_path, monkeypatch)
    by_chapter, wrong, every, formulas, elsewhere, configs = lab["tables"]
    counts = [sum(row[k] for row in by_chapter["rows"]) for k in (1, 2, 3)]
    assert counts == [len(ROWS) - len(WRONG) - len(APPROXIMATE), len(WRONG), len(APPROXIMATE)]
    assert len(every["rows"]) == len(ROWS)
    assert {row[1] for row in wrong["rows"]} == WRONG | APPROXIMATE
    assert every["columns"][-1] == "verdict"
    assert [row[-1] for row in every["rows"]][: len(WRONG)] == ["disagrees"] * len(WRONG)
    assert len(formulas["rows"]) == len(FORMULAS) and len(elsewhere["rows"]) == len(ELSEWHERE)
    assert [row[-1] for row in formulas["rows"]].count("disagrees") == len(PRINTED_OTHERWISE)
    # every configuration cited is used by a row, and says where it is published
    assert all(row[-1] >= 1 and row[1] for row in configs["rows"])


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
    """Both directions: the wrong figure disagrees, the three right rows agree, on every impl."""
    from labctl.runner import implementations

    wrong = {row.what for row in FIGURE_ROWS} & WRONG
    assert len(wrong) == 1 and len(FIGURE_ROWS) == 4
    with implementations("both", ROOM) as impls:
        for impl in (None, *impls.values()):
            judged = {row.what: row.verdict(row.recompute(impl)) for row in FIGURE_ROWS}
            assert {w for w, v in judged.items() if v == "disagrees"} == wrong
            assert sum(v == "agrees" for v in judged.values()) == 3


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


# --------------------------------------------------------------------------
# Every printed formula against the code that implements it (issue 40)
# --------------------------------------------------------------------------

# The three formulas the course prints otherwise than the code computes, by key.
PRINTED_OTHERWISE = {"hands-on-rms-norm", "hands-on-post-norm", "ch8-receptive-field"}


@pytest.fixture(scope="module")
def formulas():
    from labctl.runner import implementations

    with implementations("both", ROOM) as impls:
        yield {j.formula.key: j for j in judge(dict(impls), 5)}


def test_the_formulas_disagree_exactly_where_the_course_prints_another_formula(formulas):
    assert {f.key for f in FORMULAS if expected_verdict(f) == "disagrees"} == PRINTED_OTHERWISE
    for key, judged in formulas.items():
        want = "disagrees" if key in PRINTED_OTHERWISE else "agrees"
        assert judged.verdicts() == {"reference": want, "clean-room": want}, key
    # by how much, as the metric's why says: ε's share, O(1), and two positions
    assert 1e-7 < formulas["hands-on-rms-norm"].differences["reference"] < 1e-5
    assert formulas["hands-on-post-norm"].differences["reference"] > 0.1
    assert formulas["ch8-receptive-field"].differences["reference"] == 2.0
    assert all(
        j.differences["reference"] <= 1e-10
        for k, j in formulas.items()
        if k not in PRINTED_OTHERWISE
    )


def test_the_rms_formula_as_printed_is_what_the_code_would_be_without_eps(formulas):
    """The disagreement is ε alone: the printed side equals rms_norm with eps = 0."""
    from labctl.labs import worked_examples_formulas as module

    (index,) = [i for i, f in enumerate(FORMULAS) if f.key == "hands-on-rms-norm"]
    inputs = FORMULAS[index].inputs(np.random.default_rng([5, index]))
    printed = FORMULAS[index].printed_side(inputs)
    no_eps = reference.rms_norm(inputs["x"], inputs["gamma"], eps=0.0)
    assert np.max(np.abs(printed - no_eps)) <= 1e-15
    assert module.rms_eps(inputs["x"], inputs["gamma"]).shape == printed.shape


def test_each_disagreement_is_flagged_with_both_formulas_and_the_measured_difference():
    result = run(LAB)
    flagged = [str(f.text) for f in result.figures if isinstance(f, Note) and f.flag]
    for key in PRINTED_OTHERWISE:
        (formula,) = [f for f in FORMULAS if f.key == key]
        (note,) = [n for n in flagged if formula.printed in n]
        assert formula.code_says in note and "(reference)" in note and "(clean-room)" in note
    (rms,) = [n for n in flagged if "RMS(x)" in n]
    measured = float(rms.split("differ by up to ")[1].split(" (reference)")[0])
    assert 1e-7 < measured < 1e-5


def test_a_formula_another_lab_checks_names_metrics_that_lab_has():
    from labctl import registry

    for _section, _printed, lab_id, metrics in ELSEWHERE:
        lab = registry.get(lab_id)
        for name in metrics:
            assert lab.metric(name)


def test_the_full_formula_of_3_6_is_a_note_not_an_erratum():
    """手撕 §3.6's softmax(QKᵀ/√d_k)V is the paper's equation (1); §3.3 calls the mask optional."""
    result = run(LAB)
    (note,) = [f for f in result.figures if isinstance(f, Note) and "equation (1)" in str(f.text)]
    assert not note.flag
    text = str(note.text)
    assert "[0.46, 0.32] and [0.60, 0.46]" in text and "[0.20, 0.10] and [0.40, 0.23]" in text
    assert not any("as printed (no mask)" in row.what for row in ROWS)


def test_the_configuration_claims_by_hand():
    from labctl.labs.worked_examples_configs import CONFIG_ROWS
    from labctl.labs.worked_examples_models import LLAMA2_70B, MISTRAL_7B

    got = {row.what.split(",")[0]: row.recompute(None).tolist() for row in CONFIG_ROWS}
    window = 2 * 4096 * 8 * 128 * 2 * 32  # Mistral 7B: 32 layers, 8 K/V heads of 128, fp16
    assert window == MISTRAL_7B.kv_cache_bytes(4096) == 536_870_912
    assert got["KV cache of the last W = 4096 tokens a prefill worker sends (Mistral 7B"] == [
        pytest.approx(536.870912)
    ]
    # 537 MB at 400 Gb/s = 50 GB/s: 10.7 ms, not microseconds
    (seconds,) = got["time to send that window's KV over one 400 Gb/s RDMA port (InfiniBand NDR)"]
    assert seconds == pytest.approx(window / 50e9 * 1e6) and 10_000 < seconds < 11_000
    assert got["KV cache of a 32K-token prompt without the window (Mistral 7B's geometry"] == [
        pytest.approx(2 * 32768 * 8 * 128 * 2 * 32 / 1e9)
    ]
    assert got[
        "KV cache shrink of GQA in the Llama models that use it: Llama 2 70B (64 query heads"
    ] == [8, 4]
    assert LLAMA2_70B.kv_cache_bytes(4096) == 1_342_177_280  # 手撕 §7.4's 1.34 GB, not 10.7


class NoEps:
    """The reference, with rms_norm as 手撕 §6.2 prints it: no ε under the root."""

    def __getattr__(self, fn: str):
        return getattr(reference, fn)

    def rms_norm(self, x, weight, eps=1e-6):
        return reference.rms_norm(x, weight, 0.0)


def test_a_room_that_follows_a_printed_formula_the_contract_corrects_is_caught():
    impls = {
        "reference": Implementation("reference", reference),
        "clean-room": Implementation("clean-room", NoEps()),
    }
    got = rows(run_lab(LAB, 5, impls))
    assert got[("formula_verdicts_unexpected", "reference")].actual == 0
    assert got[("formula_verdicts_unexpected", "clean-room")].actual == 1  # the RMSNorm formula
    assert not got[("formula_impl_max_difference", "both")].passed
