"""Contract v2's "Bad input" cases for its seven new functions: each call must raise
ValueError or TypeError. `labctl.verify.bad_input.bad_cases` serves them (only a v2 room is
asked for these functions)."""

from __future__ import annotations

import numpy as np

from labctl.verify.bad_case import BadCase
from labctl.verify.builders import ints, normal, weight


def bad_cases_v2(f: str, r: np.random.Generator) -> tuple[BadCase, ...]:
    if f == "alibi_slopes":
        return (BadCase(f, "n_heads<1", (0,)),)
    if f == "alibi_bias":
        return (BadCase(f, "n_heads<1", (0, 4)),)
    if f == "learned_positions":
        table = normal(r, 4, 3)
        return (
            BadCase(f, "position>=Tmax", (ints([0, 4]), table)),
            BadCase(f, "position<0", (ints([-1, 2]), table)),
        )
    if f == "gelu":
        return (BadCase(f, "approximate", (normal(r, 3),), {"approximate": "fast"}),)
    if f in ("glu_ffn", "geglu_ffn"):
        x = normal(r, 2, 4)
        return (
            BadCase(f, "w_up-shape", (x, weight(r, 4, 6), weight(r, 4, 5), weight(r, 6, 4))),
            BadCase(f, "w_down-rows", (x, weight(r, 4, 6), weight(r, 4, 6), weight(r, 5, 4))),
        )
    if f == "attention_entropy":
        return (
            BadCase(f, "negative-weight", (np.array([[0.5, -0.25, 0.75]]),)),
            BadCase(f, "axis", (np.full((2, 2), 0.5),), {"axis": 2}),
        )
    return ()
