"""The rope-scaling lab's tables and its notes on the chapters' claims, from the kept numbers.

`kept[impl]` holds, per implementation, the unwrapped angles of every method
(`plain`, `pi`, `ntk`: (T, D/2)), the score profiles (`profile-{method}{L}`,
score against distance at length L · Tmax) and the batched outputs.
"""

from __future__ import annotations

import math

import numpy as np

from labctl.i18n import N_, Msg, declared
from labctl.lab import Note, TableFigure

METHODS = ("plain", "pi", "ntk")
METHOD_NAMES = {
    "plain": N_("plain RoPE"),
    "pi": N_("position interpolation"),
    "ntk": N_("NTK-aware"),
}
CONTENTS = 4  # identical-content vectors the score profile averages over


def lengths(p) -> range:
    """The lengths shown, in multiples of Tmax: 1x to 4x, or to s x where s is larger."""
    return range(1, max(4, p.factor) + 1)


def ntk_ratio(i: np.ndarray, D: int, factor: float) -> np.ndarray:
    """ω'_i / ω_i under NTK-aware scaling: (θ s^(D/(D-2)))^(-2i/D) / θ^(-2i/D) = s^(-2i/(D-2))."""
    return float(factor) ** (-2.0 * i / (D - 2))


def departure(profile: np.ndarray, trained: np.ndarray, length: int) -> float:
    """How far the profile at distances Tmax..length-1 leaves the range the trained one spans."""
    beyond = profile[len(trained) : length]
    if not beyond.size:
        return 0.0
    below, above = trained.min() - beyond, beyond - trained.max()
    return float(max(0.0, below.max(), above.max()))


def steps_past(angles: np.ndarray, plain: np.ndarray, p, pair: int) -> float:
    """How far `pair` turns at s · Tmax past its largest angle in training, in trained steps."""
    top = plain[p.trained - 1, pair]
    return float((angles[p.factor * p.trained - 1, pair] - top) / plain[1, pair])


def new_angle_pairs(angles: np.ndarray, plain: np.ndarray, p) -> int:
    """Pairs that never finish a turn within Tmax and go more than a trained step past their
    largest trained angle at s · Tmax: angles the model never saw."""
    top = plain[p.trained - 1]
    fresh = (top < 2 * math.pi) & (angles[p.factor * p.trained - 1] - top > plain[1])
    return int(np.sum(fresh))


def figures(p, kept: dict[str, dict[str, np.ndarray]]) -> list:
    names = list(kept)
    low = p.D // 2 - 1
    ext = p.factor * p.trained
    longest = lengths(p)[-1]
    speed = {n: {m: kept[n][m][-1] / (longest * p.trained - 1) for m in METHODS} for n in names}
    i = np.arange(p.D // 2)
    method_columns = tuple(
        Msg("{method}, {impl}", method=declared(METHOD_NAMES[m]), impl=n)
        for m in METHODS
        for n in names
    )
    out: list = [
        TableFigure(
            title=Msg("rotation angle (rad, unwrapped) of the highest-frequency pair (i = 0) and "
                      "the lowest (i = {low}) at positions within and beyond Tmax = {t}, s = {s}",
                      low=low, t=p.trained, s=p.factor),
            columns=("i", N_("position"), *method_columns),
            rows=tuple(
                (str(pair), str(L * p.trained - 1),
                 *(float(kept[n][m][L * p.trained - 1, pair]) for m in METHODS for n in names))
                for pair in (0, low) for L in lengths(p)
            ),
        ),
        TableFigure(
            title=Msg("every pair's angular speed ω_i (rad per position) and the ratio each "
                      "scaling gives it, measured, beside the formulas (s = {s})", s=p.factor),
            columns=("i", "ω_i", N_("turns within Tmax"),
                     *(Msg("PI ratio, {impl}", impl=n) for n in names), "1/s",
                     *(Msg("NTK ratio, {impl}", impl=n) for n in names), "s^(-2i/(D-2))"),
            rows=tuple(
                (str(k), float(speed[names[0]]["plain"][k]),
                 float(speed[names[0]]["plain"][k] * (p.trained - 1) / (2 * math.pi)),
                 *(float(speed[n]["pi"][k] / speed[n]["plain"][k]) for n in names),
                 1 / p.factor,
                 *(float(speed[n]["ntk"][k] / speed[n]["plain"][k]) for n in names),
                 float(ntk_ratio(k, p.D, p.factor)))
                for k in i
            ),
        ),
        TableFigure(
            title=Msg("at s · Tmax = {ext}: how far the lowest-frequency pair turns past its "
                      "largest angle in training (in trained steps), and the pairs of {pairs} that "
                      "reach angles never seen in training", ext=ext, pairs=p.D // 2),
            columns=(N_("scaling"), *(Msg("steps past, {impl}", impl=n) for n in names),
                     *(Msg("pairs with new angles, {impl}", impl=n) for n in names)),
            rows=tuple(
                (METHOD_NAMES[m],
                 *(steps_past(kept[n][m], kept[n]["plain"], p, low) for n in names),
                 *(str(new_angle_pairs(kept[n][m], kept[n]["plain"], p)) for n in names))
                for m in METHODS
            ),
        ),
        TableFigure(
            title=Msg("score q·k / |u|² of identical content vectors (mean of {n}) against "
                      "distance, for the query at {L} · Tmax - 1", n=CONTENTS, L=longest),
            columns=(N_("distance"), *method_columns),
            rows=tuple(
                (str(d), *(float(kept[n][f"profile-{m}{longest}"][d]) for m in METHODS for n in names))
                for d in _distances(p, longest)
            ),
        ),
        TableFigure(
            title=Msg("how far the score profile at distances beyond Tmax leaves the range plain "
                      "RoPE's spans within Tmax, by length"),
            columns=(N_("length"), N_("scaling"),
                     *(Msg("departure, {impl}", impl=n) for n in names),
                     *(Msg("mean score beyond Tmax, {impl}", impl=n) for n in names)),
            rows=tuple(
                (f"{L} · Tmax = {L * p.trained}", METHOD_NAMES[m],
                 *(_departure(kept[n], m, L, p) for n in names),
                 *(_mean_beyond(kept[n], m, L, p) for n in names))
                for L in lengths(p) for m in METHODS
            ),
        ),
    ]  # fmt: skip
    for n in names:
        out += _notes(p, n, kept[n], speed[n])
    return out


def _distances(p, longest: int) -> list[int]:
    T = p.trained
    marks = (0, 1, 2, T // 4, T // 2, T - 1, *(L * T - 1 for L in range(2, longest + 1)))
    return sorted(set(marks))


def _departure(kept: dict[str, np.ndarray], method: str, L: int, p) -> float:
    return departure(kept[f"profile-{method}{L}"], kept["profile-plain1"], L * p.trained)


def _mean_beyond(kept: dict[str, np.ndarray], method: str, L: int, p) -> float | str:
    beyond = kept[f"profile-{method}{L}"][p.trained :]
    return float(np.mean(beyond)) if beyond.size else ""


def _notes(p, n: str, kept: dict[str, np.ndarray], speed: dict[str, np.ndarray]) -> list[Note]:
    low, pairs = p.D // 2 - 1, p.D // 2
    plain = kept["plain"]
    steps = {m: steps_past(kept[m], plain, p, low) for m in METHODS}
    fresh = {m: new_angle_pairs(kept[m], plain, p) for m in METHODS}
    drift = {m: _departure(kept, m, p.factor, p) for m in METHODS}
    scaled_agree = steps["plain"] > 1 and steps["pi"] < 1 and steps["ntk"] < 1
    period = 2 * math.pi / speed["plain"]
    bands_agree = period[0] < p.trained < period[low]
    ratio = {m: speed[m] / speed["plain"] for m in ("pi", "ntk")}
    notes = [
        Note(
            Msg("逐部件讲透 §6.7: 扩展上下文时不能只把最大长度数字改大，还需要考虑模型训练过的距离分布和 "
                "RoPE scaling. {impl} at s · Tmax = {ext}: plain RoPE turns the lowest-frequency "
                "pair {plain:.0f} trained steps past its largest angle in training and {fp} of "
                "{pairs} pairs reach angles never seen in training; position interpolation "
                "{pi:.2f} steps and {fpi} pairs, NTK-aware {ntk:.2f} steps and {fntk} pairs. The "
                "score profile leaves its trained range by {dp:.3f} plain, {dpi:.3f} with PI and "
                "{dntk:.3f} with NTK: the measurement {verdict}.",
                impl=n, ext=p.factor * p.trained, plain=steps["plain"], fp=fresh["plain"],
                pairs=pairs, pi=steps["pi"], fpi=fresh["pi"], ntk=steps["ntk"],
                fntk=fresh["ntk"], dp=drift["plain"], dpi=drift["pi"], dntk=drift["ntk"],
                verdict=Msg("agrees") if scaled_agree else Msg("disagrees")),
            flag=not scaled_agree,
        ),
        Note(
            Msg("手撕 §1.5.2: 低频组捕捉远距离相对位置关系，高频组捕捉近距离细粒度位置关系. {impl}: the "
                "highest-frequency pair turns once every {hi:.2f} positions ({turns:.1f} turns "
                "within Tmax = {t}), the lowest once every {lo:.0f}: the measurement {verdict}. "
                "NTK-aware scaling keeps the highest pair's speed (ratio {nhi:.6f}) and slows the "
                "lowest by s (ratio {nlo:.4f}, 1/s = {inv:.4f}); PI slows every pair by s, the "
                "highest too ({phi:.4f}), so neighbouring positions turn it by 1/s of a trained step.",
                impl=n, hi=period[0], turns=(p.trained - 1) / period[0], t=p.trained, lo=period[low],
                verdict=Msg("agrees") if bands_agree else Msg("disagrees"),
                nhi=ratio["ntk"][0], nlo=ratio["ntk"][low], inv=1 / p.factor, phi=ratio["pi"][0]),
            flag=not bands_agree,
        ),
    ]  # fmt: skip
    if fresh["plain"]:
        notes.append(
            Note(
                Msg("手撕 §01.5: RoPE 理论上有更好的外推性. {impl}: its score depends on the "
                    "distance only, yet past Tmax plain RoPE turns {fp} of {pairs} pairs to "
                    "angles never seen in training and its score profile leaves the trained "
                    "range by {dp:.3f}: the claim is the approximation, and it holds where a "
                    "scaling keeps the angles in range ({fpi} such pairs with PI, {fntk} with "
                    "NTK-aware).",
                    impl=n, fp=fresh["plain"], pairs=pairs, dp=drift["plain"],
                    fpi=fresh["pi"], fntk=fresh["ntk"]),
            )
        )  # fmt: skip
    else:
        notes.append(
            Note(
                Msg("手撕 §01.5: RoPE 理论上有更好的外推性. {impl}: past Tmax no pair reaches an "
                    "angle unseen in training (every pair turns at least once within Tmax at "
                    "these parameters): the measurement agrees.", impl=n),
            )
        )  # fmt: skip
    return notes
