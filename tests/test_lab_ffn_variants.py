"""Lab `ffn-variants`: GELU exact and tanh, GLU and GeGLU against the formulas, the equal-parameter width.

Faulty clean rooms are written into tmp_path; evidence goes under tmp_path too.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from labtools import cli_run_json, failing, faulty_room, passed, run, values

from labctl.faults import labs_v2
from labctl.labs.ffn_variants import LAB, gated_width, size_rows

BOTH = ("ffn_variants_reference_max_error", "both")


def test_passes_on_both_implementations():
    result = run(LAB)
    got = passed(result)
    for impl in ("reference", "clean-room"):
        # the tanh form's worst error on [-6, 6]: 4.73e-4 (grid step 0.005, so to 3 digits)
        assert abs(got[("gelu_tanh_vs_exact_max", impl)].actual - 4.73e-4) < 1e-6
        assert got[("gelu_exact_max_error", impl)].actual <= 1e-14


def test_the_chapters_widths():
    assert gated_width(512) == 1365 and gated_width(4096) == 10923  # 2/3 · 4 · C, rounded
    # 手撕 §06.5 at d_model 512: 2,097,152 for ReLU, 3 · 512 · 1365 = 2,096,640 gated
    assert size_rows(512, 2048)[3:5] == ("2,097,152", "2,096,640")


@pytest.mark.parametrize(
    ("fault", "caught"),
    [
        (
            "gelu-tanh-ignored",
            {"gelu_tanh_max_error", "gelu_tanh_vs_exact_max", "geglu_max_error"},
        ),
        ("glu-gate-on-up", {"glu_max_error"}),
    ],
)
def test_each_fault_is_caught_at_its_metrics_only(tmp_path, fault, caught):
    result = run(LAB, faulty_room(tmp_path, labs_v2.get(fault)))
    assert result.error is None
    assert failing(result) == {(name, "clean-room") for name in caught} | {BOTH}


def test_same_seed_same_values_other_seed_other_values():
    first, again, other = (run(LAB, seed=seed, impl="reference") for seed in (5, 5, 6))
    assert values(first) == values(again)
    # the errors are rounding on any seed; the gated FFNs' gaps move with the weights
    gaps = [result.figures[-2].rows for result in (first, again, other)]
    assert gaps[0] == gaps[1] and gaps[0] != gaps[2]


def test_the_lab_module_imports_without_torch():
    code = "import sys, labctl.labs.ffn_variants; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_run_json(tmp_path, monkeypatch):
    lab, _ = cli_run_json("ffn-variants", tmp_path, monkeypatch)
    gelu, sizes, _gated = lab["tables"]
    assert gelu["rows"][4][0] == "0" and gelu["rows"][4][1] == 0.0  # GELU(0) = 0
    assert sizes["rows"][1][2] == "1365"
    assert any("0.78%" in note["text"] and note["flag"] for note in lab["notes"])
