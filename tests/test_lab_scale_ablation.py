"""The scale-ablation lab: passes on both implementations, fails on a clean room without √d_k.

The lab reads Var(q·k) and Var(q·k/√d_k) back from each implementation's
attention weights for 手撕 §03.2's d_k in 2, 16, 64, 256, 512, and measures how
sharp the softmax gets and how small its Jacobian becomes without the scale.
Each fault below is a clean room that carries one learner bug; the metric that
names the bug must fail on the clean-room row while the reference row passes.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from labtools import Recorded, cli_run_json, faulty_room, passed, rows, run, values

from labctl import faults, reference
from labctl.lab import Implementation
from labctl.labs import scale_ablation as lab_module
from labctl.labs.scale_ablation import D_KS, LAB, LARGEST
from labctl.runner import run_lab

SEED = 5
KEY = "scale_ablation_max_weight_delta"
VARIANCE_METRICS = [f"{kind}_score_var[d_k={d}]" for kind in ("raw", "scaled") for d in D_KS]

# A learner bug beyond the catalogue: `scale` is accepted and ignored, so the ablation
# (scale=1.0) silently keeps the 1/√D.
SCALE_IGNORED = faults.Fault(
    name="scale-ignored",
    function="scaled_dot_product_attention",
    module="attention",
    description="the scale argument is ignored: scores are always divided by sqrt(D)",
    course="contract v1 #5: scale defaults to 1/sqrt(D)",
    source="""
    _correct_sdpa = scaled_dot_product_attention

    def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
        return _correct_sdpa(q, k, v, mask, None)
    """,
)


@pytest.fixture(scope="module")
def result():
    return run(LAB)


@pytest.fixture(scope="module")
def no_sqrt_dk(tmp_path_factory):
    return run(LAB, faulty_room(tmp_path_factory.mktemp("fault"), "no-sqrt-dk"))


@pytest.fixture(scope="module")
def scale_ignored(tmp_path_factory):
    return run(LAB, faulty_room(tmp_path_factory.mktemp("fault"), SCALE_IGNORED))


def test_passes_on_both_implementations(result):
    measured = passed(result)
    for metric in LAB.metrics:
        for impl in metric.impls:
            assert (metric.name, impl) in measured, f"{metric.name} ({impl}) not measured"


def test_variances_follow_the_course(result):
    """Var(q·k) ≈ d_k and Var(q·k/√d_k) ≈ 1 within 10% (over 4.5 standard errors at N=10000)."""
    got = values(result)
    for impl in ("reference", "clean-room"):
        for d in D_KS:
            assert got[(f"raw_score_var[d_k={d}]", impl)] == pytest.approx(d, rel=0.1)
            assert got[(f"scaled_score_var[d_k={d}]", impl)] == pytest.approx(1.0, rel=0.1)
    # the two implementations read the same scores back: float64 rounding only
    for name in VARIANCE_METRICS:
        assert got[(name, "reference")] == pytest.approx(got[(name, "clean-room")], rel=1e-10)


def test_no_sqrt_dk_fails_the_scaled_variances_and_the_template_metric(no_sqrt_dk):
    measured = rows(no_sqrt_dk)
    assert not no_sqrt_dk.passed
    for d in D_KS:
        scaled = f"scaled_score_var[d_k={d}]"
        assert measured[(scaled, "reference")].passed
        assert not measured[(scaled, "clean-room")].passed
        # with no √d_k the "scaled" variance is the raw one, d_k (10% tolerance)
        assert measured[(scaled, "clean-room")].actual == pytest.approx(d, rel=0.1)
        # the explicit scale=1.0 path is untouched by this fault
        assert measured[(f"raw_score_var[d_k={d}]", "clean-room")].passed
    assert measured[(KEY, "reference")].passed
    assert not measured[(KEY, "clean-room")].passed
    assert measured[(KEY, "clean-room")].actual == 0.0  # default scale == 1.0: same weights
    for name in ("scaled_max_prob_spread", f"unscaled_grad_ratio[d_k={LARGEST}]"):
        assert measured[(name, "reference")].passed
        assert not measured[(name, "clean-room")].passed
    assert not measured[("scale_ablation_weights_max_error", "both")].passed


def test_ignored_scale_fails_the_raw_variances_and_the_ablation(scale_ignored):
    measured = rows(scale_ignored)
    for d in D_KS:
        raw = f"raw_score_var[d_k={d}]"
        assert measured[(raw, "reference")].passed
        assert not measured[(raw, "clean-room")].passed
        assert measured[(f"scaled_score_var[d_k={d}]", "clean-room")].passed
    for name in (
        KEY,
        f"unscaled_mean_max_prob[d_k={LARGEST}]",
        f"unscaled_grad_ratio[d_k={LARGEST}]",
    ):
        assert measured[(name, "reference")].passed
        assert not measured[(name, "clean-room")].passed


def test_same_seed_gives_identical_values(result):
    again = run(LAB)
    assert values(again) == values(result)


def test_another_seed_gives_other_values_and_still_passes(result):
    other = run(LAB, seed=SEED + 1)
    assert other.passed, other.failures()
    first, second = values(result), values(other)
    for name in [*VARIANCE_METRICS, KEY, "scaled_max_prob_spread"]:
        assert first[(name, "reference")] != second[(name, "reference")], name


def test_scores_read_back_from_the_weights_are_the_dot_products():
    """The zero-key trick: log(w_j / w_0) is q·k exactly, up to float64 rounding (1e-10)."""
    from labctl import reference

    rng = np.random.default_rng(0)
    params = lab_module.Params(pairs=200, pairs_per_block=20)
    for d in (2, 512):
        q, k, v = lab_module._pair_inputs(rng, d, params)
        _, weights = reference.scaled_dot_product_attention(q, k, v, None, 1.0)
        direct = np.einsum("gmd,gmd->gm", q[:, 0], k[:, 0, 1:])
        # scores of ±100 for d_k=512 come back through weights as small as e^-200
        assert np.max(np.abs(lab_module._scores_back(weights) - direct)) <= 1e-10


def test_jacobian_size_matches_autograd():
    """‖diag(p) - p pᵀ‖_F from the weights equals the norm of softmax's autograd Jacobian."""
    import torch

    rng = np.random.default_rng(1)
    spread = np.array([[0.3], [1.0], [2.0], [4.0]])  # autograd's 1 - p_i rounds for sharper rows
    scores = rng.standard_normal((4, 16)) * spread
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    expected = [
        float(torch.autograd.functional.jacobian(lambda z: torch.softmax(z, -1), row).norm())
        for row in torch.from_numpy(scores)
    ]
    for row, norm in zip(weights, expected, strict=True):
        assert lab_module._sharpness(row[None])[2] == pytest.approx(norm, rel=1e-10)
    assert lab_module._sharpness(weights)[2] == pytest.approx(np.mean(expected), rel=1e-10)


def test_jacobian_of_a_saturated_row_is_tiny_not_rounded_to_zero():
    """One score 60 above 15 others: every other p_j ≈ ε = e^-60 and ‖J‖ ≈ √270 · ε.

    J_ii ≈ 15ε for the winner, J_jj ≈ ε for the 15 others, J_ij ≈ -ε in the winner's
    row and column (30 entries), the rest O(ε²): ‖J‖² ≈ (225 + 15 + 30) ε². The
    formula 1 - p_i would round the winner's diagonal to 0; rel 1e-6 covers the O(ε) terms.
    """
    scores = np.zeros(16)
    scores[3] = 60.0
    weights = np.exp(scores - scores.max())
    weights /= weights.sum()
    expected = math.sqrt(270) * math.exp(-60)
    assert lab_module._sharpness(weights[None])[2] == pytest.approx(expected, rel=1e-6)


def test_sampling_error_formula_matches_a_simulation():
    """Var(s²) = 2d² + 6d for s = q·k: the standard error the table prints (within 10%)."""
    rng = np.random.default_rng(2)
    d, n, repeats = 16, 2000, 400
    variances = [
        np.var(np.sum(rng.standard_normal((n, d)) * rng.standard_normal((n, d)), axis=1))
        for _ in range(repeats)
    ]
    assert np.std(variances) == pytest.approx(lab_module._sampling_sd(d, n), rel=0.1)


def test_runs_on_one_implementation_alone():
    alone = run(LAB, None, impl="reference")
    assert alone.passed, alone.failures()
    assert {m.impl for m in alone.metrics} == {"reference"}


def test_importing_the_lab_does_not_import_torch():
    code = "import sys, labctl.labs.scale_ablation; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_cli_run_json(tmp_path, monkeypatch):
    lab, out = cli_run_json("scale-ablation", tmp_path, monkeypatch)
    by_key = {(m["name"], m["impl"]): m for m in lab["metrics"]}
    assert by_key[(KEY, "clean-room")]["passed"] is True
    assert math.isclose(by_key[(KEY, "clean-room")]["actual"], by_key[(KEY, "reference")]["actual"])


def test_sharpness_of_rows_whose_answers_are_known():
    """A one-hot row (max 1, entropy 0, zeros in it), a uniform row over 4 (max 1/4,
    entropy ln 4) and a half-half row (1/2, ln 2): the means over the three rows."""
    p = np.array([[1.0, 0.0, 0.0, 0.0], [0.25] * 4, [0.5, 0.5, 0.0, 0.0]])
    top, entropy, _ = lab_module._sharpness(p[None, None])  # (B, H, rows, keys) as the lab's
    assert top == pytest.approx((1 + 0.25 + 0.5) / 3, abs=1e-15)
    assert entropy == pytest.approx((0 + math.log(4) + math.log(2)) / 3, abs=1e-15)


def test_the_sampling_error_from_the_moments_of_a_product_of_normals():
    """d = 1: s = qk, E[s⁴] = E[q⁴] E[k⁴] = 9, so Var(s²) = 9 - 1 = 8. d = 2: E[s⁴] =
    2 · 9 + 6 · 1 · 1 = 24 (the cross terms of (a + b)⁴), E[s²]² = 4, so Var(s²) = 20."""
    assert lab_module._sampling_sd(1, 1) == pytest.approx(math.sqrt(8), rel=1e-15)
    assert lab_module._sampling_sd(2, 5) == pytest.approx(math.sqrt(20 / 5), rel=1e-15)


SMALL = lab_module.Params(pairs=1005, pairs_per_block=10, keys=8, rows=64)


def test_each_d_k_sends_one_head_blocks_of_pairs_and_of_rows():
    target = Recorded()
    result = run_lab(LAB, 5, {"clean-room": Implementation("clean-room", target)}, SMALL)
    assert result.error is None  # 1000 pairs are too few for the rows' bounds: not judged here
    calls = [args for args, _ in target.made("scaled_dot_product_attention")]
    assert len(calls) == 4 * len(D_KS)  # pairs and rows, each with and without the scale
    for n, d in enumerate(D_KS):
        pairs, pairs_raw, rows_, rows_raw = calls[4 * n : 4 * n + 4]
        for args in (pairs, pairs_raw):
            assert args[0].shape == (100, 1, 10, d)  # (G, 1, M, d)
            assert args[1].shape == (100, 1, 11, d)  # (G, 1, M + 1, d): a zero key first
        for args in (rows_, rows_raw):
            assert args[0].shape == args[1].shape == (64 // 8, 1, 8, d)  # (R / T, 1, T, d)
        assert [c[3:] for c in (pairs, rows_)] == [(), ()]  # the default scale
        assert [c[3:] for c in (pairs_raw, rows_raw)] == [(None, 1.0), (None, 1.0)]


def test_the_tables_name_the_pairs_used_and_the_keys():
    """1005 pairs in blocks of 10: 1000 are used, and the tables say so."""
    result = run_lab(LAB, 5, {"reference": Implementation("reference", reference)}, SMALL)
    titles = [f.title for f in result.figures if hasattr(f, "title")]
    assert titles[0].args == {"n": 1000} and titles[1].args == {"keys": 8}


def _small_sample_note(result):
    return [
        f for f in result.figures if getattr(f, "flag", False) and "pairs the ±10%" in str(f.text)
    ]


def test_too_few_pairs_are_named_as_why_the_variance_rows_may_fail(result):
    """1000 pairs: ±10% is 1.4 standard errors at d_k=2, so honest rows fail by chance; the
    learner is told so, with the figure; the course's 10000 pairs (4.5 σ) need no such note."""
    small = run_lab(LAB, 5, {"reference": Implementation("reference", reference)}, SMALL)
    (note,) = _small_sample_note(small)
    assert note.text.args["n"] == 1000 and note.text.args["d"] == 2
    assert note.text.args["sigmas"] == pytest.approx(0.1 / math.sqrt(20 / 1000) * 2)  # 1.41
    assert note.text.args["default"] == pytest.approx(4.47, abs=0.01)
    assert _small_sample_note(result) == []


class OffAt:
    """The reference, with the weights of d_k = `d` moved by 1e-3 (outputs untouched)."""

    def __init__(self, d: int):
        self.d = d

    def __getattr__(self, fn):
        return getattr(reference, fn)

    def scaled_dot_product_attention(self, q, k, v, mask=None, scale=None):
        out, weights = reference.scaled_dot_product_attention(q, k, v, mask, scale)
        return out, weights + (1e-3 if q.shape[-1] == self.d else 0.0)


@pytest.mark.parametrize("d", [D_KS[0], LARGEST])
def test_the_weights_error_compares_the_weights_of_every_d_k(d):
    impls = {
        "reference": Implementation("reference", reference),
        "clean-room": Implementation("clean-room", OffAt(d)),
    }
    got = rows(run_lab(LAB, 5, impls, SMALL))
    assert got[("scale_ablation_weights_max_error", "both")].actual == pytest.approx(1e-3)
