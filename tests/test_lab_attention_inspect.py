"""Lab `attention-inspect`: labelled heatmaps, entropy bounds, padding, dilution."""

from __future__ import annotations

import numpy as np
import pytest
from labtools import ROOM, at_seed_5, cli_run_json, faulty_room, passed, rows, run, values

from labctl import faults, reference
from labctl.faults.inference import PADDING_QUERY_AXIS
from labctl.lab import HeatmapFigure
from labctl.labs.attention_inspect import LAB, SENTENCE, Params, _model, _weights, entropy
from labctl.runner import implementations, run_lab

ENTROPY, PADDED, BLOCKED = (
    "entropy_bound_violations",
    "padded_key_weight_max",
    "blocked_row_max_abs",
)
LEAK, DILUTION = "wrong_axis_leak", "dilution_weight_error"

# Not in the catalogue: every query spreads its weight evenly over all keys, future included.
FLAT_UNMASKED = faults.Fault(
    name="attention-flat-unmasked",
    function="scaled_dot_product_attention",
    module="attention",
    description="scale 0 and no mask: each row is uniform over every key",
    course="手撕 §10.2 (the flat pattern), §04",
    source="""
    _correct_sdpa = scaled_dot_product_attention

    def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
        return _correct_sdpa(q, k, v, None, 0.0)
    """,
)

# Not in the catalogue: weights that sum to 1 but are no distribution (1.5 on the first key,
# -0.5 on the query's own): entropy -1.5 log 1.5 < 0. Row 0 gets 1.5 - 0.5 = 1, exact.
NEGATIVE_WEIGHTS = faults.Fault(
    name="attention-negative-weights",
    function="scaled_dot_product_attention",
    module="attention",
    description="weights 1.5 on the first key and -0.5 on the query's own: they sum to 1",
    course="手撕 §3.6",
    source="""
    _correct_sdpa = scaled_dot_product_attention

    def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
        out, weights = _correct_sdpa(q, k, v, mask, scale)
        t_q, t_k = weights.shape[-2:]
        bent = np.zeros_like(weights)
        bent[..., 0] += 1.5
        bent[..., np.arange(t_q), t_k - t_q + np.arange(t_q)] -= 0.5
        return out, bent
    """,
)

# Not in the catalogue: each row divided by its count of visible keys, as if averaging. Row i
# sums to 1 / (i + 1); its entropy (H + log(i + 1)) / (i + 1) stays within [0, log(i + 1)].
AVERAGED_WEIGHTS = faults.Fault(
    name="attention-weights-averaged",
    function="scaled_dot_product_attention",
    module="attention",
    description="each row of weights divided by the number of keys it sees",
    course="手撕 §3.6",
    source="""
    _correct_sdpa = scaled_dot_product_attention

    def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
        out, weights = _correct_sdpa(q, k, v, mask, scale)
        return out, weights / np.maximum((weights > 0).sum(axis=-1, keepdims=True), 1)
    """,
)


def run_with(params: Params, impl: str = "reference"):
    """The lab at seed 5 with `params` (the reference alone unless told)."""
    with implementations(impl, ROOM) as impls:
        return run_lab(LAB, 5, impls, params)


seed5 = at_seed_5(LAB)


def test_passes_on_both_implementations_at_seed_5(seed5):
    got = passed(seed5)
    assert got[("entropy_vs_reference", "both")].actual <= 1e-13
    for impl in ("reference", "clean-room"):
        assert got[(ENTROPY, impl)].actual == 0
        assert got[(PADDED, impl)].actual == 0.0 and got[(BLOCKED, impl)].actual == 0.0
        assert got[(LEAK, impl)].actual > 0.05  # real tokens read [PAD]
        assert got[(DILUTION, impl)].actual <= 1e-15


def test_heatmaps_per_layer_head_and_implementation_carry_the_tokens(seed5):
    maps = [f for f in seed5.figures if isinstance(f, HeatmapFigure)]
    assert len(maps) == 2 * 2 * 2  # layers x heads x implementations
    for figure in maps:
        assert figure.row_ticks == figure.col_ticks == SENTENCE
        weights = np.array(figure.matrix)
        assert np.allclose(weights.sum(axis=1), 1.0, atol=1e-12)
        assert np.all(np.triu(weights, k=1) == 0.0)  # causal: nothing above the diagonal


def test_entropy_of_uniform_and_one_hot_rows():
    assert entropy(np.array([1.0, 0.0, 0.0])) == 0.0
    assert entropy(np.full(4, 0.25)) == pytest.approx(np.log(4), abs=1e-15)
    # A negative weight adds nothing (not NaN, which every bound would let through): the 1.5
    # alone gives the negative entropy that the lower bound flags.
    assert entropy(np.array([1.5, -0.5])) == pytest.approx(-1.5 * np.log(1.5), abs=1e-15)


def test_a_reversed_causal_mask_breaks_the_entropy_bound(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "mask-reversed"))
    got = rows(result)
    assert got[(ENTROPY, "clean-room")].actual > 0 and not got[(ENTROPY, "clean-room")].passed
    assert got[(ENTROPY, "reference")].passed
    assert got[("entropy_vs_reference", "both")].actual > 0.1  # the heads read other keys
    assert got[(DILUTION, "clean-room")].passed


def test_a_padding_mask_on_the_query_axis_fails_padding_and_shows_no_leak(tmp_path):
    result = run(LAB, faulty_room(tmp_path, PADDING_QUERY_AXIS), impl="clean-room")
    got = rows(result)
    assert got[(PADDED, "clean-room")].actual > 0.01 and not got[(PADDED, "clean-room")].passed
    assert not got[(LEAK, "clean-room")].passed  # swapping the wrong axis makes it right
    assert got[(ENTROPY, "clean-room")].passed and got[(DILUTION, "clean-room")].passed


def test_nan_on_a_fully_blocked_row_fails(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "softmax-blocked-nan"), impl="clean-room")
    got = rows(result)
    assert np.isnan(got[(BLOCKED, "clean-room")].actual)
    assert not got[(BLOCKED, "clean-room")].passed


def test_a_missing_scale_fails_the_dilution_row(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "no-sqrt-dk"), impl="clean-room")
    got = rows(result)
    assert got[(DILUTION, "clean-room")].actual > 0.01  # the margin doubles: e^2m, not e^m
    assert got[(PADDED, "clean-room")].passed


def test_same_seed_same_values():
    assert values(run(LAB, seed=2)) == values(run(LAB, seed=2))


def test_cli_run_json(tmp_path, monkeypatch):
    lab, _ = cli_run_json("attention-inspect", tmp_path, monkeypatch)
    assert {m["name"] for m in lab["metrics"]} >= {ENTROPY, PADDED, LEAK}


@pytest.mark.parametrize(
    "params",
    [Params(H=3, head_scales=(1.0, 1.0, 1.0)), Params(head_scales=(1.0,)), Params(T_pad=4)],
    ids=["C%H", "scales", "lengths"],
)
def test_a_model_or_batch_it_cannot_build_is_refused_with_the_reason(params):
    result = run_with(params)
    assert result.error.endswith(": need C % H == 0, one head scale per head and lengths <= T_pad")


def test_each_head_s_queries_are_scaled_by_its_head_scale():
    p = Params(C=64, H=2, head_scales=(4.0, 0.25), L=3, F=128)
    embed, blocks = _model(np.random.default_rng(0), p)
    assert embed.shape == (len(SENTENCE), 64) and len(blocks) == 3
    for block in blocks:
        assert np.array_equal(block["norm1"], np.ones(64))
        assert np.array_equal(block["norm2"], np.ones(64))
        for half, scale in zip((slice(0, 32), slice(32, 64)), p.head_scales, strict=True):
            assert np.std(block["wq"][:, half]) * 8 == pytest.approx(scale, rel=0.1)
        fans = {"wk": 64, "wv": 64, "wo": 64, "w_gate": 64, "w_up": 64, "w_down": 128}
        for name, fan_in in fans.items():
            assert np.std(block[name]) * np.sqrt(fan_in) == pytest.approx(1.0, abs=0.1), name


def test_the_weights_shown_are_those_of_each_block_of_the_decoder():
    """Layer l's weights are attention over rms_norm of the stream that transformer_block gives."""
    p = Params()
    embed, blocks = _model(np.random.default_rng(0), p)
    T = len(SENTENCE)
    layers = _weights(reference, embed, blocks, p)
    x = (embed + reference.sinusoidal_positions(T, p.C))[None]  # (1, T, C)
    for block, shown in zip(blocks, layers, strict=True):
        xn = reference.rms_norm(x, block["norm1"])
        q, k = (reference.split_heads(xn @ block[w], p.H) for w in ("wq", "wk"))  # (1, H, T, D)
        scores = q[0] @ k[0].transpose(0, 2, 1) / np.sqrt(p.C // p.H)  # (H, T, T)
        scores[:, np.triu(np.ones((T, T), dtype=bool), k=1)] = -np.inf
        expected = np.exp(scores - scores.max(axis=-1, keepdims=True))
        expected /= expected.sum(axis=-1, keepdims=True)
        assert np.max(np.abs(shown - expected)) <= 1e-12
        x = reference.transformer_block(x, block, p.H, p.H)


def test_a_flat_head_that_sees_the_future_breaks_the_bound_on_all_rows_but_the_last(tmp_path):
    """Uniform over T keys: entropy log T, above log(i + 1) for every query i < T - 1."""
    result = run(LAB, faulty_room(tmp_path, FLAT_UNMASKED), impl="clean-room")
    T = len(SENTENCE)
    assert rows(result)[(ENTROPY, "clean-room")].actual == 2 * 2 * (T - 1)  # L x H x (T - 1)


def test_weights_zeroed_after_the_softmax_break_the_rows_sum(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "mask-after-softmax"), impl="clean-room")
    got = rows(result)
    assert got[(ENTROPY, "clean-room")].actual > 0 and not got[(ENTROPY, "clean-room")].passed


def test_a_padding_mask_that_leaves_the_first_pad_visible_fails(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "padding-off-by-one"), impl="clean-room")
    got = rows(result)
    assert got[(PADDED, "clean-room")].actual > 0.01 and not got[(PADDED, "clean-room")].passed


def test_both_implementations_are_judged_on_the_same_padded_batch():
    got = rows(run(LAB))
    assert got[(LEAK, "reference")].actual == pytest.approx(
        got[(LEAK, "clean-room")].actual, abs=1e-12
    )


@pytest.mark.parametrize("fault", [NEGATIVE_WEIGHTS, AVERAGED_WEIGHTS], ids=lambda f: f.name)
def test_weights_that_are_no_distribution_break_every_row_after_the_first(tmp_path, fault):
    """Negative weights summing to 1 fail the entropy's lower bound, averaged ones the sum."""
    result = run(LAB, faulty_room(tmp_path, fault), impl="clean-room")
    T = len(SENTENCE)
    assert rows(result)[(ENTROPY, "clean-room")].actual == 2 * 2 * (T - 1)  # L x H x (T - 1)
