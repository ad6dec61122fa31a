"""Lab 03, causal attention: does the mask really keep every position from reading its future?

The course (逐部件讲透 §6.13 实验 03; 第8章 阶段二) asks for assertions, not a heatmap:
build Q, K, V of shape [B, H, T, D], compute Q Kᵀ / √D, fill the future with
-inf before the softmax, check every row sums to 1 and the future gets exactly
zero weight, and compare with `torch.nn.functional.scaled_dot_product_attention`.
Its three kept assertions (scores shape, rows sum to 1, manual vs torch) become
metrics here, beside the strongest evidence of causality: perturb every input
after position t and watch the outputs at positions <= t not move at all.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field, model_validator

from labctl.course import CH8, HANDS_ON, PARTS, Section
from labctl.i18n import N_, Msg, implementation
from labctl.lab import (
    HeatmapFigure,
    Lab,
    LabContext,
    LabOutput,
    LabParams,
    Metric,
    allclose_ratio,
    larger,
    largest,
    within_memory,
)

BOTH_ROWS = ("reference", "clean-room")
# 逐部件讲透 §6.13: torch.allclose(manual_output, torch_output, atol=1e-6), rtol torch's default.
SDPA_ATOL, SDPA_RTOL = 1e-6, 1e-5
FLOAT32_U = 2.0**-24  # float32's unit roundoff
SDPA_ROUNDINGS = 4  # units of float32 rounding per √D that two correct rooms may differ by
SDPA_MEASURED_WORST = 0.5  # tests/test_lab_causal_attention.py sweeps sizes and seeds under it


def sdpa_atol(D: int) -> float:
    """The chapter's atol, or float32's rounding of a score's D-term sum where that is larger."""
    return max(SDPA_ATOL, SDPA_ROUNDINGS * FLOAT32_U * math.sqrt(D))


def sdpa_against_torch(impl, q32, k32, v32) -> tuple[float, float]:
    """(allclose ratio, max |Δ|) of `impl`'s float32 causal attention against torch's."""
    import torch
    import torch.nn.functional as F

    torch_out = F.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q32, k32, v32)), is_causal=True
    ).numpy()  # top-left causal equals bottom-right here: Tq == Tk
    out32, _ = impl.scaled_dot_product_attention(q32, k32, v32, impl.causal_mask(q32.shape[2]))
    return allclose_ratio(out32, torch_out, sdpa_atol(q32.shape[-1]), SDPA_RTOL)


class Params(LabParams):
    B: int = Field(2, ge=1, le=64, description="batch size")
    H: int = Field(4, ge=1, le=64, description="heads")
    T: int = Field(
        8, ge=2, le=512, description="sequence length (at least 2: one past, one future)"
    )
    D: int = Field(16, ge=1, le=1024, description="head width")
    perturbation: float = Field(
        1.0, gt=0, le=1e6, description="scale of the noise added to the future"
    )

    @model_validator(mode="after")
    def _fits_memory(self) -> Params:
        # held at once: q, k, v, x, noise and both rooms' outputs (7 of B x H x T x D), both
        # rooms' weights and a softmax's temporaries (4 of B x H x T x T), and the four
        # projections of multi_head_attention, C x C with C = H x D
        BHT, C = self.B * self.H * self.T, self.H * self.D
        within_memory(
            "B x H x T x (4T + 7D) + 4 x (H x D)²", BHT * (4 * self.T + 7 * self.D) + 4 * C * C
        )
        return self


METRICS = (
    Metric(
        "scores_shape_matches", "bool", "==1",
        N_("1 when the attention weights have shape (B, H, T, T), as the course's first assertion"),
        why=N_("a shape is right or wrong"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "row_sum_max_deviation", "probability", "<=1e-12",
        N_("largest |sum_j weights[i, j] - 1| over all rows"),
        why=N_("float64 sums of at most T terms are exact to a few ulps (~1e-16 each)"),
    ),
    Metric(
        "future_weight_max", "probability", "==0",
        N_("largest weight a query puts on a key after it; -inf then softmax gives an exact 0"),
        why=N_("exp(-inf) is exactly 0: any nonzero weight is a leak"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "future_token_invariance", "abs", "<=1e-12",
        N_("largest change of multi_head_attention outputs at positions <= t when every input "
        "after t is perturbed, over all t"),
        why=N_("masked keys contribute exactly 0 * v, so the prefix must not move; 1e-12 leaves room "
        "for a learner who fills the mask with a large finite negative"),
    ),
    Metric(
        "sdpa_allclose_ratio", "ratio", "<=1",
        N_(
            "the clean room's float32 scaled_dot_product_attention against torch "
            "F.scaled_dot_product_attention(is_causal=True): the largest |clean room - torch| / "
            "(atol + rtol · |torch|), torch.allclose's test (at most 1 where it holds); the "
            "record's note keeps the largest |clean room - torch|"
        ),
        impls=("clean-room",),
        why=Msg(
            "逐部件讲透 §6.13 asserts torch.allclose(manual_output, torch_output, atol=1e-6), "
            "whose rtol is torch's default {rtol:g}: |a - b| <= atol + rtol · |b|. float32 "
            "rounds a score's sum over D by about u·√D (u = 2^-24), so two correct float32 "
            "implementations differ by ~1e-6 at D = 64 and ~2e-6 at D = 1024 (torch itself is "
            "1.4e-6 from the exact answer there): atol is the chapter's {atol:g}, or {n}·u·√D "
            "where that is larger (D > 17). Measured on labctl's own clean room over T ≤ 1024, "
            "D ≤ 1024 and seeds: at most {worst:g} of the allowance; a wrong mask or scale is "
            "1e4 times over. No reference row: the reference is torch, so it would compare "
            "torch with itself (0 by construction, a row that cannot fail)",
            rtol=SDPA_RTOL, atol=SDPA_ATOL, n=SDPA_ROUNDINGS, worst=SDPA_MEASURED_WORST,
        ),
        reproduce_abs=1.0,
    ),
    Metric(
        "reference_output_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference: attention outputs and weights, and multi_head_attention"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-15)"),
    ),
)  # fmt: skip


def _inputs(params: Params, seed: int):
    B, H, T, D = params.B, params.H, params.T, params.D
    C = H * D
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((B, H, T, D)) for _ in range(3))  # (B, H, T, D) each
    x = rng.standard_normal((B, T, C))
    weights = [rng.standard_normal((C, C)) / math.sqrt(C) for _ in range(4)]  # wq, wk, wv, wo
    noise = rng.standard_normal((B, T, C)) * params.perturbation
    return q, k, v, x, weights, noise


def _future_invariance(impl, x, weights, noise, H: int) -> float:
    base = impl.multi_head_attention(x, *weights, H)
    worst = 0.0
    T = x.shape[1]
    for t in range(T - 1):
        perturbed = x.copy()
        perturbed[:, t + 1 :] += noise[:, t + 1 :]
        moved = impl.multi_head_attention(perturbed, *weights, H)
        worst = larger(worst, float(np.max(np.abs(moved[:, : t + 1] - base[:, : t + 1]))))
    return worst


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    q, k, v, x, weights, noise = _inputs(p, ctx.seed)
    future = np.triu(np.ones((p.T, p.T), dtype=bool), k=1)  # (T, T), True above the diagonal
    output = LabOutput()
    results = {}
    for name, impl in ctx.impls.items():
        mask = impl.causal_mask(p.T)
        out, attn = impl.scaled_dot_product_attention(q, k, v, mask)
        mha = impl.multi_head_attention(x, *weights, p.H)
        results[name] = (out, attn, mha)
        output.add("scores_shape_matches", name, float(attn.shape == (p.B, p.H, p.T, p.T)))
        output.add("row_sum_max_deviation", name, float(np.max(np.abs(attn.sum(-1) - 1.0))))
        output.add("future_weight_max", name, float(np.max(np.abs(attn[..., future]))))
        output.add(
            "future_token_invariance", name, _future_invariance(impl, x, weights, noise, p.H)
        )
        if name == "clean-room":
            q32, k32, v32 = (a.astype(np.float32) for a in (q, k, v))
            within, gap = sdpa_against_torch(impl, q32, k32, v32)
            output.add("sdpa_allclose_ratio", name, within, f"max |clean room - torch| = {gap:.3g}")
    if ctx.both:
        ref, room = results["reference"], results["clean-room"]
        error = largest(np.max(np.abs(a - b)) for a, b in zip(ref, room, strict=True))
        output.add("reference_output_max_error", "both", error)
    output.figures += _figures({name: attn for name, (_, attn, _) in results.items()}, p.T)
    return output


def _figures(weights: dict[str, np.ndarray], T: int) -> list:
    """Each implementation's attention weights of batch 0, head 0, as a heatmap."""
    positions = tuple(str(t) for t in range(T))
    return [
        HeatmapFigure(
            title=Msg(
                "attention weights, batch 0, head 0 ({impl}); the upper triangle must be 0",
                impl=implementation(name),
            ),
            name="attention-b0-h0",
            matrix=tuple(tuple(float(w) for w in row) for row in attn[0, 0]),
            impl=name,
            row_ticks=positions,
            col_ticks=positions,
        )
        for name, attn in weights.items()
    ]


LAB = Lab(
    id="causal-attention",
    title=N_("Causal attention, proved by assertions"),
    question=N_("Does the causal mask keep every position from reading its future, exactly?"),
    sections=(
        Section(
            PARTS,
            "§6.13",
            "动手：用断言验证注意力，而不是只看热力图",
            part="实验 03｜Causal Attention",
        ),
        Section(PARTS, "§6.2", "Q、K、V 的直觉"),
        Section(PARTS, "§6.3", "用形状理解注意力"),
        Section(HANDS_ON, "§02", "Q、K、V 是什么：从线性投影到语义角色"),
        Section(HANDS_ON, "§03", "Self-Attention 的完整数学推导"),
        Section(HANDS_ON, "§03.5", "最小 NumPy 版 Attention：完整实现与验证"),
        Section(CH8, "阶段二", "scaled dot-product attention 逐步算"),
        Section(
            CH8,
            "阶段六",
            "动手实验",
            part="每行 softmax 权重之和为 1；改动未来位置 token 不影响当前位置输出",
        ),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
)
