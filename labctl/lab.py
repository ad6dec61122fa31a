"""What a lab is: its declaration (id, course section, parameters, metrics) and its results.

A lab module in `labs/` defines `LAB = Lab(...)`. Its `run(ctx)` is pure: it
drives the implementations it is given, measures, and returns a `LabOutput`;
it never prints or writes files, and never compares against a tolerance (the
runner does that, from the metric declarations). Lab modules import torch
only inside `run`, so listing labs stays fast.
"""

from __future__ import annotations

import math
import re
import time
import tracemalloc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from labctl import returns
from labctl.course import Section
from labctl.i18n import N_, Msg

IMPLS = ("reference", "clean-room")
# Contract v2's functions that v1 has not (notes/v2-signatures): a room's worker answers them by
# name, so a lab reaches them on a clean room as it reaches v1's.
V2_FUNCTIONS = (
    "alibi_slopes",
    "alibi_bias",
    "learned_positions",
    "gelu",
    "glu_ffn",
    "geglu_ffn",
    "attention_entropy",
)
TIMING_UNITS = ("s", "ms", "us", "ratio-of-times")


class LabParams(BaseModel):
    """Base for a lab's parameters: strict, no unknown fields."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# What a run's largest arrays may take together: a learner's laptop has 8 to 16 GiB, most of it
# held by the system, a browser and an editor, and a run's interpreter, torch and temporaries
# come on top; 1 GiB of arrays keeps the whole run within a few GiB, clear of swap. Every
# lab's defaults stay under a third of it (tiled-attention's 4096-long rows take a quarter).
MEMORY_LIMIT = 2**30


def within_memory(product: str, numbers: int, bytes_each: int = 8) -> None:
    """Refuse, from a `Params` model validator, settings whose largest arrays exceed the limit.

    `product` is the lab's count of the numbers those arrays hold together, as written in the
    message (`B x H x T x (4T + 7D)`); float64 unless `bytes_each` says otherwise.
    """
    if numbers * bytes_each > MEMORY_LIMIT:
        raise ValueError(
            Msg(
                "{product} = {numbers:,} numbers of {width} bytes exceed the {limit} GiB a run's "
                "largest arrays may take (a learner's laptop): choose smaller values",
                product=product,
                numbers=numbers,
                width=bytes_each,
                limit=MEMORY_LIMIT // 2**30,
            )
        )


_EXPECTED = re.compile(
    r"^\s*(?:(?P<op><=|>=|==|<|>)\s*(?P<value>[-+0-9.eE]+|inf)"
    r"|in\s*\[\s*(?P<lo>[-+0-9.eE]+)\s*,\s*(?P<hi>[-+0-9.eE]+)\s*\])\s*$"
)


def parse_expected(expr: str) -> Callable[[float], bool]:
    """Turn `<=1e-12`, `>0.01`, `==0`, `in [0.9, 1.1]` into a predicate; ValueError otherwise."""
    match = _EXPECTED.match(expr)
    if not match:
        raise ValueError(f"not a tolerance expression: {expr!r}")
    if match["op"]:
        op, bound = match["op"], float(match["value"])
        return {
            "<=": lambda x: x <= bound,
            ">=": lambda x: x >= bound,
            "==": lambda x: x == bound,
            "<": lambda x: x < bound,
            ">": lambda x: x > bound,
        }[op]
    lo, hi = float(match["lo"]), float(match["hi"])
    if lo > hi:
        raise ValueError(f"empty interval in {expr!r}")
    return lambda x: lo <= x <= hi


def tolerance_key(expr: str) -> tuple:
    """A canonical form of a tolerance expression: `<= 1.0e-12` and `<=1e-12` are one tolerance."""
    match = _EXPECTED.match(expr)
    if not match:
        raise ValueError(f"not a tolerance expression: {expr!r}")
    if match["op"]:
        return (match["op"], float(match["value"]))
    return ("in", float(match["lo"]), float(match["hi"]))


def shown_expected(expr: str) -> str | Msg:
    """A tolerance expression as a person reads it: `in [0.9, 1.1]` in words of the chosen
    language (`<=1e-12` is the same in every language). Records keep the expression."""
    match = _EXPECTED.match(expr)
    if match and not match["op"]:
        return Msg("in [{low}, {high}]", low=match["lo"], high=match["hi"])
    return expr


# The units metrics are given in, as a person reads them (records keep the unit as declared).
UNITS = {
    "abs": N_("abs"),
    "ratio": N_("ratio"),
    "ratio-of-times": N_("ratio-of-times"),
    "variance": N_("variance"),
    "probability": N_("probability"),
    "nats": N_("nats"),
    "count": N_("count"),
    "bool": N_("bool"),
    "bytes": N_("bytes"),
    "pairs": N_("pairs"),
    "steps": N_("steps"),
    "tokens": N_("tokens"),
    "ms": N_("ms"),
    "rows": N_("rows"),
    "weight": N_("weight"),
    "logit": N_("logit"),
    "tiles": N_("tiles"),
    "entries": N_("entries"),
    "positions": N_("positions"),
}


def satisfies(actual: float, expected: str) -> bool:
    """True when `actual` is a finite number inside `expected`."""
    return math.isfinite(actual) and parse_expected(expected)(actual)


def larger(a: float, b: float) -> float:
    """max(a, b), NaN when either is: Python's max keeps what came first past a NaN, so a
    room that returns NaN everywhere would measure a worst difference of 0 and pass."""
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def largest(values) -> float:
    """The largest of `values` as `larger` takes two: NaN if any is, whatever the order."""
    worst = -math.inf
    for value in values:
        worst = larger(worst, float(value))
    return worst


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator; infinite over 0 (a garbage room's zeros), which no bound passes."""
    return numerator / denominator if denominator else math.inf


def reference_max_error(reference: list, room: list) -> float:
    """Max |room - reference| over outputs made on the same inputs, in the same order.

    Infinite where the counts or a shape differ: an answer of another shape is as far
    from the reference's as can be, and never passes a bound.
    """
    if not reference or len(reference) != len(room):
        return math.inf
    worst = 0.0
    for want, got in zip(reference, room, strict=True):
        want, got = np.asarray(want, dtype=float), np.asarray(got, dtype=float)
        if want.shape != got.shape:
            return math.inf
        worst = larger(worst, float(np.max(np.abs(want - got), initial=0.0)))
    return worst


def allclose_ratio(got, want, atol: float, rtol: float) -> tuple[float, float]:
    """(max |got - want| / (atol + rtol |want|), max |got - want|) over the elements.

    The ratio is at most 1 exactly where `torch.allclose(got, want, rtol, atol)` holds
    (`want` is the side whose magnitude scales the allowance, as torch's `other`); it is
    infinite where the shapes differ and NaN where any element is.
    """
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return math.inf, math.inf
    if not got.size:
        return 0.0, 0.0
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf is NaN, which fails
        gap = np.abs(got - want)
        return float(np.max(gap / (atol + rtol * np.abs(want)))), float(np.max(gap))


@dataclass(frozen=True)
class Metric:
    """A metric a lab reports.

    `impls` says which rows it has: "reference" and/or "clean-room" (measured
    on each implementation), or "both" (a comparison of the two). `expected`
    is the v1 tolerance. `reproduce` is how far a re-measurement on the same
    seed may land from a claimed value (absolute, plus relative to the value):
    0 for counts and exact zeros, about 1e-12 for float64 errors whose last
    bits depend on the BLAS, loose for trained losses. Timing metrics are
    reported and compared with `expected`, but never decide a verdict.
    """

    name: str
    unit: str
    expected: str
    description: str | Msg
    impls: tuple[str, ...] = IMPLS
    why: str | Msg = ""
    reproduce_abs: float = 1e-12
    reproduce_rel: float = 1e-9
    timing: bool = False

    def __post_init__(self) -> None:
        parse_expected(self.expected)
        unknown = set(self.impls) - {*IMPLS, "both"}
        if unknown:
            raise ValueError(f"metric {self.name}: unknown impls {sorted(unknown)}")

    def reproduces(self, claimed: float, measured: float) -> bool:
        if not (math.isfinite(claimed) and math.isfinite(measured)):
            return False
        return abs(claimed - measured) <= self.reproduce_abs + self.reproduce_rel * abs(measured)


@dataclass(frozen=True)
class Measurement:
    name: str
    impl: str
    actual: float
    note: str = ""


@dataclass(frozen=True)
class TableFigure:
    """A table to show under the metrics (for example the course's d_k table).

    Where a value is measured on an implementation, the table has a column for
    each (the clean room's beside the reference's), so a learner sees their own
    numbers. Column headers and text cells are messages (`N_`/`Msg`); numbers
    and identifiers are shown as they are.
    """

    title: str | Msg
    columns: tuple[str | Msg, ...]
    rows: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class HeatmapFigure:
    """A matrix to show as a terminal heatmap and keep as an artifact (CSV).

    A lab emits one per implementation it ran, with the same `name` and `impl`
    set, so the learner's own matrix is shown beside the reference's.
    `row_ticks`/`col_ticks` label the axes (token strings, positions).
    """

    title: str | Msg
    name: str
    matrix: tuple[tuple[float, ...], ...]
    row_label: str = "query"
    col_label: str = "key"
    impl: str = ""
    row_ticks: tuple[str, ...] = ()
    col_ticks: tuple[str, ...] = ()


@dataclass(frozen=True)
class Note:
    """A sentence the learner should read: a disagreement with the course, a caveat."""

    text: str | Msg
    flag: bool = False


@dataclass
class LabOutput:
    measurements: list[Measurement] = field(default_factory=list)
    figures: list[TableFigure | HeatmapFigure | Note] = field(default_factory=list)

    def add(self, name: str, impl: str, actual: float, note: str = "") -> None:
        self.measurements.append(Measurement(name, impl, float(actual), note))


class Implementation:
    """One side of a lab: `reference` (PyTorch) or `clean-room` (a package in a worker).

    Contract functions are attributes; `timed` also returns the compute time,
    measured where the code runs (inside the worker for a clean room, so the
    pipe between processes is not counted). A `hidden` reference is there for
    the comparisons with the clean room alone (`--impl clean-room`): the lab
    runs it as any side, and the runner shows none of its own rows.
    """

    def __init__(
        self,
        name: str,
        target: Any,
        meter: Callable[..., tuple[Any, int]] | None = None,
        later: Mapping[int, Any] | None = None,
        hidden: bool = False,
    ):
        self.name = name
        self.hidden = hidden
        self._target = target
        self._meter = meter
        self._later = dict(later or {})

    def __getattr__(self, fn: str) -> Any:
        invoke = getattr(self._target, "invoke", None)
        if invoke is not None and fn in V2_FUNCTIONS:
            found = lambda *args, **kwargs: invoke(fn, *args, echo_args=False, **kwargs).value  # noqa: E731
        else:
            found = getattr(self._target, fn)
        # A clean room's outputs reach the lab's arithmetic only in the form the contract
        # gives them; an odd one is named (labctl.returns), never a crash of the lab.
        if self.name == "clean-room" and returns.judged(fn) and callable(found):
            return returns.checked(fn, found)
        return found

    def for_contract(self, version: int) -> Implementation:
        """This implementation as a lab needing contract `version` calls it: the reference's v2
        module for v2 (a superset of v1); a clean room is itself, whichever it implements."""
        target = self._later.get(version)
        if target is None:
            return self
        return Implementation(self.name, target, self._meter, hidden=self.hidden)

    def timed(self, fn: str, *args: Any, **kwargs: Any) -> tuple[Any, float]:
        invoke = getattr(self._target, "invoke", None)
        if invoke is not None:
            result = invoke(fn, *args, echo_args=False, **kwargs)
            value, elapsed = result.value, result.elapsed_s
        else:
            start = time.perf_counter()
            value = getattr(self._target, fn)(*args, **kwargs)
            elapsed = time.perf_counter() - start
        if self.name == "clean-room":
            returns.check(fn, args, kwargs, value)
        return value, elapsed

    def measured(
        self, fn: str, *args: Any, part: int | None = None, **kwargs: Any
    ) -> tuple[Any, int | None]:
        """The value and the call's peak memory in bytes, measured out of the code's reach.

        A clean room's is its worker's peak resident memory during the call, read by
        labctl from outside the worker (`labctl.isolation.peak`), never a figure the
        worker reports. Its value comes back to be checked before the measurement counts
        (issue 42: a room that spotted the measured call and answered `np.empty` had its
        memory counted); `part` keeps one element of a tuple value (attention's output,
        not its (Tq, Tk) weights), on every side alike. An in-process target is labctl's
        own code: it may come with its own `meter(fn, *args)` (the torch reference does:
        tracemalloc does not see torch's allocator); otherwise tracemalloc here.
        """
        invoke = getattr(self._target, "invoke", None)
        if invoke is not None:
            result = invoke(
                fn, *args, measure_memory=True, echo_args=False, value_part=part, **kwargs
            )
            return result.value, result.peak_bytes
        if self._meter is not None:
            value, peak = self._meter(getattr(self._target, fn), *args, **kwargs)
        else:
            tracemalloc.start()
            try:
                value = getattr(self._target, fn)(*args, **kwargs)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        if part is not None and isinstance(value, (tuple, list)) and 0 <= part < len(value):
            value = value[part]
        return value, peak


@dataclass(frozen=True)
class LabContext:
    params: LabParams
    seed: int
    impls: Mapping[str, Implementation]

    @property
    def both(self) -> bool:
        return all(name in self.impls for name in IMPLS)


@dataclass(frozen=True)
class Lab:
    id: str
    title: str
    question: str
    sections: tuple[Section, ...]
    params: type[LabParams]
    metrics: tuple[Metric, ...]
    run: Callable[[LabContext], LabOutput]
    # The contract a clean room must declare for this lab's clean-room rows: a v2 lab on a v1
    # room shows the reference's numbers and says the room needs v2 (runner.run_lab).
    contract: int = 1

    def metric(self, name: str) -> Metric:
        for metric in self.metrics:
            if metric.name == name:
                return metric
        raise KeyError(name)
