"""Learned absolute positions: a table of T_max rows, and what happens at and past T_max.

Transformer 逐部件讲透 §6.7 lists the absolute position embedding ("位置 0、1、2 各自有
可学习向量") beside the sinusoid and RoPE; 第8章 · Attention 与 Transformer Block
阶段五 says GPT-2's learned table E^pos ∈ ℝ^(T_max × D) is added to the token
embedding, and that its cost is a context limit written into T_max. Contract v2
has the table as `learned_positions(positions, table)` (`table[positions]`,
positions (T,) or batched (B, T)) and as `decoder_forward(...,
positional="learned")` with `params["pos_embed"]` (T_max, C); both must refuse a
position past the table with ValueError (or TypeError) naming the argument.

Here each implementation looks up every row below T_max (one sequence and a
batch of shifted ones) and must return the table's rows exactly; positions at
T_max, past it and below 0 must be refused, not wrapped (numpy's `table[-1]` is
the last row) nor cut (`table[:T]` then a broadcast error); its decoder with
learned positions must equal the same model composed from its own functions
(the lookup, transformer_block, rms_norm, the tied head) and refuse T_max + 1
tokens. Beside it, the two schemes that have no T_max: the sinusoid computed
for T_max + past rows starts with the T_max-row table unchanged and keeps
PE(p)·PE(p+Δ) = Σ cos(Δω_i) past T_max, and RoPE's scores depend on m − n alone
at positions past T_max (a batch of two rows of positions, one shifted past the
table).
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field, model_validator

from labctl.course import CH8, PARTS, Section
from labctl.errors import CallError
from labctl.i18n import N_, Msg, implementation
from labctl.lab import Lab, LabContext, LabOutput, LabParams, Metric, TableFigure, larger
from labctl.textsafe import shown

REFUSALS = ("ValueError", "TypeError")
NAME_CHARS = 40  # of an exception's type name, as shown


class Params(LabParams):
    Tmax: int = Field(16, ge=2, le=512, description=N_("rows of the learned table (T_max)"))
    past: int = Field(16, ge=2, le=512, description=N_("positions probed past T_max"))
    C: int = Field(16, ge=4, le=256, description=N_("model width (even, for RoPE)"))
    V: int = Field(32, ge=2, le=1024, description=N_("vocabulary of the decoder"))
    H: int = Field(2, ge=1, le=16, description=N_("heads of the decoder"))
    F: int = Field(32, ge=1, le=1024, description=N_("SwiGLU hidden width of the decoder"))
    L: int = Field(2, ge=1, le=4, description=N_("decoder blocks"))
    delta: int = Field(3, ge=1, le=64, description=N_("distance Δ of the sinusoid's products"))
    theta: float = Field(10000.0, gt=1.0, description=N_("RoPE base"))

    @model_validator(mode="after")
    def _shapes(self) -> Params:
        if self.C % 2 or self.C % self.H or (self.C // self.H) % 2:
            raise ValueError(
                Msg("C must be even and H must divide it into even head widths, got C = {C}, "
                    "H = {H}", C=self.C, H=self.H)
            )  # fmt: skip
        if self.delta >= self.past:
            raise ValueError(Msg("delta = {d} must be below past = {p}", d=self.delta, p=self.past))
        return self


METRICS = (
    Metric(
        "learned_rows_max_abs_diff", "abs", "==0",
        N_("max |learned_positions(positions, table) - table[positions]| for every position "
           "0 .. T_max-1, as (T,) and as a batch (2, T) of shifted rows"),
        why=N_("a lookup copies the table's rows: exact; a row off by one is O(1)"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "learned_past_tmax_not_refused", "calls", "==0",
        N_("calls past the table that were not refused with ValueError or TypeError: "
           "learned_positions at T_max, at T_max + past - 1, at -1 and in a batch, and "
           "decoder_forward(positional='learned') on T_max + 1 tokens"),
        why=N_("contract v2: a position < 0 or >= T_max, and T > T_max in the decoder, raise "
               "ValueError naming the argument. table[-1] silently returns the last row; "
               "table[T_max] raises IndexError; pos_embed[:T] silently cuts"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "learned_decoder_vs_composed_error", "abs", "<=1e-10",
        N_("max |decoder_forward(positional='learned') - the same model composed from the "
           "implementation's own learned_positions, transformer_block and rms_norm| at "
           "T = T_max and T = T_max - 3"),
        why=N_("one float64 model computed twice by the same implementation: rounding only "
               "(~1e-15); a decoder that forgets the positions or adds the wrong rows is O(1)"),
    ),
    Metric(
        "sinusoid_prefix_max_abs_diff", "abs", "<=1e-12",
        N_("max |sinusoidal_positions(T_max + past, C)[:T_max] - sinusoidal_positions(T_max, "
           "C)|: the longer table starts with the shorter one"),
        why=N_("PE(p) depends on p alone, so a longer table only adds rows (equal to the last "
               "bit, 1e-12 allowed for a vectorised sin); a sinusoid scaled by the length moves "
               "every row"),
    ),
    Metric(
        "sinusoid_past_tmax_shift_error", "abs", "<=1e-10",
        N_("max |PE(p)·PE(p+Δ) - Σ_i cos(Δω_i)| over p from T_max to T_max + past - Δ - 1"),
        why=N_("第8章 阶段五's identity holds at every p, past T_max too: float64 sums of C/2 "
               "terms (~1e-15); a wrong frequency or pairing breaks it by O(1)"),
    ),
    Metric(
        "rope_past_tmax_relative_error", "abs", "<=1e-10",
        N_("max |q_m·k_n - q_(m+s)·k_(n+s)| for RoPE'd q and k, m, n < T_max and s = past: "
           "one rope call on a batch of two rows of positions (B, T), 0 .. T_max-1 and "
           "past .. past + T_max - 1"),
        why=N_("a rotation by mθ against nθ leaves (m − n)θ: the scores depend on the distance "
               "alone (float64, ~1e-14); a rope that scales the pairs instead of rotating them "
               "is O(1) off"),
    ),
    Metric(
        "learned_reference_max_error", "abs", "<=1e-10",
        N_("float64 clean room vs reference: the lookups, both decoders, the sinusoid and the "
           "RoPE'd scores"),
        impls=("both",),
        why=N_("two float64 implementations of the same functions: rounding only (~1e-15)"),
    ),
)  # fmt: skip


def refusal(call, argument: str) -> tuple[bool, str | Msg]:
    """(refused as the contract says, how): the exception's type and whether its message
    names `argument`, or what came back instead. The message itself is not shown: it is
    the implementation's own text, in its own language."""
    try:
        value = call()
    except CallError as exc:
        if exc.kind != "exception":
            return False, Msg("the call ended: {kind}", kind=exc.kind)
        kind, message = shown(exc.exc_type or "")[:NAME_CHARS], exc.detail
    except Exception as exc:  # the reference, in this process
        kind, message = type(exc).__name__, str(exc)
    else:
        return False, Msg("returned an array of shape {shape}", shape=tuple(np.shape(value)))
    named = argument in str(message)
    how = (Msg("{kind}, naming {argument}", kind=kind, argument=argument) if named
           else Msg("{kind}, not naming {argument}", kind=kind, argument=argument))  # fmt: skip
    return kind in REFUSALS, how


def make_decoder(rng: np.random.Generator, p: Params) -> dict:
    """A random decoder in the contract's layout, with a learned table of T_max rows."""
    C = p.C

    def block() -> dict[str, np.ndarray]:
        return {
            "norm1": np.ones(C),
            "wq": rng.standard_normal((C, C)) / math.sqrt(C),
            "wk": rng.standard_normal((C, C)) / math.sqrt(C),
            "wv": rng.standard_normal((C, C)) / math.sqrt(C),
            "wo": rng.standard_normal((C, C)) / math.sqrt(C),
            "norm2": np.ones(C),
            "w_gate": rng.standard_normal((C, p.F)) / math.sqrt(C),
            "w_up": rng.standard_normal((C, p.F)) / math.sqrt(C),
            "w_down": rng.standard_normal((p.F, C)) / math.sqrt(p.F),
        }

    return {
        "embed": rng.standard_normal((p.V, C)) * 0.02,
        "pos_embed": rng.standard_normal((p.Tmax, C)) * 0.02,  # (T_max, C)
        "blocks": [block() for _ in range(p.L)],
        "final_norm": np.ones(C),
    }


def composed(impl, ids: np.ndarray, model: dict, H: int) -> np.ndarray:
    """The learned-position decoder from the implementation's own parts: (B, T, V)."""
    T = ids.shape[1]
    x = model["embed"][ids] + impl.learned_positions(np.arange(T), model["pos_embed"])  # (B,T,C)
    for block in model["blocks"]:
        x = impl.transformer_block(x, block, H)
    return impl.rms_norm(x, model["final_norm"]) @ model["embed"].T  # (B, T, V): tied head


def sinusoid_shift(pe: np.ndarray, start: int, delta: int) -> float:
    """max |PE(p)·PE(p+Δ) - Σ cos(Δω_i)| for p from `start` on."""
    C = pe.shape[1]
    omega = 10000.0 ** (-2.0 * np.arange(C // 2) / C)
    closed = float(np.sum(np.cos(delta * omega)))
    dots = np.sum(pe[start : len(pe) - delta] * pe[start + delta :], axis=1)
    return float(np.max(np.abs(dots - closed)))


def rope_scores(impl, q: np.ndarray, k: np.ndarray, positions: np.ndarray, theta: float):
    """(2, T, T) q·k scores after rope at a batch of two rows of positions (2, T)."""
    qr = np.asarray(impl.rope(q, positions, theta))  # (2, T, D)
    kr = np.asarray(impl.rope(k, positions, theta))
    return qr @ np.swapaxes(kr, -1, -2)


def _measure(impl, p: Params, table, model, ids, q, k) -> tuple[dict, dict, list]:
    got: dict[str, float] = {}
    kept: dict[str, np.ndarray] = {}
    rows = np.arange(p.Tmax)
    batch = np.stack([rows, np.roll(rows, 3)])  # (2, T_max): a second row shifted
    kept["rows"] = np.asarray(impl.learned_positions(rows, table))
    kept["batch"] = np.asarray(impl.learned_positions(batch, table))
    got["learned_rows_max_abs_diff"] = max(
        float(np.max(np.abs(kept[key] - table[where]))) if kept[key].shape == table[where].shape
        else math.inf
        for key, where in (("rows", rows), ("batch", batch))
    )  # fmt: skip
    far = p.Tmax + p.past - 1
    calls = [
        (f"learned_positions([{p.Tmax}])", lambda: impl.learned_positions(np.array([p.Tmax]), table)),
        (f"learned_positions([{far}])", lambda: impl.learned_positions(np.array([far]), table)),
        ("learned_positions([-1])", lambda: impl.learned_positions(np.array([-1]), table)),
        (f"learned_positions([[0, 1], [{p.Tmax - 1}, {p.Tmax}]])",
         lambda: impl.learned_positions(np.array([[0, 1], [p.Tmax - 1, p.Tmax]]), table)),
        (f"decoder_forward(T={p.Tmax + 1}, 'learned')",
         lambda: impl.decoder_forward(
             np.zeros((1, p.Tmax + 1), dtype=np.int64), model, p.H, None, 1e-6, "learned")),
    ]  # fmt: skip
    refused = [
        (label, *refusal(call, "token_ids" if label.startswith("decoder") else "positions"))
        for label, call in calls
    ]
    got["learned_past_tmax_not_refused"] = float(sum(not ok for _, ok, _ in refused))
    error = 0.0
    for T in (p.Tmax, p.Tmax - 3):
        if T < 1:
            continue
        whole = np.asarray(impl.decoder_forward(ids[:, :T], model, p.H, None, 1e-6, "learned"))
        parts = composed(impl, ids[:, :T], model, p.H)
        kept[f"decoder{T}"] = whole
        error = larger(error, float(np.max(np.abs(whole - parts))) if whole.shape == parts.shape
                       else math.inf)  # fmt: skip
    got["learned_decoder_vs_composed_error"] = error
    short = np.asarray(impl.sinusoidal_positions(p.Tmax, p.C))
    long = np.asarray(impl.sinusoidal_positions(p.Tmax + p.past, p.C))
    kept["sinusoid"] = long
    got["sinusoid_prefix_max_abs_diff"] = (
        float(np.max(np.abs(long[: p.Tmax] - short))) if long.shape == (p.Tmax + p.past, p.C)
        and short.shape == (p.Tmax, p.C) else math.inf
    )  # fmt: skip
    got["sinusoid_past_tmax_shift_error"] = (
        sinusoid_shift(long, p.Tmax, p.delta) if long.shape == (p.Tmax + p.past, p.C) else math.inf
    )
    positions = np.stack([np.arange(p.Tmax), np.arange(p.past, p.past + p.Tmax)])  # (2, T)
    scores = rope_scores(impl, q, k, positions, p.theta)  # (2, T, T)
    kept["rope"] = scores
    got["rope_past_tmax_relative_error"] = float(np.max(np.abs(scores[0] - scores[1])))
    # one q and one k at every position 0 .. T_max + past - 1, for the figure's RoPE column
    L = p.Tmax + p.past
    line = np.broadcast_to(q[0, :1], (L, p.C)), np.broadcast_to(k[0, :1], (L, p.C))  # (L, C)
    kept["rope_line"] = np.stack([np.asarray(impl.rope(v, np.arange(L), p.theta)) for v in line])
    return got, kept, refused


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    rng = np.random.default_rng(ctx.seed)
    table = rng.standard_normal((p.Tmax, p.C))  # (T_max, C)
    model = make_decoder(rng, p)
    ids = rng.integers(0, p.V, size=(2, p.Tmax))  # (B, T)
    qk = rng.standard_normal((2, p.Tmax, p.C))  # (T, C), the same for both batch rows
    q, k = np.stack([qk[0], qk[0]]), np.stack([qk[1], qk[1]])  # (2, T, C) each
    output = LabOutput()
    kept, refused = {}, {}
    for name, impl in ctx.impls.items():
        got, kept[name], refused[name] = _measure(impl, p, table, model, ids, q, k)
        for metric, value in got.items():
            output.add(metric, name, value)
    if ctx.both:
        gap = 0.0
        for key, ref in kept["reference"].items():
            room = kept["clean-room"][key]
            gap = larger(gap, float(np.max(np.abs(ref - room))) if ref.shape == room.shape
                         else math.inf)  # fmt: skip
        output.add("learned_reference_max_error", "both", gap)
    output.figures += _figures(p, kept, refused, table)
    return output


def _figures(p: Params, kept: dict, refused: dict, table: np.ndarray) -> list:
    names = list(kept)
    last, far, d = p.Tmax - 1, p.Tmax + p.past - 1, p.delta
    first = {n: dict((label, (ok, how)) for label, ok, how in refused[n]) for n in names}
    labels = [label for label, _, _ in next(iter(refused.values()))]

    def refused_as(n: str, label: str) -> str | Msg:
        ok, how = first[n][label]
        return how.args["kind"] if ok else N_("NOT REFUSED")

    def dot(n: str, at: int) -> float:
        pe = kept[n]["sinusoid"]
        return float(pe[at] @ pe[at + d])

    probes = (
        (Msg("learned_positions at T_max - 1 = {p}: |row - table[p]|", p=last),
         lambda n: float(np.max(np.abs(kept[n]["rows"][last] - table[last])))
         if kept[n]["rows"].shape == table.shape else math.inf),
        (Msg("learned_positions at T_max = {p}", p=p.Tmax), lambda n: refused_as(n, labels[0])),
        (Msg("learned_positions at {p}", p=far), lambda n: refused_as(n, labels[1])),
        (Msg("sinusoid PE(p)·PE(p+{d}) at p = {p}", d=d, p=last), lambda n: dot(n, last)),
        (Msg("sinusoid PE(p)·PE(p+{d}) at p = {p}", d=d, p=far - d), lambda n: dot(n, far - d)),
        (Msg("RoPE q_m·k_n, m = {m}, n = {k}", m=last, k=last - d),
         lambda n: float(kept[n]["rope"][0, last, last - d])),
        (Msg("RoPE q_m·k_n, m = {m}, n = {k}", m=last + p.past, k=last + p.past - d),
         lambda n: float(kept[n]["rope"][1, last, last - d])),
    )  # fmt: skip
    schemes = TableFigure(
        title=Msg("at and past T_max = {Tmax}: the learned table refuses, the sinusoid and RoPE "
                  "go on (the same distance gives the same product)", Tmax=p.Tmax),
        columns=(N_("probe"), *(implementation(n) for n in names)),
        rows=tuple((label, *(value(n) for n in names)) for label, value in probes),
    )  # fmt: skip
    how = TableFigure(
        title=N_("how each call past the table ended"),
        columns=(N_("call"), *(implementation(n) for n in names)),
        rows=tuple(
            (label, *(first[n][label][1] if first[n][label][0]
                      else Msg("NOT REFUSED: {how}", how=first[n][label][1]) for n in names))
            for label in labels
        ),
    )  # fmt: skip
    return [schemes, how, *(_by_position(p, kept[n], table, n) for n in names)]


def _by_position(p: Params, kept: dict, table: np.ndarray, name: str) -> TableFigure:
    """The product of each scheme's vectors Δ apart, at positions up to and past T_max: the
    learned table's rows are unrelated (and refused past it), the other two depend on Δ alone."""
    d, last = p.delta, p.Tmax + p.past - p.delta - 1
    step = max(1, last // 8)
    shown = sorted({*range(0, last + 1, step), p.Tmax - d - 1, p.Tmax - d, p.Tmax, last})
    rows = []
    for at in shown:
        learned = kept["rows"]
        inside = at + d < p.Tmax and learned.shape == table.shape
        pe, (q, k) = kept["sinusoid"], kept["rope_line"]
        rows.append(
            (
                at,
                float(learned[at] @ learned[at + d]) if inside else "—",
                float(pe[at] @ pe[at + d]),
                float(q[at + d] @ k[at]),
            )
        )
    return TableFigure(
        title=Msg(
            "the product of two vectors {d} positions apart, at p and p + {d}, up to and past "
            "T_max = {Tmax} ({impl}): the learned table has no rows past it",
            d=d,
            Tmax=p.Tmax,
            impl=implementation(name),
        ),
        columns=("p", N_("learned table"), N_("sinusoid"), "RoPE q·k"),
        rows=tuple(rows),
    )


LAB = Lab(
    id="learned-positions",
    title=N_("Learned positions: a table of T_max rows, beside the sinusoid and RoPE"),
    question=N_(
        "Does a learned position table give its rows exactly and refuse every position past "
        "T_max, in the lookup and in the decoder, while the sinusoid and RoPE go on past it?"
    ),
    sections=(
        Section(PARTS, "§6.7", "位置编码"),
        Section(CH8, "阶段五", "位置从哪里来", part="学习式位置编码（GPT-2 路线）"),
        Section(CH8, "阶段五", "位置从哪里来"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
    contract=2,
)
