"""The learner's attention entropy: against the chapter's formula, bounded by 0 and log T.

Transformer 手撕与注意力机制 §13.2's third code exercise: "写一个函数，接受注意力
权重矩阵，输出每个 token 的"注意力熵"——熵越高说明注意力越分散". Contract v2's
`attention_entropy(weights, axis=-1)` is that function: -Σ w ln w over `axis`,
with 0 ln 0 = 0, so a fully blocked (all-zero) row has entropy 0.

The weights are the attention-inspect lab's decoder (a sharp and a flat head
over the course's sentence), made by each implementation. Each row's entropy is
checked against the formula written out, against its bounds (0, and log of the
number of keys the row sees: log(i + 1) under the causal mask), along the other
axis, and on the rows a padded batch blocks entirely.
"""

from __future__ import annotations

import numpy as np

from labctl.course import HANDS_ON, Section
from labctl.i18n import N_, Msg
from labctl.lab import Lab, LabContext, LabOutput, Metric, Note, TableFigure
from labctl.labs.attention_inspect import Params, _model, _weights
from labctl.labs.attention_inspect import entropy as written

METRICS = (
    Metric(
        "entropy_max_error", "nats", "<=1e-12",
        N_("max |attention_entropy(weights) - (-Σ w ln w) written out| over every row, head and "
           "layer of the decoder, along axis -1 and (transposed) along axis -2"),
        why=N_("one float64 sum two ways: rounding only (~1e-16); log2 instead of ln is off by "
               "44%, an ignored axis by O(1)"),
    ),
    Metric(
        "entropy_fn_bound_violations", "rows", "==0",
        N_("rows whose attention_entropy lies outside [0, log(visible keys)] (query i sees i + 1 "
           "keys)"),
        why=N_("a distribution over n keys has entropy between 0 and log n: exact up to rounding "
               "(1e-12 allowed); entropy in bits exceeds log n on flat rows"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "entropy_blocked_row_max_abs", "nats", "==0",
        N_("max |attention_entropy| over the fully blocked (all-zero) rows of a padded batch"),
        why=N_("0 ln 0 = 0 by the contract: exactly 0; w · log(w) computed as it stands is NaN"),
    ),
    Metric(
        "entropy_reference_max_error", "nats", "<=1e-10",
        N_("max |clean room - reference| over the entropies of the reference's weights"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-16)"),
    ),
)  # fmt: skip


LENGTHS = (0, 2)  # with T: a padded batch whose last sequence is empty (every row blocked)


def _blocked(impl, T: int) -> np.ndarray:
    """Weights (3, 1, T, T) of a padded batch of lengths T, 2 and 0 under causal | padding."""
    q = np.ones((3, 1, T, 4))  # (B, H, T, D)
    lengths = np.array([T, *LENGTHS])
    mask = np.asarray(impl.causal_mask(T)) | np.asarray(impl.padding_mask(lengths, T))
    _, weights = impl.scaled_dot_product_attention(q, q, q, mask)
    return np.asarray(weights)


def _dead(T: int) -> np.ndarray:
    """(3, 1, T): the rows `_blocked`'s mask blocks everywhere, from the masks' definitions
    (never from the room's weights: a finite fill leaves none of them all zero)."""
    j = np.arange(T)
    causal = j[None, :] > j[:, None]  # (T, T)
    padding = j[None, :] >= np.array([T, *LENGTHS])[:, None]  # (3, T)
    return (causal[None] | padding[:, None, :]).all(axis=-1)[:, None, :]


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    if p.C % p.H or len(p.head_scales) != p.H:
        raise ValueError("need C % H == 0 and one head scale per head")
    embed, blocks = _model(np.random.default_rng(ctx.seed), p)
    T = len(p.tokens)
    limit = np.log(np.arange(1, T + 1))  # (T,): log of the keys query i sees
    output = LabOutput()
    kept: dict[str, np.ndarray] = {}
    for name, impl in ctx.impls.items():
        weights = np.stack(_weights(impl, embed, blocks, p))  # (L, H, T, T)
        got = np.asarray(impl.attention_entropy(weights))  # (L, H, T)
        across = np.asarray(impl.attention_entropy(np.swapaxes(weights, -1, -2), axis=-2))
        want = written(weights)
        errors = [np.abs(g - want) if g.shape == want.shape else np.inf for g in (got, across)]
        output.add("entropy_max_error", name, float(np.max([np.max(e) for e in errors])))
        bad = (got < -1e-12) | (got > limit + 1e-12) if got.shape == want.shape else np.ones(1)
        output.add("entropy_fn_bound_violations", name, int(np.sum(bad)))
        blocked_entropy = np.asarray(impl.attention_entropy(_blocked(impl, T)))  # (B, 1, T)
        output.add(
            "entropy_blocked_row_max_abs", name,
            float(np.max(np.abs(blocked_entropy[_dead(T)]), initial=0.0)),
        )  # fmt: skip
        kept[name] = got
    if ctx.both:
        weights = np.stack(_weights(ctx.impls["reference"], embed, blocks, p))
        ref, room = (np.asarray(ctx.impls[n].attention_entropy(weights)) for n in kept)
        gap = float(np.max(np.abs(ref - room))) if ref.shape == room.shape else np.inf
        output.add("entropy_reference_max_error", "both", gap)
    output.figures += _figures(p, kept, limit)
    return output


def _figures(p: Params, kept: dict[str, np.ndarray], limit: np.ndarray) -> list:
    """Each token's entropy per head in the last layer, the learner's beside the reference's."""
    names = list(kept)
    last = {n: kept[n][-1] for n in names}  # (H, T)
    figures: list = [
        TableFigure(
            title=Msg("attention entropy (nats) of each token in layer {L}, per head (query "
                      "scale {scales}), with its bound log(i + 1)", L=p.L,
                      scales=", ".join(f"{s:g}" for s in p.head_scales)),
            columns=(N_("token"), "log(i + 1)",
                     *(Msg("head {h}, {impl}", h=h, impl=n) for h in range(p.H) for n in names)),
            rows=tuple(
                (tok, float(limit[i]), *(float(last[n][h, i]) for h in range(p.H) for n in names))
                for i, tok in enumerate(p.tokens)
            ),
        )
    ]  # fmt: skip
    for n in names:
        share = kept[n][..., 1:] / limit[1:]  # (L, H, T - 1): 1 = uniform over the visible keys
        figures.append(
            Note(
                Msg("手撕 §13.2: 熵越高说明注意力越分散. {impl}: per head, the mean entropy as a "
                    "share of its bound log(i + 1) is {shares} (query scales {scales}).",
                    impl=n, scales=", ".join(f"{s:g}" for s in p.head_scales),
                    shares=", ".join(f"{float(np.mean(share[:, h])):.2f}" for h in range(p.H))),
            )
        )  # fmt: skip
    return figures


LAB = Lab(
    id="entropy",
    title=N_("Attention entropy: your function against the formula and its bounds"),
    question=N_(
        "Does your attention_entropy give -Σ w ln w for every row, stay within 0 and log of the "
        "visible keys, and give 0 for a fully blocked row?"
    ),
    sections=(
        Section(HANDS_ON, "§13.2", "代码题", part="注意力熵"),
        Section(HANDS_ON, "§10.1", "注意力热力图能告诉我们什么"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
    contract=2,
)
