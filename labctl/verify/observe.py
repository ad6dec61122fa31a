"""Run a clean room on the fixtures and record what happened, without judging it.

Everything the checks need is gathered here, in one pass, behind the sandbox:
the static import scan, the load (in a worker process with the runtime guard),
the signatures, and every call of every fixture with its outcome (a value,
an exception, a timeout, a crash), its compute time and the inputs it edited
in place. The checks (`labctl.verify.checks`) then read this record; the
diagnosis compares two such records. Nothing here can be broken by a
clean room: its failures become outcomes.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labctl import contract
from labctl.contract_check import declared_version
from labctl.errors import CallError, CleanRoomError, ImportPolicyError, LabctlError
from labctl.i18n import Msg, declared, joined
from labctl.isolation import guard, replies, resolve_isolation
from labctl.isolation.inprocess import IN_PROCESS, InProcessRoom
from labctl.isolation.loader import source_files
from labctl.isolation.sandbox import CleanRoom
from labctl.verify import fixtures as fx
from labctl.verify.bad_input import bad_cases
from labctl.verify.builders import SEED
from labctl.verify.calls import CRASHED, Call, accepted_refusal, calls_of
from labctl.verify.functions import CAUSAL_FUNCTIONS, DEPENDS
from labctl.verify.places import PACKAGE, Located, function_at, located

# A room as the calls below see it: a learner's in a worker, or one of labctl's own here.
Room = CleanRoom | InProcessRoom
# The violations a room's observation (and so its records) keeps: each call may bring a
# hundred new ones of a thousand characters, and a room may make thousands of calls.
MAX_VIOLATIONS = 200
_UNEXPOSED = ("missing", "not-callable")


@dataclass
class Outcome:
    """What one call did."""

    kind: (
        str  # value | exception | not-implemented | timeout | crash | malformed | missing
        # | not-callable | skipped
    )
    value: Any = None
    message: str | Msg = ""  # a Msg where labctl says it, a str where the learner's code does
    exc_type: str | None = None
    where: str | None = None
    mutated: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    calls: tuple[Call, ...] = ()  # the room's contract functions it reached, in order
    skipped_for: str | None = None  # not run: built from this function, which timed out

    @property
    def ok(self) -> bool:
        return self.kind == "value"

    def describe(self) -> str | Msg:
        """One phrase for a learner: what went wrong with this call (a Msg; `str()` is English)."""
        at = Msg(" at {where}", where=self.where) if self.where else ""
        if self.kind == "not-implemented":
            return Msg("not implemented (raises NotImplementedError)")
        if self.kind == "exception":
            return Msg(
                "raised {exc_type}: {message}{at}",
                exc_type=self.exc_type,
                message=self.message,
                at=at,
            )
        if self.kind == "timeout":
            return self.message or Msg("did not return in time (stopped)")
        if self.kind == "crash":
            return Msg("crashed: {message}{at}", message=self.message, at=at)
        if self.kind in ("malformed", "not-callable"):
            return self.message
        if self.kind == "missing":
            return Msg("not exposed by the package")
        if self.kind == "skipped":
            return self.message or Msg("not run")
        return Msg("returned")

    def bad_input_class(self) -> str:
        """How a Bad input call ended: refused (as asked), returned, or something else."""
        if self.kind == "exception":
            return "refused" if accepted_refusal(self.exc_type) else "wrong-exception"
        return {"value": "returned"}.get(self.kind, self.kind)


@dataclass
class MemoryRun:
    """The measured call of a function whose memory the contract promises (tiled_attention's,
    at the tiled-attention lab's size): how it ended, and, when it returned, its peak as labctl
    read it from outside the worker with its output checked (`labctl.labs.tiled_attention`)."""

    outcome: Outcome
    call: Any = None  # a tiled_attention.MemoryCall when the call returned


@dataclass
class FunctionRun:
    """Every call of one function: fixtures, float32 probes, causal variants, bad input."""

    function: str
    fixtures: dict[str, Outcome] = field(default_factory=dict)
    probes: dict[str, Outcome] = field(default_factory=dict)
    causal: dict[int, Outcome] = field(default_factory=dict)
    bad: dict[str, Outcome] = field(default_factory=dict)
    memory: MemoryRun | None = None  # measured in a worker only (`MEASURED`)
    timed_out: bool = False
    elapsed_s: float = 0.0
    seed: int = SEED  # the seed every input of these calls was drawn with
    contract: int = 1  # the contract version checked: v2 adds fixtures to widened functions

    def outcomes(self) -> list[Outcome]:
        return [
            *self.fixtures.values(),
            *self.probes.values(),
            *self.causal.values(),
            *self.bad.values(),
        ]

    @property
    def ends_its_process(self) -> bool:
        """A fixture or probe of labctl's own ended the process (a crash)."""
        return any(o.kind == "crash" for o in (*self.fixtures.values(), *self.probes.values()))

    @property
    def not_implemented(self) -> bool:
        """Every fixture raised NotImplementedError (a fresh stub)."""
        calls = [*self.fixtures.values(), *self.probes.values()]
        return bool(calls) and all(o.kind == "not-implemented" for o in calls)

    @property
    def unexposed(self) -> Outcome | None:
        """A fixture's outcome that says the package has no function of this name (none
        at all, or something else under it), or None."""
        return next((o for o in self.fixtures.values() if o.kind in _UNEXPOSED), None)


@dataclass
class RoomObservation:
    """One clean room, observed: load status, violations, signature deviations, calls."""

    root: Path
    status: str = "loaded"  # loaded | refused | unloadable
    isolation: str = ""  # sandbox | process: how the clean room's code ran
    message: str | Msg = ""  # why it did not load (a Msg; `str()` is English)
    load_error: Located | None = None
    load_timed_out: bool = False  # the room did not load within its time (a busy machine?)
    violations: list[Located] = field(default_factory=list)
    deviations: list[contract.Deviation] = field(default_factory=list)
    files_scanned: int = 0
    runs: dict[str, FunctionRun] = field(default_factory=dict)
    seed: int = SEED
    # The functions whose calls the room's time budget left unrun (or cut short): no run
    # is kept for them, so their checks are "not run", never a pass.
    over_budget: list[str] = field(default_factory=list)
    budget_s: float | None = None
    contract: int = 1  # the contract version checked
    declared: int = 1  # the one the room declares (`contract_check.declared_version`)
    # What the room printed (stdout and stderr): bytes in all, and the first 64 KiB as text.
    output_bytes: int = 0
    output: str = ""

    @property
    def loaded(self) -> bool:
        return self.status == "loaded"


# --------------------------------------------------------------------------
# Where in the source: a load error or a violation, with the function it sits in
# --------------------------------------------------------------------------

_SYNTAX = re.compile(r"syntax error in (?P<where>\S+?\.py:\d+)")


def _refused(
    seen: RoomObservation, root: Path, violations: list[Located], text: str = ""
) -> RoomObservation:
    """`seen`, refused by the import policy: the rule, then each violation where it is."""
    seen.violations = violations
    seen.status = "refused"
    seen.message = Msg(
        "refused: {room} breaks the import policy ({rule}): {violations}",
        room=root.name,
        rule=declared(guard.RULE),
        violations=joined([v.shown() for v in violations]) or text,
    )
    return seen


def _located(root: Path, text: str) -> Located:
    """'dir/file.py:12: imports torch' -> Located(where, what, function)."""
    where, _, what = text.partition(": ")
    return located(root, where, what)


# --------------------------------------------------------------------------
# Calling
# --------------------------------------------------------------------------


def call(
    room: Room,
    name: str,
    args: tuple,
    kwargs: dict,
    trace: bool = False,
    deadline: float | None = None,
) -> Outcome:
    """One call through the sandbox; every failure of the clean room becomes an Outcome.
    With `trace`, the calls it made to the room's contract functions are kept (`calls`),
    judged only before `deadline`, the end of the room's time budget."""
    try:
        # Asked only when wanted: a room that records nothing need not know the option.
        options = {"trace": True} if trace else {}
        result = room.invoke(name, *args, **options, **kwargs)
    except CallError as exc:
        outcome = _failed(name, exc, deadline)
        if outcome.kind == "crash" and outcome.where:
            outcome.calls = _ended_in(room.path, name, outcome.where)
        return outcome
    except LabctlError as exc:
        # The worker could not be restarted (the clean room no longer loads, say).
        return Outcome("crash", message=str(exc))
    return Outcome(
        "value",
        value=result.value,
        mutated=tuple(result.mutated),
        elapsed_s=result.elapsed_s,
        calls=calls_of(result.trace, deadline),
    )


def _ended_in(root: Path, name: str, where: str) -> tuple[Call, ...]:
    """The process ended in another of the room's contract functions, reached from `name`:
    that call, its inputs unknown (the record of its calls ended with the process)."""
    function = function_at(root, where)
    if function in (name, PACKAGE):
        return ()
    return (Call(function, 1, (), {}, raised=CRASHED),)


def _believe_crashes(seen: RoomObservation) -> None:
    """Keep the call a crash ended in only where that function also ends the process on
    labctl's own fixtures: one that ends it only on what its caller handed it (inputs the
    record lost) leaves the crash its caller's."""
    ending = {name for name, run in seen.runs.items() if run.ends_its_process}
    for run in seen.runs.values():
        for outcome in run.outcomes():
            if outcome.kind == "crash":
                outcome.calls = tuple(c for c in outcome.calls if c.function in ending)


def _failed(name: str, exc: CallError, deadline: float | None = None) -> Outcome:
    body = exc.detail
    if exc.kind == "exception":
        kind = "not-implemented" if exc.exc_type == "NotImplementedError" else "exception"
        return Outcome(
            kind,
            message=body,
            exc_type=exc.exc_type,
            where=exc.where,
            calls=calls_of(exc.trace, deadline),
        )
    if exc.kind == "timeout":
        return Outcome("timeout", message=Msg("did not return: {body}", body=exc.shown))
    if exc.kind == "missing":
        return Outcome("missing", message=body)
    if exc.kind == "not-callable":
        return Outcome("not-callable", message=exc.shown)
    if exc.kind == "malformed":
        return Outcome("malformed", message=body)
    return Outcome("crash", message=exc.shown, where=exc.where)


def depends_on(function: str) -> list[str]:
    """Every contract function `function` is built from, directly or not, nearest first."""
    found: list[str] = []
    queue = list(DEPENDS.get(function, ()))
    while queue:
        name = queue.pop(0)
        if name not in found:
            found.append(name)
            queue.extend(DEPENDS.get(name, ()))
    return found


class _OverBudget(Exception):
    """The room's time budget ran out before this function's calls were done."""


def _within(room: Room, deadline: float | None, name: str, args: tuple, kwargs: dict, trace: bool):
    """`call`, its timeout cut to what is left of the budget; a call the cut stops, or one
    that cannot start, is over budget rather than a timeout of the function's own."""
    if deadline is None:
        return call(room, name, args, kwargs, trace)
    left = deadline - time.monotonic()
    if left <= 0:
        raise _OverBudget
    full = room.timeout_s
    room.timeout_s = min(full, left)
    try:
        outcome = call(room, name, args, kwargs, trace, deadline)
    finally:
        room.timeout_s = full
    if outcome.kind == "timeout" and left < full:
        raise _OverBudget
    return outcome


# How long a function built from one that hung is tried before it is taken to hang the same way.
TRY_AFTER_HANG_S = 0.5


def _tried(room: Room, deadline: float | None, name: str, args: tuple, kwargs: dict, trace: bool):
    """`_within`, given at most `TRY_AFTER_HANG_S`."""
    full = room.timeout_s
    room.timeout_s = min(full, TRY_AFTER_HANG_S)
    try:
        return _within(room, deadline, name, args, kwargs, trace)
    finally:
        room.timeout_s = full


def run_function(
    room: Room,
    function: str,
    timed_out: set[str],
    seed: int = SEED,
    deadline: float | None = None,
    contract: int = 1,
    reached: set[str] | None = None,
) -> FunctionRun:
    """Every call `function` needs; after a timeout its remaining calls are skipped.

    `timed_out` holds the functions that have hung in this room so far: a
    function that hung once is not called again. One built from it is tried
    once, for `TRY_AFTER_HANG_S`: if it returns, it is observed as any other (a
    block whose fixtures never reach a hanging `rope` lost every point it had
    earned); if that call hangs too, its calls are skipped as the hung
    function's, and so are those of every other function built from it, untried
    (`reached`, shared by the room's functions: a hanging `softmax` costs one
    short try, not a try and a restart of the room for each function above it).
    """
    reached = set() if reached is None else reached
    run = FunctionRun(function, seed=seed, contract=contract)
    blocked: str | None = None  # the hung function its try met
    cleared = False  # its try returned: it is called as any function

    def one(args: tuple, kwargs: dict, trace: bool = True) -> Outcome:
        nonlocal blocked, cleared
        if function in timed_out:
            return Outcome("skipped", message=Msg("not run: it timed out on an earlier fixture"))
        hung = blocked
        if hung is None and not cleared:
            hung = next((d for d in depends_on(function) if d in timed_out), None)
            if hung is not None and hung not in reached:
                outcome = _tried(room, deadline, function, args, kwargs, trace)
                run.elapsed_s += outcome.elapsed_s
                if outcome.kind != "timeout":
                    cleared = True
                    return outcome
                reached.add(hung)
            blocked = hung
        if hung is not None:
            return Outcome(
                "skipped",
                message=Msg("not run: it is built from {hung}, which timed out", hung=hung),
                skipped_for=hung,
            )
        outcome = _within(room, deadline, function, args, kwargs, trace)
        run.elapsed_s += outcome.elapsed_s
        if outcome.kind == "timeout":
            timed_out.add(function)
            run.timed_out = True
        return outcome

    for fixture in fx.fixtures(function, seed, contract):
        run.fixtures[fixture.name] = one(*fixture.call())
    for fixture in fx.probes(function, seed, contract):
        run.probes[fixture.name] = one(*fixture.call())
    implemented = not run.not_implemented and run.unexposed is None
    if implemented and function in CAUSAL_FUNCTIONS:
        for t, fixture in fx.causal_variants(function, seed):
            run.causal[t] = one(*fixture.call())
    if implemented:
        for case in bad_cases(function, seed, contract):
            run.bad[case.name] = one(*case.call())
    measurable = function in MEASURED and isinstance(room, CleanRoom)
    if implemented and measurable and function not in timed_out:
        run.memory = _measured(room, function, seed, deadline)
    return run


# The functions whose memory the contract promises ("never holding a (Tq, Tk) score array"),
# measured in a worker as the tiled-attention lab measures them; a room of labctl's own run in
# this process has no worker to measure.
MEASURED = ("tiled_attention",)
# The measured call is the heaviest a room makes (T = 4096): it gets this long at least, within
# the room's budget, whatever the per-call timeout (the diagnosis gives fault rooms 2 s).
MEASURED_TIMEOUT_S = 30.0


def measured_call(function: str, seed: int) -> tuple[tuple, Any]:
    """The arguments of `function`'s measured call at `seed` (the tiled-attention lab's memory
    row: q, k, v of one head at T = 4096, its block, not causal) and the query rows its output
    is checked on."""
    from labctl.labs import tiled_attention as lab
    from labctl.verify.builders import rng

    q, k, v = lab.memory_inputs(rng(seed, f"{function}/memory"), lab.MEMORY_T)
    return (q, k, v, lab.Params().memory_block, False), lab.checked_rows(seed, lab.MEMORY_T)


def _measured(room: CleanRoom, function: str, seed: int, deadline: float | None) -> MemoryRun:
    """`function` at the tiled-attention lab's memory size, its peak read by labctl from
    outside the worker and its output checked against the reference on rows drawn from
    `seed`; within what is left of the budget."""
    from labctl.lab import Implementation
    from labctl.labs import tiled_attention as lab

    if deadline is not None and deadline - time.monotonic() <= 0:
        return MemoryRun(Outcome("skipped", message=Msg("not run: the time budget ran out")))
    (q, k, v, block, causal), rows = measured_call(function, seed)
    full = room.timeout_s
    room.timeout_s = max(full, MEASURED_TIMEOUT_S)
    if deadline is not None:
        room.timeout_s = min(room.timeout_s, deadline - time.monotonic())
    try:
        impl = Implementation("clean-room", room)
        call_made = lab.measure(impl, function, q, k, v, block, causal, rows=rows)
    except CallError as exc:
        return MemoryRun(_failed(function, exc))
    except LabctlError as exc:
        return MemoryRun(Outcome("crash", message=exc.message))
    finally:
        room.timeout_s = full
    return MemoryRun(Outcome("value"), call_made)


# --------------------------------------------------------------------------
# Observing a whole clean room
# --------------------------------------------------------------------------


def observe(
    root: Path,
    timeout_s: float,
    memory_mb: int,
    functions: tuple[str, ...] | None = None,
    with_room: Callable[[CleanRoom], None] | None = None,
    progress: Callable[[str], None] | None = None,
    isolation: str = "auto",
    seed: int = SEED,
    budget_s: float | None = None,
    contract_version: int | None = None,
    on_load: Callable[[RoomObservation], None] | None = None,
    in_process: bool = False,
    own: bool = False,
) -> RoomObservation:
    """Scan, load and run the clean room at `root` (already resolved) on inputs drawn from `seed`.

    `functions` limits the calls to some contract functions (the diagnosis
    needs only the failing ones); `with_room`, if given, is called with the
    loaded room before it is closed (verify measures the course's metrics
    there), unless the budget ran out. `budget_s` is the wall-clock time the
    whole room may take, counted in labctl's process from here: past it, no
    call starts, the call running is stopped, and the functions left are
    `over_budget`. `contract_version` is the contract checked (None: the one the room
    declares). `on_load`, if given, is called once the room has loaded, before any call.
    `in_process` runs the room in labctl's process (`InProcessRoom`): for labctl's own
    rooms only, the fault catalogue's, never a learner's; `own` says the room is one of
    labctl's (its replies are not a learner's: `replies.OWN`).
    """
    deadline = None if budget_s is None else time.monotonic() + budget_s
    level = IN_PROCESS if in_process else resolve_isolation(isolation)
    seen = RoomObservation(root, isolation=level, seed=seed, budget_s=budget_s)
    seen.declared = declared_version(root)
    seen.contract = seen.declared if contract_version is None else contract_version
    seen.files_scanned = len(source_files(root))
    # Syntax errors are the loader's to report (a stray file that is never
    # imported does not stop a load); everything else the scan finds is a refusal.
    found = [v for v in guard.scan(root) if not v.what.startswith("syntax error")]
    if found:
        kept = found[:MAX_VIOLATIONS]  # 3,000 import lines were a RecursionError in the message
        return _refused(seen, root, [located(root, v.where, v.what) for v in kept])
    try:
        room = (
            InProcessRoom(root, timeout_s)
            if in_process
            else CleanRoom(
                root,
                timeout_s,
                memory_mb,
                isolation=level,
                budget=replies.OWN if own else replies.BUDGET,
            )
        )
    except ImportPolicyError as exc:
        text = str(exc).partition("breaks the import policy: ")[2]
        violations = [_located(root, part) for part in text.split("; ") if part]
        return _refused(seen, root, violations, text)
    except CleanRoomError as exc:
        seen.status = "unloadable"
        seen.message = Msg("does not load: {error}", error=exc.message)
        match = _SYNTAX.search(exc.english())
        where = match["where"] if match else ""
        seen.load_error = Located(
            where, exc.english(), function_at(root, where) if where else PACKAGE
        )
        return seen
    except CallError as exc:
        seen.status = "unloadable"
        seen.load_timed_out = exc.kind == "timeout"
        seen.message = Msg("does not load: {error}", error=str(exc))
        seen.load_error = Located("", str(exc))
        return seen
    with room:
        if on_load is not None:
            on_load(seen)
        seen.deviations = contract.check_signatures(room.signatures, seen.contract)
        timed_out: set[str] = set()
        reached: set[str] = set()
        for function in functions or contract.function_names(seen.contract):
            if progress:
                progress(function)
            if deadline is not None and time.monotonic() >= deadline:
                seen.over_budget.append(function)
                continue
            before = len(room.violations)
            try:
                seen.runs[function] = run_function(
                    room, function, timed_out, seed, deadline, seen.contract, reached
                )
            except _OverBudget:
                seen.over_budget.append(function)
                continue
            for text in room.violations[before:]:
                found_here = _located(root, text)
                if found_here.function == PACKAGE:
                    found_here = found_here.placed(function)
                if found_here not in seen.violations and len(seen.violations) < MAX_VIOLATIONS:
                    seen.violations.append(found_here)
        _believe_crashes(seen)
        if with_room is not None and not seen.over_budget:
            # The labs' calls count against the same budget as the room's own calls.
            room.deadline = deadline
            with_room(room)
            if room.cut_by_budget:  # the labs ran out of the room's time: never a pass
                seen.over_budget.append("metrics")
        seen.output_bytes, seen.output = room.output()
    return seen
