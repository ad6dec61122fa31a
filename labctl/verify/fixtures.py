"""Seeded fixtures for `labctl verify clean-room`, written from contract v1 alone.

Every input here follows `shared/contract-v1.md`, not the quirks of any one
implementation, so a clean room written by someone else from the contract
passes when it is correct: weights `(in, out)` scaled by 1/sqrt(in), positions
int64, masks boolean with True = blocked broadcasting to `(B, H, Tq, Tk)`,
`decoder_forward` params as `embed (V, C)`, `blocks` (dicts of the nine block
keys) and `final_norm (C,)`. Odd widths appear only where the contract makes
them legal (an odd head width without RoPE, an odd `d_model` for the
sinusoidal table, odd C and F in the norms and feed-forwards).

The adversarial cases the course and the contract call out are here on
purpose: non-consecutive and repeated RoPE positions, Tq < Tk (decode with a
cache, bottom-right alignment), GQA and MQA, fully blocked rows, logits of
magnitude ~1e3 (where a softmax without the max subtracted overflows), and a
tiled attention whose running max rises in a later block.

Kinds of input:

- `FIXTURES[f]`: float64 calls compared with the reference (parity) and
  checked for shape, dtype, NaN and purity.
- `PROBES[f]`: the first fixture again in float32, for the dtype check: an
  output keeps its input's floating dtype.
- `causal_variants(f)`: the first fixture of `multi_head_attention`,
  `transformer_block` and `decoder_forward` with every input after position
  t replaced, for the future-token invariance check.
- `BAD_CASES[f]`: exactly the cases of the contract's "Bad input" section;
  each must raise ValueError or TypeError.
"""

from __future__ import annotations

import copy
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

SEED = 5
FIXTURES_VERSION = "v1"

# What each function returns, as the contract's table writes it: one entry per
# returned array (a tuple when there are several). Used to name a wrong shape.
RETURNS: dict[str, tuple[str, ...]] = {
    "softmax": ("same shape as x",),
    "causal_mask": ("bool (t_q, t_k)",),
    "sliding_window_mask": ("bool (t_q, t_k)",),
    "padding_mask": ("bool (B, 1, 1, t)",),
    "scaled_dot_product_attention": ("out (B, H, Tq, Dv)", "weights (B, H, Tq, Tk)"),
    "split_heads": ("(B, H, T, C // H)",),
    "merge_heads": ("(B, T, H * D)",),
    "repeat_kv": ("(B, Hkv * n_rep, T, D)",),
    "rope": ("same shape as x",),
    "sinusoidal_positions": ("(seq_len, d_model)",),
    "rms_norm": ("same shape as x",),
    "layer_norm": ("same shape as x",),
    "relu_ffn": ("same shape as x",),
    "swiglu_ffn": ("same shape as x",),
    "multi_head_attention": ("(B, T, C)",),
    "attention_decode": ("out (B, Tn, C)", "k_all (B, Hkv, Tp+Tn, D)", "v_all (B, Hkv, Tp+Tn, D)"),
    "tiled_attention": ("out (B, H, Tq, Dv)",),
    "transformer_block": ("(B, T, C)",),
    "decoder_forward": ("logits (B, T, V)",),
}

# Which contract functions each one is built from, by the contract's own words
# (sdpa: "after masking and softmax", GQA by repeat_kv; mha: "by projection and
# split_heads; RoPE ...; mask ...; then merge_heads"; the block and the model
# as the table writes them). Used to localise a failing composition.
DEPENDS: dict[str, tuple[str, ...]] = {
    "scaled_dot_product_attention": ("softmax", "repeat_kv"),
    "tiled_attention": ("repeat_kv",),
    "multi_head_attention": (
        "causal_mask",
        "sliding_window_mask",
        "split_heads",
        "merge_heads",
        "rope",
        "scaled_dot_product_attention",
    ),
    "attention_decode": (
        "causal_mask",
        "sliding_window_mask",
        "split_heads",
        "merge_heads",
        "rope",
        "scaled_dot_product_attention",
    ),
    "transformer_block": ("rms_norm", "multi_head_attention", "swiglu_ffn"),
    "decoder_forward": ("sinusoidal_positions", "rms_norm", "transformer_block"),
}

# The functions whose future-token invariance is checked, with the argument
# that carries the sequence.
CAUSAL_FUNCTIONS = ("multi_head_attention", "transformer_block", "decoder_forward")


@dataclass(eq=False)
class Fixture:
    """One call of one contract function: positional args and keyword args."""

    function: str
    name: str
    args: tuple
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""

    def call(self) -> tuple[tuple, dict]:
        """Fresh copies of the arguments, so no caller ever shares an array with another."""
        return copy.deepcopy(self.args), copy.deepcopy(dict(self.kwargs))


@dataclass(eq=False)
class BadCase:
    """A call the contract's Bad input section says must raise ValueError or TypeError."""

    function: str
    name: str
    args: tuple
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def call(self) -> tuple[tuple, dict]:
        return copy.deepcopy(self.args), copy.deepcopy(dict(self.kwargs))


def _rng(tag: str) -> np.random.Generator:
    return np.random.default_rng([SEED, zlib.crc32(tag.encode("utf-8"))])


def _normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape)


def _weight(rng: np.random.Generator, fan_in: int, fan_out: int) -> np.ndarray:
    """(in, out), scaled by 1/sqrt(in) so activations stay O(1)."""
    return rng.standard_normal((fan_in, fan_out)) / math.sqrt(fan_in)


def _attention_weights(rng, C: int, H: int, Hkv: int) -> tuple[np.ndarray, ...]:
    D = C // H
    return (
        _weight(rng, C, H * D),
        _weight(rng, C, Hkv * D),
        _weight(rng, C, Hkv * D),
        _weight(rng, H * D, C),
    )


def _block_params(rng, C: int, H: int, Hkv: int, F: int) -> dict[str, np.ndarray]:
    wq, wk, wv, wo = _attention_weights(rng, C, H, Hkv)
    return {
        "norm1": 1.0 + 0.1 * _normal(rng, C),
        "wq": wq,
        "wk": wk,
        "wv": wv,
        "wo": wo,
        "norm2": 1.0 + 0.1 * _normal(rng, C),
        "w_gate": _weight(rng, C, F),
        "w_up": _weight(rng, C, F),
        "w_down": _weight(rng, F, C),
    }


def _decoder_params(rng, V: int, C: int, H: int, Hkv: int, F: int, n_blocks: int) -> dict:
    return {
        "embed": _normal(rng, V, C),
        "blocks": [_block_params(rng, C, H, Hkv, F) for _ in range(n_blocks)],
        "final_norm": 1.0 + 0.1 * _normal(rng, C),
    }


def causal_formula(t_q: int, t_k: int) -> np.ndarray:
    """The contract's causal mask, written here from its formula: True where j > t_k - t_q + i."""
    return np.arange(t_k)[None, :] > (t_k - t_q) + np.arange(t_q)[:, None]


def _ints(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


# --------------------------------------------------------------------------
# The fixtures, per function
# --------------------------------------------------------------------------


def _softmax() -> list[Fixture]:
    f = "softmax"
    r = _rng(f)
    blocked = _normal(r, 3, 6)
    blocked[1, :] = -np.inf  # a fully blocked slice: zeros, never NaN
    blocked[2, [0, 3, 4]] = -np.inf
    return [
        Fixture(f, "rows", (_normal(r, 3, 7),)),
        Fixture(f, "axis-0", (_normal(r, 4, 3, 5),), {"axis": 0}, "softmax over the first axis"),
        Fixture(f, "axis-1-odd", (_normal(r, 2, 5, 3),), {"axis": 1}, "odd sizes, middle axis"),
        Fixture(
            f,
            "large-logits",
            (1e3 * _normal(r, 2, 4, 9),),
            {},
            "|x| ~ 1e3: exp overflows unless the max is subtracted first",
        ),
        Fixture(f, "blocked-slices", (blocked,), {}, "an all -inf row and partly -inf rows"),
        Fixture(f, "1-d", (_normal(r, 5),)),
    ]


def _causal_mask() -> list[Fixture]:
    f = "causal_mask"
    return [
        Fixture(f, "square-default", (5,), {}, "t_k defaults to t_q"),
        Fixture(f, "tq<tk", (3, 7), {}, "bottom-right alignment for a cache"),
        Fixture(f, "decode-one", (1, 6), {}, "one new token sees every key"),
        Fixture(f, "square-explicit", (4, 4)),
    ]


def _sliding_window_mask() -> list[Fixture]:
    f = "sliding_window_mask"
    return [
        Fixture(f, "square", (6, 3)),
        Fixture(f, "window-1", (5, 1), {}, "each query sees itself only"),
        Fixture(f, "tq<tk", (3, 2, 8), {}, "bottom-right alignment for a cache"),
        Fixture(f, "window>t", (4, 10), {}, "the window is wider than the sequence"),
        Fixture(f, "decode-one", (1, 2), {"t_k": 5}),
    ]


def _padding_mask() -> list[Fixture]:
    f = "padding_mask"
    return [
        Fixture(f, "with-empty", (_ints([3, 0, 5]), 5), {}, "a length 0 and a full length"),
        Fixture(f, "short", (_ints([1, 2]), 4)),
    ]


def _sdpa() -> list[Fixture]:
    f = "scaled_dot_product_attention"
    r = _rng(f)
    blocked_rows = r.random((1, 2, 4, 5)) < 0.4
    blocked_rows[0, 1, 2, :] = True  # a fully blocked row: zero weights, zero output
    blocked_rows[0, 0, :, 0] = False
    big = 25.0
    return [
        Fixture(
            f,
            "gqa-tq<tk",
            (_normal(r, 2, 4, 3, 4), _normal(r, 2, 2, 7, 4), _normal(r, 2, 2, 7, 5)),
            {"mask": causal_formula(3, 7)},
            "GQA (H=4, Hkv=2), Tq < Tk with a bottom-right causal mask, Dv != D",
        ),
        Fixture(
            f,
            "plain",
            (_normal(r, 2, 2, 5, 4), _normal(r, 2, 2, 5, 4), _normal(r, 2, 2, 5, 4)),
            {},
            "no mask",
        ),
        Fixture(
            f,
            "causal",
            (_normal(r, 2, 4, 6, 8), _normal(r, 2, 4, 6, 8), _normal(r, 2, 4, 6, 8)),
            {"mask": causal_formula(6, 6)},
        ),
        Fixture(
            f,
            "mqa-padding",
            (_normal(r, 3, 4, 5, 6), _normal(r, 3, 1, 5, 6), _normal(r, 3, 1, 5, 6)),
            {"mask": (np.arange(5)[None, :] >= _ints([5, 2, 0])[:, None])[:, None, None, :]},
            "MQA (Hkv=1), a (B, 1, 1, Tk) padding mask, one sequence fully blocked",
        ),
        Fixture(
            f,
            "blocked-row",
            (_normal(r, 1, 2, 4, 4), _normal(r, 1, 2, 5, 4), _normal(r, 1, 2, 5, 3)),
            {"mask": blocked_rows},
            "a full (B, H, Tq, Tk) mask with a fully blocked row",
        ),
        Fixture(
            f,
            "large-logits",
            (big * _normal(r, 1, 2, 6, 4), big * _normal(r, 1, 2, 6, 4), _normal(r, 1, 2, 6, 4)),
            {"mask": causal_formula(6, 6)},
            "scores of magnitude ~1e3",
        ),
        Fixture(
            f,
            "explicit-scale",
            (_normal(r, 1, 2, 3, 4), _normal(r, 1, 2, 3, 4), _normal(r, 1, 2, 3, 4)),
            {"scale": 0.3},
        ),
    ]


def _split_heads() -> list[Fixture]:
    f = "split_heads"
    r = _rng(f)
    return [
        Fixture(f, "odd-d", (_normal(r, 2, 5, 12), 4), {}, "D = 3"),
        Fixture(f, "one-head", (_normal(r, 1, 3, 8), 1)),
        Fixture(f, "d-1", (_normal(r, 2, 4, 6), 6), {}, "D = 1"),
    ]


def _merge_heads() -> list[Fixture]:
    f = "merge_heads"
    r = _rng(f)
    return [
        Fixture(f, "odd-d", (_normal(r, 2, 4, 5, 3),)),
        Fixture(f, "one-head", (_normal(r, 1, 1, 3, 8),)),
    ]


def _repeat_kv() -> list[Fixture]:
    f = "repeat_kv"
    r = _rng(f)
    return [
        Fixture(f, "gqa", (_normal(r, 2, 2, 5, 3), 3), {}, "interleaved: head h from h // 3"),
        Fixture(f, "mqa", (_normal(r, 1, 1, 4, 2), 4)),
        Fixture(f, "n_rep-1", (_normal(r, 2, 3, 2, 4), 1)),
    ]


def _rope() -> list[Fixture]:
    f = "rope"
    r = _rng(f)
    return [
        Fixture(
            f,
            "non-consecutive",
            (_normal(r, 2, 3, 6, 8), _ints([3, 0, 17, 5, 5, 100])),
            {},
            "positions out of order, repeated, with gaps",
        ),
        Fixture(
            f,
            "2-d-theta",
            (_normal(r, 5, 4), _ints([999, 1, 2, 50, 7])),
            {"theta": 500.0},
            "x (T, D), a large position, theta != 10000",
        ),
        Fixture(f, "consecutive", (_normal(r, 2, 4, 6), _ints([0, 1, 2, 3]))),
    ]


def _sinusoidal() -> list[Fixture]:
    f = "sinusoidal_positions"
    return [
        Fixture(f, "even", (7, 8)),
        Fixture(f, "odd-width", (5, 7), {}, "an odd d_model: the last column is a sine"),
    ]


def _rms_norm() -> list[Fixture]:
    f = "rms_norm"
    r = _rng(f)
    return [
        Fixture(f, "default-eps", (_normal(r, 2, 3, 7), 1.0 + 0.1 * _normal(r, 7)), {}, "odd C"),
        Fixture(f, "eps", (_normal(r, 4, 5), _normal(r, 5)), {"eps": 1e-3}),
        Fixture(
            f,
            "small",
            (1e-4 * _normal(r, 2, 6), np.ones(6)),
            {},
            "|x| ~ 1e-4, where eps matters",
        ),
        Fixture(f, "large", (1e3 * _normal(r, 3, 8), _normal(r, 8))),
    ]


def _layer_norm() -> list[Fixture]:
    f = "layer_norm"
    r = _rng(f)
    return [
        Fixture(
            f,
            "default-eps",
            (_normal(r, 2, 3, 7), 1.0 + 0.1 * _normal(r, 7), _normal(r, 7)),
            {},
            "odd C",
        ),
        Fixture(f, "eps", (_normal(r, 4, 5), _normal(r, 5), _normal(r, 5)), {"eps": 1e-2}),
        Fixture(
            f,
            "offset",
            (500.0 + 10.0 * _normal(r, 2, 6), np.ones(6), np.zeros(6)),
            {},
            "a large mean",
        ),
    ]


def _relu_ffn() -> list[Fixture]:
    f = "relu_ffn"
    r = _rng(f)
    return [
        Fixture(
            f,
            "3-d",
            (
                _normal(r, 2, 3, 6),
                _weight(r, 6, 11),
                _normal(r, 11),
                _weight(r, 11, 6),
                _normal(r, 6),
            ),
            {},
            "odd F",
        ),
        Fixture(
            f,
            "2-d-odd",
            (_normal(r, 4, 5), _weight(r, 5, 7), _normal(r, 7), _weight(r, 7, 5), _normal(r, 5)),
        ),
    ]


def _swiglu_ffn() -> list[Fixture]:
    f = "swiglu_ffn"
    r = _rng(f)
    return [
        Fixture(
            f, "3-d", (_normal(r, 2, 3, 6), _weight(r, 6, 9), _weight(r, 6, 9), _weight(r, 9, 6))
        ),
        Fixture(
            f, "2-d-odd", (_normal(r, 4, 5), _weight(r, 5, 3), _weight(r, 5, 3), _weight(r, 3, 5))
        ),
    ]


def _mha() -> list[Fixture]:
    f = "multi_head_attention"
    r = _rng(f)
    return [
        Fixture(f, "causal", (_normal(r, 2, 5, 8), *_attention_weights(r, 8, 2, 2), 2)),
        Fixture(
            f,
            "gqa-rope",
            (_normal(r, 2, 6, 16), *_attention_weights(r, 16, 4, 2), 4),
            {"n_kv_heads": 2, "rope_theta": 10000.0},
        ),
        Fixture(
            f,
            "mqa-window",
            (_normal(r, 1, 7, 12), *_attention_weights(r, 12, 3, 1), 3),
            {"n_kv_heads": 1, "window": 3},
        ),
        Fixture(
            f,
            "odd-d-bidirectional",
            (_normal(r, 2, 4, 12), *_attention_weights(r, 12, 4, 4), 4),
            {"causal": False},
            "D = 3 without RoPE, no mask",
        ),
        Fixture(f, "one-token", (_normal(r, 1, 1, 8), *_attention_weights(r, 8, 2, 2), 2)),
    ]


def _decode() -> list[Fixture]:
    f = "attention_decode"
    r = _rng(f)
    return [
        Fixture(
            f,
            "empty-cache",
            (_normal(r, 2, 3, 8), None, None, *_attention_weights(r, 8, 2, 2), 2),
        ),
        Fixture(
            f,
            "gqa-rope",
            (
                _normal(r, 2, 1, 16),
                _normal(r, 2, 2, 5, 4),
                _normal(r, 2, 2, 5, 4),
                *_attention_weights(r, 16, 4, 2),
                4,
            ),
            {"n_kv_heads": 2, "rope_theta": 10000.0},
            "one new token at position 5",
        ),
        Fixture(
            f,
            "mqa-window-rope",
            (
                _normal(r, 1, 2, 12),
                _normal(r, 1, 1, 4, 4),
                _normal(r, 1, 1, 4, 4),
                *_attention_weights(r, 12, 3, 1),
                3,
            ),
            {"n_kv_heads": 1, "window": 3, "rope_theta": 10000.0},
        ),
        Fixture(
            f,
            "no-rope",
            (
                _normal(r, 2, 2, 8),
                _normal(r, 2, 2, 3, 4),
                _normal(r, 2, 2, 3, 4),
                *_attention_weights(r, 8, 2, 2),
                2,
            ),
        ),
    ]


def _tiled() -> list[Fixture]:
    f = "tiled_attention"
    r = _rng(f)
    big = 25.0
    return [
        Fixture(
            f,
            "causal-blocks",
            (_normal(r, 2, 2, 7, 4), _normal(r, 2, 2, 7, 4), _normal(r, 2, 2, 7, 4), 3),
            {},
            "blocks of 3 over 7 keys",
        ),
        Fixture(
            f,
            "gqa-tq<tk",
            (_normal(r, 1, 4, 3, 4), _normal(r, 1, 2, 8, 4), _normal(r, 1, 2, 8, 5), 2),
            {},
            "GQA, Tq < Tk (bottom-right), Dv != D",
        ),
        Fixture(
            f,
            "bidirectional-block-1",
            (_normal(r, 1, 2, 5, 4), _normal(r, 1, 2, 5, 4), _normal(r, 1, 2, 5, 4), 1),
            {"causal": False},
        ),
        Fixture(
            f,
            "block>t",
            (_normal(r, 1, 1, 4, 4), _normal(r, 1, 1, 4, 4), _normal(r, 1, 1, 4, 4), 10),
            {"scale": 0.5},
        ),
        Fixture(
            f,
            "large-logits",
            (
                big * _normal(r, 1, 2, 6, 4),
                big * _normal(r, 1, 2, 6, 4),
                _normal(r, 1, 2, 6, 4),
                2,
            ),
            {"causal": False},
            "scores ~1e3: the running max rises from block to block",
        ),
    ]


def _block() -> list[Fixture]:
    f = "transformer_block"
    r = _rng(f)
    return [
        Fixture(f, "default", (_normal(r, 2, 5, 8), _block_params(r, 8, 2, 2, 11), 2), {}, "odd F"),
        Fixture(
            f,
            "gqa-rope",
            (_normal(r, 1, 6, 16), _block_params(r, 16, 4, 2, 24), 4),
            {"n_kv_heads": 2, "rope_theta": 10000.0},
        ),
        Fixture(
            f,
            "mqa-window-eps",
            (_normal(r, 2, 6, 12), _block_params(r, 12, 3, 1, 16), 3),
            {"n_kv_heads": 1, "window": 2, "eps": 1e-5},
        ),
        Fixture(f, "odd-d", (_normal(r, 1, 4, 12), _block_params(r, 12, 4, 4, 8), 4), {}, "D = 3"),
    ]


def _decoder() -> list[Fixture]:
    f = "decoder_forward"
    r = _rng(f)
    return [
        Fixture(
            f,
            "sinusoidal",
            (r.integers(0, 13, (2, 5)), _decoder_params(r, 13, 8, 2, 2, 12, 2), 2),
            {},
            "two blocks, default positional encoding",
        ),
        Fixture(
            f,
            "rope-gqa",
            (r.integers(0, 11, (1, 6)), _decoder_params(r, 11, 16, 4, 2, 20, 1), 4),
            {"n_kv_heads": 2, "positional": "rope", "rope_theta": 500.0},
        ),
        Fixture(
            f,
            "none-window",
            (r.integers(0, 9, (2, 6)), _decoder_params(r, 9, 12, 3, 3, 10, 1), 3),
            {"positional": "none", "window": 3},
        ),
    ]


_BUILDERS = {
    "softmax": _softmax,
    "causal_mask": _causal_mask,
    "sliding_window_mask": _sliding_window_mask,
    "padding_mask": _padding_mask,
    "scaled_dot_product_attention": _sdpa,
    "split_heads": _split_heads,
    "merge_heads": _merge_heads,
    "repeat_kv": _repeat_kv,
    "rope": _rope,
    "sinusoidal_positions": _sinusoidal,
    "rms_norm": _rms_norm,
    "layer_norm": _layer_norm,
    "relu_ffn": _relu_ffn,
    "swiglu_ffn": _swiglu_ffn,
    "multi_head_attention": _mha,
    "attention_decode": _decode,
    "tiled_attention": _tiled,
    "transformer_block": _block,
    "decoder_forward": _decoder,
}

# Functions with float inputs get a float32 probe; masks and the sinusoidal table take ints.
_NO_PROBE = {"causal_mask", "sliding_window_mask", "padding_mask", "sinusoidal_positions"}


@cache
def fixtures(function: str) -> tuple[Fixture, ...]:
    """The float64 fixtures of `function`, built once per process."""
    return tuple(_BUILDERS[function]())


def _float32(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype == np.float64:
        return value.astype(np.float32)
    if isinstance(value, tuple):
        return tuple(_float32(v) for v in value)
    if isinstance(value, list):
        return [_float32(v) for v in value]
    if isinstance(value, dict):
        return {k: _float32(v) for k, v in value.items()}
    return value


@cache
def probes(function: str) -> tuple[Fixture, ...]:
    """The first fixture again with every float64 array as float32 (none for int-only inputs)."""
    if function in _NO_PROBE:
        return ()
    first = fixtures(function)[0]
    return (
        Fixture(
            function,
            f"{first.name}-float32",
            _float32(first.args),
            _float32(dict(first.kwargs)),
            "float32 inputs: the output must stay float32",
        ),
    )


def causal_base(function: str) -> Fixture:
    """The fixture whose future is perturbed: the function's first, causal by default."""
    return fixtures(function)[0]


@cache
def causal_variants(function: str) -> tuple[tuple[int, Fixture], ...]:
    """(t, fixture) pairs: the base fixture with every input after position t replaced."""
    base = causal_base(function)
    r = _rng(f"{function}/causal")
    variants = []
    if function == "decoder_forward":
        ids = base.args[0]
        V = base.args[1]["embed"].shape[0]
        T = ids.shape[1]
        for t in range(T - 1):
            changed = ids.copy()
            shift = r.integers(1, V, changed[:, t + 1 :].shape)
            changed[:, t + 1 :] = (changed[:, t + 1 :] + shift) % V
            args = (changed, *base.args[1:])
            variants.append((t, Fixture(function, f"future-after-{t}", args, base.kwargs)))
        return tuple(variants)
    x = base.args[0]
    T = x.shape[1]
    for t in range(T - 1):
        changed = x.copy()
        changed[:, t + 1 :] += 3.0 * r.standard_normal(changed[:, t + 1 :].shape)
        args = (changed, *base.args[1:])
        variants.append((t, Fixture(function, f"future-after-{t}", args, base.kwargs)))
    return tuple(variants)


@cache
def bad_cases(function: str) -> tuple[BadCase, ...]:
    """The contract's Bad input cases that apply to `function` (empty for the others)."""
    r = _rng(f"{function}/bad")
    f = function
    if f == "sliding_window_mask":
        return (BadCase(f, "window<1", (4, 0)),)
    if f == "split_heads":
        return (BadCase(f, "C%n_heads", (_normal(r, 2, 3, 10), 4)),)
    if f == "rope":
        return (BadCase(f, "odd-D", (_normal(r, 2, 5, 3), _ints(range(5)))),)
    if f == "scaled_dot_product_attention":
        return (
            BadCase(
                f,
                "batch-mismatch",
                (_normal(r, 2, 2, 3, 4), _normal(r, 3, 2, 3, 4), _normal(r, 3, 2, 3, 4)),
            ),
            BadCase(
                f,
                "head-width-mismatch",
                (_normal(r, 2, 2, 3, 4), _normal(r, 2, 2, 3, 5), _normal(r, 2, 2, 3, 4)),
            ),
            BadCase(
                f,
                "n_heads%n_kv_heads",
                (_normal(r, 1, 4, 3, 4), _normal(r, 1, 3, 3, 4), _normal(r, 1, 3, 3, 4)),
            ),
        )
    if f == "tiled_attention":
        q, k, v = (_normal(r, 1, 2, 4, 4) for _ in range(3))
        return (
            BadCase(f, "block_size=0", (q, k, v, 0)),
            BadCase(f, "block_size=-1", (q, k, v, -1)),
            BadCase(f, "batch-mismatch", (q, _normal(r, 2, 2, 4, 4), _normal(r, 2, 2, 4, 4), 2)),
        )
    if f == "multi_head_attention":
        return (
            BadCase(f, "C%n_heads", (_normal(r, 1, 3, 10), *_attention_weights(r, 10, 5, 5), 4)),
            BadCase(
                f,
                "n_heads%n_kv_heads",
                (_normal(r, 1, 3, 16), *_odd_group_weights(r), 4),
                {"n_kv_heads": 3},
            ),
            BadCase(
                f,
                "odd-D-rope",
                (_normal(r, 1, 3, 12), *_attention_weights(r, 12, 4, 4), 4),
                {"rope_theta": 10000.0},
            ),
            BadCase(
                f,
                "window<1",
                (_normal(r, 1, 3, 8), *_attention_weights(r, 8, 2, 2), 2),
                {"window": 0},
            ),
        )
    if f == "attention_decode":
        return (
            BadCase(
                f,
                "C%n_heads",
                (_normal(r, 1, 1, 10), None, None, *_attention_weights(r, 10, 5, 5), 4),
            ),
            BadCase(
                f,
                "n_heads%n_kv_heads",
                (_normal(r, 1, 1, 16), None, None, *_odd_group_weights(r), 4),
                {"n_kv_heads": 3},
            ),
            BadCase(
                f,
                "window<1",
                (_normal(r, 1, 1, 8), None, None, *_attention_weights(r, 8, 2, 2), 2),
                {"window": 0},
            ),
        )
    if f == "transformer_block":
        return (BadCase(f, "C%n_heads", (_normal(r, 1, 3, 10), _block_params(r, 10, 5, 5, 6), 4)),)
    if f == "decoder_forward":
        params = _decoder_params(r, 7, 10, 5, 5, 6, 1)
        return (BadCase(f, "C%n_heads", (r.integers(0, 7, (1, 3)), params, 4)),)
    return ()


def _odd_group_weights(r) -> tuple[np.ndarray, ...]:
    """C=16, H=4 (D=4) query weights with Hkv=3 key/value weights: H % Hkv != 0."""
    return (_weight(r, 16, 16), _weight(r, 16, 12), _weight(r, 16, 12), _weight(r, 16, 16))


# --------------------------------------------------------------------------
# Reference outputs, computed in labctl's own process (torch is fine here)
# --------------------------------------------------------------------------

_REFERENCE: dict[tuple[str, str], Any] = {}


def reference_output(fixture: Fixture) -> Any:
    """`labctl.reference` on the fixture, cached: numpy arrays (a tuple when several)."""
    key = (fixture.function, fixture.name)
    if key not in _REFERENCE:
        from labctl import reference

        args, kwargs = fixture.call()
        _REFERENCE[key] = getattr(reference, fixture.function)(*args, **kwargs)
    return _REFERENCE[key]


def warm_reference(functions: tuple[str, ...]) -> None:
    """Compute every reference output the given functions need (before any threads start)."""
    for function in functions:
        for fixture in (*fixtures(function), *probes(function)):
            reference_output(fixture)
