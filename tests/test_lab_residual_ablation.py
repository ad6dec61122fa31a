"""Lab `residual-ablation`: passes on both implementations, and its key metrics catch the faults.

Faults come from the catalogue (`labctl.faults`), written into tmp_path; evidence
goes under tmp_path too, never into the repository's evidence/.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from labtools import ROOM, at_seed_5, cli_run_json, faulty_room, passed, rows, run, values

from labctl import faults
from labctl.lab import TableFigure, satisfies
from labctl.labs.residual_ablation import (
    DEEPEST,
    LAB,
    Params,
    _ablations,
    _block_params,
    _block_t,
    _gradients,
)
from labctl.runner import implementations, run_lab

TEMPLATE = "residual_ablation_max_output_delta"
IDENTITY = "residual_identity_max_error"
FORMULA = "residual_block_formula_max_error"
GRADIENTS = (
    f"grad_ratio_pre_norm[depth={DEEPEST}]",
    f"grad_ratio_no_residual[depth={DEEPEST}]",
    f"grad_last_layer_post_over_pre[depth={DEEPEST}]",
)


seed5 = at_seed_5(LAB)


def test_passes_on_both_implementations_at_seed_5(seed5):
    got = passed(seed5)
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


def test_the_ablations_compose_the_block_with_its_own_eps():
    # eps = 0.5 is far from rms_norm's default 1e-6: a norm that drops it changes every row.
    p = Params(eps=0.5)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((p.B, p.T, p.C))  # (B, T, C)
    with implementations("reference", None) as impls:
        outs = _ablations(impls["reference"], x, _block_params(rng, p), p)
    # The same float64 operations in the same order: equal to rounding (~1e-15).
    np.testing.assert_allclose(outs["formula"], outs["block"], rtol=0, atol=1e-12)


def _block_without(kept: str) -> str:
    """A transformer_block whose output is `kept` (an expression of h, the attention branch
    a and the FFN f): one residual or both dropped."""
    return f"""
    def transformer_block(x, params, n_heads, n_kv_heads=None, eps=1e-6, rope_theta=None, window=None):
        p = params
        a = multi_head_attention(
            rms_norm(x, p["norm1"], eps), p["wq"], p["wk"], p["wv"], p["wo"],
            n_heads, n_kv_heads, causal=True, window=window, rope_theta=rope_theta,
        )
        h = {"a" if kept == "ffn(a)" else "x + a"}
        f = swiglu_ffn(rms_norm(h, p["norm2"], eps), p["w_gate"], p["w_up"], p["w_down"])
        return {kept.replace("ffn(a)", "f").replace("ffn(h)", "f")}
    """


FFN_DROPPED = faults.Fault(
    "ffn-residual-dropped", "transformer_block", "transformer_block",
    "the FFN sublayer's residual is dropped", "第8章 阶段四", _block_without("ffn(h)"),
)  # fmt: skip
BOTH_DROPPED = faults.Fault(
    "both-residuals-dropped", "transformer_block", "transformer_block",
    "both residuals are dropped", "第8章 阶段四", _block_without("ffn(a)"),
)  # fmt: skip


@pytest.mark.parametrize(
    ("fault", "weakest"),
    [
        ("residual-dropped", "no attention residual"),
        (FFN_DROPPED, "no FFN residual"),
        (BOTH_DROPPED, "no residual"),
    ],
    ids=["attention", "ffn", "both"],
)
def test_a_block_missing_residuals_is_its_own_ablation_and_the_row_names_it(
    tmp_path, fault, weakest
):
    result = run(LAB, faulty_room(tmp_path, fault), impl="clean-room")
    row = rows(result)[(TEMPLATE, "clean-room")]
    assert not row.passed and row.actual == 0.0  # the same operations: exactly equal
    assert row.note == f"smallest: {weakest}"
    # The ablation table first (the hidden reference's gradients follow it, issue 38).
    table = next(f for f in result.figures if isinstance(f, TableFigure))
    room = table.columns.index("clean-room")
    assert {r[0]: r[room] for r in table.rows}[weakest] == 0.0  # that ablation's row


def test_the_clean_room_alone_shows_no_gradient_row():
    """The gradients need autograd: they are the reference's rows, and `--impl clean-room`
    shows none of the reference's rows (it runs hidden, for the comparison: issue 38)."""
    result = run(LAB, impl="clean-room")
    assert result.error is None and result.passed
    assert set(rows(result)) == {
        (TEMPLATE, "clean-room"),
        (IDENTITY, "clean-room"),
        (FORMULA, "clean-room"),
        ("residual_reference_max_error", "both"),
    }


def test_the_gradient_rows_are_the_tables_depth_32_line():
    result = run(LAB, impl="reference")
    got = rows(result)
    tables = [f for f in result.figures if isinstance(f, TableFigure)]
    deepest = next(row for row in tables[1].rows if row[0] == str(DEEPEST))
    assert got[(GRADIENTS[0], "reference")].actual == deepest[1]  # ratio pre-norm
    assert got[(GRADIENTS[1], "reference")].actual == deepest[2]  # ratio no residual
    assert got[(GRADIENTS[2], "reference")].actual == deepest[6]  # dW_L post / pre


def test_the_identity_check_runs_the_block_with_the_labs_eps(tmp_path):
    # A post-norm block at the identity point returns rms_norm(rms_norm(x)): its distance from
    # x depends on eps, and eps = 0.5 is far from the contract's default 1e-6.
    p = Params(eps=0.5)
    with implementations("clean-room", faulty_room(tmp_path, "residual-post-norm")) as impls:
        result = run_lab(LAB, 5, impls, p)
    x = np.random.default_rng(5).standard_normal((p.B, p.T, p.C))  # the lab's first draw

    def rms_norm(z):
        return z / np.sqrt(np.mean(z**2, axis=-1, keepdims=True) + p.eps)

    expected = float(np.max(np.abs(rms_norm(rms_norm(x)) - x)))
    # float64, the same formula: rounding only.
    assert rows(result)[(IDENTITY, "clean-room")].actual == pytest.approx(expected, rel=1e-12)


def test_every_stack_attends_causally(monkeypatch):
    # The ablated stacks call the reference's attention themselves: a non-causal one would
    # still give gradients inside the bands, so the calls are watched.
    reference = importlib.import_module("labctl.reference.transformer_block")
    causal = []
    real = reference.mha_t

    def watched(x, wq, wk, wv, wo, H, Hkv, is_causal, window, rope_theta, *v2):
        causal.append(is_causal)
        return real(x, wq, wk, wv, wo, H, Hkv, is_causal, window, rope_theta, *v2)

    monkeypatch.setattr(reference, "mha_t", watched)
    _gradients(Params(T=4, C=8, H=2, F=16), seed=5)
    # pre-norm through block_t, no residual and post-norm through the lab's own calls
    assert len(causal) == 3 * sum((2, 8, 32)) and all(c is True for c in causal)


@pytest.mark.parametrize(
    ("kind", "fault"),
    [("pre-norm", None), ("no residual", BOTH_DROPPED), ("post-norm", "residual-post-norm")],
)
def test_each_stacked_variant_is_the_block_it_is_named_after(tmp_path, kind, fault):
    """The torch blocks the gradients go through, against the NumPy blocks: the project's
    clean room (pre-norm) and the faults that drop both residuals or norm after them."""
    import torch

    p = Params(eps=0.5)  # far from rms_norm's default: each norm must be handed the block's
    rng = np.random.default_rng(0)
    q = _block_params(rng, p)
    q["norm1"], q["norm2"] = (1 + rng.standard_normal(p.C) / 2 for _ in range(2))  # gains != 1
    x = rng.standard_normal((p.B, p.T, p.C))  # (B, T, C)
    got = _block_t(kind, torch.from_numpy(x), {k: torch.from_numpy(v) for k, v in q.items()}, p)
    room = ROOM if fault is None else faulty_room(tmp_path, fault)
    with implementations("clean-room", room) as impls:
        expected = impls["clean-room"].transformer_block(x, q, p.H, eps=p.eps)
    # float64 in torch and NumPy, the same formula: rounding only (~1e-15).
    np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-10)
