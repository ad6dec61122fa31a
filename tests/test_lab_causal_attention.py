"""Lab `causal-attention`: the future-perturbation loop covers every t, and no row that cannot fail.

Faulty clean rooms are written into tmp_path.
"""

from __future__ import annotations

import pytest
from labtools import faulty_room, rows, run, values

from labctl import faults
from labctl.labs.causal_attention import LAB

INVARIANCE = "future_token_invariance"

# The future leaks into position 0 only, from position 1: only the perturbation after t = 0
# changes position 1 while looking at position 0, so a loop starting at t = 1 misses it.
LEAKS_AT_THE_FIRST_POSITION = faults.Fault(
    name="mha-leaks-at-t0",
    function="multi_head_attention",
    module="transformer_block",
    description="position 0's output reads the input at position 1",
    course="逐部件讲透 §6.13",
    source="""
    _correct_mha = multi_head_attention

    def multi_head_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=True, window=None, rope_theta=None):
        out = _correct_mha(x, wq, wk, wv, wo, n_heads, n_kv_heads, causal, window, rope_theta)
        out[:, 0] += 1e-3 * x[:, 1]  # (B, C): the next token seeps into the first
        return out
    """,
)


# The mirror case: the second-to-last position reads the last, so only the perturbation
# after t = T - 2 can see it; a loop that stops one short misses it.
LEAKS_AT_THE_LAST_POSITION = faults.Fault(
    name="mha-leaks-at-the-end",
    function="multi_head_attention",
    module="transformer_block",
    description="the second-to-last position's output reads the input at the last position",
    course="逐部件讲透 §6.13",
    source="""
    _correct_mha = multi_head_attention

    def multi_head_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=True, window=None, rope_theta=None):
        out = _correct_mha(x, wq, wk, wv, wo, n_heads, n_kv_heads, causal, window, rope_theta)
        out[:, -2] += 1e-3 * x[:, -1]  # (B, C): the last token seeps into the one before it
        return out
    """,
)


@pytest.fixture(scope="module")
def seed5():
    return run(LAB)


def test_passes_on_both_implementations_at_seed_5(seed5):
    assert seed5.error is None and seed5.passed, seed5.failures()
    got = rows(seed5)
    for impl in ("reference", "clean-room"):
        # Masked keys contribute exactly 0: the prefix does not move at all.
        assert got[(INVARIANCE, impl)].actual == 0.0
        assert got[("future_weight_max", impl)].actual == 0.0
    # float32 against torch: reordered sums only (~1e-7), inside 1e-5.
    assert got[("sdpa_max_error", "clean-room")].actual <= 1e-6


def test_the_sdpa_row_is_measured_on_the_clean_room_only(seed5):
    """torch against torch is 0 by construction: the reference has no such row."""
    assert LAB.metric("sdpa_max_error").impls == ("clean-room",)
    assert {impl for name, impl in rows(seed5) if name == "sdpa_max_error"} == {"clean-room"}


def test_a_leak_at_the_first_position_fails_the_future_invariance(tmp_path):
    result = run(LAB, faulty_room(tmp_path, LEAKS_AT_THE_FIRST_POSITION))
    got = rows(result)
    assert got[(INVARIANCE, "reference")].passed
    leak = got[(INVARIANCE, "clean-room")]
    assert not leak.passed and not result.passed
    # 1e-3 times the perturbation of position 1 (standard normal noise): O(1e-3), not rounding.
    assert 1e-4 < leak.actual < 1e-2


def test_a_reversed_mask_fails_the_sdpa_row(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "mask-reversed"), impl="clean-room")
    sdpa = rows(result)[("sdpa_max_error", "clean-room")]
    assert not sdpa.passed and sdpa.actual > 1e-2  # another set of keys: O(1), not float32


def test_a_leak_at_the_last_position_fails_the_future_invariance(tmp_path):
    result = run(LAB, faulty_room(tmp_path, LEAKS_AT_THE_LAST_POSITION))
    got = rows(result)
    assert got[(INVARIANCE, "reference")].passed
    leak = got[(INVARIANCE, "clean-room")]
    assert not leak.passed and not result.passed
    assert 1e-4 < leak.actual < 1e-2  # 1e-3 times standard normal noise


def test_a_seed_gives_the_same_values_and_another_seed_other_inputs(seed5):
    assert values(run(LAB)) == values(seed5)
    other = values(run(LAB, seed=6))
    # The exact zeros stay zero; the float32-against-torch error follows the inputs.
    key = ("sdpa_max_error", "clean-room")
    assert other[key] != values(seed5)[key]


# A mask one diagonal short: each position also reads the very next one.
MASK_ONE_SHORT = faults.Fault(
    name="mask-one-short",
    function="causal_mask",
    module="primitives",
    description="the causal mask leaves the next position open",
    course="逐部件讲透 §6.13",
    source="""
    def causal_mask(t_q, t_k=None):
        t_k = t_q if t_k is None else t_k
        return np.triu(np.ones((t_q, t_k), dtype=bool), k=t_k - t_q + 2)
    """,
)


def test_a_mask_that_leaves_the_next_position_open_fails_the_future_weight(tmp_path):
    result = run(LAB, faulty_room(tmp_path, MASK_ONE_SHORT), impl="clean-room")
    weight = rows(result)[("future_weight_max", "clean-room")]
    assert not weight.passed and weight.actual > 1e-3  # a softmax weight, not rounding


class _LeaksAtTheEnd:
    """A stand-in implementation: position T-2 reads position T-1 (its future)."""

    def multi_head_attention(self, x, *weights_and_heads):
        out = x.copy()  # (B, T, C)
        out[:, -2] += 1e-3 * x[:, -1]
        return out


def test_the_future_loop_runs_over_positions_even_when_they_outnumber_the_width():
    """T = 8 positions of width C = 2: the loop must count positions, not channels."""
    import numpy as np

    from labctl.labs import causal_attention as lab_module

    rng = np.random.default_rng(0)
    x, noise = rng.standard_normal((1, 8, 2)), rng.standard_normal((1, 8, 2))  # (B, T, C)
    moved = lab_module._future_invariance(_LeaksAtTheEnd(), x, [], noise, 1)
    assert moved == pytest.approx(1e-3 * float(np.max(np.abs(noise[:, -1]))), rel=1e-9)


def test_the_inputs_have_the_scales_the_lab_states():
    """Projections of standard deviation 1/√C keep scores O(1); the noise is `perturbation`."""
    import math

    import numpy as np

    from labctl.labs import causal_attention as lab_module

    params = LAB.params(perturbation=4.0)
    q, k, v, x, weights, noise = lab_module._inputs(params, 5)
    C = params.H * params.D
    for w in weights:
        assert float(np.std(w)) == pytest.approx(1 / math.sqrt(C), rel=0.1)  # 4096 draws: ±2%
    assert float(np.std(noise)) == pytest.approx(4.0, rel=0.1)  # 1024 draws: ±3%
    assert float(np.std(x)) == pytest.approx(1.0, rel=0.1)


def test_the_sdpa_row_compares_float32_with_float32():
    """Against torch's float32 kernel the clean room differs by float32 rounding (~1e-7), not
    float64's (~1e-16): the row really runs in float32."""
    # its own run, not the module's fixture: mutmut attributes a fixture's run to one test only
    error = rows(run(LAB, impl="clean-room"))[("sdpa_max_error", "clean-room")].actual
    assert 1e-9 < error <= 1e-5


def test_the_heatmaps_are_each_implementation_s_own_weights():
    import numpy as np

    from labctl import reference
    from labctl.i18n import _
    from labctl.lab import HeatmapFigure
    from labctl.labs import causal_attention as lab_module

    p = LAB.params()
    q, k, v = lab_module._inputs(p, 5)[:3]
    attn = reference.scaled_dot_product_attention(q, k, v, reference.causal_mask(p.T))[1]
    # its own run, not the module's fixture: mutmut attributes a fixture's run to one test only
    maps = [f for f in run(LAB).figures if isinstance(f, HeatmapFigure)]
    assert [m.impl for m in maps] == ["reference", "clean-room"]
    for m in maps:
        assert m.name == "attention-b0-h0"
        assert f"({m.impl})" in _(m.title)
        assert m.row_ticks == m.col_ticks == tuple(str(t) for t in range(p.T))
        # batch 0, head 0; the clean room's own numbers, equal to float64 rounding
        np.testing.assert_allclose(np.array(m.matrix), attn[0, 0], rtol=0, atol=1e-12)
