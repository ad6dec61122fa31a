"""Lab `multi-head`: the shape chain, split/merge exactness, per-head parity, the head-axis fault.

Faulty clean rooms are written into tmp_path; evidence goes under tmp_path too.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from labtools import cli_run_json, failing, faulty_room, rows, run, values, wave2_fault

from labctl.labs.multi_head import LAB, per_head_loop

BOTH = ("mh_reference_max_error", "both")


def test_passes_on_both_implementations():
    result = run(LAB)
    assert result.error is None
    assert result.passed, result.failures()
    got = rows(result)
    for impl in ("reference", "clean-room"):
        assert got[("mh_split_merge_roundtrip_error", impl)].actual == 0.0
        assert got[("mh_positions_mixed", impl)].actual == 0
        assert got[("mh_per_head_parity_error", impl)].actual <= 1e-14  # float64 rounding


def test_one_head_loop_is_plain_causal_attention():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 2))
    eye = np.eye(2)
    out = per_head_loop(x, eye, eye, eye, eye, 1)
    assert np.allclose(out[0, 0], x[0, 0], atol=1e-15)  # the first token sees only itself


@pytest.mark.parametrize(
    ("fault", "caught"),
    [
        (
            "split-heads-no-transpose",
            {"mh_shape_chain_matches", "mh_split_merge_roundtrip_error", "mh_positions_mixed",
             "mh_per_head_parity_error", "mh_future_leak"},
        ),
        (
            "head-seq-confused",
            {"mh_split_merge_roundtrip_error", "mh_positions_mixed", "mh_per_head_parity_error",
             "mh_future_leak"},
        ),
        (
            "merge-heads-no-transpose",
            {"mh_split_merge_roundtrip_error", "mh_per_head_parity_error", "mh_future_leak"},
        ),
        ("mask-reversed", {"mh_per_head_parity_error", "mh_future_leak"}),
    ],
)  # fmt: skip
def test_each_fault_is_caught_at_its_metrics_only(tmp_path, fault, caught):
    result = run(LAB, faulty_room(tmp_path, wave2_fault(fault)))
    assert result.error is None
    assert failing(result) == {(name, "clean-room") for name in caught} | {BOTH}


def test_head_axis_fault_mixes_positions_across_heads(tmp_path):
    result = run(LAB, faulty_room(tmp_path, wave2_fault("head-seq-confused")), impl="clean-room")
    # B = 2, T = 6, C = 16, H = 4: reshaping (B, T, C) straight to (B, H, T, D) fills slot
    # (h, t) with features of token (6h + t) // 4; 18 of the 24 slots hold another position.
    assert rows(result)[("mh_positions_mixed", "clean-room")].actual == 18


def test_same_seed_same_values():
    first, again = (values(run(LAB, seed=5)) for _ in range(2))
    assert first == again


def test_the_lab_module_imports_without_torch():
    code = "import sys, labctl.labs.multi_head; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_run_json(tmp_path, monkeypatch):
    lab, _ = cli_run_json("multi-head", tmp_path, monkeypatch)
    chain = lab["tables"][0]
    assert [row[1] for row in chain["rows"]][3] == "(2, 4, 6, 4)"  # (B, H, T, D)
