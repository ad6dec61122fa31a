"""The float64 fixtures of the contract's primitives: the functions built on no other one.

Softmax, the masks, the head reshapes, repeat_kv, RoPE, the sinusoidal table,
the norms and the feed-forwards; `labctl.verify.fixtures` serves them. Each
builder takes the run's seed. Values are drawn from it everywhere; the sizes
of the int-only functions (the masks, the sinusoidal table: their sizes are
their whole input) and RoPE's positions are drawn too, within what each
fixture's name and note promise (`Sizes`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from labctl.i18n import N_
from labctl.verify.builders import Fixture, Sizes, ints, normal, rng, weight


def _softmax(seed: int) -> list[Fixture]:
    f = "softmax"
    r = rng(seed, f)
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


def _causal_mask(seed: int) -> list[Fixture]:
    f = "causal_mask"
    size = Sizes(seed, f)
    t_q = size(3, 2, 5)
    n = size(4, 2, 8)
    return [
        Fixture(f, "square-default", (size(5, 2, 9),), {}, N_("t_k defaults to t_q")),
        Fixture(
            f, "tq<tk", (t_q, t_q + size(4, 1, 6)), {}, N_("bottom-right alignment for a cache")
        ),
        Fixture(f, "decode-one", (1, size(6, 2, 9)), {}, N_("one new token sees every key")),
        Fixture(f, "square-explicit", (n, n)),
        _more_queries_than_keys(f, size),
    ]


def _more_queries_than_keys(f: str, size: Sizes, *rest: int) -> Fixture:
    """t_q > t_k: valid (labctl.verify.rules.EDGES); the first t_q - t_k rows see no key."""
    t_k = size(3, 1, 5)
    return Fixture(
        f,
        "tq>tk",
        (t_k + size(2, 1, 4), *rest, t_k),
        {},
        N_("t_q > t_k: the first t_q - t_k rows see no key and are True everywhere"),
    )


def _sliding_window_mask(seed: int) -> list[Fixture]:
    f = "sliding_window_mask"
    size = Sizes(seed, f)
    t = size(6, 4, 9)
    t_q, w_q = size(3, 2, 4), size(2, 2, 3)
    t_wide = size(4, 2, 6)
    w_one = size(2, 2, 3)
    return [
        Fixture(f, "square", (t, size(3, 2, t - 1))),
        Fixture(f, "window-1", (size(5, 2, 8), 1), {}, N_("each query sees itself only")),
        Fixture(
            f,
            "tq<tk",
            (t_q, w_q, t_q + w_q + size(3, 1, 5)),
            {},
            N_("bottom-right alignment for a cache"),
        ),
        Fixture(
            f,
            "window>t",
            (t_wide, t_wide + size(6, 1, 6)),
            {},
            N_("the window is wider than the sequence"),
        ),
        Fixture(f, "decode-one", (1, w_one), {"t_k": w_one + size(3, 1, 5)}),
        _more_queries_than_keys(f, size, size(2, 1, 3)),
    ]


def _padding_mask(seed: int) -> list[Fixture]:
    f = "padding_mask"
    size = Sizes(seed, f)
    t = size(5, 3, 9)
    t_short = size(4, 3, 8)
    return [
        Fixture(
            f,
            "with-empty",
            (ints([size(3, 1, t - 1), 0, t]), t),
            {},
            N_("a length 0 and a full length"),
        ),
        Fixture(f, "short", (ints([size(1, 1, t_short - 1), size(2, 1, t_short - 1)]), t_short)),
    ]


def _split_heads(seed: int) -> list[Fixture]:
    f = "split_heads"
    r = rng(seed, f)
    return [
        Fixture(f, "odd-d", (normal(r, 2, 5, 12), 4), {}, N_("D = 3")),
        Fixture(f, "one-head", (normal(r, 1, 3, 8), 1)),
        Fixture(f, "d-1", (normal(r, 2, 4, 6), 6), {}, N_("D = 1")),
    ]


def _merge_heads(seed: int) -> list[Fixture]:
    f = "merge_heads"
    r = rng(seed, f)
    return [
        Fixture(f, "odd-d", (normal(r, 2, 4, 5, 3),)),
        Fixture(f, "one-head", (normal(r, 1, 1, 3, 8),)),
    ]


def _repeat_kv(seed: int) -> list[Fixture]:
    f = "repeat_kv"
    r = rng(seed, f)
    return [
        Fixture(f, "gqa", (normal(r, 2, 2, 5, 3), 3), {}, N_("interleaved: head h from h // 3")),
        Fixture(f, "mqa", (normal(r, 1, 1, 4, 2), 4)),
        Fixture(f, "n_rep-1", (normal(r, 2, 3, 2, 4), 1)),
    ]


def _positions(size: Sizes, published: list[int], low: int, high: int) -> np.ndarray:
    """`published`, or as many positions from low..high: out of order, one repeated, a gap."""
    if size.published:
        return ints(published)
    n = len(published)
    drawn = sorted(size.distinct(n - 1, low, high), reverse=True)
    if drawn[0] - drawn[-1] == n - 2:  # consecutive after all: open a gap
        drawn[0] += 2
    return ints([*drawn[: n // 2], drawn[0], *drawn[n // 2 :]])


def _rope(seed: int) -> list[Fixture]:
    f = "rope"
    r = rng(seed, f)
    size = Sizes(seed, f)
    return [
        Fixture(
            f,
            "non-consecutive",
            (normal(r, 2, 3, 6, 8), _positions(size, [3, 0, 17, 5, 5, 100], 0, 200)),
            {},
            N_("positions out of order, repeated, with gaps"),
        ),
        Fixture(
            f,
            "2-d-theta",
            (normal(r, 5, 4), ints([size(999, 500, 4000), 1, 2, 50, 7])),
            {"theta": size.pick(500.0, [100.0, 500.0, 1000.0, 50000.0])},
            N_("x (T, D), a large position, theta != 10000"),
        ),
        Fixture(f, "consecutive", (normal(r, 2, 4, 6), ints([0, 1, 2, 3]))),
    ]


def _sinusoidal(seed: int) -> list[Fixture]:
    f = "sinusoidal_positions"
    size = Sizes(seed, f)
    return [
        Fixture(f, "even", (size(7, 2, 12), 2 * size(4, 2, 8))),
        Fixture(
            f,
            "odd-width",
            (size(5, 2, 12), 2 * size(3, 1, 6) + 1),
            {},
            N_("an odd d_model: the last column is a sine"),
        ),
    ]


def _rms_norm(seed: int) -> list[Fixture]:
    f = "rms_norm"
    r = rng(seed, f)
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


def _layer_norm(seed: int) -> list[Fixture]:
    f = "layer_norm"
    r = rng(seed, f)
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


def _relu_ffn(seed: int) -> list[Fixture]:
    f = "relu_ffn"
    r = rng(seed, f)
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


def _swiglu_ffn(seed: int) -> list[Fixture]:
    f = "swiglu_ffn"
    r = rng(seed, f)
    return [
        Fixture(f, "3-d", (normal(r, 2, 3, 6), weight(r, 6, 9), weight(r, 6, 9), weight(r, 9, 6))),
        Fixture(f, "2-d-odd", (normal(r, 4, 5), weight(r, 5, 3), weight(r, 5, 3), weight(r, 3, 5))),
    ]


PRIMITIVES: dict[str, Callable[[int], list[Fixture]]] = {
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
