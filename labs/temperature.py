"""Softmax temperature: entropy and the top weight against T.

第8章 阶段五's widget (交互：Softmax + Temperature) divides the logits by a
temperature: "Temperature 越高分布越平，越低越尖". Contract v2's
`softmax(x, temperature=T)` is softmax(x / T). Here a set of logits goes
through it over temperatures from 0.01 to 10^4; each result is checked against
softmax(x / T) written out, and the entropy and the top weight are measured:
T → 0 gives the one-hot of the largest logit (entropy 0, top weight 1),
T → ∞ the uniform distribution (entropy log n, top weight 1/n), and the
entropy rises with T in between.

The widget prints its percentages at T = 1 (8.5%, 23.2%, 5.2%, 63.1%) but not
its logits. Logits fitted to them check nothing (any distribution is the
softmax of its own logarithms), so the lab does not print its weights beside
them (the worked-examples lab lists them as not checked); what the printed
numbers can be checked for is that they sum to 100%.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from pydantic import Field

from labctl.course import CH8, Section
from labctl.i18n import N_, Msg
from labctl.lab import Lab, LabContext, LabOutput, LabParams, Metric, Note, TableFigure

TEMPERATURES = (0.01, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0, 100.0, 1e4)
WIDGET_PERCENT = (8.5, 23.2, 5.2, 63.1)  # 第8章 阶段五, Temperature = 1.00


class Params(LabParams):
    logits: tuple[float, ...] = Field(
        (1.0, 2.0, 0.5, 3.0), min_length=2, max_length=64,
        description=N_("the logits"),
    )  # fmt: skip


def written(x: np.ndarray, t: float) -> np.ndarray:
    z = x / t
    e = np.exp(z - np.max(z))
    return e / e.sum()


def entropy(w: np.ndarray) -> float:
    w = w[w > 0]
    return float(-np.sum(w * np.log(w)))


# The figures the whys quote, computed from the default logits (issue 40: 0.35 was typed
# where the value is 0.393).
_DEFAULT = np.asarray(Params.model_fields["logits"].default, dtype=np.float64)
GAP_AT_ONE = 1.0 - float(written(_DEFAULT, 1.0).max())  # 1 - top weight at T = 1
HOT_GAP_AT_ONE = math.log(len(_DEFAULT)) - entropy(written(_DEFAULT, 1.0))  # T ignored at 1e4
HOT_GAP_PREDICTED = float(np.var(_DEFAULT)) / (2 * TEMPERATURES[-1] ** 2)

METRICS = (
    Metric(
        "temperature_max_error", "abs", "<=1e-12",
        N_("max |softmax(x, temperature=T) - softmax(x / T) written out| over T from 0.01 to 1e4"),
        why=N_("one float64 formula two ways: rounding only (~1e-16); x · T instead of x / T, or "
               "the temperature ignored, is off by 0.1 or more"),
    ),
    Metric(
        "temperature_entropy_falls", "pairs", "==0",
        N_("adjacent temperatures where the entropy of the weights does not rise strictly "
           "(越高分布越平)"),
        why=N_("for logits not all equal the entropy of softmax(x / T) rises strictly with T; a "
               "temperature applied as a product makes it fall"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "temperature_cold_gap", "abs", "<=1e-12",
        N_("1 - top weight at T = 0.01"),
        why=Msg("the next logit is 1 below the top: its weight is e^-100 ~ 4e-44, so the result "
                "is one-hot to float64 rounding; at T = 1 the default logits' gap is {gap:.3f}",
                gap=GAP_AT_ONE),
    ),
    Metric(
        "temperature_hot_gap", "nats", "<=1e-6",
        N_("log n - entropy at T = 1e4"),
        why=Msg("at large T the gap is about Var(x) / (2 T²) = {predicted:.1e} for the default "
                "logits; with the temperature ignored (their weights at T = 1) it is {ignored:.3f}",
                predicted=HOT_GAP_PREDICTED, ignored=HOT_GAP_AT_ONE),
    ),
    Metric(
        "temperature_reference_max_error", "abs", "<=1e-12",
        N_("max |clean room - reference| over the weights at every temperature"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-16)"),
    ),
)  # fmt: skip


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    x = np.asarray(p.logits, dtype=np.float64)
    if np.ptp(x) == 0:
        raise ValueError("logits must not all be equal: every temperature gives the uniform")
    n = len(x)
    output = LabOutput()
    kept: dict[str, np.ndarray] = {}
    for name, impl in ctx.impls.items():
        weights = np.stack([np.asarray(impl.softmax(x, temperature=t)) for t in TEMPERATURES])
        kept[name] = weights  # (len(TEMPERATURES), n)
        output.add(
            "temperature_max_error", name,
            max(float(np.max(np.abs(w - written(x, t)))) for w, t in zip(weights, TEMPERATURES, strict=True)),
        )  # fmt: skip
        entropies = [entropy(w) for w in weights]
        output.add(
            "temperature_entropy_falls", name,
            sum(not b > a for a, b in itertools.pairwise(entropies)),
        )  # fmt: skip
        output.add("temperature_cold_gap", name, 1.0 - float(weights[0].max()))
        output.add("temperature_hot_gap", name, math.log(n) - entropies[-1])
    if ctx.both:
        output.add(
            "temperature_reference_max_error", "both",
            float(np.max(np.abs(kept["reference"] - kept["clean-room"]))),
        )  # fmt: skip
    output.figures += _figures(x, kept)
    return output


def _figures(x: np.ndarray, kept: dict[str, np.ndarray]) -> list:
    names, n = list(kept), len(x)
    figures: list = [
        TableFigure(
            title=Msg("entropy (nats) and top weight of softmax(x / T) for x = {x}; the bounds "
                      "are 0 and log n = {log_n:.4f}, 1/n and 1",
                      x=", ".join(f"{v:g}" for v in x), log_n=math.log(n)),
            columns=("T", *(Msg("entropy, {impl}", impl=m) for m in names),
                     *(Msg("top weight, {impl}", impl=m) for m in names)),
            rows=tuple(
                (t, *(entropy(kept[m][i]) for m in names), *(float(kept[m][i].max()) for m in names))
                for i, t in enumerate(TEMPERATURES)
            ),
        )
    ]  # fmt: skip
    total = sum(WIDGET_PERCENT)
    figures.append(
        Note(
            Msg("第8章 阶段五: Temperature 越高分布越平，越低越尖. Measured on the {impl}: the "
                "entropy goes from {cold:.2e} at T = 0.01 (one-hot) to {hot:.6f} at T = 1e4 "
                "(log n = {log_n:.6f}, uniform). The widget's printed percentages sum to "
                "{total:.1f}% (a distribution, to its rounding); its logits are not printed, so "
                "its numbers cannot be recomputed.",
                impl=names[0], cold=entropy(kept[names[0]][0]), hot=entropy(kept[names[0]][-1]),
                log_n=math.log(n), total=total),
            flag=abs(total - 100.0) > 0.05 * len(WIDGET_PERCENT),
        )
    )  # fmt: skip
    return figures


LAB = Lab(
    id="temperature",
    title=N_("Softmax temperature: entropy and the top weight against T"),
    question=N_(
        "How do the entropy and the top weight of softmax(x / T) move with the temperature T, "
        "and do T → 0 and T → ∞ give the one-hot and the uniform distribution?"
    ),
    sections=(Section(CH8, "阶段五", "位置从哪里来", part="交互：Softmax + Temperature"),),
    params=Params,
    metrics=METRICS,
    run=run,
    contract=2,
)
