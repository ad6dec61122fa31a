"""Looking inside attention: per-head heatmaps, entropy, padding, and dilution with length.

Transformer 手撕与注意力机制 §10 plots attention weights as a heatmap with the
tokens on both axes and names the patterns (local, global, diagonal, flat);
§13.2 asks for a function giving each token's "attention entropy", higher
when attention is spread; §4.3 combines the padding mask with the causal
mask (combined_mask = causal_mask | padding_mask); §11.2 says attention is a
zero-sum game, so the weight of one piece of evidence falls from ~0.1 to
~0.001 as the context grows from 100 to 10000 tokens.

Here a small decoder (its blocks composed from the contract's functions) runs
over the course's example sentence and every head of every layer is shown with
the tokens as labels; the entropy of each row is bounded by log(visible keys);
a padded batch checks that padded keys get weight 0 and a fully blocked row
gives zeros, and a mask broadcast along the query axis leaks; a query that
favours one key by a fixed margin shows the dilution, against the closed form.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from labctl.course import HANDS_ON, Section
from labctl.i18n import N_, Msg, implementation
from labctl.lab import (
    HeatmapFigure,
    Lab,
    LabContext,
    LabOutput,
    LabParams,
    Metric,
    Note,
    TableFigure,
)

SENTENCE = ("用", "户", "想", "要", "退", "款", "但", "是", "不", "知", "道", "流", "程")  # §10.3
DILUTION_T = (100, 1000, 10000)  # §11.2's lengths
EVIDENCE_MARGIN = math.log(11.0)  # weight 11 / (11 + 99) = 0.1 at T = 100, as §11.2 says


class Params(LabParams):
    tokens: tuple[str, ...] = Field(
        SENTENCE, min_length=2, max_length=32, description=N_("the labelled tokens to inspect")
    )
    C: int = Field(16, ge=2, le=128, description=N_("model width"))
    H: int = Field(2, ge=1, le=8, description=N_("heads"))
    L: int = Field(2, ge=1, le=4, description=N_("layers"))
    F: int = Field(32, ge=1, le=256, description=N_("SwiGLU hidden width"))
    head_scales: tuple[float, ...] = Field(
        (4.0, 0.25),
        min_length=1,
        description=N_("query scale of each head: > 1 sharpens it, < 1 flattens it"),
    )
    lengths: tuple[int, ...] = Field(
        (8, 5, 0), min_length=1, description=N_("real lengths of the padded batch")
    )
    T_pad: int = Field(8, ge=1, le=64, description=N_("padded length of the batch"))  # fmt: skip


METRICS = (
    Metric(
        "entropy_bound_violations", "rows", "==0",
        N_("attention rows of the decoder whose entropy -Σ w log w lies outside [0, log(i + 1)] "
           "(query i sees i + 1 keys) or whose weights do not sum to 1 (within 1e-12)"),
        why=N_("a distribution over n keys has entropy between 0 and log n: exact up to "
               "rounding (1e-12 slack); a query that sees the future breaks the bound at row 0"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "entropy_vs_reference", "nats", "<=1e-10",
        N_("max |entropy| difference per row and head between the clean room and the reference"),
        impls=("both",),
        why=N_("the same float64 model composed the same way: ~1e-14"),
    ),
    Metric(
        "padded_key_weight_max", "weight", "==0",
        N_("largest weight any query gives a padded key, with causal | padding and with padding "
           "alone, lengths 8, 5, 0"),
        why=N_("blocked keys get exp(-inf) = 0: exactly 0, not small"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "blocked_row_max_abs", "abs", "==0",
        N_("largest |weight| or |output| in rows whose keys are all blocked (the length-0 "
           "sequence); NaN fails"),
        why=N_("the contract: a fully blocked row gives zero weights and a zero output, never "
               "NaN"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "wrong_axis_leak", "weight", ">0.01",
        N_("largest weight on a padded key when the padding mask (alone, as in an encoder) is "
           "broadcast along the query axis ((B, 1, t, 1), swapped from padding_mask's "
           "(B, 1, 1, t))"),
        why=N_("the wrong axis blocks padded queries and leaves padded keys visible: real "
               "tokens give them O(1/t) weight. No leak means padding_mask itself has the "
               "wrong axis"),
    ),
    Metric(
        "dilution_weight_error", "abs", "<=1e-12",
        N_("weight of one key favoured by a score margin log 11 among T = 100, 1000, 10000 "
           "equal keys, read off scaled_dot_product_attention (D = 4), minus e^m / (e^m + T - 1)"),
        why=N_("the closed form of the softmax: float64 rounding ~1e-17; a wrong scale moves the "
               "margin and the weight by O(0.1)"),
    ),
)  # fmt: skip


def entropy(weights: np.ndarray) -> np.ndarray:
    """The chapter's attention entropy per row: -Σ_j w log w, with 0 log 0 = 0 (nats)."""
    logs = np.log(np.where(weights > 0, weights, 1.0))
    return -np.sum(weights * logs, axis=-1)


def _model(rng, p: Params) -> tuple[np.ndarray, list[dict]]:
    C, D = p.C, p.C // p.H
    blocks = []
    for _ in range(p.L):
        # Head h's queries scaled by head_scales[h]: sharper or flatter heads.
        scales = np.repeat(np.asarray(p.head_scales), D)  # (H * D,)
        blocks.append({
            "norm1": np.ones(C), "norm2": np.ones(C),
            "wq": rng.standard_normal((C, C)) / math.sqrt(C) * scales,
            "wk": rng.standard_normal((C, C)) / math.sqrt(C),
            "wv": rng.standard_normal((C, C)) / math.sqrt(C),
            "wo": rng.standard_normal((C, C)) / math.sqrt(C),
            "w_gate": rng.standard_normal((C, p.F)) / math.sqrt(C),
            "w_up": rng.standard_normal((C, p.F)) / math.sqrt(C),
            "w_down": rng.standard_normal((p.F, C)) / math.sqrt(p.F),
        })  # fmt: skip
    return rng.standard_normal((len(p.tokens), C)), blocks


def _weights(impl, embed, blocks, p: Params) -> list[np.ndarray]:
    """Each layer's attention weights (H, T, T), through blocks composed from contract functions."""
    T = len(p.tokens)
    x = (embed + impl.sinusoidal_positions(T, p.C))[None]  # (1, T, C)
    mask = impl.causal_mask(T)
    layers = []
    for b in blocks:
        xn = impl.rms_norm(x, b["norm1"])
        q, k, v = (impl.split_heads(xn @ b[w], p.H) for w in ("wq", "wk", "wv"))  # (1, H, T, D)
        out, weights = impl.scaled_dot_product_attention(q, k, v, mask)
        layers.append(weights[0])
        x = x + impl.merge_heads(out) @ b["wo"]  # (1, T, C)
        x = x + impl.swiglu_ffn(impl.rms_norm(x, b["norm2"]), b["w_gate"], b["w_up"], b["w_down"])
    return layers


def _padding(impl, rng, p: Params) -> tuple[float, float, float]:
    """(max weight on a padded key, max |blocked row|, max leak with the mask on the query axis)."""
    B, T, D = len(p.lengths), p.T_pad, 4
    q, k, v = (rng.standard_normal((B, 2, T, D)) for _ in range(3))  # (B, H, T, D)
    lengths = np.asarray(p.lengths)
    padding = np.asarray(impl.padding_mask(lengths, T))  # (B, 1, 1, T)
    causal = np.asarray(impl.causal_mask(T))  # (T, T)
    padded_key = (np.arange(T)[None, :] >= lengths[:, None])[:, None, None, :]  # (B, 1, 1, T)
    on_padded, blocked = 0.0, 0.0
    # Causal | padding as in a decoder, and padding alone as in an encoder (BERT, §10.3).
    for mask in (causal | padding, padding):
        out, weights = impl.scaled_dot_product_attention(q, k, v, mask)
        # np.max, not max(): a NaN must reach the verdict, and max(0.0, nan) is 0.0.
        on_padded = float(np.max([on_padded, np.max(weights * padded_key)]))
        dead = np.broadcast_to(np.broadcast_to(mask, (B, 1, T, T)).all(axis=-1), weights.shape[:3])
        blocked = float(
            np.max(
                [
                    blocked,
                    np.max(np.abs(weights[dead]), initial=0.0),
                    np.max(np.abs(out[dead]), initial=0.0),
                ]
            )
        )
    # Right padding under a causal mask hides the leak (real queries never reach the padded
    # tail); without it, a mask on the query axis lets real tokens read [PAD].
    _, leaky = impl.scaled_dot_product_attention(q, k, v, padding.swapaxes(-1, -2))
    return on_padded, blocked, float(np.max(leaky * padded_key))


def _dilution(impl) -> dict[int, float]:
    """Weight on the favoured key among T, read off attention with V = one-hot of that key."""
    measured = {}
    for T in DILUTION_T:
        q = np.zeros((1, 1, 1, 4))
        q[..., 0] = 2.0  # scale 1/sqrt(4) = 1/2: scores are k[..., 0]
        k = np.zeros((1, 1, T, 4))
        k[0, 0, T // 2, 0] = EVIDENCE_MARGIN  # the evidence sits in the middle
        v = np.zeros((1, 1, T, 1))
        v[0, 0, T // 2, 0] = 1.0
        out, _ = impl.scaled_dot_product_attention(q, k, v)
        measured[T] = float(out[0, 0, 0, 0])
    return measured


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    if p.C % p.H or len(p.head_scales) != p.H or max(p.lengths) > p.T_pad:
        raise ValueError("need C % H == 0, one head scale per head and lengths <= T_pad")
    rng = np.random.default_rng(ctx.seed)
    embed, blocks = _model(rng, p)
    pad_rng_state = rng.bit_generator.state
    output = LabOutput()
    T = len(p.tokens)
    limit = np.log(np.arange(1, T + 1))  # (T,): log of the keys query i sees
    entropies, dilution, padding, maps = {}, {}, {}, {}
    for name, impl in ctx.impls.items():
        layers = _weights(impl, embed, blocks, p)
        entropies[name] = np.stack([entropy(w) for w in layers])  # (L, H, T)
        sums = np.stack([w.sum(axis=-1) for w in layers])
        bad = (
            (entropies[name] < -1e-12)
            | (entropies[name] > limit + 1e-12)
            | (np.abs(sums - 1) > 1e-12)
        )
        output.add("entropy_bound_violations", name, int(bad.sum()))
        maps[name] = layers
        rng.bit_generator.state = pad_rng_state  # the same padded batch for every implementation
        padding[name] = _padding(impl, rng, p)
        output.add("padded_key_weight_max", name, padding[name][0])
        output.add("blocked_row_max_abs", name, padding[name][1])
        output.add("wrong_axis_leak", name, padding[name][2])
        dilution[name] = _dilution(impl)
        closed = {
            t: math.exp(EVIDENCE_MARGIN) / (math.exp(EVIDENCE_MARGIN) + t - 1) for t in DILUTION_T
        }
        output.add(
            "dilution_weight_error",
            name,
            max(abs(dilution[name][t] - closed[t]) for t in DILUTION_T),
        )
    if ctx.both:
        diff = float(np.max(np.abs(entropies["reference"] - entropies["clean-room"])))
        output.add("entropy_vs_reference", "both", diff)
    output.figures += _figures(p, maps, entropies, padding, dilution, limit)
    return output


def _figures(p: Params, maps, entropies, padding, dilution, limit) -> list:
    """Every head's heatmap, the mean entropy per head, the padding and dilution tables."""
    names = tuple(maps)
    figures: list = [
        HeatmapFigure(
            title=Msg("layer {l}, head {h}: attention weights (query scale {s:g})",
                      l=layer + 1, h=head + 1, s=p.head_scales[head]),
            name=f"attention-layer{layer + 1}-head{head + 1}",
            matrix=tuple(tuple(float(v) for v in row) for row in weights[head]),
            impl=name, row_ticks=p.tokens, col_ticks=p.tokens,
        )
        for name, layers in maps.items()
        for layer, weights in enumerate(layers)
        for head in range(p.H)
    ]  # fmt: skip
    ceiling = float(limit.mean())
    figures.append(
        TableFigure(
            title=Msg("mean attention entropy per head (nats); a uniform causal head would have "
                      "{ceiling:.3f}: 'sharp' below 60% of it", ceiling=ceiling),
            columns=(N_("layer"), N_("head"), N_("query scale"),
                     *(Msg("entropy, {impl}", impl=implementation(n)) for n in names), N_("pattern")),
            rows=tuple(
                (str(layer + 1), str(h + 1), p.head_scales[h],
                 *(float(entropies[n][layer, h].mean()) for n in names),
                 N_("sharp") if entropies[names[0]][layer, h].mean() < 0.6 * ceiling
                 else N_("diffuse"))
                for layer in range(p.L) for h in range(p.H)
            ),
        )
    )  # fmt: skip
    figures.append(
        TableFigure(
            title=N_("padding (§4.3): a batch of lengths 8, 5, 0, with causal | padding and "
                     "with padding alone"),
            columns=(N_("implementation"), N_("max weight on a padded key"),
                     N_("max |blocked row|"), N_("leak, mask on the query axis")),
            rows=tuple((n, *padding[n]) for n in names),
        )
    )  # fmt: skip
    figures.append(
        TableFigure(
            title=N_("dilution (§11.2): weight of one key favoured by a margin log 11 among "
                     "T keys"),
            columns=("T", N_("closed form 11 / (10 + T)"),
                     *(Msg("measured, {impl}", impl=implementation(n)) for n in names), N_("the chapter")),
            rows=tuple(
                (str(t), 11 / (10 + t), *(dilution[n][t] for n in names),
                 {100: "~0.1", 10000: "~0.001"}.get(t, ""))
                for t in DILUTION_T
            ),
        )
    )  # fmt: skip
    figures.append(
        Note(
            N_(
                "Entropy reads a heatmap in one number: near 0 the row looks at one key "
                "(diagonal or anchor patterns, §10.1), near log(i + 1) it spreads evenly (the "
                "'flat' pattern of §10.2). The dilution rows follow the chapter: at a fixed "
                "margin the evidence's weight falls as 1/T, ~0.1 at 100 tokens and ~0.001 at "
                "10,000."
            )
        )
    )
    return figures


LAB = Lab(
    id="attention-inspect",
    title=N_("Looking inside attention: heatmaps, entropy, padding and dilution"),
    question=N_(
        "What does each head of a small decoder attend to, how sharp or diffuse is it, "
        "do padded keys get exactly zero weight, and how does one key's weight dilute "
        "as the context grows?"
    ),
    sections=(
        Section(HANDS_ON, "§10", "从注意力矩阵看模型行为：可视化与测试启发"),
        Section(HANDS_ON, "§11", "长上下文为什么更容易失忆和偏航"),
        Section(HANDS_ON, "§13.2", "代码题"),
        Section(HANDS_ON, "§4.3", "Padding Mask vs Causal Mask"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
)
