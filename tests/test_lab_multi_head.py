"""Lab `multi-head`: the shape chain, split/merge exactness, per-head parity, the head-axis fault.

Faulty clean rooms are written into tmp_path; evidence goes under tmp_path too.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from labtools import cli_run_json, failing, faulty_room, rows, run, values, wave2_fault

from labctl import reference
from labctl.lab import Implementation
from labctl.labs import multi_head as lab_module
from labctl.labs.multi_head import LAB, Params, per_head_loop
from labctl.runner import run_lab

BOTH = ("mh_reference_max_error", "both")


def test_passes_on_both_implementations():
    result = run(LAB)
    assert result.error is None
    assert result.passed, result.failures()
    assert {m.note for m in result.metrics} == {""}  # a note says why a call failed: none did
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


class Patched:
    """The torch reference in this process, with some functions replaced."""

    def __init__(self, **replaced):
        self.replaced = replaced

    def __getattr__(self, fn):
        return self.replaced.get(fn) or getattr(reference, fn)


def against_reference(room, p: Params | None = None):
    impls = {
        "reference": Implementation("reference", reference),
        "clean-room": Implementation("clean-room", room),
    }
    return run_lab(LAB, 5, impls, p)


def test_the_shape_chain_attends_through_the_room_s_own_causal_mask():
    """A reversed causal_mask, used by nothing but the chain: the chain's output differs."""

    def reversed_mask(t_q, t_k=None):
        return np.tril(np.ones((t_q, t_k or t_q), dtype=bool), k=-1)

    got = rows(against_reference(Patched(causal_mask=reversed_mask)))
    assert got[BOTH].actual > 0.1
    assert got[("mh_future_leak", "clean-room")].passed  # its own attention is still causal


def test_a_split_of_the_wrong_shape_counts_every_position_as_mixed():
    """split_heads without the transpose: (B, T, H, D), so no head holds the positions."""
    p = Params()

    def no_transpose(x, n_heads):
        B, T, C = np.shape(x)
        return np.asarray(x).reshape(B, T, n_heads, C // n_heads)  # (B, T, H, D)

    got = rows(against_reference(Patched(split_heads=no_transpose), p))
    assert got[("mh_positions_mixed", "clean-room")].actual == p.H * p.T


def test_a_width_the_heads_do_not_divide_is_refused_by_name():
    result = run_lab(LAB, 5, {"reference": Implementation("reference", reference)}, Params(C=10))
    assert result.error is not None and "C = 10 is not a multiple of H = 4" in result.error


class LastLeaks:
    """Causal attention, except that position T-2 also reads x[T-1]² (not linear: the sign
    of the perturbation shows)."""

    def multi_head_attention(self, x, wq, wk, wv, wo, H):
        out = per_head_loop(x, wq, wk, wv, wo, H)
        out[:, -2] += 0.1 * x[:, -1] ** 2
        return out


@pytest.mark.parametrize(("T", "C"), [(6, 16), (16, 8)])  # T above C: the loop runs over T
def test_the_future_leak_is_the_largest_move_of_any_prefix_when_the_rest_moves(T, C):
    rng = np.random.default_rng(2)
    x, noise = rng.standard_normal((2, T, C)), rng.standard_normal((2, T, C))
    weights = [rng.standard_normal((C, C)) / np.sqrt(C) for _ in range(4)]
    got = lab_module._future_leak(LastLeaks(), x, weights, noise, 2)
    # Only t = T-2 moves the prefix: position T-2, by 0.1 ((x + n)² - x²) of the last token.
    want = np.max(np.abs(0.1 * ((x[:, -1] + noise[:, -1]) ** 2 - x[:, -1] ** 2)))
    assert got == pytest.approx(want, abs=1e-12)
