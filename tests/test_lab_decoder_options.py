"""Lab `decoder-options`: contract v2's untied head, ALiBi inside the decoder and batched
positions, each against the model built from its parts; each metric failed by a real fault."""

from __future__ import annotations

import numpy as np
import pytest
from labtools import at_seed_5, failing, passed

from labctl.lab import Implementation
from labctl.labs import decoder_options as lab
from labctl.reference import v2 as reference_v2
from labctl.runner import run_lab

seed5 = at_seed_5(lab.LAB)


def test_passes_on_both_implementations(seed5):
    got = passed(seed5)
    for impl in ("reference", "clean-room"):
        assert got[("batched_positions_vs_rows_error", impl)].actual <= 1e-14
    changes = seed5.figures[0]
    untied, alibi, shifted = (row[1:] for row in changes.rows)
    assert min(untied) > 0.1 and min(alibi) > 0.1  # each option changes the logits
    assert max(shifted) < 1e-12  # RoPE: the same tokens at shifted positions, the same output


def test_the_contracts_slopes_written_out_are_the_references():
    for H in (1, 2, 4, 6, 8, 12):
        np.testing.assert_allclose(lab.contract_slopes(H), reference_v2.alibi_slopes(H), rtol=1e-15)


class Faulty:
    def __init__(self, **replaced):
        self.replaced = replaced

    def __getattr__(self, fn):
        return self.replaced.get(fn) or getattr(reference_v2, fn)


def _run_faulty(**replaced):
    impls = {
        "reference": Implementation("reference", reference_v2),
        "clean-room": Implementation("clean-room", Faulty(**replaced)),
    }
    return run_lab(lab.LAB, 5, impls)


def _decoder(change):
    def decoder_forward(token_ids, params, n_heads, n_kv_heads=None, eps=1e-6,
                        positional="sinusoidal", rope_theta=10000.0, window=None):  # fmt: skip
        params, positional = change(dict(params), positional)
        return reference_v2.decoder_forward(
            token_ids, params, n_heads, n_kv_heads, eps, positional, rope_theta, window
        )

    return decoder_forward


def _keeps_tied(params, positional):
    params.pop("lm_head", None)
    return params, positional


def _alibi_forgotten(params, positional):
    return params, "none" if positional == "alibi" else positional


def _alibi_over_sinusoid(params, positional):
    return params, "sinusoidal" if positional == "alibi" else positional


def _rows_share_positions(x, *args, positions=None, **kwargs):
    args = list(args)
    if len(args) >= 10 and args[9] is not None and np.ndim(args[9]) == 2:
        args[9] = np.asarray(args[9])[0]  # row 0's positions for every row
    return reference_v2.multi_head_attention(x, *args, **kwargs)


def _decode_ignoring_positions(x_new, past_k, past_v, *args):
    return reference_v2.attention_decode(x_new, past_k, past_v, *args[:7])  # positions dropped


@pytest.mark.parametrize(
    ("replaced", "caught"),
    [
        ({"decoder_forward": _decoder(_keeps_tied)}, {"untied_head_vs_composed_error"}),
        ({"decoder_forward": _decoder(_alibi_forgotten)}, {"alibi_decoder_vs_written_error"}),
        ({"decoder_forward": _decoder(_alibi_over_sinusoid)}, {"alibi_decoder_vs_written_error"}),
        (
            {"multi_head_attention": _rows_share_positions},
            {"batched_positions_vs_rows_error", "batched_decode_vs_full_error"},
        ),
        ({"attention_decode": _decode_ignoring_positions}, {"batched_decode_vs_full_error"}),
    ],
)
def test_each_fault_fails_its_metrics_and_the_comparison_with_the_reference(replaced, caught):
    result = _run_faulty(**replaced)
    assert result.error is None
    assert failing(result) == {(name, "clean-room") for name in caught} | {
        ("decoder_options_reference_max_error", "both")
    }


def test_a_wrong_alibi_bias_cannot_hide_behind_a_decoder_that_uses_it():
    """The written-out decoder takes its bias from the contract's formula, not the room's
    alibi_bias: a room whose decoder and alibi_bias agree on the wrong slopes still fails."""

    def wrong_bias(n_heads, t_q, t_k=None):
        return 2 * reference_v2.alibi_bias(n_heads, t_q, t_k)

    def decoder_forward(token_ids, params, n_heads, n_kv_heads=None, eps=1e-6,
                        positional="sinusoidal", rope_theta=10000.0, window=None):  # fmt: skip
        if positional != "alibi":
            return reference_v2.decoder_forward(
                token_ids, params, n_heads, n_kv_heads, eps, positional, rope_theta, window
            )
        import labctl.reference.v2_block as block

        real = block.alibi_bias_t
        try:
            block.alibi_bias_t = lambda H, tq, tk: 2 * real(H, tq, tk)
            return reference_v2.decoder_forward(token_ids, params, n_heads, n_kv_heads, eps,
                                                "alibi")  # fmt: skip
        finally:
            block.alibi_bias_t = real

    result = _run_faulty(alibi_bias=wrong_bias, decoder_forward=decoder_forward)
    assert ("alibi_decoder_vs_written_error", "clean-room") in failing(result)


@pytest.mark.parametrize(
    ("setting", "message"),
    [({"C": 20, "H": 4}, "even head widths"), ({"H": 4, "Hkv": 3}, "Hkv to divide H"),
     ({"prefill": 8, "T": 8}, "below T"), ({"pad": 8, "T": 8}, "below T")],
)  # fmt: skip
def test_shapes_the_options_cannot_take_are_refused(setting, message):
    with pytest.raises(ValueError, match=message):
        lab.Params(**setting)
