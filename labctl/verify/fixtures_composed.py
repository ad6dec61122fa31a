"""The float64 fixtures of the composed functions: those built from others (`DEPENDS`).

Attention (whole and tiled), multi-head attention, decode with a cache, the
block and the decoder; `labctl.verify.fixtures` serves them. Each builder takes
the run's seed; values are drawn from it, sizes stay as published (each is a
structural promise: GQA's ratio, Tq < Tk, the position of a decode, D = 3).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from labctl.i18n import N_
from labctl.verify.builders import (
    Fixture,
    attention_weights,
    block_params,
    causal_formula,
    decoder_params,
    ints,
    normal,
    rng,
)


def _sdpa(seed: int) -> list[Fixture]:
    f = "scaled_dot_product_attention"
    r = rng(seed, f)
    blocked_rows = r.random((1, 2, 4, 5)) < 0.4
    blocked_rows[0, 1, 2, :] = True  # a fully blocked row: zero weights, zero output
    blocked_rows[0, 0, :, 0] = False
    big = 25.0
    return [
        Fixture(
            f,
            "gqa-tq<tk",
            (normal(r, 2, 4, 3, 4), normal(r, 2, 2, 7, 4), normal(r, 2, 2, 7, 5)),
            {"mask": causal_formula(3, 7)},
            N_("GQA (H=4, Hkv=2), Tq < Tk with a bottom-right causal mask, Dv != D"),
        ),
        Fixture(
            f,
            "plain",
            (normal(r, 2, 2, 5, 4), normal(r, 2, 2, 5, 4), normal(r, 2, 2, 5, 4)),
            {},
            N_("no mask"),
        ),
        Fixture(
            f,
            "causal",
            (normal(r, 2, 4, 6, 8), normal(r, 2, 4, 6, 8), normal(r, 2, 4, 6, 8)),
            {"mask": causal_formula(6, 6)},
        ),
        Fixture(
            f,
            "mqa-padding",
            (normal(r, 3, 4, 5, 6), normal(r, 3, 1, 5, 6), normal(r, 3, 1, 5, 6)),
            {"mask": (np.arange(5)[None, :] >= ints([5, 2, 0])[:, None])[:, None, None, :]},
            N_("MQA (Hkv=1), a (B, 1, 1, Tk) padding mask, one sequence fully blocked"),
        ),
        Fixture(
            f,
            "blocked-row",
            (normal(r, 1, 2, 4, 4), normal(r, 1, 2, 5, 4), normal(r, 1, 2, 5, 3)),
            {"mask": blocked_rows},
            N_("a full (B, H, Tq, Tk) mask with a fully blocked row"),
        ),
        Fixture(
            f,
            "large-logits",
            (big * normal(r, 1, 2, 6, 4), big * normal(r, 1, 2, 6, 4), normal(r, 1, 2, 6, 4)),
            {"mask": causal_formula(6, 6)},
            N_("scores of magnitude ~1e3"),
        ),
        Fixture(
            f,
            "explicit-scale",
            (normal(r, 1, 2, 3, 4), normal(r, 1, 2, 3, 4), normal(r, 1, 2, 3, 4)),
            {"scale": 0.3},
        ),
        Fixture(
            f,
            "tq>tk",
            (normal(r, 1, 2, 6, 4), normal(r, 1, 2, 4, 4), normal(r, 1, 2, 4, 3)),
            {"mask": causal_formula(6, 4)},
            N_("Tq > Tk under the causal mask: the first Tq - Tk queries see no key"),
        ),
        # Last, so the fixtures above keep their draws (fixtures v6).
        _scale_zero(f, r, mask=causal_formula(5, 5)),
    ]


def _scale_zero(f: str, r, *rest, **kwargs) -> Fixture:
    """scale=0.0 is a scale like any other (every visible key weighs the same), not None:
    `scale or 1 / sqrt(D)` replaces it with the default."""
    return Fixture(
        f,
        "scale-zero",
        (normal(r, 1, 2, 5, 4), normal(r, 1, 2, 5, 4), normal(r, 1, 2, 5, 3), *rest),
        {**kwargs, "scale": 0.0},
        N_("scale=0.0: uniform weights over the visible keys, not the default 1/sqrt(D)"),
    )


def _mha(seed: int) -> list[Fixture]:
    f = "multi_head_attention"
    r = rng(seed, f)
    return [
        Fixture(f, "causal", (normal(r, 2, 5, 8), *attention_weights(r, 8, 2, 2), 2)),
        Fixture(
            f,
            "gqa-rope",
            (normal(r, 2, 6, 16), *attention_weights(r, 16, 4, 2), 4),
            {"n_kv_heads": 2, "rope_theta": 10000.0},
        ),
        Fixture(
            f,
            "mqa-window",
            (normal(r, 1, 7, 12), *attention_weights(r, 12, 3, 1), 3),
            {"n_kv_heads": 1, "window": 3},
        ),
        Fixture(
            f,
            "odd-d-bidirectional",
            (normal(r, 2, 4, 12), *attention_weights(r, 12, 4, 4), 4),
            {"causal": False},
            N_("D = 3 without RoPE, no mask"),
        ),
        Fixture(f, "one-token", (normal(r, 1, 1, 8), *attention_weights(r, 8, 2, 2), 2)),
        Fixture(
            f,
            "rope",
            (normal(r, 2, 5, 8), *attention_weights(r, 8, 2, 2), 2),
            {"rope_theta": 10000.0},
            N_("RoPE without GQA (H = Hkv)"),
        ),
        # Last, so the fixtures above keep their draws. The window's mask holds the causal one
        # (sliding_window_mask: keys p - window + 1 .. p), so causal=False does not lift it.
        Fixture(
            f,
            "window-not-causal",
            (normal(r, 1, 6, 8), *attention_weights(r, 8, 2, 2), 2),
            {"causal": False, "window": 2},
            N_("a window with causal=False: the window still applies"),
        ),
    ]


def _decode(seed: int) -> list[Fixture]:
    f = "attention_decode"
    r = rng(seed, f)
    return [
        Fixture(
            f,
            "empty-cache",
            (normal(r, 2, 3, 8), None, None, *attention_weights(r, 8, 2, 2), 2),
        ),
        Fixture(
            f,
            "gqa-rope",
            (
                normal(r, 2, 1, 16),
                normal(r, 2, 2, 5, 4),
                normal(r, 2, 2, 5, 4),
                *attention_weights(r, 16, 4, 2),
                4,
            ),
            {"n_kv_heads": 2, "rope_theta": 10000.0},
            N_("one new token at position 5"),
        ),
        Fixture(
            f,
            "mqa-window-rope",
            (
                normal(r, 1, 2, 12),
                normal(r, 1, 1, 4, 4),
                normal(r, 1, 1, 4, 4),
                *attention_weights(r, 12, 3, 1),
                3,
            ),
            {"n_kv_heads": 1, "window": 3, "rope_theta": 10000.0},
        ),
        Fixture(
            f,
            "no-rope",
            (
                normal(r, 2, 2, 8),
                normal(r, 2, 2, 3, 4),
                normal(r, 2, 2, 3, 4),
                *attention_weights(r, 8, 2, 2),
                2,
            ),
        ),
        Fixture(
            f,
            "rope",
            (
                normal(r, 1, 2, 8),
                normal(r, 1, 2, 3, 4),
                normal(r, 1, 2, 3, 4),
                *attention_weights(r, 8, 2, 2),
                2,
            ),
            {"rope_theta": 10000.0},
            N_("RoPE without GQA (H = Hkv), two new tokens at positions 3 and 4"),
        ),
    ]


def _tiled(seed: int) -> list[Fixture]:
    f = "tiled_attention"
    r = rng(seed, f)
    big = 25.0
    return [
        Fixture(
            f,
            "causal-blocks",
            (normal(r, 2, 2, 7, 4), normal(r, 2, 2, 7, 4), normal(r, 2, 2, 7, 4), 3),
            {},
            N_("blocks of 3 over 7 keys"),
        ),
        Fixture(
            f,
            "gqa-tq<tk",
            (normal(r, 1, 4, 3, 4), normal(r, 1, 2, 8, 4), normal(r, 1, 2, 8, 5), 2),
            {},
            N_("GQA, Tq < Tk (bottom-right), Dv != D"),
        ),
        Fixture(
            f,
            "bidirectional-block-1",
            (normal(r, 1, 2, 5, 4), normal(r, 1, 2, 5, 4), normal(r, 1, 2, 5, 4), 1),
            {"causal": False},
        ),
        Fixture(
            f,
            "block>t",
            (normal(r, 1, 1, 4, 4), normal(r, 1, 1, 4, 4), normal(r, 1, 1, 4, 4), 10),
            {"scale": 0.5},
        ),
        Fixture(
            f,
            "large-logits",
            (
                big * normal(r, 1, 2, 6, 4),
                big * normal(r, 1, 2, 6, 4),
                normal(r, 1, 2, 6, 4),
                2,
            ),
            {"causal": False},
            N_("scores ~1e3: the running max rises from block to block"),
        ),
        Fixture(
            f,
            "bidirectional-ragged",
            (normal(r, 1, 2, 5, 4), normal(r, 1, 2, 7, 4), normal(r, 1, 2, 7, 3), 3),
            {"causal": False},
            N_("blocks of 3 over 5 queries and 7 keys: the last block is shorter"),
        ),
        Fixture(
            f,
            "bidirectional-block>t",
            (normal(r, 1, 2, 4, 4), normal(r, 1, 2, 6, 4), normal(r, 1, 2, 6, 4), 9),
            {"causal": False},
            N_("one block of 9, longer than the 6 keys"),
        ),
        Fixture(
            f,
            "causal-tq>tk",
            (normal(r, 1, 2, 5, 4), normal(r, 1, 2, 4, 4), normal(r, 1, 2, 4, 4), 3),
            {},
            N_("5 queries over 4 keys: the first query sees no key and gets zeros"),
        ),
        Fixture(
            f,
            "causal-even-blocks",
            (normal(r, 1, 2, 8, 4), normal(r, 1, 2, 8, 4), normal(r, 1, 2, 8, 4), 4),
            {},
            N_("blocks of 4 over 8 queries and keys: every block whole"),
        ),
        _scale_zero(f, r, 2),
    ]


def _block(seed: int) -> list[Fixture]:
    f = "transformer_block"
    r = rng(seed, f)
    return [
        Fixture(
            f, "default", (normal(r, 2, 5, 8), block_params(r, 8, 2, 2, 11), 2), {}, N_("odd F")
        ),
        Fixture(
            f,
            "gqa-rope",
            (normal(r, 1, 6, 16), block_params(r, 16, 4, 2, 24), 4),
            {"n_kv_heads": 2, "rope_theta": 10000.0},
        ),
        Fixture(
            f,
            "mqa-window-eps",
            (normal(r, 2, 6, 12), block_params(r, 12, 3, 1, 16), 3),
            {"n_kv_heads": 1, "window": 2, "eps": 1e-5},
        ),
        Fixture(
            f, "odd-d", (normal(r, 1, 4, 12), block_params(r, 12, 4, 4, 8), 4), {}, N_("D = 3")
        ),
        Fixture(
            f,
            "rope",
            (normal(r, 1, 5, 8), block_params(r, 8, 2, 2, 12), 2),
            {"rope_theta": 10000.0},
            N_("RoPE without GQA (H = Hkv)"),
        ),
    ]


def _decoder(seed: int) -> list[Fixture]:
    f = "decoder_forward"
    r = rng(seed, f)
    return [
        Fixture(
            f,
            "sinusoidal",
            (r.integers(0, 13, (2, 5)), decoder_params(r, 13, 8, 2, 2, 12, 2), 2),
            {},
            N_("two blocks, default positional encoding"),
        ),
        Fixture(
            f,
            "rope-gqa",
            (r.integers(0, 11, (1, 6)), decoder_params(r, 11, 16, 4, 2, 20, 1), 4),
            {"n_kv_heads": 2, "positional": "rope", "rope_theta": 500.0},
        ),
        Fixture(
            f,
            "none-window",
            (r.integers(0, 9, (2, 6)), decoder_params(r, 9, 12, 3, 3, 10, 1), 3),
            {"positional": "none", "window": 3},
        ),
    ]


COMPOSED: dict[str, Callable[[int], list[Fixture]]] = {
    "scaled_dot_product_attention": _sdpa,
    "multi_head_attention": _mha,
    "attention_decode": _decode,
    "tiled_attention": _tiled,
    "transformer_block": _block,
    "decoder_forward": _decoder,
}
