"""Positions: what does attention know about order, and what do sinusoidal tables and RoPE add?

Without positions self-attention is permutation-equivariant (手撕 §1.1;
第8章 阶段五): permute the tokens and the output rows permute the same way.
Sinusoidal positions (手撕 §1.2.2; 第8章 阶段五) and RoPE (手撕 §01.5;
逐部件讲透 §6.7) break that symmetry, each in its own way:

- sinusoidal: PE(p)·PE(p+Δ) = Σ_i cos(Δ ω_i) does not depend on p; the chapter
  prints 15.313649 for Δ = 1 and 11.777383 for Δ = 5 at d = 32;
- RoPE rotates pairs of q and k by angles proportional to the position, so
  q_m·k_n depends on m - n only, norms are preserved, and any positions work.

Contract v1 rotates interleaved pairs (2i, 2i+1), as the RoPE paper, the
course and Meta's own Llama (llama/model.py: view_as_complex over consecutive
pairs); HuggingFace's port of Llama (rotate_half) rotates the half-split pairs
(i, i + D/2), its conversion script permuting the rows of W_Q and W_K. Written
here in NumPy, the half-split layout gives other numbers for the same weights,
and reordering the projection's output columns (evens, then odds) maps one
onto the other exactly.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from labctl.course import CH8, HANDS_ON, PARTS, Section
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

CHAPTER_D = 32  # 第8章 阶段五: sinusoidal_positional_encoding(seq_len=16, d_model=32)
CHAPTER_T = 16
CHAPTER_DOTS = {1: 15.313649, 5: 11.777383}  # printed to 6 decimals
STARTS = (0, 5, 10)
HEATMAP_T = 10  # the first positions of the chapter's table: fits a terminal


class Params(LabParams):
    T: int = Field(8, ge=3, le=32, description=N_("tokens in the permuted sequence"))
    C: int = Field(16, ge=4, le=128, description=N_("model width; even, and a multiple of H"))
    H: int = Field(2, ge=1, le=8, description=N_("attention heads"))
    D: int = Field(8, ge=2, le=64, description=N_("head width for the RoPE checks; even"))
    max_delta: int = Field(8, ge=1, le=15, description=N_("largest distance in the table"))
    shift: int = Field(37, ge=1, le=10000, description=N_("how far RoPE positions are shifted"))
    rope_theta: float = Field(10000.0, gt=1.0, description=N_("RoPE base θ"))


METRICS = (
    Metric(
        "positions_perm_equivariance_error", "abs", "<=1e-12",
        N_("no positions, no mask: largest |attn(x[perm]) - attn(x)[perm]| of "
           "multi_head_attention(causal=False)"),
        why=N_("attention without positions only reorders the same float64 sums: ~1e-16"),
    ),
    Metric(
        "positions_perm_change_sinusoidal", "abs", ">1e-3",
        N_("with sinusoidal positions added to x: largest |attn(x[perm] + PE) - "
           "attn(x + PE)[perm]|; positions must break the symmetry"),
        why=N_("PE rows differ by O(1) between positions; 1e-3 is far above rounding and far "
               "below what a real position table gives (~0.1)"),
    ),
    Metric(
        "positions_perm_change_rope", "abs", ">1e-3",
        N_("with RoPE inside attention (rope_theta set): largest |attn(x[perm]) - "
           "attn(x)[perm]|"),
        why=N_("rotations by different angles change the scores by O(0.1); 1e-3 separates that "
               "from rounding"),
    ),
    Metric(
        "pe_dot_chapter_max_error", "abs", "<=1e-12",
        N_("PE(p)·PE(p+Δ) at d = 32 for p = 0, 5, 10 and Δ = 1, 5 (the chapter's case) against "
           "Σ_i cos(Δ ω_i) written out"),
        why=N_("16 float64 terms of size <= 1: ~1e-15; a wrong frequency moves it by > 1e-3"),
    ),
    Metric(
        "pe_dot_start_spread", "abs", "<=1e-12",
        N_("largest spread over the start p of PE(p)·PE(p+Δ), Δ = 1..max_delta, d = 32"),
        why=N_("the identity sin a sin b + cos a cos b = cos(a - b) holds to rounding (~1e-15); "
               "sin and cos at different frequencies spread by O(0.1)"),
    ),
    Metric(
        "rope_shift_invariance_error", "abs", "<=1e-10",
        N_("largest change of the scores rope(q, m)·rope(k, n) when every position is shifted by "
           "`shift`"),
        why=N_("scores depend on m - n only; float64 angles up to ~1e3 rad carry ~1e-13 error"),
    ),
    Metric(
        "rope_norm_change", "abs", "<=1e-12",
        N_("largest | |rope(x)| - |x| | over rows: a rotation keeps every length"),
        why=N_("a rotation preserves the norm to rounding (~1e-15)"),
    ),
    Metric(
        "rope_nonconsecutive_max_error", "abs", "<=1e-12",
        N_("rope at positions (0, 3, 3, 10, 11, 50, 200, 1000) against the interleaved rotation "
           "written out in the lab"),
        why=N_("the same float64 formula: ~1e-15; positions ignored or pairs half-split: O(1)"),
    ),
    Metric(
        "rope_layouts_difference", "abs", ">1e-3",
        N_("largest |rope(q) - half_split_rope(q)| for the same q: the two layouts differ"),
        why=N_("different pairs rotate by different angles: O(1) apart; an implementation that "
               "is itself half-split shows 0"),
    ),
    Metric(
        "rope_permutation_max_error", "abs", "<=1e-12",
        N_("half_split_rope(x @ W[:, P]) against rope(x @ W)[..., P], P = (0, 2, 4, .., 1, 3, "
           "..): reordering the weight columns maps the layouts exactly"),
        why=N_("the same products in the same order: exactly 0 in float64; the wrong layout: O(1)"),
    ),
    Metric(
        "positions_reference_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference over every output of this lab"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-15)"),
    ),
)  # fmt: skip


def half_split_rope(x: np.ndarray, positions: np.ndarray, theta: float) -> np.ndarray:
    """RoPE as HuggingFace's Llama lays it out: pair (i, i + D/2) turns by positions * θ^(-2i/D)."""
    D = x.shape[-1]
    angle = np.asarray(positions, dtype=np.float64)[:, None] * theta ** (
        -2.0 * np.arange(D // 2) / D
    )
    cos, sin = np.cos(angle), np.sin(angle)  # (T, D/2)
    first, second = x[..., : D // 2], x[..., D // 2 :]
    return np.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1)


def interleaved_rope(x: np.ndarray, positions: np.ndarray, theta: float) -> np.ndarray:
    """Contract v1's RoPE written out: pair (2i, 2i+1) turns by positions * θ^(-2i/D)."""
    D = x.shape[-1]
    angle = np.asarray(positions, dtype=np.float64)[:, None] * theta ** (
        -2.0 * np.arange(D // 2) / D
    )
    cos, sin = np.cos(angle), np.sin(angle)  # (T, D/2)
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out


def pe_dot(delta: int, d: int = CHAPTER_D) -> float:
    """Σ_i cos(Δ ω_i), ω_i = 10000^(-2i/d): the chapter's closed form of PE(p)·PE(p+Δ)."""
    return float(np.sum(np.cos(delta * 10000.0 ** (-2.0 * np.arange(d // 2) / d))))


def _inputs(p: Params, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, p.T, p.C))  # (B, T, C)
    weights = [rng.standard_normal((p.C, p.C)) / math.sqrt(p.C) for _ in range(4)]  # wq wk wv wo
    perm = rng.permutation(p.T)
    q, k = rng.standard_normal((2, p.T, p.D))  # (T, D) each, for the RoPE checks
    w = rng.standard_normal((p.C, p.D)) / math.sqrt(p.C)  # a one-head projection
    return x, weights, perm, q, k, w


def _pe_dots(table: np.ndarray, max_delta: int) -> dict[int, np.ndarray]:
    """PE(s)·PE(s+Δ) of the chapter's table for every start s, by Δ = 0..max_delta."""
    return {
        delta: np.array([table[s] @ table[s + delta] for s in range(CHAPTER_T - delta)])
        for delta in range(0, max_delta + 1)
    }


def _measure(impl, p: Params, inputs) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    x, weights, perm, q, k, w = inputs
    H, theta = p.H, p.rope_theta
    got: dict[str, float] = {}
    plain = impl.multi_head_attention(x, *weights, H, causal=False)  # (B, T, C)
    plain_perm = impl.multi_head_attention(x[:, perm], *weights, H, causal=False)
    got["positions_perm_equivariance_error"] = float(np.max(np.abs(plain_perm - plain[:, perm])))
    pe = impl.sinusoidal_positions(p.T, p.C)  # (T, C)
    sin_out = impl.multi_head_attention(x + pe, *weights, H, causal=False)
    sin_perm = impl.multi_head_attention(x[:, perm] + pe, *weights, H, causal=False)
    got["positions_perm_change_sinusoidal"] = float(np.max(np.abs(sin_perm - sin_out[:, perm])))
    rope_out = impl.multi_head_attention(x, *weights, H, causal=False, rope_theta=theta)
    rope_perm = impl.multi_head_attention(x[:, perm], *weights, H, causal=False, rope_theta=theta)
    got["positions_perm_change_rope"] = float(np.max(np.abs(rope_perm - rope_out[:, perm])))

    table = impl.sinusoidal_positions(CHAPTER_T, CHAPTER_D)  # (16, 32), the chapter's table
    dots = _pe_dots(table, p.max_delta)
    got["pe_dot_chapter_max_error"] = max(
        abs(float(dots[delta][s]) - pe_dot(delta)) for delta in (1, 5) for s in STARTS
    )
    got["pe_dot_start_spread"] = max(float(np.ptp(dots[d])) for d in range(1, p.max_delta + 1))

    positions = np.resize(np.array([0, 3, 3, 10, 11, 50, 200, 1000]), p.T)
    rq, rk = impl.rope(q, positions, theta), impl.rope(k, positions, theta)  # (T, D)
    sq, sk = impl.rope(q, positions + p.shift, theta), impl.rope(k, positions + p.shift, theta)
    got["rope_shift_invariance_error"] = float(np.max(np.abs(rq @ rk.T - sq @ sk.T)))
    got["rope_norm_change"] = float(
        np.max(np.abs(np.linalg.norm(rq, axis=-1) - np.linalg.norm(q, axis=-1)))
    )
    got["rope_nonconsecutive_max_error"] = float(
        np.max(np.abs(rq - interleaved_rope(q, positions, theta)))
    )
    got["rope_layouts_difference"] = float(
        np.max(np.abs(rq - half_split_rope(q, positions, theta)))
    )
    P = np.concatenate([np.arange(0, p.D, 2), np.arange(1, p.D, 2)])  # evens, then odds
    projected = x[0] @ w  # (T, D)
    mapped = half_split_rope(x[0] @ w[:, P], positions, theta)
    got["rope_permutation_max_error"] = float(
        np.max(np.abs(mapped - impl.rope(projected, positions, theta)[:, P]))
    )
    kept = {"plain": plain, "sin": sin_out, "rope": rope_out, "table": table, "rq": rq, "sq": sq}
    return got, kept


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    if p.C % p.H or p.C % 2 or p.D % 2:
        raise ValueError(f"C = {p.C} must be even and a multiple of H = {p.H}; D = {p.D} even")
    inputs = _inputs(p, ctx.seed)
    output = LabOutput()
    kept: dict[str, dict[str, np.ndarray]] = {}
    for name, impl in ctx.impls.items():
        got, kept[name] = _measure(impl, p, inputs)
        for metric, value in got.items():
            output.add(metric, name, value)
    if ctx.both:
        ref, room = kept["reference"], kept["clean-room"]
        output.add(
            "positions_reference_max_error",
            "both",
            max(
                float(np.max(np.abs(ref[key] - room[key])))
                for key in ("plain", "sin", "rope", "table", "rq", "sq")
            ),
        )
    output.figures += _figures(p, {n: k["table"] for n, k in kept.items()})
    return output


def _figures(p: Params, tables: dict[str, np.ndarray]) -> list:
    """PE·PE by Δ against the chapter, each implementation's table as a heatmap, the
    chapter's printed dot products checked, and the RoPE layouts' note."""
    names = list(tables)
    dots = {n: _pe_dots(tables[n], p.max_delta) for n in names}
    figures: list = [
        TableFigure(
            title=Msg(
                "PE(0)·PE(Δ) at d = {d} (the spread over starts p is the largest difference "
                "between PE(p)·PE(p+Δ) for every p): it depends on Δ only (and PE(p)·PE(p-Δ) is the "
                "same sum), and falls off with Δ overall, not monotonically",
                d=CHAPTER_D,
            ),
            columns=(
                "Δ", N_("Σ cos(Δ ω_i)"), N_("chapter"),
                *names,
                *(Msg("spread over p, {impl}", impl=implementation(n)) for n in names),
            ),
            rows=tuple(
                (
                    str(delta),
                    pe_dot(delta),
                    f"{CHAPTER_DOTS[delta]:.6f}" if delta in CHAPTER_DOTS else "",
                    *(float(dots[n][delta][0]) for n in names),
                    *(float(np.ptp(dots[n][delta])) for n in names),
                )
                for delta in range(p.max_delta + 1)
            ),
        )
    ]  # fmt: skip
    for name in names:
        shown = tables[name][:HEATMAP_T]
        cosine = shown @ shown.T / (CHAPTER_D / 2)  # (10, 10): PE(p)·PE(q) / |PE|^2
        figures.append(
            HeatmapFigure(
                title=Msg(
                    "PE(p)·PE(q) / (d/2) at d = {d} ({impl}): constant along each diagonal",
                    d=CHAPTER_D, impl=implementation(name),
                ),
                name="pe-dot-products",
                matrix=tuple(tuple(float(v) for v in row) for row in cosine),
                row_label="p", col_label="q", impl=name,
                row_ticks=tuple(str(i) for i in range(HEATMAP_T)),
                col_ticks=tuple(str(i) for i in range(HEATMAP_T)),
            )
        )  # fmt: skip
    for delta, printed in CHAPTER_DOTS.items():
        for name in names:
            value = float(dots[name][delta][0])
            agrees = abs(value - printed) <= 5e-7
            figures.append(
                Note(
                    Msg(
                        "第8章 阶段五 prints {printed:.6f} for Δ = {delta}; the {impl} gives "
                        "{value:.9f}: {verdict} at the 6 decimals printed",
                        printed=printed, delta=delta, impl=implementation(name), value=value,
                        verdict=Msg("agrees") if agrees else Msg("disagrees"),
                    ),
                    flag=not agrees,
                )
            )  # fmt: skip
    figures.append(
        Note(
            N_(
                "Half-split RoPE (HuggingFace's port of Llama, rotate_half) pairs column i with "
                "i + D/2; the contract pairs 2i with 2i+1, as Meta's own llama/model.py does "
                "(view_as_complex over consecutive pairs). Checkpoints converted between the two "
                "reorder the rows of W_Q and W_K (here the columns, as y = x @ W): evens first, "
                "then odds."
            )
        )
    )
    return figures


LAB = Lab(
    id="positions",
    title=N_("Positions: permutation symmetry, sinusoidal tables and RoPE"),
    question=N_(
        "Does attention without positions ignore order, and what exactly do sinusoidal "
        "positions and RoPE (in either layout) add?"
    ),
    sections=(
        Section(CH8, "阶段五", "位置从哪里来"),
        Section(HANDS_ON, "§01", "从 token 到 embedding：模型是怎么把文本变成可计算对象的"),
        Section(HANDS_ON, "§01.5", "位置编码再讲深一点：RoPE 的旋转矩阵推导"),
        Section(PARTS, "§6.7", "位置编码"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
)
