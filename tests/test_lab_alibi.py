"""Lab `alibi`: the slopes and bias against the formulas, and attention past the trained length.

Faulty clean rooms are written into tmp_path; evidence goes under tmp_path too.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from labtools import ROOM, at_seed_5, cli_run_json, failing, faulty_room, passed, rows, run, values

from labctl.faults import labs_v2
from labctl.faults.v2 import FaultV2
from labctl.lab import Note
from labctl.labs import alibi as alibi_lab
from labctl.labs.alibi import LAB, paper_slopes, written_bias
from labctl.runner import room_contract

BOTH = ("alibi_reference_max_error", "both")


seed5 = at_seed_5(LAB)


def test_passes_on_both_implementations(seed5):
    got = passed(seed5)
    for impl in ("reference", "clean-room"):
        assert got[("alibi_slopes_max_error", impl)].actual <= 1e-15
        # 8 heads, Ttrain 64, 4x: ALiBi leaves the far keys about a quarter of their share
        assert 0.15 < got[("alibi_far_mass_over_content", impl)].actual < 0.4


def test_the_papers_slopes_by_hand():
    assert paper_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]  # 1/2 .. 1/256
    # 12 heads: the 8 slopes of 8, then slopes 1, 3, 5, 7 of 16 (2^-0.5, 2^-1.5, ...)
    twelve = paper_slopes(12)
    assert twelve[:8].tolist() == [2.0**-k for k in range(1, 9)]
    assert np.allclose(twelve[8:], [2.0**-0.5, 2.0**-1.5, 2.0**-2.5, 2.0**-3.5], rtol=0, atol=1e-15)


def test_the_bias_is_bottom_right_aligned():
    bias = written_bias(np.array([0.5]), 2, 4)  # queries at positions 2 and 3
    assert bias[0].tolist() == [[-1.0, -0.5, 0.0, 0.5], [-1.5, -1.0, -0.5, 0.0]]


@pytest.mark.parametrize(
    ("fault", "caught"),
    [
        ("alibi-slopes-from-one", {"alibi_slopes_max_error", "alibi_bias_max_error"}),
        (
            "alibi-bias-sign",
            {"alibi_bias_max_error", "alibi_weight_rises", "alibi_far_mass_over_content"},
        ),
    ],
)
def test_each_fault_is_caught_at_its_metrics_only(tmp_path, fault, caught):
    result = run(LAB, faulty_room(tmp_path, labs_v2.get(fault)))
    assert result.error is None
    assert failing(result) == {(name, "clean-room") for name in caught} | {BOTH}


def test_a_v1_room_is_told_it_needs_v2_and_the_reference_still_shows(tmp_path):
    room = tmp_path / "v1_room"
    faulty = labs_v2.LABS_V2[0]  # any copy of the project's room will do; its CONTRACT goes
    faulty.materialize(room)
    init = room / "__init__.py"
    init.write_text(re.sub(r"(?m)^CONTRACT = .*$", "", init.read_text("utf-8")), "utf-8")
    assert room_contract(room) == 1 and room_contract(ROOM) == 2
    result = run(LAB, room)
    # a v1 room keeps working: the lab runs on the reference alone and says why, in a note
    assert result.passed and result.error is None
    notes = [f for f in result.figures if isinstance(f, Note)]
    assert notes[0].flag and "needs contract v2" in str(notes[0].text)
    got = rows(result)
    assert got[("alibi_slopes_max_error", "reference")].passed
    assert {impl for _, impl in got} == {"reference"}


def test_a_declaration_that_is_not_a_contract_reads_as_v1_and_an_unknown_one_is_named(tmp_path):
    for text in ("CONTRACT = 2\n", "def (:\n", ""):
        (tmp_path / "__init__.py").write_text(text, "utf-8")
        assert room_contract(tmp_path) == 1
    room = tmp_path / "room"
    labs_v2.LABS_V2[0].materialize(room)
    init = room / "__init__.py"
    init.write_text(init.read_text("utf-8").replace("-v2", "-v9x"), "utf-8")
    result = run(LAB, room)
    # the reference's numbers, and a note naming the declaration labctl does not know
    assert {impl for _, impl in rows(result)} == {"reference"}
    note = str(next(f for f in result.figures if isinstance(f, Note)).text)
    assert "transformer-block-v9x" in note


def test_same_seed_same_values_other_seed_other_values():
    first, again, other = (values(run(LAB, seed=seed, impl="reference")) for seed in (5, 5, 6))
    assert first == again
    key = ("alibi_far_mass_over_content", "reference")
    assert first[key] != other[key]


def test_the_lab_module_imports_without_torch():
    code = "import sys, labctl.labs.alibi; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_run_json(tmp_path, monkeypatch):
    lab, _ = cli_run_json("alibi", tmp_path, monkeypatch)
    slopes, far, _heads = lab["tables"]
    assert slopes["rows"][0][1] == 0.5
    assert far["rows"][0][2] == 0.0  # at 1x no key is farther than Ttrain
    assert any("ALiBi" in note["text"] and not note["flag"] for note in lab["notes"])


# --------------------------------------------------------------------------
# A bias is judged by the attention it gives (issue 40)
# --------------------------------------------------------------------------


def _form_room(name: str, body: str) -> FaultV2:
    """The project's room with alibi_bias written another way (a right one, or not)."""
    return FaultV2(
        name=name,
        function="alibi_bias",
        module="positions",
        description="alibi_bias in another form",
        course="Transformer 手撕与注意力机制 §01.5",
        source=f"""
        def alibi_bias(n_heads, t_q, t_k=None):
            slopes = alibi_slopes(n_heads)[:, None, None]
            t_k = t_q if t_k is None else t_k
            p = (t_k - t_q) + np.arange(t_q, dtype=np.float64)[:, None]  # (Tq, 1)
            j = np.arange(t_k, dtype=np.float64)[None, :]  # (1, Tk)
            return {body}
        """,
    )


# The chapter's own -λ|m - n| (手撕 §01.5), the ALiBi paper's code (slope times key index) and
# the bias measured from the query index (top-left): each the contract's bias plus a constant
# per row, or other values at the masked keys only.
SAME_ATTENTION = {
    "chapter": "-slopes * np.abs(p - j)",
    "paper-code": "slopes * np.broadcast_to(j, (t_q, t_k))",
    "top-left": "-slopes * (p - (t_k - t_q) - j)",
}


@pytest.mark.parametrize("form", sorted(SAME_ATTENTION))
def test_a_bias_that_gives_the_same_attention_passes_and_its_form_is_named(tmp_path, form):
    result = run(LAB, faulty_room(tmp_path, _form_room(f"alibi-{form}", SAME_ATTENTION[form])))
    assert result.error is None
    assert result.passed, result.failures()
    assert rows(result)[("alibi_bias_max_error", "clean-room")].actual <= 1e-13
    notes = [str(f.text) for f in result.figures if isinstance(f, Note) and f.flag]
    assert len(notes) == 1 and notes[0].startswith("clean-room's alibi_bias is ")
    assert str(alibi_lab.BIAS_FORMS[form]) in notes[0] and "labctl verify" in notes[0]


def test_the_contract_s_form_is_named_without_a_flag(seed5):
    notes = [f for f in seed5.figures if isinstance(f, Note) and "alibi_bias is" in str(f.text)]
    assert [n.flag for n in notes] == [False, False]
    assert all(str(alibi_lab.BIAS_FORMS["contract"]) in str(n.text) for n in notes)


@pytest.mark.parametrize(
    ("body", "least"),
    [
        ("-slopes * (p - j) * 2 ** (1 / 8)", 1e-3),  # every slope a head off
        ("-slopes * np.abs(p - j) + 0.1 * (j == 0)", 1e-3),  # one visible key moved
        ("np.where(j > p, np.nan, -slopes * (p - j))", 1e-3),  # NaN, if only at masked keys
    ],
)
def test_a_bias_that_gives_other_attention_fails(tmp_path, body, least):
    result = run(LAB, faulty_room(tmp_path, _form_room("alibi-other", body)), impl="clean-room")
    row = rows(result)[("alibi_bias_max_error", "clean-room")]
    assert not row.passed and not row.actual < least
    note = next(str(f.text) for f in result.figures if isinstance(f, Note) and f.flag)
    assert "a form of its own" in note


def test_the_attention_of_a_bias_under_the_causal_mask():
    scores = np.zeros((1, 2, 3))
    weights = alibi_lab.causal_weights(np.zeros((1, 2, 3)), scores)
    # query 0 sits at position 1 of 3 keys (bottom-right): it sees keys 0 and 1
    assert weights[0].tolist() == [[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]]
    assert np.isinf(alibi_lab.causal_weights(np.zeros((1, 3, 2)), scores)).all()
