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

The checks live in `labctl.verify.checks_structure` (loads, import policy, contract, runs,
shape, dtype, parity) and `labctl.verify.checks_behaviour` (finite, pure, rows-sum, causal,
bad-input); this module lists them in that order and runs them.
"""

from __future__ import annotations

from labctl import contract
from labctl.i18n import N_
from labctl.verify import checks_behaviour, checks_structure
from labctl.verify.check_base import FAIL, NOT_RUN, PASS, Check, CheckResult
from labctl.verify.checks_behaviour import (
    check_bad_input,
    check_causal,
    check_finite,
    check_pure,
    check_rows_sum,
)
from labctl.verify.checks_structure import (
    check_contract,
    check_dtype,
    check_import_policy,
    check_loads,
    check_parity,
    check_runs,
    check_shape,
)
from labctl.verify.observe import PACKAGE, FunctionRun, RoomObservation

__all__ = [
    "CHECKS",
    "CHECK_LABELS",
    "CHECK_NAMES",
    "FAIL",
    "FUNCTION_CHECKS",
    "JUSTIFIED",
    "NOT_RUN",
    "PASS",
    "Check",
    "CheckResult",
    "FunctionRun",
    "RoomObservation",
    "applicable",
    "check_bad_input",
    "check_causal",
    "check_contract",
    "check_dtype",
    "check_finite",
    "check_import_policy",
    "check_label",
    "check_loads",
    "check_parity",
    "check_pure",
    "check_rows_sum",
    "check_runs",
    "check_shape",
    "evaluate",
    "failing_functions",
]

CHECKS: list[Check] = [*checks_structure.CHECKS, *checks_behaviour.CHECKS]
CHECK_NAMES = tuple(c.name for c in CHECKS)
# A check as a person reads it, translated where shown (JSON and records keep the names).
CHECK_LABELS = {
    "loads": N_("loads"),
    "import-policy": N_("import-policy"),
    "contract": N_("contract"),
    "runs": N_("runs"),
    "shape": N_("shape"),
    "dtype": N_("dtype"),
    "parity": N_("parity"),
    "finite": N_("finite"),
    "pure": N_("pure"),
    "rows-sum": N_("rows-sum"),
    "causal": N_("causal"),
    "bad-input": N_("bad-input"),
}


def check_label(name: str) -> str:
    """The message naming check `name` (its name where it has no label of its own)."""
    return CHECK_LABELS.get(name, name)


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
    for function in functions or contract.function_names(seen.contract):
        if any(v.function == function for v in seen.violations):
            results.append(check_import_policy(seen, function))
        for c in applicable(function):
            results.append(c.evaluate(seen, function))
    return results


def failing_functions(results: list[CheckResult]) -> list[str]:
    """Contract functions with at least one failing check, in contract order."""
    failing = {r.function for r in results if r.failed}
    return [f for f in contract.function_names(contract.LATEST) if f in failing]
