"""ALiBi: the bias, the slopes for H heads, and attention past the trained length.

Transformer 逐部件讲透 §6.7 lists ALiBi among the position schemes ("在注意力分数上
加入与距离相关的偏置"); Transformer 手撕与注意力机制 §01.5's table gives it as
score - λ·|m-n| ("距离越远惩罚越大 … 显式衰减远距离注意力，长文推理更保守") beside
absolute positions ("超出训练长度后外推困难") and RoPE ("理论上有更好的外推性").

Contract v2's `alibi_slopes(H)` gives m_h = 2^(-8(h+1)/H) for H a power of two
(else the paper's interleaving) and `alibi_bias(H, Tq, Tk)` the bias
-m_h · (p_i - j), bottom-right aligned. The slopes are checked against the
formula written out here; the bias by the attention it gives under the causal
mask, which is what a bias is for: the chapter's own -λ·|m - n| differs from
the contract's entries only at the masked future keys, and the paper's code
adds m_h · j, which differs by a constant in each row (softmax ignores it), so
both give the same attention and pass; a note names the form each
implementation returns. Then one query at the end of sequences 1x to 4x a trained
length looks at seeded random keys, four ways: content only, ALiBi, RoPE and
the sinusoidal table added to q and k; the attention mass it puts on keys
farther away than the trained length measures what each scheme does there.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from labctl.course import HANDS_ON, PARTS, Section
from labctl.i18n import N_, Msg, declared, implementation
from labctl.lab import (
    Lab,
    LabContext,
    LabOutput,
    LabParams,
    Metric,
    Note,
    TableFigure,
    largest,
    ratio,
)

LENGTHS = (1, 2, 3, 4)  # multiples of the trained length
SCHEMES = ("content", "alibi", "rope", "sinusoidal")
SCHEME_NAMES = {
    "content": N_("content only"),
    "alibi": "ALiBi",
    "rope": "RoPE",
    "sinusoidal": N_("sinusoidal table"),
}


class Params(LabParams):
    H: int = Field(8, ge=2, le=64, description=N_("attention heads (one ALiBi slope each)"))
    D: int = Field(32, ge=4, le=256, description=N_("head width; even"))
    trained: int = Field(64, ge=16, le=512, description=N_("the trained length Ttrain"))
    rope_theta: float = Field(10000.0, gt=1.0, description=N_("RoPE base θ"))


METRICS = (
    Metric(
        "alibi_slopes_max_error", "abs", "<=1e-15",
        N_("alibi_slopes(H) for H, 12 and 6 heads (12 and 6 are not powers of two) against "
           "2^(-8(h+1)/n) written out, with the paper's interleaving"),
        why=N_("powers of two are exact in float64; the paper's rule picks the same numbers: 0, "
               "or 1 ulp; a slope list off by one head is off by a factor 2^(8/H)"),
    ),
    Metric(
        "alibi_bias_max_error", "abs", "<=1e-12",
        N_("largest difference of the attention weights softmax(s + alibi_bias(H, Tq, Tk)) under "
           "the causal mask from those with -m_h (Tk - Tq + i - j) written out, for random "
           "scores s, Tq = Tk and the decode case Tq < Tk: a bias in another form that gives "
           "the same attention (a constant per row, other values at masked keys) passes"),
        why=N_("softmax ignores a constant added to a row and the causal mask removes the keys "
               "after p_i, so only the bias's differences between visible keys matter; float64 "
               "weights round at ~1e-16. A slope off by a factor 2^(8/H), a bias of the wrong "
               "sign or none moves the weights by 1e-3 or more"),
    ),
    Metric(
        "alibi_weight_rises", "pairs", "==0",
        N_("with identical keys, adjacent keys where the ALiBi weight does not fall strictly as "
           "the distance grows (every head, 4 · Ttrain keys)"),
        why=N_("equal content leaves only the bias, -m_h · distance: the weights fall "
               "geometrically with distance; a bias of the wrong sign or none does not"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "alibi_far_mass_over_content", "ratio", "<0.9",
        N_("attention mass beyond Ttrain of the last query at 4 · Ttrain with ALiBi, over the "
           "same without any position (random keys, mean over heads)"),
        why=N_("ALiBi's penalty grows with distance, so the far keys get less than their share "
               "(about 0.2 of it for 8 heads); a bias of the wrong sign gives them more, no bias "
               "exactly their share (1)"),
    ),
    Metric(
        "alibi_reference_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference over every output of this lab"),
        impls=("both",),
        why=N_("two float64 implementations of one formula differ by rounding only (~1e-15)"),
    ),
)  # fmt: skip


def paper_slopes(n_heads: int) -> np.ndarray:
    """The ALiBi paper's slopes written out: a geometric sequence from 2^(-8/n)."""

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (h + 1) for h in range(n)]

    if n_heads & (n_heads - 1) == 0:
        return np.array(power_of_two(n_heads))
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = power_of_two(2 * closest)[0::2][: n_heads - closest]
    return np.array(power_of_two(closest) + extra)


def written_bias(slopes: np.ndarray, t_q: int, t_k: int) -> np.ndarray:
    """bias[h, i, j] = -m_h (t_k - t_q + i - j), loop by loop."""
    out = np.zeros((len(slopes), t_q, t_k))
    for h, m in enumerate(slopes):
        for i in range(t_q):
            for j in range(t_k):
                out[h, i, j] = -m * (t_k - t_q + i - j)
    return out


def causal_weights(bias, scores: np.ndarray) -> np.ndarray:
    """softmax(scores + bias) over each row's visible keys (j <= Tk - Tq + i): the attention a
    bias gives; inf where the bias is not (H, Tq, Tk), NaN where it holds a NaN."""
    bias = np.asarray(bias, dtype=np.float64)
    H, t_q, t_k = scores.shape
    if bias.shape != scores.shape:
        return np.full(scores.shape, np.inf)
    if np.isnan(bias).any():  # not a number is no bias, even where the mask would hide it
        return np.full(scores.shape, np.nan)
    blocked = np.arange(t_k)[None, :] > (t_k - t_q) + np.arange(t_q)[:, None]  # (Tq, Tk)
    with np.errstate(invalid="ignore", over="ignore"):  # +inf at a visible key gives NaN: fails
        z = np.where(blocked, -np.inf, scores + bias)
        e = np.exp(z - np.max(z, axis=-1, keepdims=True))
        return e / np.sum(e, axis=-1, keepdims=True)


# The forms of the bias that give the same attention, as a learner may write them: each is
# -m_h (p_i - j) plus a constant per row, or other values at the masked keys j > p_i.
BIAS_FORMS = {
    "contract": N_("the contract's -m_h (p_i - j), entry for entry"),
    "chapter": N_(
        "手撕 §01.5's -λ·|m - n|: the same at the visible keys, negative at the masked "
        "future keys where the contract's is positive"
    ),
    "paper-code": N_(
        "the ALiBi paper's code, m_h · j (slope times key index): the contract's "
        "plus m_h · p_i in each row"
    ),
    "top-left": N_("-m_h (i - j), top-left aligned: the contract's plus m_h (Tk - Tq) in each row"),
    "masked": N_(
        "the contract's at the visible keys with the causal mask folded in (-inf at "
        "the masked keys)"
    ),
}


def bias_forms(bias, slopes: np.ndarray, t_q: int, t_k: int) -> frozenset[str]:
    """Which of BIAS_FORMS `bias` is, to 1e-12 (several where they coincide: at Tq = 1 the
    chapter's form is the contract's), or none."""
    bias = np.asarray(bias, dtype=np.float64)
    m = slopes[:, None, None]
    p = (t_k - t_q) + np.arange(t_q)[None, :, None]  # each query's position
    j = np.arange(t_k)[None, None, :]
    contract = -m * (p - j)
    forms = {
        "contract": contract,
        "chapter": -m * np.abs(p - j),
        "paper-code": m * j + 0.0 * p,
        "top-left": -m * (p - (t_k - t_q) - j),
        "masked": np.where(j > p, -np.inf, contract),
    }
    found = set()
    for name, form in forms.items():
        if bias.shape == form.shape and np.array_equal(np.isinf(bias), np.isinf(form)):
            finite = ~np.isinf(form)
            if np.all(np.abs(bias[finite] - form[finite]) <= 1e-12) and np.all(
                bias[~finite] == form[~finite]
            ):
                found.add(name)
    return frozenset(found)


def _form_note(impl: str, kept: dict) -> Note:
    """Which form of the bias `impl` returns, and what that means for the lab and for verify."""
    forms = set(BIAS_FORMS).intersection(*(kept[key] for key in kept if key.startswith("form")))
    form = next((name for name in BIAS_FORMS if name in forms), None)
    if form == "contract":
        return Note(Msg("{impl}'s alibi_bias is {form}.", impl=implementation(impl),
                        form=declared(BIAS_FORMS[form])))  # fmt: skip
    named = declared(BIAS_FORMS[form]) if form else Msg("a form of its own")
    return Note(
        Msg("{impl}'s alibi_bias is {form}. The lab judges a bias by the attention it gives under "
            "the causal mask (softmax ignores a constant per row, the mask the keys after p_i), "
            "so any form giving the same weights passes alibi_bias_max_error; contract v2 (#21) "
            "fixes the entries themselves, so `labctl verify` compares them as written.",
            impl=implementation(impl), form=named),
        flag=True,
    )  # fmt: skip


def _far_mass(weights: np.ndarray, trained: int) -> float:
    """Mass of the last query's weights (H, T) on keys at distance >= trained, mean over heads."""
    T = weights.shape[-1]
    return float(np.mean(np.sum(weights[:, : max(T - trained, 0)], axis=-1)))


def last_query_weights(impl, q, k, scheme: str, p: Params) -> np.ndarray:
    """The last query's softmax weights (H, T) over keys k (H, T, D) under one position scheme."""
    H, T, D = k.shape
    if scheme == "rope":
        q = impl.rope(q, np.array([T - 1]), p.rope_theta)
        k = impl.rope(k, np.arange(T), p.rope_theta)
    elif scheme == "sinusoidal":
        table = impl.sinusoidal_positions(T, D)  # (T, D)
        q, k = q + table[-1:], k + table
    scores = (q @ np.swapaxes(k, -1, -2))[:, 0] / math.sqrt(D)  # (H, T)
    if scheme == "alibi":
        scores = scores + impl.alibi_bias(H, 1, T)[:, 0]
    return impl.softmax(scores, -1)


def _measure(impl, p: Params, q, k, scores) -> tuple[dict[str, float], dict]:
    got: dict[str, float] = {}
    kept: dict = {}
    errors = []
    for heads in (p.H, 12, 6):
        kept[f"slopes{heads}"] = impl.alibi_slopes(heads)
        errors.append(float(np.max(np.abs(kept[f"slopes{heads}"] - paper_slopes(heads)))))
    got["alibi_slopes_max_error"] = max(errors)
    slopes = paper_slopes(p.H)
    errors = []
    for t_q, t_k in ((7, 7), (3, 9), (1, 4 * p.trained)):
        bias = impl.alibi_bias(p.H, t_q, t_k)
        kept[f"bias{t_q}x{t_k}"] = causal_weights(bias, scores[f"{t_q}x{t_k}"])
        kept[f"form{t_q}x{t_k}"] = bias_forms(bias, slopes, t_q, t_k)
        written = causal_weights(written_bias(slopes, t_q, t_k), scores[f"{t_q}x{t_k}"])
        errors.append(float(np.max(np.abs(kept[f"bias{t_q}x{t_k}"] - written))))
    got["alibi_bias_max_error"] = largest(errors)
    T = 4 * p.trained
    same = np.broadcast_to(k[:, :1], (p.H, T, p.D))  # every key the same
    flat = last_query_weights(impl, q, np.ascontiguousarray(same), "alibi", p)  # (H, T)
    # reading keys from the nearest back: each must weigh strictly less than the one after it
    got["alibi_weight_rises"] = int(np.sum(flat[:, :-1] >= flat[:, 1:]))
    for L in LENGTHS:
        for scheme in SCHEMES:
            kept[f"{scheme}{L}"] = last_query_weights(impl, q, k[:, : L * p.trained], scheme, p)
    got["alibi_far_mass_over_content"] = ratio(
        _far_mass(kept["alibi4"], p.trained), _far_mass(kept["content4"], p.trained)
    )
    kept["flat"] = flat
    return got, kept


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    if p.D % 2:
        raise ValueError(f"D = {p.D} must be even")
    rng = np.random.default_rng(ctx.seed)
    q = rng.standard_normal((p.H, 1, p.D))  # (H, 1, D): the last query
    k = rng.standard_normal((p.H, 4 * p.trained, p.D))  # (H, T, D)
    scores = {  # the content scores the bias is added to, (H, Tq, Tk) each
        f"{t_q}x{t_k}": rng.standard_normal((p.H, t_q, t_k))
        for t_q, t_k in ((7, 7), (3, 9), (1, 4 * p.trained))
    }
    output = LabOutput()
    kept: dict[str, dict] = {}
    for name, impl in ctx.impls.items():
        got, kept[name] = _measure(impl, p, q, k, scores)
        for metric, value in got.items():
            output.add(metric, name, value)
    if ctx.both:
        ref, room = kept["reference"], kept["clean-room"]
        output.add(
            "alibi_reference_max_error", "both",
            largest(
                np.max(np.abs(ref[key] - room[key])) for key in ref if not key.startswith("form")
            ),
        )  # fmt: skip
    output.figures += _figures(p, kept)
    return output


def _figures(p: Params, kept: dict[str, dict]) -> list:
    """The slopes, the bias's form, the far mass by length and scheme, per-head mass, and the
    chapters' claims."""
    names = list(kept)
    figures: list = [*(_form_note(n, kept[n]) for n in names)]
    figures += [
        TableFigure(
            title=Msg("ALiBi slopes m_h for H = {H} and for 12 heads (not a power of two: the 8 "
                      "slopes of 8 heads, then every other slope of 16)", H=p.H),
            columns=("h", N_("written out"), *(Msg("H = {H}, {impl}", H=p.H, impl=n) for n in names),
                     N_("12 heads, written out"), *(Msg("12 heads, {impl}", impl=n) for n in names)),
            rows=tuple(
                (str(h),
                 float(paper_slopes(p.H)[h]) if h < p.H else "",
                 *(float(kept[n][f"slopes{p.H}"][h]) if h < p.H else "" for n in names),
                 float(paper_slopes(12)[h]) if h < 12 else "",
                 *(float(kept[n]["slopes12"][h]) if h < 12 else "" for n in names))
                for h in range(max(p.H, 12))
            ),
        )
    ]  # fmt: skip
    figures.append(
        TableFigure(
            title=Msg("attention mass of the last query on keys farther than Ttrain = {t} (mean "
                      "over {H} heads, random q and k): within the trained length there are none",
                      t=p.trained, H=p.H),
            columns=(N_("length"), N_("scheme"), *names),
            rows=tuple(
                (f"{L} · Ttrain = {L * p.trained}", SCHEME_NAMES[s],
                 *(_far_mass(kept[n][f"{s}{L}"], p.trained) for n in names))
                for L in LENGTHS for s in SCHEMES
            ),
        )
    )  # fmt: skip
    figures.append(
        TableFigure(
            title=Msg("per head at 4 · Ttrain: ALiBi's slope, its penalty at distance Ttrain, and "
                      "the far mass beside RoPE's", ),
            columns=("h", "m_h", N_("m_h · Ttrain"),
                     *(Msg("ALiBi far mass, {impl}", impl=n) for n in names),
                     *(Msg("RoPE far mass, {impl}", impl=n) for n in names)),
            rows=tuple(
                (str(h), float(m), float(m * p.trained),
                 *(float(np.sum(kept[n]["alibi4"][h, : 3 * p.trained])) for n in names),
                 *(float(np.sum(kept[n]["rope4"][h, : 3 * p.trained])) for n in names))
                for h, m in enumerate(paper_slopes(p.H))
            ),
        )
    )  # fmt: skip
    for n in names:
        alibi, rope, content, sinus = (
            _far_mass(kept[n][f"{s}4"], p.trained) for s in ("alibi", "rope", "content", "sinusoidal")
        )  # fmt: skip
        agrees = alibi < 0.5 * min(rope, content)
        figures.append(
            Note(
                Msg("手撕 §01.5: ALiBi 显式衰减远距离注意力. {impl} at 4 · Ttrain: the keys beyond "
                    "Ttrain get {alibi:.3f} of the mass with ALiBi, {rope:.3f} with RoPE, {sin:.3f} "
                    "with the sinusoidal table and {content:.3f} with content only: the "
                    "measurement {verdict}. ALiBi's bias is the same line -m·d inside and past "
                    "the trained length, so nothing it adds there is new to the model; RoPE's "
                    "random-key mass spreads like content only (its far angles are the subject "
                    "of the rope-scaling lab).",
                    impl=n, alibi=alibi, rope=rope, sin=sinus, content=content,
                    verdict=Msg("agrees") if agrees else Msg("disagrees")),
                flag=not agrees,
            )
        )  # fmt: skip
    return figures


LAB = Lab(
    id="alibi",
    title=N_("ALiBi: slopes, bias, and attention past the trained length"),
    question=N_(
        "What bias does ALiBi add and with which slopes, and where does a query past the "
        "trained length put its attention with ALiBi, RoPE and a sinusoidal table?"
    ),
    sections=(
        Section(PARTS, "§6.7", "位置编码"),
        Section(HANDS_ON, "§01.5", "位置编码再讲深一点：RoPE 的旋转矩阵推导"),
        Section(HANDS_ON, "§1.2.2", "绝对位置编码的矩阵形式"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
    contract=2,
)
