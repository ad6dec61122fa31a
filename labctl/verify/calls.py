"""The calls a learner's function made to the room's other contract functions, judged here.

The worker records them (`labctl.isolation.calltrace`); this module reads the
record and judges each call in labctl's process: the reference runs on the
very inputs the call received, and the call's outcome is compared with it.
A call whose inputs or output did not travel in full (too large, or of a type
the wire does not carry) is judged by nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from labctl import contract
from labctl.isolation import calltrace, wire
from labctl.verify.compare import (
    EXACT_TOLERANCE,
    compare,
    elements,
    parity_tolerance,
    structure_problem,
)

# Relative error (to max(1, max |reference|)) up to which an output differs from the
# reference by float32 rounding: float32's unit roundoff is 6e-8, and a fixture's chain of
# a few hundred operations on O(1) values stays within 1e-5 of it.
FLOAT32_ROUNDING = 1e-5
# A recorded call is a claim of the learner's process, and judging it runs the reference
# here: only on inputs the size of a fixture's (the largest int there is 14, the largest
# array 384 elements), so a forged trace cannot make labctl allocate much. Every integer
# counts, whatever its type: a forged `causal_mask(np.int64(50000))` made labctl's
# reference use 5 GB when only Python's int was bounded.
MAX_INT_ARGUMENT = 256
# `raised` of the call a process ended in (`observe` reads it from the stack the worker
# printed as it died); no exception's name is this.
CRASHED = "$crashed"
# Exception names that are ValueError or TypeError: the builtins' own subclasses
# and numpy's. A class the clean room defines itself is taken on trust.
_ACCEPTED_BAD_INPUT = {"ValueError", "TypeError", "AxisError", "UnicodeError"}


@dataclass(eq=False)
class Call:
    """One call recorded below the call labctl made: `depth` 1 is made by that function.

    `deadline` (time.monotonic) is the end of the room's time budget: judging runs the
    reference in labctl, and the budget covers it as it covers the room's own calls, so past
    it a call is not judged (47 forged calls per fixture took a verify to 481 s of its 120)."""

    function: str
    depth: int
    args: tuple
    kwargs: dict
    out: Any = None
    raised: str | None = None
    deadline: float | None = None
    edited: bool = False  # it wrote into an array it was given

    @cached_property
    def judged(self) -> Judged:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return Judged(None)
        return judge(self)


def accepted_refusal(exc_type: str | None) -> bool:
    """ValueError or TypeError (or a subclass we can tell, or the clean room's own class)."""
    if exc_type is None:
        return False
    if exc_type in _ACCEPTED_BAD_INPUT:
        return True
    import builtins

    known = getattr(builtins, exc_type, None)
    if isinstance(known, type) and issubclass(known, BaseException):
        return issubclass(known, (ValueError, TypeError))
    # Not a builtin: a class of the clean room's own (ShapeError(ValueError), ...).
    return exc_type != "ForbiddenImport"


def calls_of(trace: list[dict], deadline: float | None = None) -> tuple[Call, ...]:
    """The recorded calls of contract functions, in the order they started; each judged only
    before `deadline` (see `Call`)."""
    names = set(contract.function_names(contract.LATEST))
    return tuple(
        Call(
            e["function"],
            e["depth"],
            tuple(e["args"]),
            e["kwargs"],
            e.get("out"),
            e.get("raised"),
            deadline,
            e.get("edited") is True,
        )
        for e in trace
        if e["function"] in names
    )


def complete(value: Any) -> bool:
    """Did `value` travel whole (no array cut for size, no value the wire does not carry)?"""
    if isinstance(value, wire.Unsupported):
        return False
    if isinstance(value, dict):
        return calltrace.TOO_LARGE not in value and all(complete(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(complete(v) for v in value)
    return True


def _fresh(value: Any) -> Any:
    """A writable copy: the arrays decoded from a reply are views of its buffer."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, list):
        return [_fresh(v) for v in value]
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    return value


def _as_returned(value: Any) -> Any:
    """A recorded output in the reference's form: the wire turns tuples into lists."""
    if isinstance(value, list) and all(isinstance(v, np.ndarray) for v in value):
        return tuple(value)
    return value


@dataclass(frozen=True)
class Judged:
    """What a recorded call did wrong on its own inputs: a kind of check, or nothing."""

    # runs | shape | dtype | parity | pure | bad-input | None (correct, not judged)
    kind: str | None
    relative_error: float = 0.0
    # A dtype of another kind than the reference's (a float mask where the contract keeps
    # bool): what the caller then does with it may raise, which float32 for float64 does not.
    other_kind: bool = False


def reference_on(call: Call) -> tuple[Any, bool]:
    """The reference on the call's inputs: (value, True), or (None, False) when it refuses.

    v2's reference: v1's functions with v2's keyword parameters (last, defaulting to v1's
    behaviour) and the functions v2 adds, which a v2 room's functions call too."""
    import labctl.reference.v2 as reference

    try:
        value = getattr(reference, call.function)(*_fresh(list(call.args)), **_fresh(call.kwargs))
    except Exception:  # the reference refuses what the caller passed: the caller's doing
        return None, False
    return value, True


def _small(value: Any) -> tuple[bool, int]:
    """(every integer within MAX_INT_ARGUMENT, the number of array elements) of `value`: an
    int, a NumPy integer or a 0-d integer array alike (a size the reference may build)."""
    if isinstance(value, np.ndarray):
        if value.ndim == 0 and value.dtype.kind in "iu":
            return abs(int(value)) <= MAX_INT_ARGUMENT, value.size
        return True, value.size
    if isinstance(value, (bool, np.bool_)):
        return True, 0
    if isinstance(value, (int, np.integer)):
        return abs(int(value)) <= MAX_INT_ARGUMENT, 0
    if not isinstance(value, (list, tuple, dict)):
        return True, 0
    items = value.values() if isinstance(value, dict) else value
    found = [_small(v) for v in items]
    return all(ok for ok, _ in found), sum(n for _, n in found)


def _float_dtypes(value: Any) -> set[np.dtype]:
    if isinstance(value, np.ndarray):
        return {value.dtype} if value.dtype.kind == "f" else set()
    if isinstance(value, (list, tuple)):
        return set().union(*(_float_dtypes(v) for v in value))
    if isinstance(value, dict):
        return _float_dtypes(list(value.values()))
    return set()


def relative_error(value: Any, expected: Any) -> float:
    """max |value - expected| over max(1, max |expected|), over every float element; inf
    where a mask or an index differs at all (no rounding makes a mask wrong: a reversed
    triangle was said to be off by float32 rounding, its error counted as 0)."""
    worst = 0.0
    for x, ref in zip(elements(value), elements(expected), strict=True):
        if ref.size == 0:
            continue
        if not np.issubdtype(ref.dtype, np.floating):
            if not compare(np.asarray(x), ref, EXACT_TOLERANCE).ok:
                return float("inf")
            continue
        scale = max(1.0, float(np.max(np.abs(ref))))
        # Errors as parity counts them (an imaginary part included, NaN against a number inf).
        worst = max(worst, compare(np.asarray(x), ref, 0.0).max_error / scale)
    return worst


def _tolerance(reference: np.ndarray) -> float:
    """Parity v1 for a float64 call; float32 rounding for a call the caller made in float32,
    where two honest implementations differ by exactly that."""
    if reference.dtype.kind == "f" and reference.dtype.itemsize < 8 and reference.size:
        return FLOAT32_ROUNDING * max(1.0, float(np.max(np.abs(reference))))
    return parity_tolerance(reference)


def judge(call: Call) -> Judged:
    """How the call's own outcome differs from the reference's on the inputs it received."""
    if call.raised == CRASHED:
        # Its inputs ended with the process; `observe` keeps such a call only where the
        # function also ends the process on labctl's own fixtures.
        return Judged("runs")
    if not (complete(list(call.args)) and complete(call.kwargs)):
        return Judged(None)
    small, size = _small([list(call.args), call.kwargs])
    if not small or size > calltrace.MAX_ELEMENTS:
        return Judged(None)
    expected, accepted = reference_on(call)
    if not accepted:
        # Inputs the contract refuses: the call should have raised ValueError or TypeError.
        refused = call.raised is not None and accepted_refusal(call.raised)
        return Judged(None if refused or call.raised == CRASHED else "bad-input")
    if call.raised is not None:
        return Judged("runs")
    value = _as_returned(call.out)
    if not complete(value):
        return Judged(None)
    if structure_problem(call.function, value, expected):
        return Judged("shape")
    if any(x.dtype != r.dtype for x, r in zip(elements(value), elements(expected), strict=True)):
        # Handed float32 and float64 arrays at once, any dtype it returns is the caller's doing.
        mixed = len(_float_dtypes([*call.args, *call.kwargs.values()])) > 1
        other = any(
            x.dtype.kind != r.dtype.kind
            for x, r in zip(elements(value), elements(expected), strict=True)
        )
        return Judged(None if mixed else "dtype", relative_error(value, expected), other)
    ok = all(
        compare(x, r, _tolerance(r)).ok
        for x, r in zip(elements(value), elements(expected), strict=True)
    )
    if not ok:
        return Judged("parity", relative_error(value, expected))
    # Right values, but the caller's array changed under it: the caller's failure, not its own.
    return Judged("pure" if call.edited else None, relative_error(value, expected))
