"""The FFN family: GELU exact and tanh, and GLU, GeGLU and SwiGLU at equal parameters.

Transformer 逐部件讲透 §6.8 writes the classic MLP as W_2 GELU(W_1 x) and the
modern one as SwiGLU; 第8章 阶段四 says GPT-2/3 use GELU and Llama SwiGLU with a
hidden width of about 8/3·D (11008 at D = 4096) "在参数量与标准 FFN 完全持平的前提下";
Transformer 手撕与注意力机制 §06.5 defines GLU (sigmoid gate), SwiGLU (SiLU) and
GeGLU (GELU, "GELU(z) ≈ z · Φ(z)") and shrinks d_ff to 2/3 × 4 × d_model so the
gated FFN's three matrices hold what the ReLU FFN's two do.

Contract v2's `gelu` (exact and tanh), `glu_ffn` and `geglu_ffn` are checked
against the formulas written out; the tanh approximation's largest error is
measured, not quoted; the three gated FFNs run on the same weights at
F = round(2/3 · 4C), and their parameter counts are taken from the arrays.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from labctl.course import CH8, HANDS_ON, PARTS, Section
from labctl.i18n import N_, Msg
from labctl.lab import Lab, LabContext, LabOutput, LabParams, Metric, Note, TableFigure

GRID = np.linspace(-6.0, 6.0, 2401)  # step 0.005: the approximation's worst point lies inside
SHOWN = (-3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0)
CHAPTER_SIZES = ((512, 2048), (4096, 16384))  # 手撕 §06.5's d_model, d_ff; 第8章's D = 4096


class Params(LabParams):
    B: int = Field(2, ge=1, le=8, description=N_("batch"))
    T: int = Field(6, ge=1, le=64, description=N_("tokens"))
    C: int = Field(48, ge=3, le=512, description=N_("model width"))


METRICS = (
    Metric(
        "gelu_exact_max_error", "abs", "<=1e-12",
        N_("gelu(x) against 0.5 x (1 + erf(x / √2)) written out, on [-6, 6] and random x"),
        why=N_("one float64 formula: ~1e-16; the tanh form in its place is off by ~5e-4"),
    ),
    Metric(
        "gelu_tanh_max_error", "abs", "<=1e-12",
        N_("gelu(x, 'tanh') against 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))) written out"),
        why=N_("one float64 formula: ~1e-16; the exact form in its place is off by ~5e-4"),
    ),
    Metric(
        "gelu_tanh_vs_exact_max", "abs", "in [1e-4, 1e-3]",
        N_("largest |gelu(x, 'tanh') - gelu(x)| on [-6, 6], both from the implementation"),
        why=N_("the approximation's known worst error is about 4.7e-4 near |x| ≈ 2.7; 0 means "
               "one mode answers for both"),
    ),
    Metric(
        "glu_max_error", "abs", "<=1e-12",
        N_("glu_ffn against (sigmoid(x W_gate) ⊙ (x W_up)) W_down written out"),
        why=N_("one float64 formula: ~1e-15; the gate on W_up's branch is O(0.1) off"),
    ),
    Metric(
        "geglu_max_error", "abs", "<=1e-12",
        N_("geglu_ffn, exact and tanh, against (GELU(x W_gate) ⊙ (x W_up)) W_down written out"),
        why=N_("one float64 formula: ~1e-15; a GELU mode ignored is off by ~1e-4"),
    ),
    Metric(
        "ffn_variants_reference_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference over every output of this lab"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-15)"),
    ),
)  # fmt: skip

_erf = np.vectorize(math.erf, otypes=[float])


def gelu_exact(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def gated_width(C: int) -> int:
    """手撕 §06.5's 2/3 × 4 × d_model, rounded to the nearest integer."""
    return round(2 / 3 * 4 * C)


def _weights(rng, C: int, F: int):
    w_gate = rng.standard_normal((C, F)) / math.sqrt(C)
    w_up = rng.standard_normal((C, F)) / math.sqrt(C)
    w_down = rng.standard_normal((F, C)) / math.sqrt(F)
    return w_gate, w_up, w_down


def _measure(impl, x, grid, weights) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    w_gate, w_up, w_down = weights
    kept = {
        "exact": impl.gelu(grid),
        "tanh": impl.gelu(grid, "tanh"),
        "exact_x": impl.gelu(x),
        "tanh_x": impl.gelu(x, "tanh"),
        "glu": impl.glu_ffn(x, *weights),
        "geglu": impl.geglu_ffn(x, *weights),
        "geglu_tanh": impl.geglu_ffn(x, *weights, "tanh"),
        "swiglu": impl.swiglu_ffn(x, *weights),
    }
    gate, up = x @ w_gate, x @ w_up
    got = {
        "gelu_exact_max_error": max(
            float(np.max(np.abs(kept["exact"] - gelu_exact(grid)))),
            float(np.max(np.abs(kept["exact_x"] - gelu_exact(x)))),
        ),
        "gelu_tanh_max_error": max(
            float(np.max(np.abs(kept["tanh"] - gelu_tanh(grid)))),
            float(np.max(np.abs(kept["tanh_x"] - gelu_tanh(x)))),
        ),
        "gelu_tanh_vs_exact_max": float(np.max(np.abs(kept["tanh"] - kept["exact"]))),
        "glu_max_error": float(np.max(np.abs(kept["glu"] - (_sigmoid(gate) * up) @ w_down))),
        "geglu_max_error": max(
            float(np.max(np.abs(kept["geglu"] - (gelu_exact(gate) * up) @ w_down))),
            float(np.max(np.abs(kept["geglu_tanh"] - (gelu_tanh(gate) * up) @ w_down))),
        ),
    }
    return got, kept


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    rng = np.random.default_rng(ctx.seed)
    x = 2.0 * rng.standard_normal((p.B, p.T, p.C))  # (B, T, C): wide enough to reach GELU's tails
    weights = _weights(rng, p.C, gated_width(p.C))
    output = LabOutput()
    kept: dict[str, dict[str, np.ndarray]] = {}
    for name, impl in ctx.impls.items():
        got, kept[name] = _measure(impl, x, GRID, weights)
        for metric, value in got.items():
            output.add(metric, name, value)
    if ctx.both:
        ref, room = kept["reference"], kept["clean-room"]
        output.add(
            "ffn_variants_reference_max_error", "both",
            max(float(np.max(np.abs(ref[k] - room[k]))) for k in ref),
        )  # fmt: skip
    output.figures += _figures(p, kept)
    return output


def size_rows(C: int, d_ff: int) -> tuple:
    """Parameters of the ReLU FFN (d_ff hidden) and of a gated FFN at F = round(2/3 · d_ff)."""
    F = round(2 / 3 * d_ff)
    relu, gated = 2 * C * d_ff, 3 * C * F
    return (str(C), str(d_ff), str(F), f"{relu:,}", f"{gated:,}", gated / relu - 1.0)


def _figures(p: Params, kept: dict[str, dict[str, np.ndarray]]) -> list:
    names = list(kept)
    index = [int(np.argmin(np.abs(GRID - v))) for v in SHOWN]
    figures: list = [
        TableFigure(
            title=N_("GELU exact (erf) and tanh on [-6, 6]: the written-out values and each "
                     "implementation's difference between its two modes"),
            columns=("x", N_("exact, written out"), N_("tanh, written out"),
                     *(Msg("tanh - exact, {impl}", impl=n) for n in names)),
            rows=tuple(
                (f"{GRID[i]:g}", float(gelu_exact(GRID[i : i + 1])[0]),
                 float(gelu_tanh(GRID[i : i + 1])[0]),
                 *(float(kept[n]["tanh"][i] - kept[n]["exact"][i]) for n in names))
                for i in index
            ),
        )
    ]  # fmt: skip
    for n in names:
        diff = np.abs(kept[n]["tanh"] - kept[n]["exact"])
        figures.append(
            Note(
                Msg("{impl}: the tanh approximation's largest error on [-6, 6] is {err:.3e}, at "
                    "x = {at:+.3f}; 手撕 §06.5's GELU(z) ≈ z · Φ(z) is the exact form (Φ the "
                    "normal CDF), the tanh form approximates it.",
                    impl=n, err=float(diff.max()), at=float(GRID[int(np.argmax(diff))]))
            )
        )  # fmt: skip
    C, F = p.C, gated_width(p.C)
    figures.append(
        TableFigure(
            title=N_("parameters without biases: the ReLU FFN (2·C·d_ff) and a gated FFN "
                     "(3·C·F) at F = round(2/3 · d_ff); GLU, GeGLU and SwiGLU count the same"),
            columns=("C", "d_ff", "F", N_("ReLU FFN"), N_("gated FFN"), N_("gated over ReLU - 1")),
            rows=(size_rows(C, 4 * C), *(size_rows(c, d) for c, d in CHAPTER_SIZES)),
        )
    )  # fmt: skip
    figures.append(
        TableFigure(
            title=Msg("the gated FFNs on the same weights (C = {C}, F = {F}): how far apart the "
                      "gates put the outputs (max |difference| / max |SwiGLU output|)", C=C, F=F),
            columns=(N_("pair"), *names),
            rows=tuple(
                (label,
                 *(float(np.max(np.abs(kept[n][a] - kept[n][b])) / np.max(np.abs(kept[n]["swiglu"])))
                   for n in names))
                for label, a, b in (
                    (N_("GLU vs SwiGLU"), "glu", "swiglu"),
                    (N_("GeGLU vs SwiGLU"), "geglu", "swiglu"),
                    (N_("GeGLU tanh vs GeGLU"), "geglu_tanh", "geglu"),
                )
            ),
        )
    )  # fmt: skip
    relu, llama = 2 * 4096 * 16384, 3 * 4096 * 11008
    figures.append(
        Note(
            Msg("第8章 阶段四's 11008 at D = 4096 is not round(2/3 · 4D) = {F}: Llama rounds 8/3·D "
                "up to a multiple of 256, so its gated FFN has {pct:.2%} more parameters than the "
                "ReLU FFN, close to but not 完全持平.",
                F=round(2 / 3 * 4 * 4096), pct=llama / relu - 1.0),
            flag=llama != relu,
        )
    )  # fmt: skip
    return figures


LAB = Lab(
    id="ffn-variants",
    title=N_("The FFN family: GELU exact and tanh, GLU, GeGLU and SwiGLU"),
    question=N_(
        "How far is GELU's tanh form from the exact one, and what do GLU, GeGLU and SwiGLU "
        "compute, and cost, at the chapters' equal parameter count?"
    ),
    sections=(
        Section(PARTS, "§6.8", "前馈网络：每个 token 自己思考"),
        Section(CH8, "阶段四", "组装 Transformer Block"),
        Section(HANDS_ON, "§06.5", "FFN 与激活函数：SwiGLU / GeGLU 的推导"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
    contract=2,
)
