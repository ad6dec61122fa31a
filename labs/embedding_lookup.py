"""Token embedding is a lookup: one-hot times W_E equals row lookup, exactly, and what each costs.

Transformer 手撕与注意力机制 §1.2.1: with W_E ∈ ℝ^(V × d_model), the embedding of
token 42 is row 42 of W_E; written with a one-hot vector, e_42 · W_E = W_E[42, :],
and a sequence's one-hot matrix X_onehot (n × V) gives X_embed = X_onehot · W_E.
The chapter checks the two with np.allclose and warns that engineering never
builds the one-hot matrix ("太稀疏太大").

Here each implementation's lookup (contract v2's `learned_positions(positions,
table)` is `table[positions]`, the same lookup) is set against the chapter's
one-hot product, on the chapter's own example (V = 1000, d_model = 64, ids 42,
7, 256, 99) and on n random ids at growing vocabularies, in float64 and float32:
the two agree exactly, not just within allclose, since each output element is
one weight times 1 plus exact zeros. What each costs is computed and measured
as V grows: the one-hot matrix holds n·V numbers (measured with tracemalloc
around the chapter's code), a lookup only its n·d_model outputs (measured out
of the learner's reach: the clean room's worker's peak resident memory, the
reference's live torch tensors); the times are reported and never decide.
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
from pydantic import Field, model_validator

from labctl.course import HANDS_ON, Section
from labctl.i18n import N_, Msg, implementation
from labctl.lab import Lab, LabContext, LabOutput, LabParams, Metric, Note, TableFigure, larger

CHAPTER_V, CHAPTER_D = 1000, 64
CHAPTER_IDS = (42, 7, 256, 99)  # 手撕 §1.2.1's token_ids
# The largest one-hot matrix or table a run may build: 16 Mi numbers (128 MiB in float64).
MOST_NUMBERS = 16 * 2**20
# The most multiply-adds of the largest one-hot product (n x V x d_model): 4x the default's.
MOST_PRODUCT = 4 * 256 * 32000 * 64
# The least one-hot matrix the memory row is judged at: glibc serves allocations up to
# 32 MiB from memory a process already holds, which a worker's resident memory cannot see.
LEAST_ONEHOT_BYTES = 40 * 2**20


class Params(LabParams):
    d_model: int = Field(64, ge=1, le=1024, description=N_("embedding width d_model"))
    n: int = Field(256, ge=1, le=4096, description=N_("tokens looked up at each vocabulary size"))
    vocabs: tuple[int, ...] = Field(
        (1000, 8000, 32000),
        min_length=1,
        max_length=8,
        description=N_("vocabulary sizes V (increasing; the last is the one judged)"),
    )

    @model_validator(mode="after")
    def _sizes(self) -> Params:
        if any(v < 2 for v in self.vocabs) or list(self.vocabs) != sorted(set(self.vocabs)):
            raise ValueError(Msg("vocabs must be increasing sizes of at least 2"))
        largest = self.vocabs[-1]
        if self.n * largest * 8 < LEAST_ONEHOT_BYTES:
            raise ValueError(
                Msg(
                    "the one-hot matrix n x V x 8 at the largest V must hold at least {least:,} "
                    "bytes (40 MiB) for its memory to be measured, got n = {n}, V = {V}",
                    least=LEAST_ONEHOT_BYTES,
                    n=self.n,
                    V=largest,
                )
            )
        if self.n < 2 * self.d_model:
            raise ValueError(
                Msg(
                    "n = {n} must be at least 2 x d_model = {twice}: a one-hot lookup then "
                    "needs half its matrix or more beyond the table",
                    n=self.n,
                    twice=2 * self.d_model,
                )
            )
        if max(self.n, self.d_model) * largest > MOST_NUMBERS:
            raise ValueError(
                Msg(
                    "n x V and d_model x V must stay under {most:,} numbers (128 MiB), got "
                    "V = {V}, n = {n}, d_model = {d}",
                    most=MOST_NUMBERS,
                    V=largest,
                    n=self.n,
                    d=self.d_model,
                )
            )
        if self.n * largest * self.d_model > MOST_PRODUCT:
            raise ValueError(
                Msg(
                    "n x V x d_model = {product:,} multiply-adds of the one-hot product exceed "
                    "{most:,} (a few seconds on two cores)",
                    product=self.n * largest * self.d_model,
                    most=MOST_PRODUCT,
                )
            )
        return self


METRICS = (
    Metric(
        "onehot_lookup_max_abs_diff", "abs", "==0",
        N_("max |learned_positions(ids, W_E) - X_onehot @ W_E| over the chapter's example "
           "(V = 1000, ids 42, 7, 256, 99) and n random ids at every vocabulary, float64 and "
           "float32"),
        why=N_("each element of the product is one weight times 1 plus exact zeros, so the "
               "two are equal to the last bit in any float format, not just allclose; a "
               "row off by one or a transposed table is off by ~0.02"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
    Metric(
        "lookup_peak_over_onehot_bytes", "ratio", "<=0.25",
        N_("peak memory of a learned_positions(ids, W_E) call at the largest vocabulary (the "
           "less of two calls) beyond the table's own bytes, over the bytes of the one-hot "
           "matrix n x V x 8 it does not need; the clean room's peak is its worker's resident "
           "memory during the call (which receives the table), read by labctl from outside the "
           "worker; the reference's, the torch tensors the call makes"),
        why=N_("a lookup holds its n x d_model outputs, less than the table (about 0); a "
               "lookup written as the chapter's one-hot product builds the n x V matrix first: "
               "(n - d_model) / n = 0.75 or more at the defaults. Judged where that matrix is "
               "40 MiB or more, which a worker's allocator maps afresh at every call"),
        reproduce_abs=0.01, reproduce_rel=0.5,
    ),
    Metric(
        "embedding_lookup_ms", "ms", "<1000",
        N_("milliseconds of one learned_positions(ids, W_E) call at the largest vocabulary, "
           "timed where the code runs"),
        why=N_("timing depends on the machine and its load: reported, never deciding"),
        timing=True,
    ),
    Metric(
        "embedding_reference_max_abs_diff", "abs", "==0",
        N_("max |clean room - reference| of the lookups on the same tables and ids"),
        impls=("both",),
        why=N_("a lookup copies numbers: both implementations return the same bits"),
        reproduce_abs=0.0, reproduce_rel=0.0,
    ),
)  # fmt: skip


def onehot(ids: np.ndarray, V: int, dtype=np.float64) -> np.ndarray:
    """手撕 §1.2.1's X_onehot (n, V): row i is 1 at column ids[i]."""
    X = np.zeros((len(ids), V), dtype=dtype)
    X[np.arange(len(ids)), ids] = 1.0
    return X


def onehot_cost(ids: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, int, float]:
    """The chapter's one-hot product, its peak memory (tracemalloc) and its time in seconds."""
    tracemalloc.start()
    try:
        start = time.perf_counter()
        product = onehot(ids, table.shape[0], table.dtype) @ table  # (n, d_model)
        seconds = time.perf_counter() - start
        return product, tracemalloc.get_traced_memory()[1], seconds
    finally:
        tracemalloc.stop()


def needs(impl, ids: np.ndarray, table: np.ndarray) -> int | None:
    """Peak bytes of a lookup beyond its table, the less of two calls, at least 0; None when
    a measured call's output is not the table's rows (a room that spots the measured call
    and answers it cheaply is not measured: issue 42's rule for every measured call).

    A worker's resident memory grows by the table it receives during the call (up to its
    bytes, as the allocator reuses memory or not): those bytes are not the lookup's. A
    one-hot matrix over 32 MiB is mapped afresh at every call (glibc reuses at most 32 MiB),
    so the less of two calls still holds it.
    """
    want = table[ids]  # (n, d_model): the rows, exactly
    peaks = []
    for _ in "ab":
        got, peak = impl.measured("learned_positions", ids, table)
        got = np.asarray(got)
        if got.shape != want.shape or got.dtype != want.dtype or not np.array_equal(got, want):
            return None
        peaks.append(peak)
    return None if None in peaks else max(0, min(peaks) - table.nbytes)


def _tables(rng: np.random.Generator, p: Params) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(label, table, ids): the chapter's example, each vocabulary (float64), then the
    chapter's example and the first vocabulary in float32."""
    cases = [("chapter", rng.standard_normal((CHAPTER_V, CHAPTER_D)) * 0.02, np.array(CHAPTER_IDS))]
    for V in p.vocabs:
        table = rng.standard_normal((V, p.d_model)) * 0.02  # the chapter's scale
        cases.append((f"V={V}", table, rng.integers(0, V, size=p.n)))
    cases += [(f"{label} float32", t.astype(np.float32), ids) for label, t, ids in cases[:2]]
    return cases


def run(ctx: LabContext) -> LabOutput:
    p: Params = ctx.params
    rng = np.random.default_rng(ctx.seed)
    cases = _tables(rng, p)
    onehots = {label: onehot_cost(ids, table) for label, table, ids in cases}
    sized = {f"V={V}" for V in p.vocabs}
    output = LabOutput()
    looked: dict[str, dict[str, np.ndarray]] = {}
    costs: dict[str, dict[int, tuple[int | None, float]]] = {}
    for name, impl in ctx.impls.items():
        looked[name], costs[name] = {}, {}
        worst = 0.0
        for label, table, ids in cases:
            if label in sized:
                got, seconds = impl.timed("learned_positions", ids, table)
                costs[name][table.shape[0]] = (needs(impl, ids, table), seconds)
            else:
                got = impl.learned_positions(ids, table)
            got = looked[name][label] = np.asarray(got)
            want = onehots[label][0]
            same = got.shape == want.shape and got.dtype == want.dtype
            worst = larger(worst, float(np.max(np.abs(got - want))) if same else np.inf)
        output.add("onehot_lookup_max_abs_diff", name, worst)
        peak = costs[name][p.vocabs[-1]][0]
        onehot_bytes = p.n * p.vocabs[-1] * 8
        output.add(
            "lookup_peak_over_onehot_bytes",
            name,
            np.nan if peak is None else peak / onehot_bytes,
        )
        output.add("embedding_lookup_ms", name, costs[name][p.vocabs[-1]][1] * 1e3)
    if ctx.both:
        gap = 0.0
        for label in onehots:
            ref, room = looked["reference"][label], looked["clean-room"][label]
            gap = larger(
                gap, float(np.max(np.abs(ref - room))) if ref.shape == room.shape else np.inf
            )
        output.add("embedding_reference_max_abs_diff", "both", gap)
    output.figures += _figures(p, cases, onehots, costs)
    return output


def _nonfinite_note() -> Note:
    """What "exactly" needs: a finite table. 0 x inf is NaN, so one inf in W_E spoils its
    column in every row of the one-hot product; the lookup copies it to that row alone."""
    table = np.ones((4, 3))
    table[2, 0] = np.inf
    ids = np.array([0, 2, 1])
    with np.errstate(invalid="ignore"):
        product = onehot(ids, 4) @ table
    lookup = table[ids]
    spoiled = int(np.sum(np.isnan(product) & ~np.isnan(lookup)))
    return Note(
        Msg(
            "exact only for a finite table: with W_E[2, 0] = inf, X_onehot @ W_E has NaN in "
            "{spoiled} of {n} rows of column 0 (0 x inf = NaN), the lookup inf in row 2 alone",
            spoiled=spoiled,
            n=len(ids),
        )
    )


def _figures(p: Params, cases, onehots, costs) -> list:
    names = list(costs)
    rows = []
    for label, table, _ids in cases[1 : 1 + len(p.vocabs)]:
        V = table.shape[0]
        _, onehot_peak, onehot_s = onehots[label]
        rows.append(
            (
                f"{V:,}",
                p.n * V * 8,
                onehot_peak,
                p.n * p.d_model * 8,
                *(float("nan") if costs[n][V][0] is None else costs[n][V][0] for n in names),
                onehot_s * 1e3,
                *(costs[n][V][1] * 1e3 for n in names),
            )
        )
    table = TableFigure(
        title=Msg(
            "one-hot product against lookup for n = {n} tokens, d_model = {d}, float64: bytes "
            "and milliseconds (times are reported, never judged)",
            n=p.n,
            d=p.d_model,
        ),
        columns=(
            "V",
            N_("one-hot bytes (n·V·8)"),
            N_("one-hot peak (measured)"),
            N_("lookup bytes (n·d·8)"),
            *(Msg("lookup needs ({impl})", impl=implementation(n)) for n in names),
            N_("one-hot ms"),
            *(Msg("lookup ms ({impl})", impl=implementation(n)) for n in names),
        ),
        rows=tuple(rows),
    )
    return [table, _nonfinite_note()]


LAB = Lab(
    id="embedding-lookup",
    title=N_("Token embedding: one-hot times W_E is a row lookup"),
    question=N_(
        "Is X_onehot · W_E exactly W_E[token_ids], and what do the two cost in memory and "
        "time as the vocabulary grows?"
    ),
    sections=(
        Section(HANDS_ON, "§1.2.1", "Token Embedding 的本质：查表"),
        Section(HANDS_ON, "§01.2", "Token Embedding + Positional Encoding 的完整矩阵运算推导"),
    ),
    params=Params,
    metrics=METRICS,
    run=run,
    contract=2,
)
