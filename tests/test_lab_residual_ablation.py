"""Lab `residual-ablation`: passes on both implementations, and its key metrics catch the faults.

Faults come from the catalogue (`labctl.faults`), written into tmp_path; evidence
goes under tmp_path too, never into the repository's evidence/.
"""

from __future__ import annotations

import pytest
from labtools import cli_run_json, faulty_room, rows, run, values

from labctl.lab import satisfies
from labctl.labs.residual_ablation import DEEPEST, LAB, Params, _gradients

TEMPLATE = "residual_ablation_max_output_delta"
IDENTITY = "residual_identity_max_error"
FORMULA = "residual_block_formula_max_error"
GRADIENTS = (
    f"grad_ratio_pre_norm[depth={DEEPEST}]",
    f"grad_ratio_no_residual[depth={DEEPEST}]",
    f"grad_last_layer_post_over_pre[depth={DEEPEST}]",
)


@pytest.fixture(scope="module")
def seed5():
    return run(LAB)


def test_passes_on_both_implementations_at_seed_5(seed5):
    assert seed5.error is None
    assert seed5.passed, seed5.failures()
    got = rows(seed5)
    for impl in ("reference", "clean-room"):
        # Removing a residual takes away x, which is O(1): the delta is ~4, far above 1e-5.
        assert got[(TEMPLATE, impl)].actual > 1.0
        # x + 0.0 is x exactly; the same float64 ops in the same order agree exactly.
        assert got[(IDENTITY, impl)].actual == 0.0
        assert got[(FORMULA, impl)].actual <= 1e-12
    for name in GRADIENTS:
        assert got[(name, "reference")].passed
        assert (name, "clean-room") not in got  # autograd exists on the reference only


@pytest.mark.parametrize(
    ("fault", "caught"),
    [
        ("residual-dropped", {TEMPLATE, IDENTITY, FORMULA}),
        ("residual-post-norm", {IDENTITY, FORMULA}),
    ],
)
def test_key_metrics_fail_on_a_faulty_clean_room(tmp_path, fault, caught):
    result = run(LAB, faulty_room(tmp_path, fault))
    assert result.error is None
    assert not result.passed
    got = rows(result)
    for name in caught:
        assert not got[(name, "clean-room")].passed, name
        assert got[(name, "reference")].passed, name
    # A block without its attention residual is exactly its own "no attention residual" ablation.
    if fault == "residual-dropped":
        assert got[(TEMPLATE, "clean-room")].actual == 0.0
        assert "no attention residual" in got[(TEMPLATE, "clean-room")].note


def test_same_seed_same_values_other_seed_other_values():
    first, again, other = (values(run(LAB, seed=seed)) for seed in (5, 5, 6))
    assert first == again
    for name in (TEMPLATE, *GRADIENTS):
        impl = "clean-room" if name == TEMPLATE else "reference"
        assert first[(name, impl)] != other[(name, impl)], name
    # Exact zeros stay zero on any seed.
    assert other[(IDENTITY, "clean-room")] == 0.0


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_gradient_thresholds_separate_the_variants(seed):
    """Each gradient metric's tolerance accepts its own variant and refuses the other one."""
    grads = _gradients(Params(), seed)
    pre, none = grads[("pre-norm", DEEPEST)][0], grads[("no residual", DEEPEST)][0]
    pre_band, none_band, post_band = (LAB.metric(name).expected for name in GRADIENTS)
    assert satisfies(pre, pre_band) and not satisfies(none, pre_band)
    assert satisfies(none, none_band) and not satisfies(pre, none_band)
    post_over_pre = grads[("post-norm", DEEPEST)][1] / grads[("pre-norm", DEEPEST)][1]
    assert satisfies(post_over_pre, post_band)
    assert not satisfies(1.0, post_band)  # two identical blocks would give exactly 1
    # Pre-norm's last-layer gradient shrinks with depth (~1/sqrt(L)); post-norm's does not.
    assert grads[("pre-norm", 32)][1] < grads[("pre-norm", 2)][1] / 2
    assert grads[("post-norm", 32)][1] > grads[("post-norm", 2)][1] / 2


def test_cli_run_json(tmp_path, monkeypatch):
    lab, _ = cli_run_json("residual-ablation", tmp_path, monkeypatch)
    names = {m["name"] for m in lab["metrics"]}
    assert {TEMPLATE, IDENTITY, FORMULA, *GRADIENTS} <= names
    assert any("Xiong" in note["text"] for note in lab["notes"])
