"""Do two clean rooms behave alike? The comparison a catalogued fault is matched by.

A learner's function matches a fault when the same checks fail and every
fixture behaves alike: the same outcome (a value, a raise, a hang), the same
inputs edited, and outputs that agree. Outputs agree within the parity
tolerance, or, for a room that computes in float32 inside a float64 path,
when they are nearer the fault's output than the reference's and within
float32 rounding of it (`FLOAT32_MATCH_RELATIVE`): the same formula mistake, computed at
lower precision.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from labctl.verify import fixtures as fx
from labctl.verify.checks import CheckResult, evaluate
from labctl.verify.compare import compare, elements, parity_tolerance, structure_problem
from labctl.verify.observe import FunctionRun, Outcome, RoomObservation

FLOAT32_DIAGNOSIS_RELATIVE = 1e-4
# How far a float32-internal room may sit from the fault it matches (relative to
# max(1, max |reference|)). float32 rounds each value by 6e-8 of its size, so the error grows
# with a function's arguments: RoPE's angle is the position times the frequency, and at the
# fixture `2-d-theta`'s positions (up to 4000) float32 tables alone put the output up to
# 1.8e-5 away (measured over seeds 1 to 400; seed 12 gives 1.4e-5), past the 1e-5 that holds
# for O(1) arguments. 1e-4 leaves 5x over that; the room must also be nearer the fault than
# the reference, which a different mistake is not.
FLOAT32_MATCH_RELATIVE = 1e-4


def _same_value(
    function: str, fixture: fx.Fixture, a, b, probe: bool, any_dtype: bool = False
) -> bool:
    """`a` and `b` agree; with `any_dtype`, `a`'s dtype may be another (a bug of its own,
    beside the one `b` shows: its values are compared in `b`'s dtype)."""
    reference = fx.reference_output(fixture)
    if structure_problem(function, a, reference) or structure_problem(function, b, reference):
        # Both malformed: the same malformation (types and shapes) counts as the same.
        return _shape_signature(a) == _shape_signature(b)
    for x, y, ref in zip(elements(a), elements(b), elements(reference), strict=True):
        if x.dtype != y.dtype and not (any_dtype and y.dtype == ref.dtype):
            return False
        if x.dtype != y.dtype:
            x = x.astype(y.dtype)
        tolerance = parity_tolerance(ref)
        if probe and np.issubdtype(ref.dtype, np.floating):
            tolerance = FLOAT32_DIAGNOSIS_RELATIVE * max(1.0, float(np.max(np.abs(ref))))
        if not (compare(x, y, tolerance).ok or _nearer_at_float32(x, y, ref)):
            return False
    return True


def _nearer_at_float32(x: np.ndarray, fault: np.ndarray, reference: np.ndarray) -> bool:
    """`x` is the fault's output computed at float32 precision: within float32 rounding of it,
    and nearer to it than to the reference."""
    if not np.issubdtype(reference.dtype, np.floating) or reference.size == 0:
        return False
    scale = max(1.0, float(np.max(np.abs(reference))))
    with np.errstate(invalid="ignore", over="ignore"):
        to_fault = float(np.max(np.abs(x - fault), initial=0.0))
        to_reference = float(np.max(np.abs(x - reference), initial=0.0))
    return to_fault <= FLOAT32_MATCH_RELATIVE * scale and to_fault < to_reference


def _shape_signature(value) -> object:
    if isinstance(value, np.ndarray):
        return ("array", value.shape, str(value.dtype))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_shape_signature(v) for v in value))
    return type(value).__name__


def _same_outcome(function: str, fixture: fx.Fixture, a: Outcome, b: Outcome, probe: bool) -> bool:
    if a.kind != b.kind or set(a.mutated) != set(b.mutated):
        return False
    if a.kind != "value":
        return True
    return _same_value(function, fixture, a.value, b.value, probe)


def same_behaviour(function: str, a: FunctionRun | None, b: FunctionRun | None) -> bool:
    """Two runs of `function` behave alike on the fixtures and probes: the same outcomes
    (value, exception, timeout, crash), the same inputs edited, outputs equal within tolerance."""
    if a is None or b is None:
        return a is None and b is None
    for fixture in fx.fixtures(function, a.seed, a.contract):
        oa, ob = a.fixtures.get(fixture.name), b.fixtures.get(fixture.name)
        if (oa is None) != (ob is None):
            return False
        if oa is not None and not _same_outcome(function, fixture, oa, ob, probe=False):
            return False
    for fixture in fx.probes(function, a.seed, a.contract):
        oa, ob = a.probes.get(fixture.name), b.probes.get(fixture.name)
        if (oa is None) != (ob is None):
            return False
        if oa is not None and not _same_outcome(function, fixture, oa, ob, probe=True):
            return False
    return True


def distance(a: FunctionRun | None, b: FunctionRun | None) -> float:
    """The largest difference between two runs' outputs over the calls both returned values
    for (`compare`'s, inf where they cannot be set side by side): among faults that each match
    a learner's function, the one nearest to it is named first, whatever the seed drew."""
    if a is None or b is None:
        return np.inf
    worst = 0.0
    for (_, oa, _), (_, ob, _) in zip(_calls(a), _calls(b), strict=True):
        if oa is None or ob is None or oa.kind != "value" or ob.kind != "value":
            continue
        xs, ys = elements(oa.value), elements(ob.value)
        if len(xs) != len(ys):
            return np.inf
        for x, y in zip(xs, ys, strict=True):
            x, y = np.asarray(x), np.asarray(y)
            if x.shape != y.shape or not all(v.dtype.kind in "biufc" for v in (x, y)):
                return np.inf
            worst = max(worst, compare(x, y, 0.0).max_error)
    return worst


def _same_bad_input(a: FunctionRun | None, b: FunctionRun | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    names = set(a.bad) | set(b.bad)
    return all(
        name in a.bad
        and name in b.bad
        and a.bad[name].bad_input_class() == b.bad[name].bad_input_class()
        for name in names
    )


def _memory_kind(run: FunctionRun | None) -> tuple[str, bool] | None:
    """How a measured call ended: its outcome, and whether its peak counted (its output was
    the reference's), or None when no call was measured."""
    measured = run.memory if run is not None else None
    if measured is None:
        return None
    counted = measured.call is not None and measured.call.peak is not None
    return measured.outcome.kind, counted


def _goes_wrong(function: str, fixture: fx.Fixture, outcome: Outcome, probe: bool) -> bool:
    """Does this call of a room go wrong: a raise, an edit, another structure or dtype, or
    values off (a probe's at float32 precision)?"""
    if outcome.kind != "value" or outcome.mutated:
        return outcome.kind != "skipped"
    reference = fx.reference_output(fixture)
    if structure_problem(function, outcome.value, reference):
        return True
    for x, ref in zip(elements(outcome.value), elements(reference), strict=True):
        if x.dtype != ref.dtype:
            return True
        tolerance = parity_tolerance(ref)
        if probe and np.issubdtype(ref.dtype, np.floating):
            tolerance = FLOAT32_DIAGNOSIS_RELATIVE * max(1.0, float(np.max(np.abs(ref))))
        if not compare(x, ref, tolerance).ok:
            return True
    return False


def _calls(run: FunctionRun):
    """(fixture, outcome, probe) for every fixture and probe call of the run."""
    for probe, fixtures, outcomes in (
        (False, fx.fixtures(run.function, run.seed, run.contract), run.fixtures),
        (True, fx.probes(run.function, run.seed, run.contract), run.probes),
    ):
        for fixture in fixtures:
            yield fixture, outcomes.get(fixture.name), probe


def wrong_calls(run: FunctionRun | None) -> set[str]:
    """The names of the fixture and probe calls on which the run goes wrong."""
    if run is None:
        return set()
    return {
        f.name
        for f, o, probe in _calls(run)
        if o is not None and _goes_wrong(run.function, f, o, probe)
    }


@dataclass
class Explanation:
    """What one fault explains of a learner's failing function: its failing checks and calls.
    `exact`: the same checks fail and every call behaves alike (`matches`)."""

    checks: set[str]
    calls: set[str] = field(default_factory=set)
    exact: bool = False
    # Calls on which the fault's room and the learner's both go wrong, but not alike: where
    # two bugs meet. The fault is named only where another fault named explains those.
    conflicts: set[str] = field(default_factory=set)


def failed_checks(results: list[CheckResult], function: str) -> set[str]:
    return {r.name for r in results if r.function == function and r.failed}


# Checks a fault is compared on only when they are among its own symptoms: a learner who
# makes the same formula mistake may check arguments, or name a default, differently.
SIDE_CHECKS = frozenset({"contract", "import-policy", "bad-input", "loads"})


def matches(
    function: str,
    seen: RoomObservation,
    results: list[CheckResult],
    fault_seen: RoomObservation,
) -> set[str] | None:
    """Does the learner's `function` fail as it does in the fault's room?

    The same checks fail among those the fixtures decide (runs, shape, dtype,
    parity, finite, pure, rows-sum, causal), every fixture behaves alike, and
    each of the fault's other symptoms (a signature deviation, an import
    violation, an accepted bad input) is the learner's too. Returns the
    learner's failing checks the fault does not explain (empty for an exact
    match), or None when it does not match.
    """
    failed = failed_checks(results, function)
    fault_failed = failed_checks(evaluate(fault_seen, (function,)), function)
    if not fault_failed or (failed - SIDE_CHECKS) != (fault_failed - SIDE_CHECKS):
        return None
    side = fault_failed & SIDE_CHECKS
    if not side <= failed:
        return None
    if "import-policy" in side and {v.what for v in seen.violations if v.function == function} != {
        v.what for v in fault_seen.violations if v.function == function
    }:
        return None
    if "contract" in side and {d.message for d in seen.deviations if d.function == function} != {
        d.message for d in fault_seen.deviations if d.function == function
    }:
        return None
    learner_run, fault_run = seen.runs.get(function), fault_seen.runs.get(function)
    if "bad-input" in side and not _same_bad_input(learner_run, fault_run):
        return None
    if "memory" in fault_failed and _memory_kind(learner_run) != _memory_kind(fault_run):
        return None  # a peak too large is not an output never computed
    if not same_behaviour(function, learner_run, fault_run):
        return None
    return failed - fault_failed


def explains(
    function: str,
    seen: RoomObservation,
    results: list[CheckResult],
    fault_seen: RoomObservation,
) -> Explanation | None:
    """What the fault explains of the learner's `function`, which may hold another bug too.

    An exact match (`matches`) explains every call. Otherwise the fault explains part of it
    when each check the fault's room fails is among the learner's failures (with the same
    side symptoms), and on every call where the fault's room goes wrong the learner's goes
    wrong too: alike (`calls`), or otherwise (`conflicts`: where a second bug meets this
    one, which another fault must explain). A call the learner gets right where the fault
    goes wrong rules the fault out. The learner's dtype may differ where the fault keeps
    the reference's: that is a bug of its own.
    """
    extra = matches(function, seen, results, fault_seen)
    learner_run, fault_run = seen.runs.get(function), fault_seen.runs.get(function)
    failed = failed_checks(results, function)
    if extra is not None:
        return Explanation(failed - extra, wrong_calls(learner_run), exact=True)
    fault_failed = failed_checks(evaluate(fault_seen, (function,)), function)
    decided = fault_failed - SIDE_CHECKS
    if not decided or not decided <= failed or learner_run is None or fault_run is None:
        return None
    side = fault_failed & SIDE_CHECKS
    if not side <= failed:
        return None
    if "bad-input" in side and not _same_bad_input(learner_run, fault_run):
        return None
    if "memory" in fault_failed and _memory_kind(learner_run) != _memory_kind(fault_run):
        return None
    learner_calls = {**learner_run.fixtures, **learner_run.probes}
    wrong = [
        (fixture, outcome, probe)
        for fixture, outcome, probe in _calls(fault_run)
        if outcome is not None and _goes_wrong(function, fixture, outcome, probe)
    ]
    # Where the learner's room raises the same error at the same place on a call the fault
    # gets right, that error is another bug's, on the fault's calls too: a transposed k
    # raised on every call, and a fault raising on the GQA calls alone was named for them.
    theirs = {fixture.name for fixture, _, _ in wrong}
    elsewhere = {
        (o.exc_type, o.where)
        for name, o in learner_calls.items()
        if name not in theirs and o.kind == "exception"
    }
    covered: set[str] = set()
    conflicts: set[str] = set()
    for fixture, outcome, probe in wrong:
        mine = learner_calls.get(fixture.name)
        if mine is None or not _goes_wrong(function, fixture, mine, probe):
            return None  # right where the fault goes wrong: not this fault
        alike = mine.kind == outcome.kind and set(mine.mutated) == set(outcome.mutated)
        if alike and outcome.kind == "value":
            alike = _same_value(function, fixture, mine.value, outcome.value, probe, any_dtype=True)
        elif alike and outcome.kind == "exception":
            alike = (mine.exc_type, mine.where) not in elsewhere
        (covered if alike else conflicts).add(fixture.name)
    if not covered and decided - {"causal", "memory"}:
        return None
    return Explanation(fault_failed & failed, covered, conflicts=conflicts)
