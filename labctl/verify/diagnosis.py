"""Diagnosis: name a learner's failure after its cause, in one sentence a learner can act on.

For each failing function the diagnosis does one of four things:

1. Send it on: when every failing check of the function shows, on the very
   fixtures it fails, a call it made to another contract function that fails
   the same kind of check on the inputs it received (`labctl.verify.blame`),
   the failure is that function's; it follows the calls down to the function
   at fault ("transformer_block fails because multi_head_attention fails, ...;
   fix rope first"), or says it "fails only because it calls a stub". A
   function the failing calls never reached is never named.
2. Match: otherwise it runs each catalogued fault of that function (and,
   when none matches, the faults of the functions it is built on, which a
   learner may have inlined) on the same fixtures, in a clean room of its own,
   and compares (`labctl.verify.likeness`): the same checks fail, the same
   calls raise or hang, and every output agrees, at the precision the room
   computed in. A match is named with its course reference ("matches fault
   `mask-reversed`: ...; see 第8章 · Attention 与 Transformer Block, 故障注入与预期信号").
   A function with two bugs matches no fault exactly: each fault that explains a part
   of it (on every call its own room gets wrong, the learner's goes wrong too) is
   named, the one that explains most first, and what none explains is said after them.
   A v1 fault of a function v2 widens is compared on v1's calls of a v2 room.
3. Precision: values off by float32 rounding only are said to be computed in
   float32 inside a float64 path, first where the call trace shows it.
4. Otherwise it says in words what goes wrong in the function's own code,
   and that no catalogued fault matches it.

Each sentence is made once (`labctl.verify.said`); `--json`, the terminal, the gradebook,
feedback and JUnit all carry it. Numbers stay out of it (`numbers`, in `--json`).

Fault rooms are materialized once per process and their observations cached,
so `labctl faults` (which has already observed every fault) diagnoses for free.
"""

from __future__ import annotations

import atexit
import dataclasses
import shutil
import tempfile
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from labctl import contract
from labctl import faults as catalogue
from labctl.faults import Fault
from labctl.i18n import Msg
from labctl.verify import blame
from labctl.verify import fixtures as fx
from labctl.verify.bad_input import bad_cases
from labctl.verify.builders import SEED
from labctl.verify.checks import CheckResult, evaluate, failing_functions
from labctl.verify.fixtures_v2 import EXTENDED
from labctl.verify.functions import DEPENDS
from labctl.verify.likeness import Explanation, distance, explains, failed_checks
from labctl.verify.observe import FunctionRun, RoomObservation, observe
from labctl.verify.said import (
    Diagnosis,
    _exactly,
    _in_part,
    _not_implemented,
    _own,
    _sent_on,
    describe,
)

# The sentences live in labctl.verify.said; `Diagnosis` and `describe` are read from here too.
__all__ = ["ROOMS", "Diagnosis", "FaultRooms", "describe", "diagnose", "transitive_dependencies"]

DIAGNOSIS_TIMEOUT_S = 2.0
# A fault declared to hang (`Fault.hangs`) loops forever by construction on its first call:
# its room shows that as soon as any limit stops it. Its load and its calls before the hang
# are labctl's own code on small fixtures (milliseconds); one a busy machine stops early
# times out where the learner's did not, and is observed again (`_timed_out`, `_time_again`).
HANG_TIMEOUT_S = 0.5
RETRY_MIN_S = 6.0


# --------------------------------------------------------------------------
# Fault rooms: materialized once, observed lazily, cached per process
# --------------------------------------------------------------------------


class FaultRooms:
    """Materialized faulty clean rooms and what each did, per (timeout, memory limit, seed).

    Observations of one seed are kept: they are replies, held against labctl's reply
    budget, and a long-lived process (a grading worker, a Dask worker between batches)
    that kept every seed's would end by refusing a learner's replies.
    """

    def __init__(self) -> None:
        self._dir: Path | None = None
        self._paths: dict[str, Path] = {}
        self._seen: dict[tuple[str, float, int, int, int | None], RoomObservation] = {}
        self._lock = threading.Lock()
        self._fault_locks: dict[tuple[str, float, int, int, int | None], threading.Lock] = {}

    def path(self, fault: Fault) -> Path:
        with self._lock:
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix="labctl-faults-"))
                atexit.register(shutil.rmtree, self._dir, True)
            if fault.name not in self._paths:
                # The directory's name is the project's, as a learner's copy would be.
                self._paths[fault.name] = fault.materialize(self._dir / fault.name / "clean_room")
            return self._paths[fault.name]

    def remember(self, fault: Fault, timeout_s: float, memory_mb: int, seen: RoomObservation):
        with self._lock:
            self._keep((fault.name, timeout_s, memory_mb, seen.seed, seen.contract), seen)

    def _keep(self, key: tuple[str, float, int, int, int | None], seen: RoomObservation) -> None:
        """Under `_lock`: `seen` kept, and what other seeds left behind let go."""
        for other in [k for k in self._seen if k[3] != key[3]]:
            del self._seen[other]
            self._fault_locks.pop(other, None)
        self._seen[key] = seen

    def observe(
        self,
        fault: Fault,
        functions: Iterable[str],
        timeout_s: float,
        memory_mb: int,
        seed: int = SEED,
        contract: int | None = None,
    ) -> RoomObservation:
        """The fault room observed on at least `functions` at `seed` against `contract` (the
        learner's, so both draw the same fixtures; None: the one the fault room declares),
        cached; only the missing ones run."""
        key = (fault.name, timeout_s, memory_mb, seed, contract)
        with self._lock:
            lock = self._fault_locks.setdefault(key, threading.Lock())
        with lock:
            cached = self._seen.get(key)
            wanted = tuple(functions)
            missing = tuple(f for f in wanted if cached is None or f not in cached.runs)
            if cached is not None and (not missing or not cached.loaded):
                return cached
            fresh = observe(
                self.path(fault),
                timeout_s,
                memory_mb,
                functions=missing,
                seed=seed,
                contract_version=contract,
                in_process=not fault.in_worker,
                own=True,
            )
            if cached is not None:
                cached.runs.update(fresh.runs)
                fresh = cached
            with self._lock:
                self._keep(key, fresh)
            return fresh


ROOMS = FaultRooms()


# --------------------------------------------------------------------------
# Localising and naming
# --------------------------------------------------------------------------


def transitive_dependencies(function: str) -> list[str]:
    """The functions `function` is built on, nearest first, each once."""
    order: list[str] = []
    frontier = list(DEPENDS.get(function, ()))
    while frontier:
        name = frontier.pop(0)
        if name not in order:
            order.append(name)
            frontier.extend(DEPENDS.get(name, ()))
    return order


def fault_limit(fault: Fault, timeout_s: float) -> float:
    """The time a call of `fault`'s room gets, for a learner whose calls get `timeout_s`:
    the diagnosis's own limit, shorter still for a fault that hangs (the whole limit is spent
    on it: a learner whose function hangs waited 2 s more for its diagnosis)."""
    return min(timeout_s, HANG_TIMEOUT_S if fault.hangs else DIAGNOSIS_TIMEOUT_S)


def _prefetch(
    rooms: FaultRooms,
    group: list[Fault],
    function: str,
    timeout_s: float,
    memory_mb: int,
    seed: int = SEED,
    wanted: dict[str, tuple[str, ...]] | None = None,
    contract: int | None = None,
) -> None:
    """Observe the group's fault rooms a few at a time, each on every function it will be
    compared on (`wanted`, by fault name; else `function` alone), each within its own
    `fault_limit` of the learner's `timeout_s`: one process per room."""
    if len(group) < 2:
        return

    def one(fault: Fault) -> None:
        functions = (wanted or {}).get(fault.name, (function,))
        by_version: dict[int | None, list[str]] = {}
        for name in functions:
            version = contract if contract is None else _version_for(fault, name, contract)
            by_version.setdefault(version, []).append(name)
        limit = fault_limit(fault, timeout_s)
        for version, names in by_version.items():
            rooms.observe(fault, tuple(names), limit, memory_mb, seed, version)

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(one, group))


def _wanted(plans: list[tuple[str, list[Fault], list[Fault]]]) -> dict[str, tuple[str, ...]]:
    """For each fault room, every failing function it may be compared on, in contract
    order: a room that fails softmax, attention and the block is loaded once, not thrice."""
    order = {name: i for i, name in enumerate(contract.function_names(contract.LATEST))}
    found: dict[str, set[str]] = {}
    for function, own, inlined in plans:
        for fault in (*own, *inlined):
            found.setdefault(fault.name, set()).add(function)
    return {name: tuple(sorted(fs, key=lambda f: order.get(f, -1))) for name, fs in found.items()}


def _version_for(fault: Fault, function: str, version: int) -> int:
    """The contract a fault is compared at: a v1 fault (written with v1's signatures) of a
    function v2 widens is compared on v1's calls alone, where a v2 room answers as a v1 room
    (its v2 calls, a temperature or batched positions, are no part of the fault)."""
    if version >= 2 and function in EXTENDED and fault.name in _V1_FAULTS:
        return 1
    return version


_V1_FAULTS = {f.name for f in catalogue.CATALOGUE}


def _as_version(
    seen: RoomObservation, results: list[CheckResult], function: str, version: int
) -> tuple[RoomObservation, list[CheckResult]]:
    """The learner's room as checked against `version` for `function`: its calls of that
    version alone, and the checks they give."""
    if version == seen.contract:
        return seen, results
    run = seen.runs.get(function)
    view = dataclasses.replace(seen, contract=version)
    if run is not None:
        names = {f.name for f in fx.fixtures(function, run.seed, version)}
        probes = {f.name for f in fx.probes(function, run.seed, version)}
        cases = {c.name for c in bad_cases(function, run.seed, version)}
        narrowed = dataclasses.replace(
            run,
            fixtures={n: o for n, o in run.fixtures.items() if n in names},
            probes={n: o for n, o in run.probes.items() if n in probes},
            bad={n: o for n, o in run.bad.items() if n in cases},
            contract=version,
        )
        view.runs = {**seen.runs, function: narrowed}
    return view, evaluate(view, (function,))


def _called(run: FunctionRun | None) -> set[str]:
    """The contract functions a function's fixture calls reached (the record of its calls)."""
    if run is None:
        return set()
    return {c.function for o in run.fixtures.values() for c in o.calls}


def _timed_out(fault_seen: RoomObservation, function: str, seen: RoomObservation) -> bool:
    """The fault's room ran out of time where the learner's room did not: loading (a learner
    whose function hangs still loaded: a fault room that did not load in time is no match
    for it, only late), or on a call of `function`."""
    if fault_seen.load_timed_out:
        return not seen.load_timed_out

    def timed_out(observed: RoomObservation) -> bool:
        # Any call of the function's: fixtures, probes, causal variants and bad inputs alike.
        run = observed.runs.get(function)
        return run is not None and run.timed_out

    return timed_out(fault_seen) and not timed_out(seen)


def _time_again(seen: RoomObservation, function: str, timeout_s: float) -> float:
    """The time a fault room's call gets when it ran out of the diagnosis's: four times the
    learner's slowest call of `function` and the diagnosis's time again, at least
    `RETRY_MIN_S`, at most the learner's own timeout. A fault room that needs more than
    that does not behave as the learner's room did, which answered within it; a fault that
    hangs (`sinusoidal-hang`) costs seconds, not the learner's whole timeout."""
    run = seen.runs.get(function)
    slowest = max((o.elapsed_s for o in run.outcomes()), default=0.0) if run else 0.0
    return min(timeout_s, max(RETRY_MIN_S, 4 * slowest + DIAGNOSIS_TIMEOUT_S))


def diagnose(
    seen: RoomObservation,
    results: list[CheckResult],
    timeout_s: float,
    memory_mb: int,
    rooms: FaultRooms | None = None,
) -> list[Diagnosis]:
    """A diagnosis line for each failing function (and one for a clean room that does not load)."""
    rooms = rooms or ROOMS
    found: list[Diagnosis] = []
    if seen.status == "unloadable":
        found.append(
            Diagnosis(
                seen.load_error.function if seen.load_error else "(package)",
                "load",
                Msg("the clean room {message}", message=seen.message),
            )
        )
    failing = failing_functions(results)
    plans: list[tuple[str, list[Fault], list[Fault]]] = []
    for function in failing:
        run = seen.runs.get(function)
        if run is not None and run.not_implemented:
            found.append(_not_implemented(seen, run))
            continue
        unexposed = run.unexposed if run is not None else None
        if unexposed is not None:
            said = (
                Msg("{function}: the package does not expose it", function=function)
                if unexposed.kind == "missing"
                else Msg("{function}: {said}", function=function, said=unexposed.message)
            )
            found.append(Diagnosis(function, "missing", said))
            continue
        first = blame.blamed(seen, results, function)
        if first is not None:
            others = blame.blamed_too(seen, results, function)
            found.append(_sent_on(seen, results, function, first, others))
            continue
        if run is not None and run.ends_its_process:
            # A match needs the same outcome on every fixture, and no catalogued fault ends
            # its process (`test_no_catalogued_fault_ends_its_process`): none is observed.
            found.append(_own(seen, results, function))
            continue
        # A fault that hangs matches only a function that timed out too (a match needs the
        # same outcome on every fixture): its room is not observed for one that did not; nor
        # is one whose symptom is memory, for a function whose memory passed.
        hung = run is not None and run.timed_out
        heavy = any(r.function == function and r.name == "memory" and r.failed for r in results)
        candidates = [
            f
            for f in catalogue.for_contract(seen.contract)
            if (hung or not f.hangs) and (heavy or not f.measured)
        ]
        own = [f for f in candidates if f.function == function]
        # A fault of a function it calls is inlined only where it does not call that function:
        # an MHA that passes no mask to its SDPA is not SDPA's mask-adds-zero, inlined.
        deps = set(transitive_dependencies(function)) - _called(run)
        inlined = [f for f in candidates if f.function in deps]
        plans.append((function, own, inlined))
    wanted = _wanted(plans)
    for function, own, inlined in plans:
        exact: list[tuple[Fault, set[str]]] = []
        near: dict[str, float] = {}  # each exact match's distance to the learner's outputs
        partial: list[tuple[Fault, Explanation]] = []
        for group in (own, inlined):
            # Observe this group's fault rooms a few at a time (each is its own process).
            _prefetch(
                rooms, group, function, timeout_s, memory_mb, seen.seed, wanted, seen.contract
            )
            for fault in group:
                version = _version_for(fault, function, seen.contract)
                view, view_results = _as_version(seen, results, function, version)
                limit = fault_limit(fault, timeout_s)
                fault_seen = rooms.observe(fault, (function,), limit, memory_mb, seen.seed, version)
                if limit < timeout_s and _timed_out(fault_seen, function, view):
                    # Perhaps a busy machine, not the fault: its room gets the time the
                    # learner's calls needed, with room to spare.
                    again = _time_again(seen, function, timeout_s)
                    fault_seen = rooms.observe(
                        fault, (function,), again, memory_mb, seen.seed, version
                    )
                explanation = explains(function, view, view_results, fault_seen)
                if explanation is None:
                    continue
                if explanation.exact:
                    exact.append((fault, failed_checks(results, function) - explanation.checks))
                    near[fault.name] = distance(
                        view.runs.get(function), fault_seen.runs.get(function)
                    )
                else:
                    partial.append((fault, explanation))
            if exact or partial:
                break
        if exact:
            # Faults that explain the same failures: the nearest to the learner's outputs first.
            exact.sort(key=lambda hit: (len(hit[1]), near[hit[0].name]))
            found.append(_exactly(function, exact))
        elif partial:
            found.append(_in_part(seen, results, function, partial))
        else:
            found.append(_own(seen, results, function))
    # Root causes first, then what they explain, each in contract order.
    order = {name: i for i, name in enumerate(contract.function_names(contract.LATEST))}
    return sorted(found, key=lambda d: (d.kind == "dependency", order.get(d.function, -1)))
