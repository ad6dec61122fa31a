"""The float64 fixtures of the contract's primitives: the functions built on no other one.

Softmax, the masks, the head reshapes, repeat_kv, RoPE, the sinusoidal table,
the norms and the feed-forwards; `labctl.verify.fixtures` serves them.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from labctl.i18n import N_
from labctl.verify.builders import Fixture, ints, normal, rng, weight


def _softmax() -> list[Fixture]:
    f = "softmax"
    r = rng(f)
    blocked = normal(r, 3, 6)
    blocked[1, :] = -np.inf  # a fully blocked slice: zeros, never NaN
    blocked[2, [0, 3, 4]] = -np.inf
    return [
        Fixture(f, "rows", (normal(r, 3, 7),)),
        Fixture(f, "axis-0", (normal(r, 4, 3, 5),), {"axis": 0}, N_("softmax over the first axis")),
        Fixture(f, "axis-1-odd", (normal(r, 2, 5, 3),), {"axis": 1}, N_("odd sizes, middle axis")),
        Fixture(
            f,
            "large-logits",
            (1e3 * normal(r, 2, 4, 9),),
            {},
            N_("|x| ~ 1e3: exp overflows unless the max is subtracted first"),
        ),
        Fixture(f, "blocked-slices", (blocked,), {}, N_("an all -inf row and partly -inf rows")),
        Fixture(f, "1-d", (normal(r, 5),)),
    ]


def _causal_mask() -> list[Fixture]:
    f = "causal_mask"
    return [
        Fixture(f, "square-default", (5,), {}, N_("t_k defaults to t_q")),
        Fixture(f, "tq<tk", (3, 7), {}, N_("bottom-right alignment for a cache")),
        Fixture(f, "decode-one", (1, 6), {}, N_("one new token sees every key")),
        Fixture(f, "square-explicit", (4, 4)),
    ]


def _sliding_window_mask() -> list[Fixture]:
    f = "sliding_window_mask"
    return [
        Fixture(f, "square", (6, 3)),
        Fixture(f, "window-1", (5, 1), {}, N_("each query sees itself only")),
        Fixture(f, "tq<tk", (3, 2, 8), {}, N_("bottom-right alignment for a cache")),
        Fixture(f, "window>t", (4, 10), {}, N_("the window is wider than the sequence")),
        Fixture(f, "decode-one", (1, 2), {"t_k": 5}),
    ]


def _padding_mask() -> list[Fixture]:
    f = "padding_mask"
    return [
        Fixture(f, "with-empty", (ints([3, 0, 5]), 5), {}, N_("a length 0 and a full length")),
        Fixture(f, "short", (ints([1, 2]), 4)),
    ]


def _split_heads() -> list[Fixture]:
    f = "split_heads"
    r = rng(f)
    return [
        Fixture(f, "odd-d", (normal(r, 2, 5, 12), 4), {}, N_("D = 3")),
        Fixture(f, "one-head", (normal(r, 1, 3, 8), 1)),
        Fixture(f, "d-1", (normal(r, 2, 4, 6), 6), {}, N_("D = 1")),
    ]


def _merge_heads() -> list[Fixture]:
    f = "merge_heads"
    r = rng(f)
    return [
        Fixture(f, "odd-d", (normal(r, 2, 4, 5, 3),)),
        Fixture(f, "one-head", (normal(r, 1, 1, 3, 8),)),
    ]


def _repeat_kv() -> list[Fixture]:
    f = "repeat_kv"
    r = rng(f)
    return [
        Fixture(f, "gqa", (normal(r, 2, 2, 5, 3), 3), {}, N_("interleaved: head h from h // 3")),
        Fixture(f, "mqa", (normal(r, 1, 1, 4, 2), 4)),
        Fixture(f, "n_rep-1", (normal(r, 2, 3, 2, 4), 1)),
    ]


def _rope() -> list[Fixture]:
    f = "rope"
    r = rng(f)
    return [
        Fixture(
            f,
            "non-consecutive",
            (normal(r, 2, 3, 6, 8), ints([3, 0, 17, 5, 5, 100])),
            {},
            N_("positions out of order, repeated, with gaps"),
        ),
        Fixture(
            f,
            "2-d-theta",
            (normal(r, 5, 4), ints([999, 1, 2, 50, 7])),
            {"theta": 500.0},
            N_("x (T, D), a large position, theta != 10000"),
        ),
        Fixture(f, "consecutive", (normal(r, 2, 4, 6), ints([0, 1, 2, 3]))),
    ]


def _sinusoidal() -> list[Fixture]:
    f = "sinusoidal_positions"
    return [
        Fixture(f, "even", (7, 8)),
        Fixture(f, "odd-width", (5, 7), {}, N_("an odd d_model: the last column is a sine")),
    ]


def _rms_norm() -> list[Fixture]:
    f = "rms_norm"
    r = rng(f)
    return [
        Fixture(f, "default-eps", (normal(r, 2, 3, 7), 1.0 + 0.1 * normal(r, 7)), {}, N_("odd C")),
        Fixture(f, "eps", (normal(r, 4, 5), normal(r, 5)), {"eps": 1e-3}),
        Fixture(
            f,
            "small",
            (1e-4 * normal(r, 2, 6), np.ones(6)),
            {},
            N_("|x| ~ 1e-4, where eps matters"),
        ),
        Fixture(f, "large", (1e3 * normal(r, 3, 8), normal(r, 8))),
    ]


def _layer_norm() -> list[Fixture]:
    f = "layer_norm"
    r = rng(f)
    return [
        Fixture(
            f,
            "default-eps",
            (normal(r, 2, 3, 7), 1.0 + 0.1 * normal(r, 7), normal(r, 7)),
            {},
            N_("odd C"),
        ),
        Fixture(f, "eps", (normal(r, 4, 5), normal(r, 5), normal(r, 5)), {"eps": 1e-2}),
        Fixture(
            f,
            "offset",
            (500.0 + 10.0 * normal(r, 2, 6), np.ones(6), np.zeros(6)),
            {},
            N_("a large mean"),
        ),
    ]


def _relu_ffn() -> list[Fixture]:
    f = "relu_ffn"
    r = rng(f)
    return [
        Fixture(
            f,
            "3-d",
            (
                normal(r, 2, 3, 6),
                weight(r, 6, 11),
                normal(r, 11),
                weight(r, 11, 6),
                normal(r, 6),
            ),
            {},
            N_("odd F"),
        ),
        Fixture(
            f,
            "2-d-odd",
            (normal(r, 4, 5), weight(r, 5, 7), normal(r, 7), weight(r, 7, 5), normal(r, 5)),
        ),
    ]


def _swiglu_ffn() -> list[Fixture]:
    f = "swiglu_ffn"
    r = rng(f)
    return [
        Fixture(f, "3-d", (normal(r, 2, 3, 6), weight(r, 6, 9), weight(r, 6, 9), weight(r, 9, 6))),
        Fixture(f, "2-d-odd", (normal(r, 4, 5), weight(r, 5, 3), weight(r, 5, 3), weight(r, 3, 5))),
    ]


PRIMITIVES: dict[str, Callable[[], list[Fixture]]] = {
    "softmax": _softmax,
    "causal_mask": _causal_mask,
    "sliding_window_mask": _sliding_window_mask,
    "padding_mask": _padding_mask,
    "split_heads": _split_heads,
    "merge_heads": _merge_heads,
    "repeat_kv": _repeat_kv,
    "rope": _rope,
    "sinusoidal_positions": _sinusoidal,
    "rms_norm": _rms_norm,
    "layer_norm": _layer_norm,
    "relu_ffn": _relu_ffn,
    "swiglu_ffn": _swiglu_ffn,
}
