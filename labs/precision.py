"""Softmax in float16: where exp overflows and underflows, and what float32 buys.

Transformer 手撕与注意力机制 §09 reads HuggingFace's LlamaAttention, whose
softmax is `F.softmax(attn_weights, dim=-1, dtype=torch.float32)`; §9.3's
table says why ("即使模型是 FP16/BF16，softmax 也在 FP32 下计算以避免精度损失")
and its 测试启发 warns that a framework skipping it may give NaN on extreme
inputs.

Float16 holds at most 65504, so exp(x) is inf from x ≈ 11.09 on and a softmax
that does not subtract the max turns any row with such a logit into NaN; exp(-x)
rounds to 0 from x ≈ 17.33 on (below half the smallest subnormal, 2^-25). Here
float16 logits go through each implementation's `softmax` (the contract keeps
the input dtype) and are judged against a float64 softmax of the same values,
beside the same softmax written out three ways: float16 without the max,
float16 with the max, and HF's float32 upcast rounded back to float16.
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from labctl.course import HANDS_ON, Section
from labctl.i18n import N_, Msg
from labctl.lab import Lab, LabContext, LabOutput, LabParams, Metric, Note, TableFigure

FP16_MAX = float(np.finfo(np.float16).max)  # 65504
SHIFTS = (0.0, 12.0, 1000.0, 60000.0)  # added to a whole row: softmax is unchanged by it
HALF_ULP_AT_1 = 2.0**-12  # one rounding of a weight in [0.5, 1] to float16


class Params(LabParams):
    rows: int = Field(32, ge=1, le=512, description=N_("rows of logits per shift"))
    keys: int = Field(256, ge=2, le=8192, description=N_("keys per row"))
    scale: float = Field(10.0, gt=0.0, le=100.0, description=N_("standard deviation of the logits"))


METRICS = (
    Metric(
        "fp16_softmax_nonfinite", "count", "==0",
        N_("NaN or inf among the weights of softmax on float16 logits, rows shifted by 0, 12, "
           "1000 and 60000 (every row but the first overflows float16's exp without the max)"),
        why=N_("softmax(x + c) = softmax(x), so subtracting the max keeps every exp in [0, 1]: "
               "none; without it exp(x) is inf from x = 11.09 and inf / inf is NaN"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "fp16_softmax_max_error", "abs", "<=2e-3",
        N_("max |softmax(float16 logits) - softmax in float64 of the same values| over every row "
           "and shift"),
        why=N_("float16 keeps 11 bits: one rounding of the result is at most 2^-12 = 2.4e-4 "
               "(float32 upcast, as HF does), float16 throughout with the max subtracted about "
               "6e-4 (a few roundings of exp and the sum); NaN or a wrong row is never within"),
    ),
    Metric(
        "fp16_underflow_gap", "logit", "in [17.0, 17.6]",
        N_("the smallest float16 gap d for which softmax([0, -d]) gives the second key exactly 0 "
           "once stored as float16"),
        why=N_("e^-d falls below half the smallest float16 subnormal (2^-25) at d = 25 ln 2 = "
               "17.33; a softmax that clamps or adds an epsilon never reaches 0, one that flushes "
               "subnormals does so at 9.7"),
    ),
    Metric(
        "fp16_reference_max_error", "abs", "<=2e-3",
        N_("max |clean room - reference| over the weights of every float16 row"),
        impls=("both",),
        why=N_("each is within about 6e-4 of the float64 softmax (float16 rounding)"),
    ),
)  # fmt: skip


def naive16(x: np.ndarray) -> np.ndarray:
    """exp(x) / Σ exp(x) in float16, no max subtracted."""
    e = np.exp(x)
    return e / np.sum(e, axis=-1, keepdims=True, dtype=np.float16)


def stable16(x: np.ndarray) -> np.ndarray:
    """The max subtracted, every step in float16."""
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True, dtype=np.float16)


def upcast32(x: np.ndarray) -> np.ndarray:
    """HF's F.softmax(x, dtype=torch.float32).to(float16), written out."""
    x = x.astype(np.float32)
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return (e / np.sum(e, axis=-1, keepdims=True)).astype(np.float16)


def exact64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def float16_grid(lo: float, hi: float) -> np.ndarray:
    """Every float16 value in [lo, hi], in order (0 <= lo)."""
    bits = np.arange(np.float16(lo).view(np.uint16), np.float16(hi).view(np.uint16) + 1)
    return bits.astype(np.uint16).view(np.float16)


def overflow_logit() -> float:
    """The smallest float16 x with exp(x) = inf in float16."""
    grid = float16_grid(10.0, 12.0)
    with np.errstate(over="ignore"):
        return float(grid[np.argmax(np.isinf(np.exp(grid)))])


def underflow_logit() -> float:
    """The smallest float16 x with exp(-x) = 0 in float16."""
    grid = float16_grid(16.0, 18.0)
    with np.errstate(under="ignore"):
        return float(grid[np.argmax(np.exp(-grid) == 0)])


def _error(got, want: np.ndarray) -> float:
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want.shape:
        return np.inf
    # np.max, not max(): a NaN must reach the verdict
    return float(np.max(np.abs(got - want)))


def _cell(error: float) -> float | str:
    return error if np.isfinite(error) else "NaN"


def _underflow_gap(impl) -> float:
    grid = float16_grid(16.0, 18.0)
    pairs = np.stack([np.zeros_like(grid), -grid], axis=-1)  # (n, 2) float16
    second = np.asarray(impl.softmax(pairs), dtype=np.float64).astype(np.float16)[:, 1]
    zero = np.flatnonzero(second == 0)
    return float(grid[zero[0]]) if zero.size else np.inf


def logit_rows(rng, p: Params) -> dict[float, np.ndarray]:
    """Seeded float16 logits (rows, keys) for each shift."""
    base = rng.standard_normal((p.rows, p.keys)) * p.scale
    base -= base.max(axis=-1, keepdims=True)  # the top logit of each row sits at the shift
    return {s: np.clip(base + s, -FP16_MAX, FP16_MAX).astype(np.float16) for s in SHIFTS}


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    rows = logit_rows(np.random.default_rng(ctx.seed), p)
    exact = {s: exact64(x) for s, x in rows.items()}
    output = LabOutput()
    kept: dict[str, dict[float, np.ndarray]] = {}
    for name, impl in ctx.impls.items():
        kept[name] = {s: np.asarray(impl.softmax(x), dtype=np.float64) for s, x in rows.items()}
        output.add(
            "fp16_softmax_nonfinite", name,
            sum(int(np.sum(~np.isfinite(w))) for w in kept[name].values()),
        )  # fmt: skip
        output.add(
            "fp16_softmax_max_error", name,
            float(np.max([_error(kept[name][s], exact[s]) for s in SHIFTS])),
        )  # fmt: skip
        output.add("fp16_underflow_gap", name, _underflow_gap(impl))
    if ctx.both:
        ref, room = kept["reference"], kept["clean-room"]
        output.add(
            "fp16_reference_max_error", "both",
            float(np.max([_error(room[s], ref[s]) for s in SHIFTS])),
        )  # fmt: skip
    output.figures += _figures(rows, exact, kept, ctx.impls)
    return output


def _figures(rows, exact, kept, impls) -> list:
    """float16's limits, then the error of each way of computing softmax, the learner's beside."""
    names = list(kept)
    with np.errstate(over="ignore", invalid="ignore"):
        written = {
            N_("float16, no max subtracted"): {s: naive16(x) for s, x in rows.items()},
            N_("float16, max subtracted"): {s: stable16(x) for s, x in rows.items()},
            N_("float32 upcast, then float16 (HF)"): {s: upcast32(x) for s, x in rows.items()},
        }
    dtypes = {n: str(np.asarray(impls[n].softmax(rows[0.0][:1])).dtype) for n in names}
    over, under = overflow_logit(), underflow_logit()
    figures: list = [
        TableFigure(
            title=N_("float16's limits, measured on every float16 value"),
            columns=(N_("quantity"), N_("value")),
            rows=(
                (N_("largest finite float16"), FP16_MAX),
                (N_("smallest x with exp(x) = inf in float16"), over),
                (N_("smallest x with exp(-x) = 0 in float16"), under),
                (N_("one rounding of a weight near 1 (2^-12)"), HALF_ULP_AT_1),
            ),
        ),
        TableFigure(
            title=N_("max |weight - float64 softmax| by the top logit of the row (NaN: the row "
                     "overflowed); the implementations return the dtype shown"),
            columns=(N_("top logit"), *written,
                     *(Msg("{impl} ({dtype})", impl=n, dtype=dtypes[n]) for n in names)),
            rows=tuple(
                (s, *(_cell(_error(w[s], exact[s])) for w in written.values()),
                 *(_cell(_error(kept[n][s], exact[s])) for n in names))
                for s in SHIFTS
            ),
        ),
    ]  # fmt: skip
    naive_nan = sum(
        int(np.sum(np.isnan(w))) for w in written[N_("float16, no max subtracted")].values()
    )
    figures.append(
        Note(
            Msg("手撕 §9.3: softmax(..., dtype=float32) 精度保护. Measured: float16's exp is inf "
                "from x = {over:.4g}, so without the max {nan} weights of these rows are NaN; "
                "with the max subtracted float16 is within {stable:.1e} of float64, and HF's "
                "float32 upcast within {up:.1e} (one rounding): the upcast buys about {gain:.1f}x "
                "in accuracy, the max subtraction buys finiteness.",
                over=over, nan=naive_nan,
                stable=max(_error(stable16(x), exact[s]) for s, x in rows.items()),
                up=max(_error(upcast32(x), exact[s]) for s, x in rows.items()),
                gain=max(_error(stable16(x), exact[s]) for s, x in rows.items())
                / max(_error(upcast32(x), exact[s]) for s, x in rows.items())),
        )
    )  # fmt: skip
    return figures


LAB = Lab(
    id="precision",
    title=N_("Softmax in float16: overflow, underflow and the float32 remedy"),
    question=N_(
        "Where does a float16 softmax overflow or underflow, what does subtracting the max "
        "fix, and what does computing softmax in float32 (as HF's LlamaAttention does) buy?"
    ),
    sections=(
        Section(HANDS_ON, "§09", "HuggingFace LlamaAttention 源码剖析"),
        Section(HANDS_ON, "§9.2", "前向传播核心逻辑", part="dtype=torch.float32"),
        Section(HANDS_ON, "§9.3", "源码关键点解读", part="精度保护"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
)
