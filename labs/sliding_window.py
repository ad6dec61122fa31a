"""Sliding-window attention: the band mask, the receptive field of a stack, and the KV cache.

第8章 阶段五 (SWA) says query i sees keys [i - W + 1, i], a band along the
diagonal; that L stacked layers give the top layer a theoretical receptive
field of L x W; and that a windowed decoder can drop every key and value
older than the window, so its KV cache per layer stays O(W) however long the
text grows. Its self-check asks the learner to derive both.

Here the band is read off `sliding_window_mask`; the receptive field is
measured by perturbing one input position and counting which outputs of each
stacked `transformer_block` move; and `attention_decode` decodes token by
token once with the whole cache and once keeping only the last W - 1 keys
and values between steps.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from labctl.course import CH8, Section
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
    larger,
    reference_max_error,
)


class Params(LabParams):
    W: int = Field(4, ge=1, le=16, description=N_("window: keys a query sees, itself included"))
    L: int = Field(3, ge=1, le=8, description=N_("stacked layers for the receptive field"))
    T: int = Field(32, ge=2, le=128, description=N_("sequence length of the stack and decode"))
    C: int = Field(16, ge=2, le=128, description=N_("model width"))
    H: int = Field(2, ge=1, le=8, description=N_("query heads"))
    Hkv: int = Field(1, ge=1, le=8, description=N_("key/value heads"))
    F: int = Field(32, ge=1, le=256, description=N_("feed-forward width"))
    shown: int = Field(10, ge=2, le=24, description=N_("positions in the band heatmap"))


METRICS = (
    Metric(
        "band_mask_mismatches", "entries", "==0",
        N_("entries of sliding_window_mask that differ from the band [p - W + 1, p] (query at "
           "absolute position p), for Tq = Tk and for Tq < Tk (bottom-right)"),
        why=N_("a boolean mask: exact. Counting the window from p - W gives W + 1 keys"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "receptive_field_error", "positions", "==0",
        N_("outputs of the last stacked transformer_block (window W) that move when input "
           "position 0 is perturbed, minus the exact count L(W - 1) + 1"),
        why=N_("each layer reaches W - 1 positions back, so L layers reach L(W - 1) and the "
               "position itself: a count, exact. A window of W + 1 keys, or none, moves more"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "window_cache_max_error", "abs", "<=1e-12",
        N_("attention_decode token by token with window W: the outputs when only the last "
           "W - 1 keys and values are kept between steps, against keeping the whole cache"),
        why=N_("the window masks the dropped keys to weight exactly 0, so both paths sum the "
               "same terms: equal up to the order of a BLAS sum (~1e-16); a decode that "
               "ignores the window sees keys the short cache no longer has: O(0.1)"),
    ),
    Metric(
        "window_reference_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference on the same inputs: every stacked transformer_block "
           "output (window W) and every token's attention_decode output (whole cache)"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-15); "
               "the rows above compare a room only with itself, so a block or decode that "
               "returns zeros or its input would pass them"),
    ),
)  # fmt: skip


def band(t_q: int, t_k: int, W: int) -> np.ndarray:
    """The band the chapter defines, as a contract mask (True = blocked)."""
    p = (t_k - t_q) + np.arange(t_q)[:, None]  # (Tq, 1): absolute positions, bottom-right
    j = np.arange(t_k)[None, :]
    return (j > p) | (j < p - W + 1)


def _block(rng, p: Params) -> dict[str, np.ndarray]:
    C, D = p.C, p.C // p.H
    w = {
        "wq": rng.standard_normal((C, p.H * D)) / math.sqrt(C),
        "wk": rng.standard_normal((C, p.Hkv * D)) / math.sqrt(C),
        "wv": rng.standard_normal((C, p.Hkv * D)) / math.sqrt(C),
        "wo": rng.standard_normal((p.H * D, C)) / math.sqrt(p.H * D),
        "w_gate": rng.standard_normal((C, p.F)) / math.sqrt(C),
        "w_up": rng.standard_normal((C, p.F)) / math.sqrt(C),
        "w_down": rng.standard_normal((p.F, C)) / math.sqrt(p.F),
    }
    return {"norm1": np.ones(C), "norm2": np.ones(C), **w}


def _moved(impl, x, blocks, p: Params, outputs: list) -> list[int]:
    """Per layer: how many output positions move when input position 0 is perturbed.

    Each layer's output is appended to `outputs`, for the comparison with the reference.
    """
    bumped = x.copy()
    bumped[:, 0] += 1.0
    counts = []
    for block in blocks:
        x = impl.transformer_block(x, block, p.H, p.Hkv, window=p.W)  # (B, T, C)
        bumped = impl.transformer_block(bumped, block, p.H, p.Hkv, window=p.W)
        counts.append(int(np.sum(np.max(np.abs(bumped - x), axis=(0, 2)) > 1e-12)))
        outputs.append(x)
    return counts


def _decode(impl, x, block, p: Params, outputs: list) -> tuple[float, list[tuple[int, int, int]]]:
    """Full cache vs last W - 1 kept: max output difference, and (t, full bytes, kept bytes).

    Each step's output (whole cache) is appended to `outputs`.
    """
    weights = (block["wq"], block["wk"], block["wv"], block["wo"])
    full_k = full_v = short_k = short_v = None
    worst, sizes = 0.0, []
    for t in range(x.shape[1]):
        token = x[:, t : t + 1]  # (B, 1, C)
        out_full, full_k, full_v = impl.attention_decode(
            token, full_k, full_v, *weights, p.H, p.Hkv, p.W
        )
        out_short, short_k, short_v = impl.attention_decode(
            token, short_k, short_v, *weights, p.H, p.Hkv, p.W
        )
        worst = larger(worst, float(np.max(np.abs(out_full - out_short))))
        outputs.append(out_full)
        sizes.append((t + 1, full_k.nbytes + full_v.nbytes, short_k.nbytes + short_v.nbytes))
        # Drop every key and value the next query can no longer see: it sees W - 1 old ones.
        keep = p.W - 1
        short_k = short_k[:, :, -keep:] if keep else None  # (B, Hkv, W - 1, D)
        short_v = short_v[:, :, -keep:] if keep else None
    return worst, sizes


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    if p.C % p.H or p.H % p.Hkv:
        raise ValueError(f"need C % H == 0 and H % Hkv == 0, got C={p.C}, H={p.H}, Hkv={p.Hkv}")
    rng = np.random.default_rng(ctx.seed)
    x = rng.standard_normal((1, p.T, p.C))  # (B, T, C)
    blocks = [_block(rng, p) for _ in range(p.L)]
    output = LabOutput()
    moved, sizes, seen, outputs = {}, {}, {}, {}
    for name, impl in ctx.impls.items():
        outputs[name] = []
        mismatches = sum(
            int(np.sum(np.asarray(impl.sliding_window_mask(t_q, p.W, t_k)) != band(t_q, t_k, p.W)))
            for t_q, t_k in ((p.shown, p.shown), (4, p.shown))
        )
        output.add("band_mask_mismatches", name, mismatches)
        seen[name] = ~np.asarray(impl.sliding_window_mask(p.shown, p.W))  # (shown, shown)
        moved[name] = _moved(impl, x, blocks, p, outputs[name])
        output.add("receptive_field_error", name, abs(moved[name][-1] - (p.L * (p.W - 1) + 1)))
        error, sizes[name] = _decode(impl, x, blocks[0], p, outputs[name])
        output.add("window_cache_max_error", name, error)
    if ctx.both:
        output.add(
            "window_reference_max_error",
            "both",
            reference_max_error(outputs["reference"], outputs["clean-room"]),
        )
    output.figures += _figures(p, seen, moved, sizes)
    return output


def _figures(p: Params, seen, moved, sizes) -> list:
    """The band each implementation returned, the receptive field per depth, the cache sizes."""
    ticks = tuple(str(i) for i in range(p.shown))
    figures: list = [
        HeatmapFigure(
            title=Msg("the band: query i sees keys i - {W} + 1 .. i (1 = sees)", W=p.W),
            name="sliding-window-band",
            matrix=tuple(tuple(float(v) for v in row) for row in band_seen),
            impl=name,
            row_ticks=ticks,
            col_ticks=ticks,
        )
        for name, band_seen in seen.items()
    ]
    names = tuple(seen)
    figures.append(
        TableFigure(
            title=Msg("receptive field through stacked layers, window W = {W}: outputs that "
                      "move when input position 0 is perturbed", W=p.W),
            columns=(N_("layers"), *(Msg("measured, {impl}", impl=implementation(n)) for n in names),
                     N_("exact l(W - 1) + 1"), N_("chapter l x W"), N_("chapter over by")),
            rows=tuple(
                (str(depth), *(str(moved[n][depth - 1]) for n in names),
                 str(depth * (p.W - 1) + 1), str(depth * p.W), str(depth - 1))
                for depth in range(1, p.L + 1)
            ),
        )
    )  # fmt: skip
    figures.append(
        Note(
            Msg("L x W disagrees: each layer adds W - 1 positions, not W, because "
                "the window counts the current token. The exact field is L(W - 1) + 1, which "
                "L x W overstates by L - 1: {over} positions for the chapter's L = 32, W = 4096 "
                "(131,072 vs {exact:,}), under 0.03%.", over=31, exact=32 * 4095 + 1)
        )
    )  # fmt: skip
    shown_sizes = [row for row in sizes[names[0]] if row[0] in (p.W, 2 * p.W, p.T // 2, p.T)]
    figures.append(
        TableFigure(
            title=Msg("KV cache of one layer after T tokens (B = 1, Hkv = {Hkv}, D = {D}, "
                      "float64), as attention_decode returned it", Hkv=p.Hkv, D=p.C // p.H),
            columns=("T", *(Msg("whole cache, {impl}", impl=implementation(n)) for n in names),
                     *(Msg("window {W}, {impl}", W=p.W, impl=implementation(n)) for n in names)),
            rows=tuple(
                (str(t), *(f"{dict((r[0], r[1]) for r in sizes[n])[t]:,} B" for n in names),
                 *(f"{dict((r[0], r[2]) for r in sizes[n])[t]:,} B" for n in names))
                for t, _, _ in shown_sizes
            ),
        )
    )  # fmt: skip
    figures.append(
        Note(
            N_(
                "With the window the cache stops growing at W tokens: O(W) bytes per layer, "
                "however long the text; without it the cache grows by the same bytes every "
                "token, O(T). Dropping is exact here because attention_decode is driven without "
                "RoPE: the contract places new tokens at position Tp = the cache length, so with "
                "RoPE a shortened cache would also need the true position offset."
            )
        )
    )
    return figures


LAB = Lab(
    id="sliding-window",
    title=N_("Sliding-window attention: the band, the receptive field, the constant cache"),
    question=N_(
        "What does a query see under a window of W keys, how far back does a stack of "
        "L windowed layers reach, and can a windowed decoder drop the old keys and "
        "values exactly?"
    ),
    sections=(
        Section(CH8, "阶段五", "现代长上下文变体深探——滑动窗口注意力（SWA）与推理 Infra 的颠覆"),
        Section(
            CH8,
            "本章验收",
            "",
            part="能解释 SWA 滑动窗口注意力在 L 层堆叠后的理论感受野推导与显存截断机制",
        ),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
)
