"""The checks that hold a clean room to the contract and the reference: it loads, keeps
the import policy and the signatures, runs, returns the contract's shapes and dtypes, and
matches the PyTorch reference within tolerance v1 (`labctl.verify.checks` gathers them)."""

from __future__ import annotations

from labctl import contract
from labctl.i18n import N_, Msg, declared, joined
from labctl.verify import fixtures as fx
from labctl.verify.check_base import (
    FAIL,
    NOT_RUN,
    PASS,
    Check,
    CheckResult,
    files_msg,
    not_loaded,
    num,
    of_run,
    returned,
    run_or_skip,
)
from labctl.verify.compare import (
    EXACT_TOLERANCE,
    Comparison,
    compare_value,
    elements,
    structure_message,
    structure_problem,
)
from labctl.verify.functions import RETURNS
from labctl.verify.observe import PACKAGE, RoomObservation

LOADS_JUSTIFIED = N_(
    "a file that does not parse or import has no behaviour for a diagnosis to compare, so "
    "it is no fault of the catalogue (a transformation of a correct function); the tests "
    "prove this check instead, with a clean room that has a syntax error and one whose "
    "import fails"
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
        Msg("{files} import in a worker process", files=files_msg(seen.files_scanned)),
    )


def check_import_policy(seen: RoomObservation, function: str) -> CheckResult:
    """Only the standard library and numpy: a static scan of the source and a runtime guard.

    One rule (`labctl.isolation.guard.RULE`): any other package is refused by
    name. Catches: `import torch`, `scipy`, `sklearn` (any third-party
    package), the course's reference (`labctl`), however imported
    (`importlib.import_module("tor" + "ch")`, `__import__`, `exec`'d source);
    each named with its file and line, and placed in the contract function
    that holds it. A violation found by the static scan refuses the clean
    room: none of its code is run. The standard library is allowed: what code
    does with it is the sandbox's business. Fault: `merge-heads-imports-torch`.
    """
    mine = [v for v in seen.violations if v.function == function]
    if mine:
        shown = joined([v.shown() for v in mine])
        return CheckResult(
            function, "import-policy", FAIL, Msg("breaks the import policy: {shown}", shown=shown)
        )
    if function != PACKAGE:
        return CheckResult(function, "import-policy", PASS, N_("no forbidden import"))
    if seen.status == "unloadable" and not seen.violations:
        return CheckResult(function, "import-policy", PASS, N_("static scan clean"))
    if seen.violations:
        places = sorted({v.function for v in seen.violations})
        text = seen.message or joined([v.shown() for v in seen.violations])
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
            files=files_msg(seen.files_scanned),
        ),
    )


def check_contract(seen: RoomObservation, function: str) -> CheckResult:
    """The function exists with contract v1's exact parameter names, order and defaults.

    Catches: a missing function, a renamed or reordered parameter, a changed
    default (eps 1e-5 for rms_norm, causal=False), variadic parameters; as
    `labctl contract check`. Fault: `rms-eps-default`.
    """
    if not seen.loaded:
        return CheckResult(function, "contract", NOT_RUN, not_loaded(seen))
    problems = [d.shown for d in seen.deviations if d.function == function]
    if problems:
        return CheckResult(function, "contract", FAIL, contract.joined(problems))
    return CheckResult(function, "contract", PASS, N_("signature matches"))


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
            function, "runs", NOT_RUN, not_loaded(seen) if not seen.loaded else N_("not run")
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
    # Each way it fails is named (two bugs raise two ways), each with its first call; skipped
    # calls (after a hang) go with the first.
    groups: dict[tuple, list[tuple[str, object]]] = {}
    for n, o in sorted(failed, key=lambda item: item[1].kind == "skipped"):
        key = ("first",) if o.kind == "skipped" and groups else (o.kind, o.exc_type, o.where)
        groups.setdefault(next(iter(groups)) if key == ("first",) else key, []).append((n, o))
    said: str | Msg = ""
    for calls in groups.values():
        name, first = calls[0]
        more = len(calls) - 1
        tail = ""
        if more:
            tail = (
                Msg("; {n} more calls failed or skipped", n=more)
                if more > 1
                else Msg("; {n} more call failed or skipped", n=more)
            )
        one = Msg("fixture {name}: {problem}{tail}", name=name, problem=first.describe(), tail=tail)
        said = Msg("{said}; {one}", said=said, one=one) if said else one
    return CheckResult(function, "runs", FAIL, said)


def check_shape(seen: RoomObservation, function: str) -> CheckResult:
    """Each return value has the contract's structure: ndarray(s), the tuple arity, the shapes.

    Catches: a wrong shape (a head axis left in place, a cache not appended),
    a list where an ndarray is expected, a tuple where one array is expected
    (or one array where a tuple is), a value that is no array at all.
    Fault: `decode-cache-not-appended`.
    """
    run, skipped = run_or_skip(seen, function, "shape")
    if skipped:
        return skipped
    checked = 0
    for fixture, outcome in returned(run):
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


def check_dtype(seen: RoomObservation, function: str) -> CheckResult:
    """Each returned array has the reference's dtype: float32 in, float32 out; masks are bool.

    Catches: an upcast (float32 input, float64 output), a float or int mask
    where the contract says bool. Fault: `relu-ffn-float64`.
    """
    run, skipped = run_or_skip(seen, function, "dtype")
    if skipped:
        return skipped
    checked = 0
    wrong: list[tuple[fx.Fixture, Msg]] = []  # the first wrong output of each fixture
    for fixture, outcome in returned(run):
        reference = fx.reference_output(fixture)
        if structure_problem(function, outcome.value, reference):
            continue
        checked += 1
        for item, ref, spec in zip(
            elements(outcome.value), elements(reference), RETURNS[function], strict=True
        ):
            if item.dtype != ref.dtype:
                inputs = (
                    Msg("float32 inputs")
                    if fixture in of_run(fx.probes, run)
                    else Msg("its inputs")
                )
                label = f" ({spec.split(' ')[0]})" if len(RETURNS[function]) > 1 else ""
                said = Msg(
                    "fixture {name}: returned {dtype}{label} for {inputs} where the contract "
                    "keeps {expected}",
                    name=fixture.name,
                    dtype=str(item.dtype),
                    label=label,
                    inputs=inputs,
                    expected=str(ref.dtype),
                )
                wrong.append((fixture, said))
                break
    if wrong:
        (fixture, said), more = wrong[0], len(wrong) - 1
        if more > 1:
            said = Msg("{said}; {n} more fixtures return another dtype", said=said, n=more)
        elif more:
            said = Msg("{said}; {n} more fixture returns another dtype", said=said, n=more)
        return CheckResult(function, "dtype", FAIL, said, fixture=fixture.name)
    if not checked:
        return CheckResult(function, "dtype", NOT_RUN, N_("not run: no usable return value"))
    probes = len(of_run(fx.probes, run))
    extra = Msg(", float32 kept on {n} probes", n=probes) if probes else ""
    return CheckResult(
        function, "dtype", PASS, Msg("dtypes as the reference's{extra}", extra=extra)
    )


def check_parity(seen: RoomObservation, function: str) -> CheckResult:
    """Each fixture's output matches the PyTorch reference within tolerance v1: the float64
    fixtures, the causal check's inputs, and the float32 probes at float32's bound (a float32
    path that returns zeros kept its dtype and passed before).

    Catches: every formula fault: a missing 1/sqrt(D), a reversed or
    misaligned mask, a confused reshape, a wrong GQA order, RoPE's layout or
    positions, eps in the wrong place, a biased/unbiased variance mix-up, a
    swapped gate, an online softmax that never rescales, a residual dropped
    or misordered. Reported: max abs error, the fraction of elements outside
    tolerance, and the margin (error / tolerance) of the worst fixture.
    Faults: most of the catalogue; `no-sqrt-dk` for one.
    """
    run, skipped = run_or_skip(seen, function, "parity")
    if skipped:
        return skipped
    results: list[tuple[str, Comparison | Msg]] = []
    # The causal check's inputs too, each its future changed: they are the calls that share
    # a fixture's shapes with other values, where a room that answers from a cache of earlier
    # calls (functions keep no state) returned the base's outputs and passed.
    variants = (
        [(f, run.causal.get(t)) for t, f in of_run(fx.causal_variants, run)] if run.causal else []
    )
    for fixture, outcome in [*returned(run), *((f, o) for f, o in variants if o and o.ok)]:
        reference = fx.reference_output(fixture)
        problem = structure_message(function, outcome.value, reference)
        results.append((fixture.name, problem or compare_value(function, outcome.value, reference)))
    if not results:
        return CheckResult(function, "parity", NOT_RUN, N_("not run: no fixture returned"))
    uncompared = [(n, r) for n, r in results if isinstance(r, Msg)]
    compared = [(n, r) for n, r in results if not isinstance(r, Msg)]
    called = len(of_run(fx.fixtures, run)) + len(of_run(fx.probes, run)) + len(variants)
    skipped = called - len(results)
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
            # A fixture's note says what it holds (scale=0.0, T = Tmax): often the bug itself.
            notes = {f.name: f.note for f in of_run(fx.fixtures, run) if f.note}
            if name in notes:
                name = Msg(
                    "{text}{more}", text=name, more=Msg(" ({note})", note=declared(notes[name]))
                )
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
                    "({margin} × the tolerance), {percent:.0f}% of elements outside",
                    name=name,
                    error=num(r.max_error),
                    tolerance=num(r.tolerance),
                    margin=num(r.margin),
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
            "{n} fixtures within tolerance v1, max abs error {error} "
            "({margin} × the tolerance){note}",
            n=len(compared),
            error=num(common["max_error"]),
            margin=num(common["margin"]),
            note=note,
        ),
        **common,
    )


# In the order `labctl verify` shows them.
CHECKS: list[Check] = [
    Check(
        "loads",
        check_loads,
        "the package imports in a worker process",
        scope="package",
        justified=LOADS_JUSTIFIED,
    ),
    Check(
        "import-policy", check_import_policy, "only the standard library and numpy", scope="package"
    ),
    Check("contract", check_contract, "signature as contract v1 says"),
    Check("runs", check_runs, "returns in time, no exception or crash"),
    Check("shape", check_shape, "returns arrays of the contract's shapes"),
    Check("dtype", check_dtype, "keeps the input's dtype (bool masks)"),
    Check("parity", check_parity, "matches the reference within tolerance v1"),
]
