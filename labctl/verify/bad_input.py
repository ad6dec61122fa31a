"""The contract's "Bad input" cases, exactly: each call must raise ValueError or TypeError.

Each case carries the rule it tests (`labctl.verify.rules`): `labctl contract show` and
the stubs list a function's rules from these cases, so what is shown is what is graded.
v2's cases for the functions it widens (a temperature, RoPE's scaling, positions, the
decoder's position schemes and head) are asked of a room checked against v2 only.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from labctl.verify import rules
from labctl.verify.bad_case import BadCase
from labctl.verify.builders import (
    SEED,
    attention_weights,
    block_params,
    decoder_params,
    ints,
    normal,
    rng,
    weight,
)


def _odd_group_weights(r) -> tuple[np.ndarray, ...]:
    """C=16, H=4 (D=4) query weights with Hkv=3 key/value weights: H % Hkv != 0."""
    return (weight(r, 16, 16), weight(r, 16, 12), weight(r, 16, 12), weight(r, 16, 16))


@cache
def bad_cases(function: str, seed: int = SEED, contract: int = 1) -> tuple[BadCase, ...]:
    """The contract's Bad input cases that apply to `function` (empty for the others), with
    values drawn from `seed`; checked against v2 (`contract`), with v2's cases after v1's."""
    cases = _v1_cases(function, seed)
    if contract >= 2:
        from labctl.verify.bad_input_v2 import widened_cases  # it builds on BadCase, here

        cases += widened_cases(function, rng(seed, f"{function}/bad/v2"))
    return cases


def rules_of(function: str, contract: int = 1) -> tuple[rules.Rule, ...]:
    """The distinct rules `function` is graded on at `contract`, in the order of its cases."""
    found: list[rules.Rule] = []
    for case in bad_cases(function, contract=contract):
        if case.rule not in found:
            found.append(case.rule)
    return tuple(found)


def _v1_cases(function: str, seed: int) -> tuple[BadCase, ...]:
    r = rng(seed, f"{function}/bad")
    f = function
    if f == "sliding_window_mask":
        return (BadCase(f, "window<1", rules.WINDOW, (4, 0)),)
    if f == "split_heads":
        return (BadCase(f, "C%n_heads", rules.C_NOT_DIVISIBLE, (normal(r, 2, 3, 10), 4)),)
    if f == "rope":
        return (BadCase(f, "odd-D", rules.ODD_D_ROPE, (normal(r, 2, 5, 3), ints(range(5)))),)
    if f == "scaled_dot_product_attention":
        return (
            BadCase(
                f,
                "batch-mismatch",
                rules.BATCH_MISMATCH,
                (normal(r, 2, 2, 3, 4), normal(r, 3, 2, 3, 4), normal(r, 3, 2, 3, 4)),
            ),
            BadCase(
                f,
                "head-width-mismatch",
                rules.HEAD_WIDTH_MISMATCH,
                (normal(r, 2, 2, 3, 4), normal(r, 2, 2, 3, 5), normal(r, 2, 2, 3, 4)),
            ),
            BadCase(
                f,
                "n_heads%n_kv_heads",
                rules.QK_HEADS_NOT_GROUPED,
                (normal(r, 1, 4, 3, 4), normal(r, 1, 3, 3, 4), normal(r, 1, 3, 3, 4)),
            ),
        )
    if f == "tiled_attention":
        q, k, v = (normal(r, 1, 2, 4, 4) for _ in range(3))
        return (
            BadCase(f, "block_size=0", rules.BLOCK_SIZE, (q, k, v, 0)),
            BadCase(f, "block_size=-1", rules.BLOCK_SIZE, (q, k, v, -1)),
            BadCase(
                f,
                "batch-mismatch",
                rules.BATCH_MISMATCH,
                (q, normal(r, 2, 2, 4, 4), normal(r, 2, 2, 4, 4), 2),
            ),
        )
    if f == "multi_head_attention":
        return (
            BadCase(
                f,
                "C%n_heads",
                rules.C_NOT_DIVISIBLE,
                (normal(r, 1, 3, 10), *attention_weights(r, 10, 5, 5), 4),
            ),
            BadCase(
                f,
                "n_heads%n_kv_heads",
                rules.HEADS_NOT_GROUPED,
                (normal(r, 1, 3, 16), *_odd_group_weights(r), 4),
                {"n_kv_heads": 3},
            ),
            BadCase(
                f,
                "odd-D-rope",
                rules.ODD_D_MHA_ROPE,
                (normal(r, 1, 3, 12), *attention_weights(r, 12, 4, 4), 4),
                {"rope_theta": 10000.0},
            ),
            BadCase(
                f,
                "window<1",
                rules.WINDOW,
                (normal(r, 1, 3, 8), *attention_weights(r, 8, 2, 2), 2),
                {"window": 0},
            ),
        )
    if f == "attention_decode":
        return (
            BadCase(
                f,
                "C%n_heads",
                rules.C_NOT_DIVISIBLE,
                (normal(r, 1, 1, 10), None, None, *attention_weights(r, 10, 5, 5), 4),
            ),
            BadCase(
                f,
                "n_heads%n_kv_heads",
                rules.HEADS_NOT_GROUPED,
                (normal(r, 1, 1, 16), None, None, *_odd_group_weights(r), 4),
                {"n_kv_heads": 3},
            ),
            BadCase(
                f,
                "window<1",
                rules.WINDOW,
                (normal(r, 1, 1, 8), None, None, *attention_weights(r, 8, 2, 2), 2),
                {"window": 0},
            ),
        )
    if f == "transformer_block":
        return (
            BadCase(
                f,
                "C%n_heads",
                rules.C_NOT_DIVISIBLE,
                (normal(r, 1, 3, 10), block_params(r, 10, 5, 5, 6), 4),
            ),
        )
    if f == "decoder_forward":
        params = decoder_params(r, 7, 10, 5, 5, 6, 1)
        return (
            BadCase(f, "C%n_heads", rules.C_NOT_DIVISIBLE, (r.integers(0, 7, (1, 3)), params, 4)),
        )
    from labctl.verify.bad_input_v2 import bad_cases_v2

    return bad_cases_v2(f, r)
