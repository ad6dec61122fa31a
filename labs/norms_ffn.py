"""Norms and the feed-forward: what LayerNorm, RMSNorm and SwiGLU compute, and what they cost.

手撕 §06 defines LayerNorm (subtract the mean, divide by sqrt(σ² + ε), scale
and shift) and RMSNorm (divide by the root mean square, no centring), and runs
both on x = [1.0, -2.0, 3.0, 0.5] without printing the result; 逐部件讲透 §6.10
says RMSNorm drops the mean and keeps the scaling. Here both run on that
vector step by step, then the properties that follow are measured: RMSNorm is
LayerNorm when the input has zero mean; LayerNorm ignores a constant added to
the input, RMSNorm does not; both ignore a positive scale.

手撕 §06.5 and 第8章 阶段四 size the FFN: 4·D hidden for ReLU, ≈ 8/3·D for
SwiGLU "at the same parameter count" (11008 at D = 4096). The counts are
worked out exactly, with the FFN's share of a block (逐部件讲透 §6.8: "MLP 参数通常
占每层很大比例"). Last, SwiGLU's gate: on inputs where the gate closes some
units, the implementation must gate the W_gate branch, not W_up.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from labctl.course import CH8, HANDS_ON, PARTS, Section
from labctl.i18n import N_, Msg, implementation
from labctl.lab import Lab, LabContext, LabOutput, LabParams, Metric, Note, TableFigure

WORKED = (1.0, -2.0, 3.0, 0.5)  # 手撕 §6.3
LLAMA_D, LLAMA_HIDDEN = 4096, 11008  # 第8章 阶段四


class Params(LabParams):
    B: int = Field(2, ge=1, le=8, description=N_("batch"))
    T: int = Field(4, ge=1, le=64, description=N_("tokens"))
    C: int = Field(16, ge=2, le=256, description=N_("model width"))
    F: int = Field(32, ge=1, le=1024, description=N_("SwiGLU hidden width"))
    shift: float = Field(3.0, ge=0.5, le=100.0, description=N_("constant added to the input"))
    scale: float = Field(7.0, gt=0.0, le=1000.0, description=N_("positive factor on the input"))


METRICS = (
    Metric(
        "norms_worked_vector_max_error", "abs", "<=1e-12",
        N_("layer_norm and rms_norm of the chapter's x = [1, -2, 3, 0.5] (γ = 1, β = 0) against "
           "the steps written out: mean, variance or mean square, output"),
        why=N_("four float64 terms: ~1e-16; the unbiased variance or eps outside the root is "
               "off by 1e-6 (eps) to 0.1 (C - 1)"),
    ),
    Metric(
        "norms_rms_vs_ln_zero_mean_error", "abs", "<=1e-12",
        N_("on inputs with their mean subtracted: largest |rms_norm(x) - layer_norm(x, γ=1, "
           "β=0)|, the same eps for both"),
        why=N_("with μ = 0 the two formulas are one: rounding only; the unbiased variance "
               "differs by a factor sqrt(C / (C - 1))"),
    ),
    Metric(
        "norms_ln_shift_change", "abs", "<=1e-12",
        N_("largest |layer_norm(x + c) - layer_norm(x)| for the constant c = shift"),
        why=N_("the mean absorbs the constant exactly, up to rounding of x + c (~1e-15)"),
    ),
    Metric(
        "norms_rms_shift_change", "abs", ">1e-3",
        N_("largest |rms_norm(x + c) - rms_norm(x)|: RMSNorm does not centre, so a shift moves it"),
        why=N_("for c = 3 on unit-variance inputs the output moves by O(0.1); a norm that "
               "centres moves ~1e-15"),
    ),
    Metric(
        "norms_scale_change", "abs", "<=1e-12",
        N_("largest |N(a x) - N(x)| over N = layer_norm, rms_norm (eps = 0), a = scale"),
        why=N_("with eps = 0 both divide the factor out exactly: rounding only (~1e-15)"),
    ),
    Metric(
        "ffn_swiglu_max_error", "abs", "<=1e-12",
        N_("swiglu_ffn against (silu(x W_gate) * (x W_up)) W_down written out, on inputs where "
           "the gate closes some units"),
        why=N_("the same float64 formula: ~1e-15; the gate on the wrong branch: O(0.1)"),
    ),
    Metric(
        "ffn_gate_branch_gap", "abs", ">1e-3",
        N_("largest |swiglu_ffn(x) - (x W_gate * silu(x W_up)) W_down|: on these inputs gating "
           "the other branch gives another output"),
        why=N_("the inputs are chosen so the two branches differ by O(1); an implementation "
               "that gates W_up shows 0"),
    ),
    Metric(
        "norms_ffn_reference_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference over every output of this lab"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-15)"),
    ),
)  # fmt: skip


def _silu(z: np.ndarray) -> np.ndarray:
    return z / (1.0 + np.exp(-z))


def worked_steps(eps_ln: float = 1e-5, eps_rms: float = 1e-6) -> dict[str, np.ndarray]:
    """手撕 §6.1/§6.2 on x = [1, -2, 3, 0.5], written out."""
    x = np.array(WORKED)
    mean = x.sum() / len(x)
    var = ((x - mean) ** 2).sum() / len(x)  # biased, as the chapter's (1/d) Σ
    mean_square = (x**2).sum() / len(x)
    return {
        "mean": np.array([mean]),
        "var": np.array([var]),
        "layer_norm": (x - mean) / math.sqrt(var + eps_ln),
        "mean_square": np.array([mean_square]),
        "rms": np.array([math.sqrt(mean_square + eps_rms)]),
        "rms_norm": x / math.sqrt(mean_square + eps_rms),
    }


def _ffn_inputs(p: Params, rng):
    x = rng.standard_normal((p.B, p.T, p.C))  # (B, T, C)
    w_gate = rng.standard_normal((p.C, p.F)) / math.sqrt(p.C)
    w_gate[:, : p.F // 2] -= 1.5 * np.sign(x.mean(axis=(0, 1)))[:, None]  # closes half the gates
    w_up = rng.standard_normal((p.C, p.F)) / math.sqrt(p.C)
    w_down = rng.standard_normal((p.F, p.C)) / math.sqrt(p.F)
    return x, w_gate, w_up, w_down


def _measure(impl, p: Params, x, ffn) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    C = p.C
    ones, zeros = np.ones(C), np.zeros(C)
    steps = worked_steps()
    v = np.array(WORKED)
    ln_v = impl.layer_norm(v, np.ones(4), np.zeros(4))
    rms_v = impl.rms_norm(v, np.ones(4))
    got = {
        "norms_worked_vector_max_error": max(
            float(np.max(np.abs(ln_v - steps["layer_norm"]))),
            float(np.max(np.abs(rms_v - steps["rms_norm"]))),
        )
    }
    centred = x - x.mean(axis=-1, keepdims=True)
    rms_c, ln_c = impl.rms_norm(centred, ones, 1e-6), impl.layer_norm(centred, ones, zeros, 1e-6)
    got["norms_rms_vs_ln_zero_mean_error"] = float(np.max(np.abs(rms_c - ln_c)))
    ln, ln_shift = impl.layer_norm(x, ones, zeros), impl.layer_norm(x + p.shift, ones, zeros)
    rms, rms_shift = impl.rms_norm(x, ones), impl.rms_norm(x + p.shift, ones)
    got["norms_ln_shift_change"] = float(np.max(np.abs(ln_shift - ln)))
    got["norms_rms_shift_change"] = float(np.max(np.abs(rms_shift - rms)))
    scaled = max(
        float(np.max(np.abs(impl.layer_norm(p.scale * x, ones, zeros, 0.0) - impl.layer_norm(x, ones, zeros, 0.0)))),
        float(np.max(np.abs(impl.rms_norm(p.scale * x, ones, 0.0) - impl.rms_norm(x, ones, 0.0)))),
    )  # fmt: skip
    got["norms_scale_change"] = scaled
    fx, w_gate, w_up, w_down = ffn
    out = impl.swiglu_ffn(fx, w_gate, w_up, w_down)  # (B, T, C)
    right = (_silu(fx @ w_gate) * (fx @ w_up)) @ w_down
    swapped = ((fx @ w_gate) * _silu(fx @ w_up)) @ w_down
    got["ffn_swiglu_max_error"] = float(np.max(np.abs(out - right)))
    got["ffn_gate_branch_gap"] = float(np.max(np.abs(out - swapped)))
    kept = {"ln_v": ln_v, "rms_v": rms_v, "ln": ln, "rms": rms, "rms_shift": rms_shift, "out": out}
    return got, kept


def ffn_counts(D: int, hidden_relu: int, hidden_swiglu: float) -> dict[str, float]:
    """Parameter counts, no biases (Llama's choice; 第8章 阶段四): ReLU FFN, SwiGLU, attention."""
    return {
        "relu": 2 * D * hidden_relu,
        "swiglu": 3 * D * hidden_swiglu,
        "attention": 4 * D * D,  # W_Q, W_K, W_V, W_O with H * D_head = D
        "norms": 2 * D,
    }


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    rng = np.random.default_rng(ctx.seed)
    x = rng.standard_normal((p.B, p.T, p.C))  # (B, T, C)
    ffn = _ffn_inputs(p, rng)
    output = LabOutput()
    kept: dict[str, dict[str, np.ndarray]] = {}
    for name, impl in ctx.impls.items():
        got, kept[name] = _measure(impl, p, x, ffn)
        for metric, value in got.items():
            output.add(metric, name, value)
    if ctx.both:
        ref, room = kept["reference"], kept["clean-room"]
        output.add(
            "norms_ffn_reference_max_error", "both",
            max(float(np.max(np.abs(ref[k] - room[k]))) for k in ref),
        )  # fmt: skip
    output.figures += _figures(p, kept)
    return output


def _figures(p: Params, kept: dict[str, dict[str, np.ndarray]]) -> list:
    """The worked vector step by step, the FFN sizes, Llama's hidden width and the shift note."""
    names = list(kept)
    steps = worked_steps()

    def vec(a: np.ndarray) -> str:
        return "[" + ", ".join(f"{v:.6f}" for v in a) + "]"

    figures: list = [
        TableFigure(
            title=N_("Transformer 手撕与注意力机制 §6.3: x = [1.0, -2.0, 3.0, 0.5], γ = 1, β = 0, step by step "
                     "(the chapter prints the code, not its output)"),
            columns=(N_("step"), N_("written out"), *names),
            rows=(
                (N_("LayerNorm: mean μ"), vec(steps["mean"]), *("" for _ in names)),
                (N_("LayerNorm: variance σ² (1/d)"), vec(steps["var"]), *("" for _ in names)),
                (N_("LayerNorm output (ε = 1e-5)"), vec(steps["layer_norm"]),
                 *(vec(kept[n]["ln_v"]) for n in names)),
                (N_("RMSNorm: mean square"), vec(steps["mean_square"]), *("" for _ in names)),
                (N_("RMSNorm: sqrt(mean square + ε)"), vec(steps["rms"]), *("" for _ in names)),
                (N_("RMSNorm output (ε = 1e-6)"), vec(steps["rms_norm"]),
                 *(vec(kept[n]["rms_v"]) for n in names)),
            ),
        )
    ]  # fmt: skip
    figures.append(
        TableFigure(
            title=N_("FFN parameters without biases: ReLU with 4·D hidden vs SwiGLU, and the "
                     "SwiGLU FFN's share of a block (4·D² attention + FFN + two norms)"),
            columns=("D", N_("SwiGLU hidden"), N_("ReLU 2·D·4D"), N_("SwiGLU 3·D·hidden"),
                     N_("SwiGLU over ReLU - 1"), N_("FFN share of the block")),
            rows=_figure_size_rows(),
        )
    )  # fmt: skip
    excess = 3 * LLAMA_D * LLAMA_HIDDEN - 2 * LLAMA_D * 4 * LLAMA_D
    figures.append(
        Note(
            Msg(
                "8/3·D is not an integer unless 3 divides D: at D = {D} exact parity needs "
                "{exact:.2f} hidden units. Llama's {hidden} (8/3·D rounded up to a multiple of "
                "256) has {excess:,} more parameters than the 4·D ReLU FFN: {pct:.2f}% off, close "
                "but not the same count.",
                D=LLAMA_D, exact=8 / 3 * LLAMA_D, hidden=LLAMA_HIDDEN, excess=excess,
                pct=100 * excess / (2 * LLAMA_D * 4 * LLAMA_D),
            )
        )
    )  # fmt: skip
    for name in names:
        moved = float(np.max(np.abs(kept[name]["rms_shift"] - kept[name]["rms"])))
        figures.append(
            Note(
                Msg(
                    "{impl}: adding {c} to every input moves RMSNorm's output by up to {moved:.3f} "
                    "and LayerNorm's not at all: RMSNorm keeps the scaling invariance only.",
                    impl=implementation(name), c=p.shift, moved=moved,
                )
            )
        )  # fmt: skip
    return figures


def _figure_size_rows() -> tuple[tuple, ...]:
    """The FFN size table's rows: the course's widths and Llama's."""
    rows = []
    for D, hidden in (
        (512, 1365),
        (512, 8 / 3 * 512),
        (LLAMA_D, 8 / 3 * LLAMA_D),
        (LLAMA_D, LLAMA_HIDDEN),
    ):
        n = ffn_counts(D, 4 * D, hidden)
        block = n["attention"] + n["swiglu"] + n["norms"]
        rows.append((
            str(D), f"{hidden:.2f}" if hidden % 1 else str(int(hidden)), f"{n['relu']:,.0f}",
            f"{n['swiglu']:,.1f}" if n["swiglu"] % 1 else f"{n['swiglu']:,.0f}",
            n["swiglu"] / n["relu"] - 1.0, n["swiglu"] / block,
        ))  # fmt: skip
    return tuple(rows)


LAB = Lab(
    id="norms-ffn",
    title=N_("LayerNorm, RMSNorm and the feed-forward"),
    question=N_(
        "What do LayerNorm and RMSNorm compute on the chapter's vector, which "
        "invariances does each have, and what do the FFN sizes really cost?"
    ),
    sections=(
        Section(HANDS_ON, "§06", "LayerNorm vs RMSNorm：归一化的数学推导"),
        Section(HANDS_ON, "§06.5", "FFN 与激活函数：SwiGLU / GeGLU 的推导"),
        Section(PARTS, "§6.8", "前馈网络：每个 token 自己思考"),
        Section(PARTS, "§6.10", "LayerNorm 与 RMSNorm"),
        Section(CH8, "阶段四", "组装 Transformer Block"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
)
