"""Multi-head attention: the shape chain, per-head parity, and the head-axis fault.

第8章 阶段三 walks the chain (B, T, C) → view (B, T, H, D) → transpose
(B, H, T, D) → scores (B, H, T, T) → (B, H, T, D) → transpose back and view
(B, T, C), and its 本章验收 asks the learner to explain every step; 手撕 §05
and 逐部件讲透 §6.5 split C into H heads of D = C / H and concatenate them again
before W_O. Its fault table (故障注入与预期信号) lists "head 与序列维混淆":
a reshape without the transpose, which keeps the shapes right and mixes
positions across heads.

Here the chain runs with the implementation's own split_heads,
scaled_dot_product_attention and merge_heads, printing the shape at each
step. split then merge must give back the input exactly; each head's output
must equal single-head attention on that head's slice of W_Q, W_K, W_V (the
per-head loop of the paper's formula, written out here); the future must not
leak. Then the parameter count of the chapter's sizes, recomputed.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from labctl.course import CH8, HANDS_ON, PARTS, Section
from labctl.errors import CallError
from labctl.i18n import N_, Msg, implementation
from labctl.lab import Lab, LabContext, LabOutput, LabParams, Metric, Note, TableFigure, larger

CHAPTER_SIZES = (
    # (section, d_model, heads, the count the chapter prints)
    ("Transformer 手撕与注意力机制 §5.3", 512, 8, 1_048_576),
    ("Transformer 手撕与注意力机制 §13.4", 2048, 16, 16_777_216),
)


class Params(LabParams):
    B: int = Field(2, ge=1, le=8, description=N_("batch"))
    T: int = Field(6, ge=2, le=32, description=N_("tokens; differs from H so a swapped axis shows"))
    C: int = Field(16, ge=2, le=256, description=N_("model width, a multiple of H"))
    H: int = Field(4, ge=1, le=16, description=N_("heads"))


METRICS = (
    Metric(
        "mh_shape_chain_matches", "bool", "==1",
        N_("1 when every step of the chain has the chapter's shape: split_heads (B, H, T, D), "
           "weights (B, H, T, T), head outputs (B, H, T, D), merge_heads (B, T, C)"),
        why=N_("a shape is right or wrong"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "mh_split_merge_roundtrip_error", "abs", "==0",
        N_("largest |merge_heads(split_heads(x)) - x|: a reshape and its inverse move numbers, "
           "never change them"),
        why=N_("no arithmetic happens: exactly 0"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "mh_positions_mixed", "count", "==0",
        N_("(head, position) slots of split_heads(x) holding features of another position, "
           "probed with x[b, t, :] = t"),
        why=N_("split_heads only regroups features of one token: any other position is the "
               "head-axis fault"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "mh_per_head_parity_error", "abs", "<=1e-12",
        N_("multi_head_attention against the per-head loop written out: single-head causal "
           "attention on x W_Q[:, hD:(h+1)D] etc. for each h, concatenated, then W_O"),
        why=N_("the same float64 sums: ~1e-16; mixed heads or positions: O(0.1)"),
    ),
    Metric(
        "mh_future_leak", "abs", "<=1e-12",
        N_("largest change of multi_head_attention at positions <= t when every input after t "
           "is perturbed, over all t"),
        why=N_("masked keys contribute exactly 0; a head axis swapped with the sequence lets "
               "later tokens in"),
    ),
    Metric(
        "mh_reference_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference over every output of this lab"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-15)"),
    ),
)  # fmt: skip


def per_head_loop(x: np.ndarray, wq, wk, wv, wo, H: int) -> np.ndarray:
    """The paper's MultiHead = Concat(head_1..head_H) W_O, one causal head at a time."""
    B, T, C = x.shape
    D = C // H
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    heads = []
    for h in range(H):
        cols = slice(h * D, (h + 1) * D)
        q, k, v = x @ wq[:, cols], x @ wk[:, cols], x @ wv[:, cols]  # (B, T, D) each
        scores = np.where(future, -np.inf, q @ k.transpose(0, 2, 1) / math.sqrt(D))  # (B, T, T)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        heads.append(weights @ v)  # (B, T, D)
    return np.concatenate(heads, axis=-1) @ wo  # (B, T, C)


def _future_leak(impl, x, weights, noise, H: int) -> float:
    base = impl.multi_head_attention(x, *weights, H)
    worst = 0.0
    for t in range(x.shape[1] - 1):
        moved = x.copy()
        moved[:, t + 1 :] += noise[:, t + 1 :]
        out = impl.multi_head_attention(moved, *weights, H)
        worst = larger(worst, float(np.max(np.abs(out[:, : t + 1] - base[:, : t + 1]))))
    return worst


# The chapter's steps, as the shape table labels them (one shape each, in `_chain`).
STEPS = (
    "x",
    "Q = x @ W_Q",
    "view (B, T, H, D)",
    "split_heads: transpose(1, 2)",
    N_("scores / weights"),
    N_("weights @ V"),
    "merge_heads",
    "@ W_O",
)


def _chain(impl, p: Params, x, weights) -> tuple[list[tuple[str, tuple, tuple | None]], dict]:
    """The chapter's steps with this implementation's functions; stops at the first wrong shape."""
    B, T, C, H = p.B, p.T, p.C, p.H
    D = C // H
    wq, wk, wv, wo = weights
    shapes = [
        (B, T, C),
        (B, T, C),
        (B, T, H, D),
        (B, H, T, D),
        (B, H, T, T),
        (B, H, T, D),
        (B, T, C),
        (B, T, C),
    ]
    expected = list(zip(STEPS, shapes, strict=True))
    have: list[tuple | None] = [x.shape, (x @ wq).shape, (x @ wq).reshape(B, T, H, D).shape]
    kept: dict[str, np.ndarray] = {}
    q = impl.split_heads(x @ wq, H)  # (B, H, T, D)
    have.append(q.shape)
    if q.shape == (B, H, T, D):
        k, v = impl.split_heads(x @ wk, H), impl.split_heads(x @ wv, H)
        heads, attn = impl.scaled_dot_product_attention(q, k, v, impl.causal_mask(T))
        merged = impl.merge_heads(heads)  # (B, T, C)
        have += [attn.shape, heads.shape, merged.shape]
        if merged.shape == (B, T, C):
            kept["out"] = merged @ wo
            have.append(kept["out"].shape)
    have += [None] * (len(expected) - len(have))
    return [(step, want, got) for (step, want), got in zip(expected, have, strict=True)], kept


def _guard(compute) -> tuple[float, str]:
    """A metric's value, or NaN and the reason when the implementation refuses the call."""
    try:
        return float(compute()), ""
    except (CallError, ValueError) as exc:
        return math.nan, f"call failed: {exc}"


def _measure(impl, p: Params, x, weights, noise):
    B, T, C, H = p.B, p.T, p.C, p.H
    D = C // H
    chain, kept = _chain(impl, p, x, weights)
    got = {"mh_shape_chain_matches": (float(all(want == have for _, want, have in chain)), "")}
    got["mh_split_merge_roundtrip_error"] = _guard(
        lambda: np.max(np.abs(impl.merge_heads(impl.split_heads(x, H)) - x))
    )
    probe = np.broadcast_to(np.arange(T, dtype=np.float64)[None, :, None], (B, T, C)).copy()
    split = np.asarray(impl.split_heads(probe, H))
    source = split[0] if split.shape == (B, H, T, D) else None  # (H, T, D): positions
    mixed = H * T if source is None else np.sum(np.any(source != np.arange(T)[None, :, None], -1))
    got["mh_positions_mixed"] = (float(mixed), "")

    def parity() -> float:
        kept["mha"] = impl.multi_head_attention(x, *weights, H)
        return np.max(np.abs(kept["mha"] - per_head_loop(x, *weights, H)))

    got["mh_per_head_parity_error"] = _guard(parity)
    got["mh_future_leak"] = _guard(lambda: _future_leak(impl, x, weights, noise, H))
    return got, kept, chain, source


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    if p.C % p.H:
        raise ValueError(f"C = {p.C} is not a multiple of H = {p.H}")
    rng = np.random.default_rng(ctx.seed)
    x = rng.standard_normal((p.B, p.T, p.C))  # (B, T, C)
    weights = [rng.standard_normal((p.C, p.C)) / math.sqrt(p.C) for _ in range(4)]
    noise = rng.standard_normal((p.B, p.T, p.C))
    output = LabOutput()
    kept, chains, sources = {}, {}, {}
    for name, impl in ctx.impls.items():
        got, kept[name], chains[name], sources[name] = _measure(impl, p, x, weights, noise)
        for metric, (value, note) in got.items():
            output.add(metric, name, value, note)
    if ctx.both:
        ref, room = kept["reference"], kept["clean-room"]
        gaps = [np.max(np.abs(ref[k] - room[k])) if k in room else np.inf for k in ref]
        output.add("mh_reference_max_error", "both", float(max(gaps)))
    output.figures += _figures(p, chains, sources)
    return output


def _figures(p: Params, chains: dict[str, list], sources: dict[str, np.ndarray | None]) -> list:
    """The shape chain per implementation, where split_heads put each position, the
    chapter's parameter counts and the note on them."""
    names = list(chains)
    first = chains[names[0]]
    figures: list = [
        TableFigure(
            title=Msg(
                "the shape chain of 第8章 阶段三 at B = {B}, T = {T}, C = {C}, H = {H} (D = {D})",
                B=p.B, T=p.T, C=p.C, H=p.H, D=p.C // p.H,
            ),
            columns=(N_("step"), N_("chapter's shape"), *names),
            rows=tuple(
                (step, str(want), *(str(chains[n][i][2] or "-") for n in names))
                for i, (step, want, _) in enumerate(first)
            ),
        )
    ]  # fmt: skip
    for name in names:
        source = sources[name]
        if source is None:
            continue
        figures.append(
            TableFigure(
                title=Msg(
                    "{impl}: the position whose features split_heads put in each (head, "
                    "position) slot (x[b, t, :] = t); every column must read its own position",
                    impl=implementation(name),
                ),
                columns=(N_("head"), *(f"t={t}" for t in range(p.T))),
                rows=tuple(
                    (f"h={h}", *(_figure_positions(source[h, t]) for t in range(p.T)))
                    for h in range(p.H)
                ),
            )
        )  # fmt: skip
    figures.append(
        TableFigure(
            title=N_("parameters of one multi-head attention layer, no bias: W_Q, W_K, W_V, W_O "
                     "each d_model x d_model"),
            columns=(N_("section"), "d_model", "h", "d_k", N_("4 x d_model²"), N_("chapter")),
            rows=tuple(
                (where, str(d), str(h), str(d // h), f"{4 * d * d:,}", f"{printed:,}")
                for where, d, h, printed in CHAPTER_SIZES
            ),
        )
    )  # fmt: skip
    figures.append(
        Note(
            N_(
                "The count does not depend on h: splitting into heads regroups the same C x C "
                "projections, which is why the chapter's 8 heads of 512 x 64 equal one 512 x 512 "
                "matrix."
            )
        )
    )
    return figures


def _figure_positions(features: np.ndarray) -> str:
    """The positions whose features fill one (head, position) slot, as '3' or '1,5'."""
    found = sorted({int(v) for v in np.asarray(features).ravel()})
    return ",".join(str(v) for v in found)


LAB = Lab(
    id="multi-head",
    title=N_("Multi-head attention: the shape chain and the head axis"),
    question=N_(
        "Does splitting into heads and merging them back keep every position's features "
        "in its own row, and does each head compute single-head attention on its slice?"
    ),
    sections=(
        Section(CH8, "阶段三", "多头注意力——同时看好几种关系"),
        Section(CH8, "阶段六", "动手实验", part="多头拆分再拼回"),
        Section(HANDS_ON, "§05", "Multi-Head Attention 深度剖析"),
        Section(PARTS, "§6.5", "多头注意力"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
)
