"""The checks of behaviour that need no reference: finite outputs, pure functions, attention
weights that sum to 1, a future that does not move the prefix, and the contract's bad
inputs refused (`labctl.verify.checks` gathers them)."""

from __future__ import annotations

import numpy as np

from labctl import contract
from labctl.i18n import N_, Msg, declared, joined
from labctl.verify import fixtures as fx
from labctl.verify.bad_input import BadCase, bad_cases
from labctl.verify.check_base import (
    FAIL,
    NOT_RUN,
    PASS,
    Check,
    CheckResult,
    num,
    returned,
    run_or_skip,
)
from labctl.verify.compare import (
    CAUSAL_TOLERANCE,
    ROW_SUM_TOLERANCE,
    _real_diff,
    elements,
    structure_problem,
)
from labctl.verify.functions import CAUSAL_FUNCTIONS
from labctl.verify.observe import RoomObservation


def _has_float_output(function: str) -> bool:
    return function not in ("causal_mask", "sliding_window_mask", "padding_mask")


def check_finite(seen: RoomObservation, function: str) -> CheckResult:
    """No NaN or inf in any output, the adversarial fixtures included.

    Catches: a softmax that overflows at |x| ~ 1e3 (no max subtracted), NaN
    on a fully blocked row (-inf - (-inf)), a division by a zero sum.
    Faults: `softmax-no-max`, `softmax-blocked-nan`.
    """
    run, skipped = run_or_skip(seen, function, "finite")
    if skipped:
        return skipped
    checked = 0
    for fixture, outcome in returned(run):
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
    return function not in (
        "causal_mask",
        "sliding_window_mask",
        "sinusoidal_positions",
        "alibi_slopes",
        "alibi_bias",
    )


def check_pure(seen: RoomObservation, function: str) -> CheckResult:
    """No input array is modified in place (the worker compares every input before and after).

    Catches: `x -= mean`, `scores[mask] = -inf` on a caller's array, an
    in-place RoPE; the contract's functions are pure. Fault: `layer-norm-in-place`.
    """
    run, skipped = run_or_skip(seen, function, "pure")
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


def check_rows_sum(seen: RoomObservation, function: str) -> CheckResult:
    """Every softmax slice and every attention row is >= 0 and sums to 1; a blocked one is all 0.

    Needs no reference. Catches: weights masked after the softmax (rows no
    longer sum to 1), a wrong denominator, NaN rows, uniform weights on a
    fully blocked row (a finite -1e9 fill). Fault: `mask-after-softmax`.
    """
    run, skipped = run_or_skip(seen, function, "rows-sum")
    if skipped:
        return skipped
    worst, worst_name, checked = 0.0, None, 0
    for fixture, outcome in returned(run, with_probes=False):
        if structure_problem(function, outcome.value, fx.reference_output(fixture)):
            continue
        weights, blocked = _row_sums(function, fixture, outcome.value)
        weights = np.asarray(weights)
        # Weights are real: an imaginary part is a deviation as large as itself.
        imaginary = (
            float(np.max(np.abs(weights.imag), initial=0.0)) if np.iscomplexobj(weights) else 0.0
        )
        weights = weights.real.astype(np.float64)
        with np.errstate(invalid="ignore"):
            sums = weights.sum(axis=-1)
        target = np.where(blocked, 0.0, 1.0)
        error = np.abs(sums - target)
        error = np.where(np.isnan(error), np.inf, error)
        negative = float(np.max(-weights, initial=0.0))
        deviation = max(float(np.max(error, initial=0.0)), negative, imaginary)
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
                error=num(worst),
                tolerance=ROW_SUM_TOLERANCE,
            ),
            **common,
        )
    return CheckResult(
        function,
        "rows-sum",
        PASS,
        Msg("rows sum to 1 within {error} on {n} fixtures", error=num(worst), n=checked),
        **common,
    )


def check_causal(seen: RoomObservation, function: str) -> CheckResult:
    """Future-token invariance: changing inputs after position t leaves outputs <= t unchanged.

    Needs no reference: every t of the base fixture, its future replaced.
    Catches: a reversed triangle, a mask that adds 0, weights zeroed after
    the softmax (the future still moves the denominator), a transposed mask.
    Faults: `mask-reversed`, `mask-adds-zero`.
    """
    run, skipped = run_or_skip(seen, function, "causal")
    if skipped:
        return skipped
    base_fixture = fx.causal_base(function, run.seed)
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
    # A NaN reaches every position through a zero weight (0 x NaN is NaN), the future's too:
    # with one in any output, no comparison says whether the future leaks. finite fails it.
    if any(
        isinstance(o.value, np.ndarray) and o.value.dtype.kind in "fc" and np.isnan(o.value).any()
        for o in (base, *(c for c in run.causal.values() if c.ok))
    ):
        return CheckResult(
            function,
            "causal",
            NOT_RUN,
            N_("not run: its outputs hold NaN (see finite), which hides whether the future leaks"),
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
        # A NaN in both outputs at one place is no change (the finite check says NaN): a room
        # whose norm is NaN everywhere does not leak the future. NaN in one of them is.
        prefix = value[:, : t + 1].astype(np.float64)
        moved = _real_diff(prefix, np.asarray(base.value[:, : t + 1], dtype=np.float64))
        change = float(np.max(moved, initial=0.0))
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
                error=num(worst),
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
            error=num(worst),
            n=len(run.causal),
        ),
        **common,
    )


def _not_refused(name: str, case: BadCase | None, outcome) -> Msg:
    """What one bad-input case did instead of raising ValueError or TypeError, with the
    contract's rule it breaks quoted."""
    verdict = outcome.bad_input_class()
    if verdict == "returned":
        did: str | Msg = Msg("returned a value")
    elif verdict == "wrong-exception":
        did = Msg("raised {exc_type}", exc_type=outcome.exc_type)
    else:
        did = outcome.describe()
    if case is None:  # a case of another seed or version: no rule to quote
        return Msg(
            "case {name}: {did} instead of raising ValueError or TypeError", name=name, did=did
        )
    return Msg(
        "case {name}: {did}; the contract's rule: {condition} must raise ValueError (or "
        "TypeError) naming {argument}",
        name=case.name,
        condition=declared(case.rule.condition),
        did=did,
        argument=case.rule.argument,
    )


def check_bad_input(seen: RoomObservation, function: str) -> CheckResult:
    """The contract's Bad input cases raise ValueError or TypeError (any message).

    Exactly the section's cases: C % n_heads != 0, n_heads % n_kv_heads != 0,
    an odd D for RoPE, block_size < 1, window < 1, mismatched batch or head
    widths. Catches: a missing argument check that silently returns garbage
    (window=0 gives a mask that blocks everything), an exception of another
    type. Every case not refused is named, so one fix is not followed by
    another surprise. Fault: `window-unchecked`.
    """
    run, skipped = run_or_skip(seen, function, "bad-input")
    if skipped:
        return skipped
    if not run.bad:
        return CheckResult(function, "bad-input", NOT_RUN, N_("not run"))
    cases = {case.name: case for case in bad_cases(function, run.seed, run.contract)}
    failed: list[tuple[str, Msg]] = []
    for name, outcome in run.bad.items():
        verdict = outcome.bad_input_class()
        if verdict == "skipped":
            # The calls after it were not made (the budget ran out): report what was seen.
            if not failed:
                return CheckResult(function, "bad-input", NOT_RUN, outcome.describe())
            break
        if verdict != "refused":
            failed.append((name, _not_refused(name, cases.get(name), outcome)))
    if not failed:
        return CheckResult(
            function, "bad-input", PASS, Msg("{n} bad inputs refused", n=len(run.bad))
        )
    text = joined([message for _, message in failed])
    if len(failed) > 1:
        text = Msg(
            "{n} of {total} bad inputs not refused: {cases}",
            n=len(failed),
            total=len(run.bad),
            cases=text,
        )
    return CheckResult(function, "bad-input", FAIL, text, fixture=failed[0][0])


# In the order `labctl verify` shows them.
CHECKS: list[Check] = [
    Check("finite", check_finite, "no NaN or inf", applies=_has_float_output),
    Check("pure", check_pure, "inputs unchanged after the call", applies=_has_array_input),
    Check(
        "rows-sum",
        check_rows_sum,
        "weights are >= 0 and sum to 1 (0 on a blocked row)",
        applies=lambda f: f in ("softmax", "scaled_dot_product_attention"),
    ),
    Check(
        "causal",
        check_causal,
        "the future does not move the prefix",
        applies=lambda f: f in CAUSAL_FUNCTIONS,
    ),
    Check(
        "bad-input",
        check_bad_input,
        "the contract's Bad input cases raise ValueError/TypeError",
        applies=lambda f: bool(bad_cases(f, contract=contract.LATEST)),
        applies_at=lambda f, version: bool(bad_cases(f, contract=version)),
    ),
]
