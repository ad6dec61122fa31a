"""Lab `causal-attention`: the future-perturbation loop covers every t, and no row that cannot fail.

Faulty clean rooms are written into tmp_path.
"""

from __future__ import annotations

import pytest
from labtools import at_seed_5, faulty_room, passed, rows, run, values

from labctl import faults
from labctl.labs.causal_attention import LAB

INVARIANCE = "future_token_invariance"
SDPA = "sdpa_allclose_ratio"

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


seed5 = at_seed_5(LAB)


def test_passes_on_both_implementations_at_seed_5(seed5):
    got = passed(seed5)
    for impl in ("reference", "clean-room"):
        # Masked keys contribute exactly 0: the prefix does not move at all.
        assert got[(INVARIANCE, impl)].actual == 0.0
        assert got[("future_weight_max", impl)].actual == 0.0
    # float32 against torch: reordered sums only (~3e-7), a fraction of the chapter's 1e-6.
    sdpa = got[(SDPA, "clean-room")]
    assert 0 < sdpa.actual <= 0.5
    # the record keeps the largest absolute difference beside the ratio
    assert sdpa.note.startswith("max |clean room - torch| = ")
    assert 1e-8 < float(sdpa.note.rsplit("= ", 1)[1]) < 1e-6


def test_the_sdpa_row_is_measured_on_the_clean_room_only(seed5):
    """torch against torch is 0 by construction: the reference has no such row."""
    assert LAB.metric(SDPA).impls == ("clean-room",)
    assert {impl for name, impl in rows(seed5) if name == SDPA} == {"clean-room"}


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
    sdpa = rows(result)[(SDPA, "clean-room")]
    assert not sdpa.passed and sdpa.actual > 1e3  # another set of keys: O(1), not float32


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
    key = (SDPA, "clean-room")
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
    sdpa = rows(run(LAB, impl="clean-room"))[(SDPA, "clean-room")]
    assert 1e-9 < float(sdpa.note.rsplit("= ", 1)[1]) <= 1e-5


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


# --------------------------------------------------------------------------
# float32 against torch at the sizes and seeds a learner may run (issue 40)
# --------------------------------------------------------------------------


def _qkv32(T: int, D: int, seed: int, B: int = 2, H: int = 4):
    """The lab's q, k, v at (T, D, seed), in float32: `_inputs` draws them first, in this order."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((B, H, T, D)).astype(np.float32) for _ in range(3))


def test_the_sweep_draws_the_lab_s_own_inputs():
    import numpy as np

    from labctl.labs import causal_attention as lab_module

    drawn = lab_module._inputs(LAB.params(T=16, D=8), 3)[:3]
    for mine, lab in zip(_qkv32(16, 8, 3), drawn, strict=True):
        np.testing.assert_array_equal(mine, lab.astype(np.float32))


def _worst(cases) -> tuple[float, list]:
    """The largest allclose ratio of labctl's own clean room over (T, D, seed[, B, H]) cases,
    and the cases over the bound."""
    import labctl.clean_room as room
    from labctl.labs.causal_attention import sdpa_against_torch

    ratios = [(sdpa_against_torch(room, *_qkv32(*case))[0], case) for case in cases]
    return max(r for r, _ in ratios), [case for r, case in ratios if not r <= 1]


# The failing runs (T = 256, D = 64, seed 4: 1.43e-6; D = 512: seeds over 1e-6), the
# smallest sizes, the head width where the allowance starts to grow, and the worst measured.
QUICK_CASES = [(256, 64, 4), *((8, 512, s) for s in range(10)), (2, 1, 0), (8, 17, 2), (64, 256, 3)]


def test_labctl_s_own_room_passes_the_sdpa_row_where_an_absolute_1e_6_failed():
    from labctl.labs.causal_attention import SDPA_MEASURED_WORST

    worst, failed = _worst(QUICK_CASES)
    assert failed == []
    assert worst <= SDPA_MEASURED_WORST  # the figure the metric's why quotes


@pytest.mark.slow
def test_labctl_s_own_room_passes_the_sdpa_row_at_every_size_and_seed_swept():
    """T up to 1024 (past the lab's 512) and D up to 1024 on a log grid, T x D up to 1024 x
    512. A ratio's size follows T and D (the sums' lengths); B and H only add elements, so
    the large sizes run one (batch, head) pair and one seed, and the grid stays a few
    seconds (the widest sweep, below the why's figure, is in the commit that set it)."""
    from labctl.labs.causal_attention import SDPA_MEASURED_WORST

    grid = [(T, D) for T in (2, 8, 64, 256, 1024) for D in (1, 4, 16, 64, 256, 512, 1024)]
    small = [(T, D, seed, 2, 4) for T, D in grid if T * D <= 16 * 1024 for seed in range(2)]
    large = [(T, D, 0, 1, 1) for T, D in grid if 16 * 1024 < T * D <= 512 * 1024]
    cases = small + large
    worst, failed = _worst(cases)
    assert failed == []
    assert worst <= SDPA_MEASURED_WORST


def test_the_allclose_ratio_is_torch_s_allclose():
    """At most 1 exactly where torch.allclose holds, elementwise |a - b| <= atol + rtol |b|: a
    difference just inside and just outside the allowance, at small and large |b|."""
    import numpy as np
    import torch

    from labctl.lab import allclose_ratio

    rng = np.random.default_rng(0)
    want = rng.standard_normal(200) * np.logspace(-3, 2, 200)
    for scale in (0.5, 0.99, 1.01, 2.0):
        gap = scale * (1e-6 + 1e-5 * np.abs(want)) * rng.choice([-1.0, 1.0], 200)
        got = want + gap
        ratio, largest = allclose_ratio(got, want, 1e-6, 1e-5)
        held = torch.allclose(torch.from_numpy(got), torch.from_numpy(want), rtol=1e-5, atol=1e-6)
        assert (ratio <= 1) == held == (scale < 1)
        assert ratio == pytest.approx(scale, rel=1e-6)
        assert largest == pytest.approx(float(np.max(np.abs(gap))))
    assert allclose_ratio(np.zeros(3), np.zeros(4), 1e-6, 1e-5)[0] == float("inf")
    assert np.isnan(allclose_ratio(np.array([np.nan, 0.0]), np.zeros(2), 1e-6, 1e-5)[0])
