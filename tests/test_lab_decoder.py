"""Lab `decoder`: parity, future-token invariance, greedy generation recomputed vs cached."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from labtools import ROOM, at_seed_5, cli_run_json, faulty_room, passed, rows, run, values

from labctl import faults, reference
from labctl.faults.inference import DECODE_WINDOW_IGNORED
from labctl.i18n import catalog
from labctl.lab import Implementation, Note
from labctl.labs.decoder import (
    LAB,
    Params,
    _forward,
    make_model,
    parameter_counts,
    replace_from,
)
from labctl.runner import implementations, run_lab

PARITY, FUTURE = "decoder_logits_vs_reference", "future_invariance_max_change"
TOKENS, LOGITS = "greedy_tokens_mismatch", "greedy_logits_max_error"

# Not in the catalogue: the blocks' causal mask lets query i see key i + 1 as well.
ONE_AHEAD = faults.Fault(
    name="causal-one-key-ahead",
    function="causal_mask",
    module="transformer_block",
    description="the causal mask of the blocks lets each query see the next key",
    course="手撕 §04",
    source="""
    def causal_mask(t_q, t_k=None):
        t_k = t_q if t_k is None else t_k
        return np.triu(np.ones((t_q, t_k), dtype=bool), k=t_k - t_q + 2)
    """,
)


def run_with(params: Params, impl: str = "reference", room=ROOM):
    """The lab at seed 5 with `params` (the reference alone unless told)."""
    with implementations(impl, room) as impls:
        return run_lab(LAB, 5, impls, params)


class Clocked:
    """The reference, every call reported as taking exactly 1 ms of compute."""

    def __getattr__(self, fn: str):
        return getattr(reference, fn)

    def invoke(self, fn: str, *args, echo_args: bool = False, **kwargs):
        return SimpleNamespace(value=getattr(reference, fn)(*args, **kwargs), elapsed_s=1e-3)


seed5 = at_seed_5(LAB)


def test_passes_on_both_implementations_at_seed_5(seed5):
    got = passed(seed5)
    assert got[(PARITY, "both")].actual <= 1e-13
    assert got[("greedy_tokens_vs_reference", "both")].actual == 0
    for impl in ("reference", "clean-room"):
        assert got[(FUTURE, impl)].actual <= 1e-13
        assert got[(TOKENS, impl)].actual == 0
        assert got[(LOGITS, impl)].actual <= 1e-13  # float64 rounding only
        for path in ("recompute", "cached"):
            timing = got[(f"greedy_ms_per_token[{path}]", impl)]
            assert timing.timing and not timing.decides and timing.actual > 0


def test_parameter_counts_add_up():
    p = Params()
    counts = dict(parameter_counts(make_model(np.random.default_rng(0), p)))
    D = p.C // p.H
    attention = p.L * (p.C * p.H * D * 2 + 2 * p.C * p.Hkv * D)
    assert sum(counts.values()) == p.V * p.C + attention + p.L * 3 * p.C * p.F + (2 * p.L + 1) * p.C


@pytest.mark.parametrize("fault", ["decode-rope-offset", DECODE_WINDOW_IGNORED])
def test_a_faulty_decode_fails_the_cached_generation(tmp_path, fault):
    result = run(LAB, faulty_room(tmp_path, fault))
    got = rows(result)
    assert not got[(LOGITS, "clean-room")].passed
    assert got[(LOGITS, "clean-room")].actual > 1e-6
    assert got[(TOKENS, "clean-room")].actual > 0  # the argmax moves too (3 and 5 of 8 at seed 5)
    assert not got[("greedy_tokens_vs_reference", "both")].passed
    assert got[(LOGITS, "reference")].passed
    assert got[(PARITY, "both")].passed and got[(FUTURE, "clean-room")].passed


def test_a_decoder_without_final_norm_fails_parity(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "decoder-no-final-norm"))
    got = rows(result)
    assert not got[(PARITY, "both")].passed
    assert got[(FUTURE, "clean-room")].passed


def test_a_reversed_mask_fails_future_invariance(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "mask-reversed"), impl="clean-room")
    got = rows(result)
    assert got[(FUTURE, "clean-room")].actual > 1e-6
    assert not got[(FUTURE, "clean-room")].passed


def test_same_seed_same_values():
    assert values(run(LAB, seed=4)) == values(run(LAB, seed=4))


def test_cli_run_json(tmp_path, monkeypatch):
    lab, _ = cli_run_json("decoder", tmp_path, monkeypatch)
    timing = {m["name"] for m in lab["metrics"] if m["timing"]}
    assert timing == {"greedy_ms_per_token[recompute]", "greedy_ms_per_token[cached]"}


def test_the_time_per_token_sums_every_call_of_each_path():
    """1 ms a call: recomputing makes one call a token, the cache 4 per layer and a final norm."""
    p = Params(L=3)
    result = run_lab(LAB, 5, {"reference": Implementation("reference", Clocked())}, p)
    got = rows(result)
    assert got[("greedy_ms_per_token[recompute]", "reference")].actual == pytest.approx(1.0)
    assert got[("greedy_ms_per_token[cached]", "reference")].actual == pytest.approx(4 * 3 + 1)


def test_the_cached_path_uses_the_lab_s_epsilon_and_rope_base():
    """eps = 1e-2 and base 100, far from the functions' defaults: both paths must still agree."""
    result = run_with(Params(eps=1e-2, rope_theta=100.0))
    assert result.passed, result.failures()
    assert rows(result)[(LOGITS, "reference")].actual <= 1e-13
    (tied,) = [f for f in result.figures if isinstance(f, Note) and "Tied" in str(f.text)]
    assert "reference (2, 8, 64)" in str(tied.text)  # the parity batch: B = 2, T = 8, V


def test_a_mask_one_key_ahead_fails_future_invariance_through_one_block(tmp_path):
    """One block: only query 3 sees key 4, so the row catches it only if key 4 is replaced."""
    room = faulty_room(tmp_path, ONE_AHEAD)
    result = run_with(Params(L=1), impl="clean-room", room=room)
    got = rows(result)
    assert got[(FUTURE, "clean-room")].actual > 1e-6 and not got[(FUTURE, "clean-room")].passed


def test_the_parity_forward_uses_the_lab_s_rope_base():
    p = Params(rope_theta=100.0)
    model = make_model(np.random.default_rng(0), p)
    ids = np.random.default_rng(1).integers(0, p.V, size=(1, 6))
    expected = reference.decoder_forward(ids, model, p.H, p.Hkv, p.eps, "rope", 100.0, None)
    assert np.array_equal(_forward(reference, ids, model, p), expected)
    default = reference.decoder_forward(ids, model, p.H, p.Hkv, p.eps, "rope", 10000.0, None)
    assert np.max(np.abs(expected - default)) > 1e-6  # the base is visible in the logits


@pytest.mark.parametrize(
    "params",
    [Params(H=3, Hkv=1), Params(H=4, Hkv=3), Params(C=12, H=4)],
    ids=["C%H", "H%Hkv", "odd D"],
)
def test_shapes_the_model_cannot_take_are_refused_with_the_reason(params):
    result = run_with(params)
    assert "need C % H == 0, H % Hkv == 0 and an even D" in result.error


@pytest.mark.parametrize("V", [2, 3, 64])
def test_every_token_from_the_start_is_replaced_and_none_before(V):
    """The future-invariance row changes every later token: a leak from any one position shows."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, V, size=(500, 8))  # (B, T)
    future = replace_from(rng, ids, 4, V)
    assert np.array_equal(future[:, :4], ids[:, :4])
    assert np.all(future[:, 4:] != ids[:, 4:])
    assert future.dtype == ids.dtype and future.min() >= 0 and future.max() < V
    shifts = (future[:, 4:] - ids[:, 4:]) % V
    assert set(np.unique(shifts)) == set(range(1, V))  # each shift drawn, 0 never


def test_the_model_is_drawn_in_the_contract_layout_at_one_over_fan_in():
    """Weights (in, out) at variance 1 / fan-in, norms at 1, the chapter's 0.02 embedding."""
    p = Params(V=256, C=64, H=4, Hkv=2, F=128, L=3)
    model = make_model(np.random.default_rng(0), p)
    assert model["embed"].shape == (256, 64)
    assert np.std(model["embed"]) == pytest.approx(0.02, rel=0.05)
    assert np.array_equal(model["final_norm"], np.ones(64)) and len(model["blocks"]) == 3
    D = 64 // 4
    shapes = {
        "wq": (64, 4 * D), "wk": (64, 2 * D), "wv": (64, 2 * D), "wo": (4 * D, 64),
        "w_gate": (64, 128), "w_up": (64, 128), "w_down": (128, 64),
    }  # fmt: skip
    for block in model["blocks"]:
        assert np.array_equal(block["norm1"], np.ones(64))
        assert np.array_equal(block["norm2"], np.ones(64))
        for name, shape in shapes.items():
            assert block[name].shape == shape, name
            assert np.std(block[name]) * np.sqrt(shape[0]) == pytest.approx(1.0, abs=0.15), name


def test_parameter_counts_by_part_under_translated_names():
    p = Params()
    counts = dict(parameter_counts(make_model(np.random.default_rng(0), p)))
    chinese = catalog("zh")
    assert all(chinese.get(part) for part in counts), "a part the table cannot translate"
    D = p.C // p.H
    assert list(counts.values()) == [
        p.V * p.C,
        p.L * (2 * p.C * p.H * D + 2 * p.C * p.Hkv * D),
        p.L * 3 * p.C * p.F,
        (2 * p.L + 1) * p.C,
    ]
