"""Contract v2's "Bad input" cases: each call must raise ValueError or TypeError.

`bad_cases_v2` holds those of its seven new functions (only a v2 room is asked for
them); `widened_cases` those of the five functions v2 widens (a temperature, RoPE's
scaling and positions, the decoder's position schemes and head), asked of a room
checked against v2 after v1's. `labctl.verify.bad_input.bad_cases` serves both.
"""

from __future__ import annotations

import numpy as np

from labctl.verify import rules
from labctl.verify.bad_case import BadCase
from labctl.verify.builders import attention_weights, decoder_params, ints, normal, weight


def bad_cases_v2(f: str, r: np.random.Generator) -> tuple[BadCase, ...]:
    if f == "alibi_slopes":
        return (BadCase(f, "n_heads<1", rules.ALIBI_HEADS, (0,)),)
    if f == "alibi_bias":
        return (BadCase(f, "n_heads<1", rules.ALIBI_HEADS, (0, 4)),)
    if f == "learned_positions":
        table = normal(r, 4, 3)
        return (
            BadCase(f, "position>=Tmax", rules.LEARNED_RANGE, (ints([0, 4]), table)),
            BadCase(f, "position<0", rules.LEARNED_RANGE, (ints([-1, 2]), table)),
        )
    if f == "gelu":
        return (
            BadCase(f, "approximate", rules.APPROXIMATE, (normal(r, 3),), {"approximate": "fast"}),
        )
    if f in ("glu_ffn", "geglu_ffn"):
        x = normal(r, 2, 4)
        cases = (
            BadCase(
                f, "w_up-shape", rules.W_UP, (x, weight(r, 4, 6), weight(r, 4, 5), weight(r, 6, 4))
            ),
            BadCase(
                f,
                "w_down-rows",
                rules.W_DOWN,
                (x, weight(r, 4, 6), weight(r, 4, 6), weight(r, 5, 4)),
            ),
        )
        if f == "geglu_ffn":
            weights = (weight(r, 4, 6), weight(r, 4, 6), weight(r, 6, 4))
            cases += (
                BadCase(
                    f, "approximate", rules.APPROXIMATE, (x, *weights), {"approximate": "fast"}
                ),
            )
        return cases
    if f == "attention_entropy":
        return (
            BadCase(f, "negative-weight", rules.NEGATIVE_WEIGHT, (np.array([[0.5, -0.25, 0.75]]),)),
            BadCase(f, "axis", rules.AXIS, (np.full((2, 2), 0.5),), {"axis": 2}),
        )
    return ()


def widened_cases(f: str, r: np.random.Generator) -> tuple[BadCase, ...]:
    """The cases v2's Bad input section adds for the v1 functions it widens."""
    if f == "softmax":
        return (
            BadCase(
                f, "temperature=0", rules.TEMPERATURE, (normal(r, 2, 5),), {"temperature": 0.0}
            ),
            BadCase(
                f, "temperature<0", rules.TEMPERATURE, (normal(r, 2, 5),), {"temperature": -1.5}
            ),
        )
    if f == "rope":
        T = 4
        positions = ints(np.arange(T))
        return (
            BadCase(
                f,
                "scaling",
                rules.SCALING,
                (normal(r, T, 8), positions),
                {"scaling": "cubic", "factor": 2.0},
            ),
            BadCase(
                f,
                "factor<1",
                rules.FACTOR,
                (normal(r, T, 8), positions),
                {"scaling": "linear", "factor": 0.5},
            ),
            BadCase(
                f,
                "ntk-D<4",
                rules.NTK_NARROW,
                (normal(r, T, 2), positions),
                {"scaling": "ntk", "factor": 2.0},
            ),
            BadCase(
                f,
                "positions-shape",
                rules.ROPE_POSITIONS,
                (normal(r, 2, 3, T, 8), ints(np.zeros((3, T)))),
            ),
        )
    if f == "multi_head_attention":
        B, T, C, H = 2, 3, 8, 2
        return (
            BadCase(
                f,
                "positions-shape",
                rules.POSITIONS,
                (normal(r, B, T, C), *attention_weights(r, C, H, H), H),
                {"rope_theta": 10000.0, "positions": ints(np.arange(T + 1))},
            ),
        )
    if f == "attention_decode":
        B, Tn, C, H = 1, 2, 8, 2
        return (
            BadCase(
                f,
                "positions-shape",
                rules.DECODE_POSITIONS,
                (normal(r, B, Tn, C), None, None, *attention_weights(r, C, H, H), H),
                {"rope_theta": 10000.0, "positions": ints(np.arange(Tn + 1))},
            ),
        )
    if f == "decoder_forward":
        V, C, H, F, T = 7, 8, 2, 6, 3
        ids = ints(r.integers(0, V, (1, T)))
        params = decoder_params(r, V, C, H, H, F, 1)
        short = {**decoder_params(r, V, C, H, H, F, 1), "pos_embed": normal(r, T - 1, C)}
        wrong_head = {**decoder_params(r, V, C, H, H, F, 1), "lm_head": weight(r, V, C)}
        return (
            BadCase(f, "positional", rules.POSITIONAL, (ids, params, H), {"positional": "absolute"}),
            BadCase(
                f, "learned-no-pos_embed", rules.LEARNED_NO_TABLE, (ids, params, H),
                {"positional": "learned"},
            ),
            BadCase(
                f, "T>Tmax", rules.LEARNED_TOO_LONG, (ids, short, H), {"positional": "learned"}
            ),
            BadCase(f, "lm_head-shape", rules.LM_HEAD, (ids, wrong_head, H)),
        )  # fmt: skip
    return ()
