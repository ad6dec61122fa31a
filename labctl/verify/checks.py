"""The checks of `labctl verify clean-room`: each a small unit that reads an observation.

A check looks at what a clean room did (`labctl.verify.observe`) and says
pass, fail or not-run, with a message a learner can act on and, for the
numeric ones, the max abs error, the tolerance, the margin (error /
tolerance) and the fraction of mismatching elements. Each check's docstring
says what class of fault it catches; `labctl faults` proves it, by running
every check on every fault of the catalogue (`labctl.faults`). A check that
no fault can make fail would be a defect: `loads` is the one check without a
fault in the catalogue, and its docstring says why.

The tolerances (v1) and how a value is compared with the reference are in
`labctl.verify.compare`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from labctl import contract
from labctl.i18n import N_, Msg, declared
from labctl.verify import fixtures as fx
from labctl.verify.bad_input import bad_cases
from labctl.verify.compare import (
    CAUSAL_TOLERANCE,
    EXACT_TOLERANCE,
    ROW_SUM_TOLERANCE,
    Comparison,
    compare_value,
    elements,
    structure_message,
    structure_problem,
)
from labctl.verify.functions import CAUSAL_FUNCTIONS, RETURNS
from labctl.verify.observe import PACKAGE, FunctionRun, RoomObservation

PASS, FAIL, NOT_RUN = "pass", "fail", "not-run"


@dataclass
class CheckResult:
    function: str
    name: str
    status: str
    message: str  # English, for --json and the evidence records; given as a Msg or a str
    max_error: float | None = None
    tolerance: float | None = None
    margin: float | None = None
    mismatch_fraction: float | None = None
    fixture: str | None = None
    # What the terminal shows, translated there with `_()`: the Msg (or text) given as message.
    shown: str | Msg = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.shown = self.message
        self.message = str(self.message)

    @property
    def passed(self) -> bool:
        return self.status == PASS

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def to_json(self) -> dict:
        data = {
            "function": self.function,
            "name": self.name,
            "passed": self.passed,
            "status": self.status,
            "max_error": self.max_error,
            "message": self.message,
        }
        for key in ("tolerance", "margin", "mismatch_fraction", "fixture"):
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        return data


# --------------------------------------------------------------------------
# The checks
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    name: str
    scope: str  # "package" or "function"
    applies: Callable[[str], bool]
    evaluate: Callable
    summary: str
    justified: str = ""

    @property
    def doc(self) -> str:
        return (self.evaluate.__doc__ or "").strip()


CHECKS: list[Check] = []


def check(
    name: str, summary: str, scope: str = "function", applies=lambda f: True, justified: str = ""
):
    """Register a check; `justified` says why no catalogued fault proves it (else empty)."""

    def register(fn):
        CHECKS.append(Check(name, scope, applies, fn, summary, justified))
        return fn

    return register


def _skipped_reason(run: FunctionRun | None) -> str | None:
    """Why a function's output checks cannot run at all, or None."""
    if run is None:
        return N_("not run")
    if run.not_implemented:
        return N_("not run: not implemented")
    if any(o.kind == "missing" for o in run.fixtures.values()):
        return N_("not run: the package does not expose it")
    return None


def _values(run: FunctionRun, with_probes: bool = True):
    """(fixture, outcome) for every call that returned, fixtures then probes."""
    pairs = [(f, run.fixtures.get(f.name)) for f in fx.fixtures(run.function)]
    if with_probes:
        pairs += [(f, run.probes.get(f.name)) for f in fx.probes(run.function)]
    return [(f, o) for f, o in pairs if o is not None and o.ok]


LOADS_JUSTIFIED = (
    "a file that does not parse or import has no behaviour for a diagnosis to compare, so "
    "it is no fault of the catalogue (a transformation of a correct function); the tests "
    "prove this check instead, with a clean room that has a syntax error and one whose "
    "import fails"
)


@check(
    "loads",
    "the package imports in a worker process",
    scope="package",
    justified=LOADS_JUSTIFIED,
)
def check_loads(seen: RoomObservation, function: str) -> CheckResult:
    """The package imports: no syntax error, no failing import, no hang at import time.

    Catches: a syntax error (named with file and line), an import of a
    missing module, an exception or an endless loop at module level.
    Justified without a fault: a file that does not parse or import has no
    behaviour for a diagnosis to compare, so it is no fault of the catalogue
    (a transformation of a correct function). The tests prove this check
    instead (tests/test_verify_isolation.py): a clean room with a syntax
    error, and one whose import fails.
    """
    if seen.status == "unloadable":
        return CheckResult(function, "loads", FAIL, seen.message)
    if seen.status == "refused":
        return CheckResult(function, "loads", NOT_RUN, N_("not run: refused by the import policy"))
    return CheckResult(
        function,
        "loads",
        PASS,
        Msg("{files} import in a worker process", files=_files(seen.files_scanned)),
    )


@check("import-policy", "only the standard library and numpy", scope="package")
def check_import_policy(seen: RoomObservation, function: str) -> CheckResult:
    """Only the standard library and numpy: a static scan of the source and a runtime guard.

    Catches: `import torch` (or any third-party package), the course's
    reference (`labctl`), dynamic imports (`importlib.import_module("tor" +
    "ch")`, `__import__`, `exec`), process-spawning modules; each named with
    its file and line, and placed in the contract function that holds it.
    A violation found by the static scan refuses the clean room: none of its
    code is run. Fault: `merge-heads-imports-torch`.
    """
    mine = [v for v in seen.violations if v.function == function]
    if mine:
        shown = "; ".join(str(v) for v in mine)
        return CheckResult(
            function, "import-policy", FAIL, Msg("breaks the import policy: {shown}", shown=shown)
        )
    if function != PACKAGE:
        return CheckResult(function, "import-policy", PASS, N_("no forbidden import"))
    if seen.status == "unloadable" and not seen.violations:
        return CheckResult(function, "import-policy", PASS, N_("static scan clean"))
    if seen.violations:
        places = sorted({v.function for v in seen.violations})
        text = seen.message or "; ".join(str(v) for v in seen.violations)
        return CheckResult(
            function,
            "import-policy",
            FAIL,
            Msg("violations in {places}: {text}", places=", ".join(places), text=text),
        )
    return CheckResult(
        function,
        "import-policy",
        PASS,
        Msg(
            "none found by the static scan of {files} or the runtime guard",
            files=_files(seen.files_scanned),
        ),
    )


@check("contract", "signature as contract v1 says")
def check_contract(seen: RoomObservation, function: str) -> CheckResult:
    """The function exists with contract v1's exact parameter names, order and defaults.

    Catches: a missing function, a renamed or reordered parameter, a changed
    default (eps 1e-5 for rms_norm, causal=False), variadic parameters; as
    `labctl contract check`. Fault: `rms-eps-default`.
    """
    if not seen.loaded:
        return CheckResult(function, "contract", NOT_RUN, _not_loaded(seen))
    problems = [d.shown for d in seen.deviations if d.function == function]
    if problems:
        return CheckResult(function, "contract", FAIL, contract.joined(problems))
    return CheckResult(function, "contract", PASS, N_("signature matches"))


def _files(n: int) -> Msg:
    return Msg("{n} file", n=n) if n == 1 else Msg("{n} files", n=n)


def _not_loaded(seen: RoomObservation) -> str:
    if seen.status == "refused":
        return N_("not run: refused by the import policy")
    return N_("not run: the clean room does not load")


def _run_or_skip(
    seen: RoomObservation, function: str, check: str
) -> tuple[FunctionRun | None, CheckResult | None]:
    """The function's calls, or the not-run result when its output checks cannot run."""
    run = seen.runs.get(function)
    reason = _not_loaded(seen) if not seen.loaded else _skipped_reason(run)
    return run, CheckResult(function, check, NOT_RUN, reason) if reason else None


@check("runs", "returns in time, no exception or crash")
def check_runs(seen: RoomObservation, function: str) -> CheckResult:
    """Every fixture call returns within the timeout, without an exception or a crash.

    Catches: a hang (stopped at the timeout, the worker killed and
    restarted), an exception on a legal input (a Tq < Tk cache, an odd head
    width), a crash or the memory limit, a stub still raising
    NotImplementedError. Fault: `sinusoidal-hang`.
    """
    run = seen.runs.get(function)
    if not seen.loaded or run is None:
        return CheckResult(
            function, "runs", NOT_RUN, _not_loaded(seen) if not seen.loaded else N_("not run")
        )
    if run.not_implemented:
        return CheckResult(
            function, "runs", FAIL, N_("not implemented (raises NotImplementedError)")
        )
    calls = {**run.fixtures, **run.probes}
    failed = [(name, o) for name, o in calls.items() if not o.ok]
    if not failed:
        slowest = max((o.elapsed_s for o in calls.values()), default=0.0)
        return CheckResult(
            function,
            "runs",
            PASS,
            Msg("{n} calls returned (slowest {ms:.1f} ms)", n=len(calls), ms=slowest * 1e3),
        )
    name, first = next(((n, o) for n, o in failed if o.kind != "skipped"), failed[0])
    more = len(failed) - 1
    tail = ""
    if more:
        tail = (
            Msg("; {n} more calls failed or skipped", n=more)
            if more > 1
            else Msg("; {n} more call failed or skipped", n=more)
        )
    return CheckResult(
        function,
        "runs",
        FAIL,
        Msg("fixture {name}: {problem}{tail}", name=name, problem=first.describe(), tail=tail),
    )


@check("shape", "returns arrays of the contract's shapes")
def check_shape(seen: RoomObservation, function: str) -> CheckResult:
    """Each return value has the contract's structure: ndarray(s), the tuple arity, the shapes.

    Catches: a wrong shape (a head axis left in place, a cache not appended),
    a list where an ndarray is expected, a tuple where one array is expected
    (or one array where a tuple is), a value that is no array at all.
    Fault: `decode-cache-not-appended`.
    """
    run, skipped = _run_or_skip(seen, function, "shape")
    if skipped:
        return skipped
    checked = 0
    for fixture, outcome in _values(run):
        problem = structure_message(function, outcome.value, fx.reference_output(fixture))
        if problem:
            return CheckResult(
                function,
                "shape",
                FAIL,
                Msg("fixture {name}: {problem}", name=fixture.name, problem=problem),
                fixture=fixture.name,
            )
        checked += 1
    if not checked:
        return CheckResult(function, "shape", NOT_RUN, N_("not run: no call returned"))
    return CheckResult(
        function, "shape", PASS, Msg("{n} return values have the contract's shapes", n=checked)
    )


@check("dtype", "keeps the input's dtype (bool masks)")
def check_dtype(seen: RoomObservation, function: str) -> CheckResult:
    """Each returned array has the reference's dtype: float32 in, float32 out; masks are bool.

    Catches: an upcast (float32 input, float64 output), a float or int mask
    where the contract says bool. Fault: `relu-ffn-float64`.
    """
    run, skipped = _run_or_skip(seen, function, "dtype")
    if skipped:
        return skipped
    checked = 0
    for fixture, outcome in _values(run):
        reference = fx.reference_output(fixture)
        if structure_problem(function, outcome.value, reference):
            continue
        for item, ref, spec in zip(
            elements(outcome.value), elements(reference), RETURNS[function], strict=True
        ):
            if item.dtype != ref.dtype:
                inputs = (
                    Msg("float32 inputs") if fixture in fx.probes(function) else Msg("its inputs")
                )
                label = f" ({spec.split(' ')[0]})" if len(RETURNS[function]) > 1 else ""
                return CheckResult(
                    function,
                    "dtype",
                    FAIL,
                    Msg(
                        "fixture {name}: returned {dtype}{label} for {inputs} where the contract "
                        "keeps {expected}",
                        name=fixture.name,
                        dtype=str(item.dtype),
                        label=label,
                        inputs=inputs,
                        expected=str(ref.dtype),
                    ),
                    fixture=fixture.name,
                )
        checked += 1
    if not checked:
        return CheckResult(function, "dtype", NOT_RUN, N_("not run: no usable return value"))
    probes = len(fx.probes(function))
    extra = Msg(", float32 kept on {n} probe", n=probes) if probes else ""
    return CheckResult(
        function, "dtype", PASS, Msg("dtypes as the reference's{extra}", extra=extra)
    )


@check("parity", "matches the reference within tolerance v1")
def check_parity(seen: RoomObservation, function: str) -> CheckResult:
    """Each float64 fixture's output matches the PyTorch reference within tolerance v1.

    Catches: every formula fault: a missing 1/sqrt(D), a reversed or
    misaligned mask, a confused reshape, a wrong GQA order, RoPE's layout or
    positions, eps in the wrong place, a biased/unbiased variance mix-up, a
    swapped gate, an online softmax that never rescales, a residual dropped
    or misordered. Reported: max abs error, the fraction of elements outside
    tolerance, and the margin (error / tolerance) of the worst fixture.
    Faults: most of the catalogue; `no-sqrt-dk` for one.
    """
    run, skipped = _run_or_skip(seen, function, "parity")
    if skipped:
        return skipped
    results: list[tuple[str, Comparison | Msg]] = []
    for fixture, outcome in _values(run, with_probes=False):
        reference = fx.reference_output(fixture)
        problem = structure_message(function, outcome.value, reference)
        results.append((fixture.name, problem or compare_value(function, outcome.value, reference)))
    if not results:
        return CheckResult(function, "parity", NOT_RUN, N_("not run: no fixture returned"))
    uncompared = [(n, r) for n, r in results if isinstance(r, Msg)]
    compared = [(n, r) for n, r in results if not isinstance(r, Msg)]
    skipped = len(fx.fixtures(function)) - len(results)
    worst_name, worst = max(compared, key=lambda nr: nr[1].margin) if compared else (None, None)
    bad = [(n, r) for n, r in compared if not r.ok]
    common = dict(
        max_error=max((r.max_error for _, r in compared), default=None),
        tolerance=worst.tolerance if worst else None,
        margin=worst.margin if worst else None,
        mismatch_fraction=worst.mismatch_fraction if worst else None,
        fixture=worst_name,
    )
    if bad or uncompared:
        if bad:
            name, r = max(bad, key=lambda nr: nr[1].margin)
            if r.tolerance == EXACT_TOLERANCE:
                text = Msg(
                    "fixture {name}: {percent:.0f}% of the entries differ from the reference "
                    "(masks are compared exactly)",
                    name=name,
                    percent=100 * r.mismatch_fraction,
                )
            else:
                text = Msg(
                    "fixture {name}: max abs error {error} > tolerance {tolerance} "
                    "(margin {margin}), {percent:.0f}% of elements outside",
                    name=name,
                    error=_num(r.max_error),
                    tolerance=_num(r.tolerance),
                    margin=_num(r.margin),
                    percent=100 * r.mismatch_fraction,
                )
            others = len(bad) - 1 + len(uncompared)
        else:
            name, problem = uncompared[0]
            text = Msg("fixture {name}: not compared: {problem}", name=name, problem=problem)
            others = len(uncompared) - 1
        if others:
            more = (
                Msg("; {n} more fixtures differ", n=others)
                if others > 1
                else Msg("; {n} more fixture differs", n=others)
            )
            text = Msg("{text}{more}", text=text, more=more)
        return CheckResult(function, "parity", FAIL, text, **common)
    note = Msg(" ({n} not compared: the call failed)", n=skipped) if skipped else ""
    return CheckResult(
        function,
        "parity",
        PASS,
        Msg(
            "{n} fixtures within tolerance v1, max abs error {error} (margin {margin}){note}",
            n=len(compared),
            error=_num(common["max_error"]),
            margin=_num(common["margin"]),
            note=note,
        ),
        **common,
    )


def _num(value: float | None) -> str:
    if value is None:
        return "—"
    if value == 0 or (1e-3 <= abs(value) < 1e4):
        return f"{value:.3g}"
    return f"{value:.1e}"


def _has_float_output(function: str) -> bool:
    return function not in ("causal_mask", "sliding_window_mask", "padding_mask")


@check("finite", "no NaN or inf", applies=_has_float_output)
def check_finite(seen: RoomObservation, function: str) -> CheckResult:
    """No NaN or inf in any output, the adversarial fixtures included.

    Catches: a softmax that overflows at |x| ~ 1e3 (no max subtracted), NaN
    on a fully blocked row (-inf - (-inf)), a division by a zero sum.
    Faults: `softmax-no-max`, `softmax-blocked-nan`.
    """
    run, skipped = _run_or_skip(seen, function, "finite")
    if skipped:
        return skipped
    checked = 0
    for fixture, outcome in _values(run):
        for item in elements(outcome.value):
            if not isinstance(item, np.ndarray) or not np.issubdtype(item.dtype, np.floating):
                continue
            bad = ~np.isfinite(item)
            if bad.any():
                kinds = "NaN" if np.isnan(item).any() else "inf"
                return CheckResult(
                    function,
                    "finite",
                    FAIL,
                    Msg(
                        "fixture {name}: {kinds} in {bad} of {size} elements{note}",
                        name=fixture.name,
                        kinds=kinds,
                        bad=int(bad.sum()),
                        size=item.size,
                        note=Msg(" ({note})", note=declared(fixture.note)) if fixture.note else "",
                    ),
                    fixture=fixture.name,
                )
        checked += 1
    if not checked:
        return CheckResult(function, "finite", NOT_RUN, N_("not run: no call returned"))
    return CheckResult(function, "finite", PASS, Msg("no NaN or inf in {n} outputs", n=checked))


def _has_array_input(function: str) -> bool:
    return function not in ("causal_mask", "sliding_window_mask", "sinusoidal_positions")


@check("pure", "inputs unchanged after the call", applies=_has_array_input)
def check_pure(seen: RoomObservation, function: str) -> CheckResult:
    """No input array is modified in place (the worker compares every input before and after).

    Catches: `x -= mean`, `scores[mask] = -inf` on a caller's array, an
    in-place RoPE; the contract's functions are pure. Fault: `layer-norm-in-place`.
    """
    run, skipped = _run_or_skip(seen, function, "pure")
    if skipped:
        return skipped
    named = [(n, o) for n, o in {**run.fixtures, **run.probes}.items() if o.ok]
    named += [(f"future-after-{t}", o) for t, o in run.causal.items() if o.ok]
    if not named:
        return CheckResult(function, "pure", NOT_RUN, N_("not run: no call returned"))
    for name, outcome in named:
        if outcome.mutated:
            return CheckResult(
                function,
                "pure",
                FAIL,
                Msg(
                    "fixture {name}: modified its input {inputs} in place",
                    name=name,
                    inputs=", ".join(outcome.mutated),
                ),
                fixture=name,
            )
    return CheckResult(function, "pure", PASS, Msg("inputs unchanged by {n} calls", n=len(named)))


def _row_sums(function: str, fixture: fx.Fixture, value) -> tuple[np.ndarray, np.ndarray]:
    """(weights moved to the last axis, True where the row has every key blocked)."""
    args, kwargs = fixture.args, fixture.kwargs
    if function == "softmax":
        axis = kwargs.get("axis", -1)
        x = np.moveaxis(args[0], axis, -1)
        return np.moveaxis(value, axis, -1), np.all(np.isneginf(x), axis=-1)
    weights = value[1]
    mask = kwargs.get("mask", args[3] if len(args) > 3 else None)
    if mask is None:
        return weights, np.zeros(weights.shape[:-1], dtype=bool)
    return weights, np.all(np.broadcast_to(mask, weights.shape), axis=-1)


@check(
    "rows-sum",
    "weights are >= 0 and sum to 1 (0 on a blocked row)",
    applies=lambda f: f in ("softmax", "scaled_dot_product_attention"),
)
def check_rows_sum(seen: RoomObservation, function: str) -> CheckResult:
    """Every softmax slice and every attention row is >= 0 and sums to 1; a blocked one is all 0.

    Needs no reference. Catches: weights masked after the softmax (rows no
    longer sum to 1), a wrong denominator, NaN rows, uniform weights on a
    fully blocked row (a finite -1e9 fill). Fault: `mask-after-softmax`.
    """
    run, skipped = _run_or_skip(seen, function, "rows-sum")
    if skipped:
        return skipped
    worst, worst_name, checked = 0.0, None, 0
    for fixture, outcome in _values(run, with_probes=False):
        if structure_problem(function, outcome.value, fx.reference_output(fixture)):
            continue
        weights, blocked = _row_sums(function, fixture, outcome.value)
        weights = np.asarray(weights, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            sums = weights.sum(axis=-1)
        target = np.where(blocked, 0.0, 1.0)
        error = np.abs(sums - target)
        error = np.where(np.isnan(error), np.inf, error)
        negative = float(np.max(-weights, initial=0.0))
        deviation = max(float(np.max(error, initial=0.0)), negative)
        checked += 1
        if deviation > worst:
            worst, worst_name = deviation, fixture.name
    if not checked:
        return CheckResult(function, "rows-sum", NOT_RUN, N_("not run: no usable return value"))
    common = dict(
        max_error=worst,
        tolerance=ROW_SUM_TOLERANCE,
        margin=worst / ROW_SUM_TOLERANCE,
        fixture=worst_name,
    )
    if worst > ROW_SUM_TOLERANCE:
        return CheckResult(
            function,
            "rows-sum",
            FAIL,
            Msg(
                "fixture {name}: a row's weights are off by {error} from summing to 1 "
                "(0 for a fully blocked row), tolerance {tolerance:g}",
                name=worst_name,
                error=_num(worst),
                tolerance=ROW_SUM_TOLERANCE,
            ),
            **common,
        )
    return CheckResult(
        function,
        "rows-sum",
        PASS,
        Msg("rows sum to 1 within {error} on {n} fixtures", error=_num(worst), n=checked),
        **common,
    )


@check(
    "causal",
    "the future does not move the prefix",
    applies=lambda f: f in CAUSAL_FUNCTIONS,
)
def check_causal(seen: RoomObservation, function: str) -> CheckResult:
    """Future-token invariance: changing inputs after position t leaves outputs <= t unchanged.

    Needs no reference: every t of the base fixture, its future replaced.
    Catches: a reversed triangle, a mask that adds 0, weights zeroed after
    the softmax (the future still moves the denominator), a transposed mask.
    Faults: `mask-reversed`, `mask-adds-zero`.
    """
    run, skipped = _run_or_skip(seen, function, "causal")
    if skipped:
        return skipped
    base_fixture = fx.causal_base(function)
    base = run.fixtures.get(base_fixture.name)
    if base is None or not base.ok or not isinstance(base.value, np.ndarray):
        return CheckResult(
            function,
            "causal",
            NOT_RUN,
            Msg("not run: the base fixture {name} failed", name=base_fixture.name),
        )
    if base.value.shape != fx.reference_output(base_fixture).shape:
        return CheckResult(
            function, "causal", NOT_RUN, N_("not run: the base output has the wrong shape")
        )
    worst, worst_t = 0.0, None
    for t, outcome in sorted(run.causal.items()):
        if not outcome.ok:
            if outcome.kind == "skipped":
                return CheckResult(function, "causal", NOT_RUN, outcome.describe())
            return CheckResult(
                function,
                "causal",
                FAIL,
                Msg(
                    "with the future after {t} changed, the call {problem}",
                    t=t,
                    problem=outcome.describe(),
                ),
            )
        value = outcome.value
        if not isinstance(value, np.ndarray) or value.shape != base.value.shape:
            return CheckResult(
                function,
                "causal",
                FAIL,
                Msg("with the future after {t} changed, the output's shape changed", t=t),
            )
        with np.errstate(invalid="ignore"):
            moved = np.abs(value[:, : t + 1].astype(np.float64) - base.value[:, : t + 1])
        change = float(np.max(np.where(np.isnan(moved), np.inf, moved)))
        if change > worst:
            worst, worst_t = change, t
    common = dict(max_error=worst, tolerance=CAUSAL_TOLERANCE, margin=worst / CAUSAL_TOLERANCE)
    if worst > CAUSAL_TOLERANCE:
        return CheckResult(
            function,
            "causal",
            FAIL,
            Msg(
                "changing the inputs after position {t} moved the outputs at positions <= {t} "
                "by {error} (tolerance {tolerance:g}): the future leaks",
                t=worst_t,
                error=_num(worst),
                tolerance=CAUSAL_TOLERANCE,
            ),
            **common,
        )
    return CheckResult(
        function,
        "causal",
        PASS,
        Msg(
            "prefix unchanged ({error}) over {n} future perturbations",
            error=_num(worst),
            n=len(run.causal),
        ),
        **common,
    )


@check(
    "bad-input",
    "the contract's Bad input cases raise ValueError/TypeError",
    applies=lambda f: bool(bad_cases(f)),
)
def check_bad_input(seen: RoomObservation, function: str) -> CheckResult:
    """The contract's Bad input cases raise ValueError or TypeError (any message).

    Exactly the section's cases: C % n_heads != 0, n_heads % n_kv_heads != 0,
    an odd D for RoPE, block_size < 1, window < 1, mismatched batch or head
    widths. Catches: a missing argument check that silently returns garbage
    (window=0 gives a mask that blocks everything), an exception of another
    type. Fault: `window-unchecked`.
    """
    run, skipped = _run_or_skip(seen, function, "bad-input")
    if skipped:
        return skipped
    if not run.bad:
        return CheckResult(function, "bad-input", NOT_RUN, N_("not run"))
    for name, outcome in run.bad.items():
        verdict = outcome.bad_input_class()
        if verdict == "refused":
            continue
        if verdict == "skipped":
            return CheckResult(function, "bad-input", NOT_RUN, outcome.describe())
        if verdict == "returned":
            text = Msg(
                "case {name}: returned a value instead of raising ValueError or TypeError",
                name=name,
            )
        elif verdict == "wrong-exception":
            text = Msg(
                "case {name}: raised {exc_type}; the contract asks for ValueError or TypeError",
                name=name,
                exc_type=outcome.exc_type,
            )
        else:
            text = Msg(
                "case {name}: {problem} instead of raising ValueError or TypeError",
                name=name,
                problem=outcome.describe(),
            )
        return CheckResult(function, "bad-input", FAIL, text, fixture=name)
    return CheckResult(function, "bad-input", PASS, Msg("{n} bad inputs refused", n=len(run.bad)))


CHECK_NAMES = tuple(c.name for c in CHECKS)
FUNCTION_CHECKS = tuple(c for c in CHECKS if c.scope == "function")
JUSTIFIED = {c.name: c.justified for c in CHECKS if c.justified}


def applicable(function: str) -> tuple[Check, ...]:
    return tuple(c for c in FUNCTION_CHECKS if c.applies(function))


def evaluate(seen: RoomObservation, functions: tuple[str, ...] | None = None) -> list[CheckResult]:
    """Every applicable check, for the package and then each function in contract order."""
    results = [check_loads(seen, PACKAGE), check_import_policy(seen, PACKAGE)]
    if seen.load_error is not None and seen.load_error.function != PACKAGE:
        # A syntax error inside a function's body: that function fails to load too.
        results.append(check_loads(seen, seen.load_error.function))
    for function in functions or contract.function_names():
        if any(v.function == function for v in seen.violations):
            results.append(check_import_policy(seen, function))
        for c in applicable(function):
            results.append(c.evaluate(seen, function))
    return results


def failing_functions(results: list[CheckResult]) -> list[str]:
    """Contract functions with at least one failing check, in contract order."""
    failing = {r.function for r in results if r.failed}
    return [f for f in contract.function_names() if f in failing]
