"""The float64 fixtures of contract v2: its seven new functions (`NEW`) and the new parameters
of the five it widens (`EXTENDED`: temperature, batched positions, RoPE scaling, an untied
head, learned and ALiBi positions).

`labctl.verify.fixtures` serves them: a new function's fixtures as any function's (only a
v2 room is asked for it), a widened function's only to a room checked against v2, after
v1's. Every value is drawn from the run's seed; fixtures of a widened function are named
`v2-...` so that they never share a name (or a cached reference output) with v1's.
Their reference is `labctl.reference.v2` (`Fixture.contract`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from labctl.i18n import N_
from labctl.verify.builders import (
    Fixture,
    attention_weights,
    decoder_params,
    ints,
    normal,
    rng,
    weight,
)


def _v2(f: str, name: str, args: tuple, kwargs: dict, note: str = "") -> Fixture:
    return Fixture(f, name, args, kwargs, note, contract=2)


def _alibi_slopes(seed: int) -> list[Fixture]:
    f = "alibi_slopes"
    return [
        _v2(f, "8-heads", (8,), {}, N_("a power of two: 2 ** (-8 (h + 1) / H)")),
        _v2(f, "12-heads", (12,), {}, N_("not a power of two: the paper's interleaving rule")),
        _v2(f, "1-head", (1,), {}),
    ]


def _alibi_bias(seed: int) -> list[Fixture]:
    f = "alibi_bias"
    return [
        _v2(f, "square", (4, 6), {}),
        _v2(f, "tq<tk", (6, 2, 7), {}, N_("bottom-right aligned like causal_mask")),
        _v2(f, "3-heads", (3, 5, 5), {}),
        _v2(f, "tq>tk", (2, 6, 4), {}, N_("t_q > t_k: p_i < 0 for the first rows, still a bias")),
    ]


def _learned_positions(seed: int) -> list[Fixture]:
    f = "learned_positions"
    r = rng(seed, f)
    table = normal(r, 12, 6)
    return [
        _v2(f, "arange", (ints(np.arange(5)), table), {}),
        _v2(
            f,
            "batched",
            (ints(r.integers(0, 12, (2, 4))), table),
            {},
            N_("positions (B, T): rows of the table, repeats allowed"),
        ),
    ]


def _gelu(seed: int) -> list[Fixture]:
    f = "gelu"
    r = rng(seed, f)
    return [
        _v2(f, "exact", (3.0 * normal(r, 4, 9),), {}),
        _v2(f, "tanh", (3.0 * normal(r, 4, 9),), {"approximate": "tanh"}),
        _v2(f, "exact-explicit", (normal(r, 2, 3, 5),), {"approximate": "none"}),
    ]


def _gated(f: str, seed: int, extra: dict) -> list[Fixture]:
    r = rng(seed, f)
    C, F = 6, 10
    weights = (weight(r, C, F), weight(r, C, F), weight(r, F, C))
    return [
        _v2(f, "3-d", (normal(r, 2, 5, C), *weights), {}),
        _v2(f, "2-d", (normal(r, 4, C), *weights), dict(extra)),
    ]


def _glu_ffn(seed: int) -> list[Fixture]:
    return _gated("glu_ffn", seed, {})


def _geglu_ffn(seed: int) -> list[Fixture]:
    return _gated("geglu_ffn", seed, {"approximate": "tanh"})


def _attention_entropy(seed: int) -> list[Fixture]:
    f = "attention_entropy"
    r = rng(seed, f)
    e = np.exp(2.0 * normal(r, 2, 3, 6))
    weights = e / e.sum(axis=-1, keepdims=True)
    causal = np.tril(np.exp(normal(r, 5, 5)))
    causal /= causal.sum(axis=-1, keepdims=True)
    causal[0] = 0.0  # a fully blocked row: entropy 0
    return [
        _v2(f, "softmax-rows", (weights,), {}),
        _v2(f, "causal-zeros", (causal,), {}, N_("exact zeros: 0 ln 0 = 0; an all-zero row")),
        _v2(f, "axis-0", (weights[0].T.copy(),), {"axis": 0}),
        # Last, so the fixtures above keep their draws (fixtures v6).
        _v2(
            f,
            "rows-not-summing-to-1",
            (0.9 * r.random((3, 5)),),
            {},
            N_("weights >= 0 that do not sum to 1: -sum(w ln w) as they are, never renormalised"),
        ),
    ]


NEW: dict[str, Callable[[int], list[Fixture]]] = {
    "alibi_slopes": _alibi_slopes,
    "alibi_bias": _alibi_bias,
    "learned_positions": _learned_positions,
    "gelu": _gelu,
    "glu_ffn": _glu_ffn,
    "geglu_ffn": _geglu_ffn,
    "attention_entropy": _attention_entropy,
}


def _softmax(seed: int) -> list[Fixture]:
    f = "softmax"
    r = rng(seed, f"{f}/v2")
    return [
        _v2(f, "v2-temperature-hot", (normal(r, 3, 7),), {"temperature": 2.5}),
        _v2(f, "v2-temperature-cold", (normal(r, 3, 7),), {"temperature": 0.3}, N_("T < 1")),
    ]


def _rope(seed: int) -> list[Fixture]:
    f = "rope"
    r = rng(seed, f"{f}/v2")
    T = 5
    batched = ints(np.stack([r.permutation(40)[:T], 3 + np.arange(T)]))
    return [
        _v2(
            f,
            "v2-batched-positions",
            (normal(r, 2, 3, T, 8), batched),
            {},
            N_("positions (B, T): each batch row at its own positions"),
        ),
        _v2(
            f,
            "v2-linear",
            (normal(r, T, 8), ints(r.integers(0, 64, T))),
            {"scaling": "linear", "factor": 4.0},
        ),
        _v2(
            f,
            "v2-ntk",
            (normal(r, 2, T, 8), ints(r.integers(0, 64, T))),
            {"scaling": "ntk", "factor": 8.0},
        ),
        # Last, so the fixtures above keep their draws (fixtures v6).
        _v2(
            f,
            "v2-factor-without-scaling",
            (normal(r, T, 8), ints(r.integers(0, 64, T))),
            {"factor": 4.0},
            N_("scaling=None: factor is ignored (v1's angles)"),
        ),
        _v2(
            f,
            "v2-batched-positions-3-d",
            (normal(r, 2, T, 8), ints(r.integers(0, 40, (2, T)))),
            {},
            N_("positions (B, T) with x (B, T, D): no head axis between them"),
        ),
    ]


def _mha(seed: int) -> list[Fixture]:
    f = "multi_head_attention"
    r = rng(seed, f"{f}/v2")
    B, T, C, H, Hkv = 2, 6, 8, 4, 2
    positions = ints(np.stack([7 + np.arange(T), np.maximum(np.arange(T) - 2, 0)]))
    return [
        _v2(
            f,
            "v2-batched-positions",
            (normal(r, B, T, C), *attention_weights(r, C, H, Hkv), H),
            {"n_kv_heads": Hkv, "rope_theta": 10000.0, "positions": positions},
            N_("an offset and a left pad: RoPE at the given positions, the mask by index"),
        ),
        # Last, so the fixture above keeps its draws (fixtures v6).
        _v2(
            f,
            "v2-positions-1-d",
            (normal(r, B, T, C), *attention_weights(r, C, H, Hkv), H),
            {"n_kv_heads": Hkv, "rope_theta": 10000.0, "positions": ints(5 + 2 * np.arange(T))},
            N_("positions (T,) other than 0..T-1, shared by every batch row"),
        ),
    ]


def _decode(seed: int) -> list[Fixture]:
    f = "attention_decode"
    r = rng(seed, f"{f}/v2")
    B, Tp, Tn, C, H, Hkv = 2, 4, 2, 8, 4, 2
    D = C // H
    positions = ints([[9, 10], [Tp - 1, Tp]])
    return [
        _v2(
            f,
            "v2-positions",
            (
                normal(r, B, Tn, C),
                normal(r, B, Hkv, Tp, D),
                normal(r, B, Hkv, Tp, D),
                *attention_weights(r, C, H, Hkv),
                H,
            ),
            {"n_kv_heads": Hkv, "rope_theta": 10000.0, "positions": positions},
            N_("the new tokens at given positions, not Tp .. Tp+Tn-1"),
        ),
        # Last, so the fixture above keeps its draws (fixtures v6).
        _v2(
            f,
            "v2-positions-1-d",
            (
                normal(r, B, Tn, C),
                normal(r, B, Hkv, Tp, D),
                normal(r, B, Hkv, Tp, D),
                *attention_weights(r, C, H, Hkv),
                H,
            ),
            {"n_kv_heads": Hkv, "rope_theta": 10000.0, "positions": ints([Tp + 6, Tp + 7])},
            N_("positions (Tn,) other than Tp .. Tp+Tn-1, shared by every batch row"),
        ),
    ]


def _decoder(seed: int) -> list[Fixture]:
    f = "decoder_forward"
    r = rng(seed, f"{f}/v2")
    V, C, H, Hkv, F, T = 11, 8, 4, 2, 12, 6
    untied = decoder_params(r, V, C, H, Hkv, F, 1)
    untied["lm_head"] = weight(r, C, V)
    learned = {**decoder_params(r, V, C, H, Hkv, F, 1), "pos_embed": 0.5 * normal(r, 9, C)}
    alibi = decoder_params(r, V, C, H, Hkv, F, 2)
    ids = ints(r.integers(0, V, (2, T)))
    return [
        _v2(f, "v2-untied-head", (ids, untied, H), {"n_kv_heads": Hkv}, N_("logits x @ lm_head")),
        _v2(f, "v2-learned", (ids, learned, H), {"n_kv_heads": Hkv, "positional": "learned"}),
        _v2(f, "v2-alibi", (ids, alibi, H), {"n_kv_heads": Hkv, "positional": "alibi"}),
        # Last, so the fixtures above keep their draws (fixtures v6).
        _v2(
            f,
            "v2-learned-t=tmax",
            (ids, {**decoder_params(r, V, C, H, Hkv, F, 1), "pos_embed": 0.5 * normal(r, T, C)}, H),
            {"n_kv_heads": Hkv, "positional": "learned"},
            N_("T equal to pos_embed's Tmax rows: valid, only T > Tmax is refused"),
        ),
        _v2(
            f,
            "v2-alibi-window",
            (ids, decoder_params(r, V, C, H, Hkv, F, 1), H),
            {"n_kv_heads": Hkv, "positional": "alibi", "window": 2},
            N_("ALiBi with a sliding window: the window's mask still applies"),
        ),
    ]


EXTENDED: dict[str, Callable[[int], list[Fixture]]] = {
    "softmax": _softmax,
    "rope": _rope,
    "multi_head_attention": _mha,
    "attention_decode": _decode,
    "decoder_forward": _decoder,
}
