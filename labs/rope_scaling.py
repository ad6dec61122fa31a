"""RoPE scaling: what position interpolation and NTK-aware scaling do past the trained length.

Transformer 逐部件讲透 §6.7 warns that extending the context is more than
raising the maximum length ("还需要考虑模型训练过的距离分布和 RoPE scaling");
Transformer 手撕与注意力机制 §1.5.2 gives pair i the frequency
ω_i = θ^(-2i/D) ("低频组捕捉远距离相对位置关系，高频组捕捉近距离细粒度位置关系")
and §01.5's table says RoPE "理论上有更好的外推性".

Contract v2's `rope(x, positions, theta, scaling, factor)` rotates by
positions / s with position interpolation (`"linear"`) and raises the base to
θ · s^(D/(D-2)) with NTK-aware scaling (`"ntk"`). The lab reads the angles back
from rotated unit pairs, unwrapped along consecutive positions (every step is
under π), for a model trained to Tmax and extended to s · Tmax: the frequency
ratios each scaling gives every pair, how far the lowest-frequency pair turns
past its largest angle in training, the score profile q·k of identical content
vectors against distance at 1x to 4x Tmax, and batched positions (B, T) against
the formula written out here.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from labctl.course import HANDS_ON, PARTS, Section
from labctl.i18n import N_
from labctl.lab import Lab, LabContext, LabOutput, LabParams, Metric
from labctl.labs.rope_scaling_figures import (
    CONTENTS,
    METHODS,
    figures,
    lengths,
    ntk_ratio,
    steps_past,
)

SCALING = {"plain": None, "pi": "linear", "ntk": "ntk"}
BATCH_T = 8  # rows of the batched-positions check


class Params(LabParams):
    D: int = Field(64, ge=8, le=128, description=N_("head width; even"))
    trained: int = Field(128, ge=16, le=256, description=N_("the trained length Tmax"))
    factor: int = Field(
        4, ge=2, le=8, description=N_("the scaling factor s: the context is extended to s · Tmax")
    )
    theta: float = Field(10000.0, ge=100.0, le=1e6, description=N_("RoPE base θ"))


METRICS = (
    Metric(
        "pi_frequency_ratio_error", "abs", "<=1e-9",
        N_("position interpolation: largest |ω'_i / ω_i - 1/s| over every pair i, the angular "
           "speeds read from the rotated unit pairs"),
        why=N_("PI divides every position by s, so every pair turns s times slower; the angles "
               "are read by atan2 to ~1e-16 rad on angles as small as ~1e-6 rad (~1e-10 "
               "relative); a PI that multiplies is off by s - 1/s"),
    ),
    Metric(
        "ntk_frequency_ratio_error", "abs", "<=1e-9",
        N_("NTK-aware: largest |ω'_i / ω_i - s^(-2i/(D-2))| over every pair i"),
        why=N_("the base θ · s^(D/(D-2)) scales pair i by s^(-2i/(D-2)): 1 for the highest "
               "frequency, exactly 1/s for the lowest; the exponent inverted, (D-2)/D, is off by "
               "~0.1 at the lowest pair for D = 64"),
    ),
    Metric(
        "pi_new_angle_steps", "steps", "<1",
        N_("position interpolation at s · Tmax: how far the lowest-frequency pair turns past its "
           "largest angle in training, in trained steps (its angle per position)"),
        why=N_("position s · Tmax - 1 maps to Tmax - 1/s: 1 - 1/s of a step past the last trained "
               "position, between trained angles; plain RoPE goes (s - 1) · Tmax steps past"),
    ),
    Metric(
        "ntk_new_angle_steps", "steps", "<1",
        N_("NTK-aware at s · Tmax: how far the lowest-frequency pair turns past its largest angle "
           "in training, in trained steps"),
        why=N_("the lowest pair is slowed by exactly s, so it ends 1 - 1/s of a step past, as with "
               "PI; the inverted exponent slows it by less (~22 steps past at the defaults)"),
    ),
    Metric(
        "pi_profile_error", "abs", "<=1e-12",
        N_("position interpolation at s · Tmax: largest |score(s · k) - plain score(k)| over "
           "distances k < Tmax, the score q·k of identical content vectors (mean of 4, over |u|²)"),
        why=N_("PI turns distance s · k by the angles plain RoPE gives k, so it scores exactly the "
               "trained profile, stretched: the same float64 products, ~1e-16"),
    ),
    Metric(
        "batched_max_error", "abs", "<=1e-11",
        N_("rope with batched positions (B, T) (from 0, past s · Tmax, left-padded) for plain, "
           "linear and ntk, against the formula written out row by row"),
        why=N_("one rotation per pair: rounding only (~1e-15); a rope that reads only the first "
               "batch row of positions is off by O(1) in the other rows"),
    ),
    Metric(
        "rope_scaling_reference_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference over every output of this lab"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-13 on "
               "unwrapped angles near 1000 rad)"),
    ),
)  # fmt: skip


def written_rope(x, positions, theta: float, scaling: str | None, factor: float) -> np.ndarray:
    """Contract v2's rope for x (B, H, T, D) and positions (B, T), loop by loop: pair i of row t
    in batch b turns by positions[b, t] / divisor · base^(-2i/D)."""
    B, _, T, D = x.shape
    base = theta * factor ** (D / (D - 2)) if scaling == "ntk" else theta
    divisor = factor if scaling == "linear" else 1.0
    out = np.empty_like(x)
    for b in range(B):
        for t in range(T):
            for i in range(D // 2):
                angle = positions[b, t] / divisor * base ** (-2.0 * i / D)
                c, s = math.cos(angle), math.sin(angle)
                even, odd = x[b, :, t, 2 * i], x[b, :, t, 2 * i + 1]
                out[b, :, t, 2 * i] = even * c - odd * s
                out[b, :, t, 2 * i + 1] = even * s + odd * c
    return out


def _rotate(impl, x, positions, p: Params, method: str) -> np.ndarray:
    factor = float(p.factor) if method != "plain" else 1.0
    return np.asarray(impl.rope(x, positions, p.theta, SCALING[method], factor))


def _angles(impl, p: Params, method: str, T: int) -> np.ndarray:
    """(T, D/2) unwrapped angles of every pair at positions 0..T-1, read back from unit pairs."""
    unit = np.zeros((T, p.D))
    unit[:, 0::2] = 1.0
    out = _rotate(impl, unit, np.arange(T), p, method)
    return np.unwrap(np.arctan2(out[:, 1::2], out[:, 0::2]), axis=0)


def _profile(rotated: np.ndarray, norms: np.ndarray, length: int) -> np.ndarray:
    """Score against distance d = 0..length-1 of the query at position length - 1."""
    q = rotated[:, length - 1]  # (n, D)
    keys = rotated[:, length - 1 :: -1][:, :length]  # (n, length, D): distance 0, 1, ...
    return np.mean(np.einsum("nd,ntd->nt", q, keys) / norms[:, None], axis=0)


def _measure(impl, p: Params, content, x, positions):
    T = lengths(p)[-1] * p.trained
    i = np.arange(p.D // 2)
    kept = {m: _angles(impl, p, m, T) for m in METHODS}
    speed = {m: kept[m][-1] / (T - 1) for m in METHODS}
    got = {
        "pi_frequency_ratio_error": float(np.max(np.abs(speed["pi"] / speed["plain"] - 1 / p.factor))),
        "ntk_frequency_ratio_error": float(
            np.max(np.abs(speed["ntk"] / speed["plain"] - ntk_ratio(i, p.D, p.factor)))
        ),
    }  # fmt: skip
    for m in ("pi", "ntk"):
        got[f"{m}_new_angle_steps"] = steps_past(kept[m], kept["plain"], p, p.D // 2 - 1)
    norms = np.sum(content**2, axis=-1)
    x_all = np.ascontiguousarray(np.broadcast_to(content[:, None], (CONTENTS, T, p.D)))
    for m in METHODS:
        rotated = _rotate(impl, x_all, np.arange(T), p, m)
        for L in lengths(p):
            kept[f"profile-{m}{L}"] = _profile(rotated, norms, L * p.trained)
    trained = kept["profile-plain1"]
    stretched = kept[f"profile-pi{p.factor}"][:: p.factor]
    got["pi_profile_error"] = float(np.max(np.abs(stretched[: p.trained] - trained)))
    errors = []
    for m in METHODS:
        kept[f"batched-{m}"] = _rotate(impl, x, positions, p, m)
        factor = float(p.factor) if m != "plain" else 1.0
        want = written_rope(x, positions, p.theta, SCALING[m], factor)
        errors.append(float(np.max(np.abs(kept[f"batched-{m}"] - want))))
    got["batched_max_error"] = max(errors)
    return got, kept


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    if p.D % 2:
        raise ValueError(f"D = {p.D} must be even")
    rng = np.random.default_rng(ctx.seed)
    content = rng.standard_normal((CONTENTS, p.D))
    x = rng.standard_normal((3, 2, BATCH_T, p.D))  # (B, H, T, D)
    t = np.arange(BATCH_T)
    # from 0; past the extended length; left-padded by 3 (the pads sit at position 0)
    positions = np.stack([t, p.factor * p.trained + t, np.maximum(t - 3, 0)])
    output = LabOutput()
    kept: dict[str, dict[str, np.ndarray]] = {}
    for name, impl in ctx.impls.items():
        got, kept[name] = _measure(impl, p, content, x, positions)
        for metric, value in got.items():
            output.add(metric, name, value)
    if ctx.both:
        ref, room = kept["reference"], kept["clean-room"]
        output.add(
            "rope_scaling_reference_max_error", "both",
            max(float(np.max(np.abs(ref[key] - room[key]))) for key in ref),
        )  # fmt: skip
    output.figures += figures(p, kept)
    return output


LAB = Lab(
    id="rope-scaling",
    title=N_("RoPE scaling: interpolation and NTK-aware bases past the trained length"),
    question=N_(
        "What do position interpolation and NTK-aware scaling do to RoPE's rotation angles and "
        "to attention beyond the trained length, and do the chapters' claims about "
        "extrapolation hold?"
    ),
    sections=(
        Section(
            PARTS, "§6.7", "位置编码",
            part="扩展上下文时不能只把最大长度数字改大，还需要考虑模型训练过的距离分布和 RoPE scaling",
        ),
        Section(
            HANDS_ON, "§1.5.2", "高维推广",
            part="低频组捕捉远距离相对位置关系，高频组捕捉近距离细粒度位置关系",
        ),
        Section(
            HANDS_ON, "§01.5", "位置编码再讲深一点：RoPE 的旋转矩阵推导",
            part="理论上有更好的外推性，长上下文模型常用",
        ),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
    contract=2,
)  # fmt: skip
