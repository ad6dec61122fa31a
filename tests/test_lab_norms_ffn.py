"""Lab `norms-ffn`: the chapter's vector step by step, the norms' invariances, SwiGLU's gate.

Faulty clean rooms are written into tmp_path; evidence goes under tmp_path too.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from labtools import cli_run_json, failing, faulty_room, passed, run, values, wave2_fault

from labctl.labs.norms_ffn import LAB, ffn_counts, worked_steps

BOTH = ("norms_ffn_reference_max_error", "both")


def test_passes_on_both_implementations():
    result = run(LAB)
    got = passed(result)
    for impl in ("reference", "clean-room"):
        assert got[("norms_worked_vector_max_error", impl)].actual <= 1e-14  # 4 float64 terms
        assert got[("norms_rms_shift_change", impl)].actual > 0.1  # RMSNorm does not centre
        assert got[("ffn_gate_branch_gap", impl)].actual > 0.1  # the gate matters here


def test_worked_vector_by_hand():
    # x = [1, -2, 3, 0.5]: mean 2.5 / 4, variance 12.6875 / 4, mean square 14.25 / 4; exact in
    # binary fractions, so compared with ==.
    steps = worked_steps()
    assert steps["mean"][0] == 0.625
    assert steps["var"][0] == 3.171875
    assert steps["mean_square"][0] == 3.5625


def test_llama_hidden_width_is_not_parameter_parity():
    relu = ffn_counts(4096, 4 * 4096, 11008)
    assert relu["relu"] == 134_217_728 and relu["swiglu"] == 135_266_304
    exact = ffn_counts(4096, 4 * 4096, 8 / 3 * 4096)
    assert abs(exact["swiglu"] - exact["relu"]) < 1e-6  # 8/3·D: parity, but not an integer


@pytest.mark.parametrize(
    ("fault", "caught"),
    [
        ("layer-norm-unbiased", {"norms_worked_vector_max_error", "norms_rms_vs_ln_zero_mean_error"}),
        ("layer-norm-uncentred", {"norms_worked_vector_max_error", "norms_ln_shift_change"}),
        ("rms-mean-subtracted", {"norms_worked_vector_max_error", "norms_rms_shift_change"}),
        (
            "rms-no-sqrt",
            {"norms_worked_vector_max_error", "norms_rms_vs_ln_zero_mean_error",
             "norms_scale_change"},
        ),
        ("rms-eps-outside-sqrt", {"norms_worked_vector_max_error", "norms_rms_vs_ln_zero_mean_error"}),
        ("swiglu-swapped", {"ffn_swiglu_max_error", "ffn_gate_branch_gap"}),
    ],
)  # fmt: skip
def test_each_fault_is_caught_at_its_metrics_only(tmp_path, fault, caught):
    result = run(LAB, faulty_room(tmp_path, wave2_fault(fault)))
    assert result.error is None
    assert failing(result) == {(name, "clean-room") for name in caught} | {BOTH}


def test_same_seed_same_values():
    first, again, other = (values(run(LAB, seed=seed)) for seed in (5, 5, 6))
    assert first == again
    key = ("norms_rms_shift_change", "clean-room")
    assert first[key] != other[key]


def test_the_lab_module_imports_without_torch():
    code = "import sys, labctl.labs.norms_ffn; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_run_json(tmp_path, monkeypatch):
    lab, _ = cli_run_json("norms-ffn", tmp_path, monkeypatch)
    steps, sizes = lab["tables"]
    assert steps["rows"][2][1] == steps["rows"][2][3]  # the clean room's LayerNorm, as written out
    assert sizes["rows"][3][3] == "135,266,304"
