"""Residual ablation: what does `x + ...` buy, and where should the norm go?

The course (第8章 阶段四; 手撕 §06.8) says the residual gives the gradient a
straight lane: dL/dx_l = dL/dx_L (I + d/dx_l sum F), so "even if the sublayers'
gradient decays to 0, the identity I carries dL/dx_L undamped to the shallowest
layer", while without it the gradient is a product of L Jacobians that "easily
vanishes or explodes" (手撕 §06.8). It also says Pre-LN, x + F(LN(x)), keeps the
residual stream a pure sum, and Post-LN, LN(x + F(x)), makes the expected
gradient decay exponentially with depth at initialisation (第8章 阶段四).

Here the contract block is ablated on both implementations: remove either
residual and the output must move (the template's
`residual_ablation_max_output_delta`, > 1e-5); zero both branches and a
pre-norm block must return its input exactly; the block must equal its formula
composed from the implementation's own functions. Then, on the reference with
autograd, stacks of 2, 8 and 32 blocks at initialisation, with the residual
(pre-norm), without it, and post-norm: the gradient that reaches the first layer
relative to the gradient at the top, and the last layer's weight gradient.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field, model_validator

from labctl.course import CH8, HANDS_ON, PARTS, Section
from labctl.i18n import N_, Msg
from labctl.lab import (
    Lab,
    LabContext,
    LabOutput,
    LabParams,
    Metric,
    Note,
    TableFigure,
    reference_max_error,
    within_memory,
)
from labctl.memo import remember

DEPTHS = (2, 8, 32)
DEEPEST = DEPTHS[-1]
WEIGHTS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")


class Params(LabParams):
    B: int = Field(2, ge=1, le=64, description="batch size")
    T: int = Field(8, ge=1, le=512, description="sequence length")
    C: int = Field(32, ge=1, le=1024, description="model width")
    H: int = Field(4, ge=1, le=64, description="heads; must divide C")
    F: int = Field(64, ge=1, le=4096, description="SwiGLU hidden width")
    eps: float = Field(1e-6, gt=0, le=1.0, description="RMSNorm epsilon")

    @model_validator(mode="after")
    def _heads_divide_width(self) -> Params:
        if self.C % self.H:
            raise ValueError(Msg("H = {H} must divide C = {C}", H=self.H, C=self.C))
        # the gradients keep every block of the deepest stack for backward: per block, an
        # attention's scores and weights (3 of B x H x T x T), the SwiGLU's hidden (4 of
        # B x T x F) and the activations around them (10 of B x T x C), and its weights
        # (4C² + 3CF) three times: drawn, cloned for each depth, and their gradients
        per_block = self.B * self.T * (3 * self.H * self.T + 4 * self.F + 10 * self.C)
        weights = 4 * self.C**2 + 3 * self.C * self.F
        within_memory(
            f"{DEEPEST} x (B x T x (3HT + 4F + 10C) + 3 x (4C² + 3CF))",
            DEEPEST * (per_block + 3 * weights),
        )
        return self


METRICS = (
    Metric(
        "residual_ablation_max_output_delta", "abs", ">1e-5",
        N_("the course template's metric: largest |transformer_block(x) - ablated(x)|, where the "
        "ablated block is composed from the implementation's own rms_norm, multi_head_attention "
        "and swiglu_ffn with the attention residual, the FFN residual, or both removed; the "
        "smallest of the three, so each residual must matter"),
        why=N_("removing a residual takes away x (O(1) here), so a block with both residuals moves "
        "by ~1; a block that already lacks one matches that ablation exactly and gives 0"),
    ),
    Metric(
        "residual_identity_max_error", "abs", "<=1e-12",
        N_("largest |transformer_block(x) - x| with wo = 0 and w_down = 0: both branches output "
        "exactly 0, so a pre-norm block is the identity lane x + 0 + 0"),
        why=N_("x + 0.0 is exactly x in floating point; 1e-12 is slack only. A post-norm block "
        "returns rms_norm(x), a block without the residual returns 0"),
    ),
    Metric(
        "residual_block_formula_max_error", "abs", "<=1e-10",
        N_("largest |transformer_block(x) - (h + swiglu_ffn(rms_norm(h)))|, h = x + "
        "multi_head_attention(rms_norm(x)), composed from the implementation's own functions"),
        why=N_("the same float64 operations in the same order agree to rounding (~1e-15); a norm or "
        "residual in another place differs by O(1)"),
    ),
    Metric(
        "residual_reference_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference on the same inputs: transformer_block, its formula "
        "and the three ablations composed from each implementation's own functions"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-15); "
        "the rows above compare a room's block only with its own functions, so a room whose "
        "multi_head_attention and transformer_block both reverse the heads would pass them"),
    ),
    Metric(
        f"grad_ratio_pre_norm[depth={DEEPEST}]", "ratio", "in [1, 50]",
        Msg(
            "||dL/dx_0|| / ||dL/dx_L|| through {DEEPEST} pre-norm blocks at initialisation "
            "(autograd on the reference's own block): the gradient reaching the first layer "
            "relative to the gradient at the top",
            DEEPEST=DEEPEST,
        ),
        impls=("reference",),
        why=N_("the identity lane keeps the gradient from vanishing and the sum of branches grows "
        "it only slowly; seeds 0-199 gave 7.6 to 32 at depth 32, against 118 to 1.6e6 without "
        "the residual"),
    ),
    Metric(
        f"grad_ratio_no_residual[depth={DEEPEST}]", "ratio", ">50",
        Msg(
            "the same ratio through {DEEPEST} blocks with both residual adds removed",
            DEEPEST=DEEPEST,
        ),
        impls=("reference",),
        why=N_("without the lane the gradient is a product of 32 block Jacobians, exponential in "
        "depth; at this init their gain is above 1, so it explodes: seeds 0-199 gave 118 to "
        "1.6e6, against at most 32 with the residual"),
    ),
    Metric(
        f"grad_last_layer_post_over_pre[depth={DEEPEST}]", "ratio", ">2",
        Msg(
            "||dL/dW|| of the last block's seven weight matrices, post-norm over pre-norm, "
            "{DEEPEST} blocks at initialisation",
            DEEPEST=DEEPEST,
        ),
        impls=("reference",),
        why=N_("Xiong et al. 2020: the last layer's gradient is O(1) in depth for Post-LN but "
        "shrinks ~1/sqrt(L) for Pre-LN, so the ratio grows ~sqrt(32) = 5.7; seeds 0-199 gave "
        "3.4 to 7.2; 1 would mean the two blocks are the same"),
    ),
)  # fmt: skip


def _block_params(rng, p: Params, zero_branches: bool = False) -> dict[str, np.ndarray]:
    """One block at initialisation: fan-in scaled normal weights, RMSNorm gains of 1."""

    def weight(fan_in: int, fan_out: int) -> np.ndarray:
        return rng.standard_normal((fan_in, fan_out)) / math.sqrt(fan_in)

    C, F = p.C, p.F
    params = {
        "norm1": np.ones(C),
        "wq": weight(C, C),
        "wk": weight(C, C),
        "wv": weight(C, C),
        "wo": weight(C, C),
        "norm2": np.ones(C),
        "w_gate": weight(C, F),
        "w_up": weight(C, F),
        "w_down": weight(F, C),
    }
    if zero_branches:
        params["wo"] = np.zeros((C, C))
        params["w_down"] = np.zeros((F, C))
    return params


def _ablations(impl, x, params, p: Params) -> dict[str, np.ndarray]:
    """The block, its formula, and the three ablations, composed from `impl`'s own functions."""
    q = params

    def attention(z):
        normed = impl.rms_norm(z, q["norm1"], p.eps)
        return impl.multi_head_attention(normed, q["wq"], q["wk"], q["wv"], q["wo"], p.H)

    def ffn(z):
        return impl.swiglu_ffn(
            impl.rms_norm(z, q["norm2"], p.eps), q["w_gate"], q["w_up"], q["w_down"]
        )

    a = attention(x)
    h = x + a
    return {
        "block": impl.transformer_block(x, params, p.H, eps=p.eps),
        "formula": h + ffn(h),
        N_("no attention residual"): a + ffn(a),
        N_("no FFN residual"): ffn(h),
        N_("no residual"): ffn(a),
    }


def _block_t(kind: str, x, q, p: Params):
    """One block of a stack in torch: the reference's pre-norm block, the same with both
    residual adds removed, or post-norm (Vaswani 2017)."""
    from labctl.reference.primitives import rms_norm_t, swiglu_ffn_t
    from labctl.reference.transformer_block import block_t, mha_t

    def attention(z):
        return mha_t(z, q["wq"], q["wk"], q["wv"], q["wo"], p.H, p.H, True, None, None)

    def ffn(z):
        return swiglu_ffn_t(z, q["w_gate"], q["w_up"], q["w_down"])

    if kind == "pre-norm":  # the reference's own block: h = x + A(N(x)); h + F(N(h))
        return block_t(x, q, p.H, p.H, p.eps, None, None)
    if kind == "no residual":
        return ffn(rms_norm_t(attention(rms_norm_t(x, q["norm1"], p.eps)), q["norm2"], p.eps))
    h = rms_norm_t(x + attention(x), q["norm1"], p.eps)
    return rms_norm_t(h + ffn(h), q["norm2"], p.eps)


def _gradients(p: Params, seed: int) -> dict[tuple[str, int], tuple[float, float]]:
    """(first/top gradient ratio, last block's weight-gradient norm) per (variant, depth)."""
    import torch

    from labctl.reference.primitives import rms_norm_t

    rng = np.random.default_rng([seed, 1])
    x0 = torch.from_numpy(rng.standard_normal((p.B, p.T, p.C)))  # (B, T, C)
    readout = torch.from_numpy(rng.standard_normal((p.B, p.T, p.C)))  # fixed dL/d(normed output)
    stack = [
        {k: torch.from_numpy(v) for k, v in _block_params(rng, p).items()} for _ in range(DEEPEST)
    ]
    final_gain = torch.ones(p.C, dtype=torch.float64)

    found = {}
    for kind in ("pre-norm", "no residual", "post-norm"):
        for depth in DEPTHS:
            layers = [
                {k: v.clone().requires_grad_(k in WEIGHTS) for k, v in q.items()}
                for q in stack[:depth]
            ]
            x = x0.clone().requires_grad_(True)
            top = x
            for q in layers:
                top = _block_t(kind, top, q, p)
            top.retain_grad()
            normed = rms_norm_t(top, final_gain, p.eps)  # a final norm, as decoder_forward
            (normed * readout).sum().backward()
            ratio = float(x.grad.norm() / top.grad.norm())
            last = math.sqrt(sum(float(layers[-1][k].grad.pow(2).sum()) for k in WEIGHTS))
            found[(kind, depth)] = (ratio, last)
    return found


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    rng = np.random.default_rng(ctx.seed)
    x = rng.standard_normal((p.B, p.T, p.C))  # (B, T, C)
    params = _block_params(rng, p)
    zeroed = _block_params(rng, p, zero_branches=True)
    output = LabOutput()
    deltas_shown, composed = {}, {}
    for name, impl in ctx.impls.items():
        outs = _ablations(impl, x, params, p)
        composed[name] = list(outs.values())
        block = outs["block"]
        deltas = {
            key: float(np.max(np.abs(block - value)))
            for key, value in outs.items()
            if key not in ("block", "formula")
        }
        deltas_shown[name] = deltas
        weakest = min(deltas, key=deltas.get)
        output.add(
            "residual_ablation_max_output_delta", name, deltas[weakest], f"smallest: {weakest}"
        )
        identity = impl.transformer_block(x, zeroed, p.H, eps=p.eps)
        output.add("residual_identity_max_error", name, float(np.max(np.abs(identity - x))))
        output.add(
            "residual_block_formula_max_error", name, float(np.max(np.abs(block - outs["formula"])))
        )
    if ctx.both:
        error = reference_max_error(composed["reference"], composed["clean-room"])
        output.add("residual_reference_max_error", "both", error)
    grads = None
    if "reference" in ctx.impls:
        # A pure function of the parameters and the seed: computed once per grading worker.
        grads = remember(
            ("residual-ablation gradients", p.model_dump(), ctx.seed),
            lambda: _gradients(p, ctx.seed),
        )
        output.add(
            f"grad_ratio_pre_norm[depth={DEEPEST}]", "reference", grads[("pre-norm", DEEPEST)][0]
        )
        output.add(
            f"grad_ratio_no_residual[depth={DEEPEST}]",
            "reference",
            grads[("no residual", DEEPEST)][0],
        )
        post_over_pre = grads[("post-norm", DEEPEST)][1] / grads[("pre-norm", DEEPEST)][1]
        output.add(f"grad_last_layer_post_over_pre[depth={DEEPEST}]", "reference", post_over_pre)
    output.figures += _figures(deltas_shown, grads)
    return output


def _figures(deltas_shown: dict[str, dict[str, float]], grads) -> list:
    """The ablations' deltas per implementation; with the reference's gradients (`grads`,
    None without the reference), their table by depth and the notes."""
    figures: list = [
        TableFigure(
            title=N_(
                "largest |block(x) - ablated(x)| for each ablation (the template metric is the "
                "smallest)"
            ),
            columns=(N_("ablation"), *deltas_shown),
            rows=tuple(
                (key, *(deltas_shown[name][key] for name in deltas_shown))
                for key in next(iter(deltas_shown.values()))
            ),
        )
    ]
    if grads is None:
        return figures
    figures.append(
        TableFigure(
            title=N_(
                "at initialisation (reference, autograd): ||dL/dx_0|| / ||dL/dx_L|| and the "
                "last block's weight gradient ||dL/dW_L||"
            ),
            columns=(
                N_("depth"),
                N_("ratio pre-norm"),
                N_("ratio no residual"),
                N_("ratio post-norm"),
                N_("dW_L pre-norm"),
                N_("dW_L post-norm"),
                N_("dW_L post/pre"),
            ),
            rows=tuple(
                (
                    str(depth),
                    grads[("pre-norm", depth)][0],
                    grads[("no residual", depth)][0],
                    grads[("post-norm", depth)][0],
                    grads[("pre-norm", depth)][1],
                    grads[("post-norm", depth)][1],
                    grads[("post-norm", depth)][1] / grads[("pre-norm", depth)][1],
                )
                for depth in DEPTHS
            ),
        )
    )
    return figures + _figure_notes(grads)


def _figure_notes(grads) -> list[Note]:
    pre, none, post = (
        grads[(kind, DEEPEST)][0] for kind in ("pre-norm", "no residual", "post-norm")
    )
    direction = Msg("explodes") if none > 1 else Msg("vanishes")
    notes = [
        Note(
            Msg(
                "Without the residual the gradient {direction}: through {DEEPEST} blocks it is "
                "{none:.3g}x the top's, a product of {DEEPEST} block Jacobians. 第8章 · Attention 与 Transformer Block 阶段四 (梯度断流) and "
                "Transformer 手撕与注意力机制 §06.8's O(α^L) speak of decay; Transformer 手撕与注意力机制 §06.8 also says the product 'easily vanishes or "
                "explodes', and at this init (fan-in weights, unit norm gains) α > 1. With the "
                "residual the ratio is {pre:.3g}: the identity lane keeps the gradient from vanishing "
                "and the sum of branches grows it only slowly.",
                direction=direction,
                DEEPEST=DEEPEST,
                none=none,
                pre=pre,
            )
        )
    ]
    if post >= 0.1:
        notes.append(
            Note(
                Msg(
                    "The course (第8章 · Attention 与 Transformer Block 阶段四) says Post-LN's expected gradient decays exponentially with depth "
                    "at initialisation. Measured here (RMSNorm, SwiGLU, causal attention, fan-in init), "
                    "the gradient reaching the first of {DEEPEST} post-norm blocks is {post:.3g}x the "
                    "top's: no exponential decay. What Xiong et al. (2020, On Layer Normalization in the "
                    "Transformer Architecture) showed is about the last layer: its weight gradient stays "
                    "O(1) in depth for Post-LN but shrinks ~1/sqrt(L) for Pre-LN, so Post-LN starts with "
                    "larger updates at the top and needs warmup; the dW_L column shows it.",
                    DEEPEST=DEEPEST,
                    post=post,
                ),
                flag=True,
            )
        )
    else:
        notes.append(
            Note(
                Msg(
                    "As the course (第8章 · Attention 与 Transformer Block 阶段四) says, the post-norm gradient decays with depth: through "
                    "{DEEPEST} post-norm blocks it is {post:.3g}x the top's.",
                    DEEPEST=DEEPEST,
                    post=post,
                )
            )
        )
    return notes


LAB = Lab(
    id="residual-ablation",
    title=N_("Residual ablation: the identity lane, and pre-norm vs post-norm at initialisation"),
    question=N_(
        "Does each residual change the block's output, is the identity lane exact, and "
        "does the gradient reach the first of 32 layers with and without it?"
    ),
    sections=(
        Section(CH8, "阶段四", "组装 Transformer Block"),
        Section(CH8, "阶段六", "动手实验", part="去 residual 最大输出差 1.732…"),
        Section(HANDS_ON, "§06.8", "残差连接与深度稳定性"),
        Section(PARTS, "§6.9", "残差连接"),
        Section(HANDS_ON, "§6.4", "Pre-Norm vs Post-Norm"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
)
