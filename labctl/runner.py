"""`labctl run`: drive labs on the reference and a clean room, judge, keep evidence.

The runner opens the implementations once (the clean room in a worker
process), runs each lab's pure `run`, compares each measurement with its
metric's v1 tolerance, and writes one evidence record per lab. A clean room
that raises, hangs or crashes fails the lab that called it, by name; the
other labs still run.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np

from labctl import registry
from labctl.contract import VERSIONS, ContractError, declared_version
from labctl.errors import CallError, LabctlError, UsageError, message_of
from labctl.evidence.room import identify, own_room
from labctl.evidence.store import EvidenceStore
from labctl.i18n import Msg
from labctl.isolation.sandbox import DEFAULT_TIMEOUT_S, CleanRoom
from labctl.lab import (
    IMPLS,
    Implementation,
    Lab,
    LabContext,
    LabOutput,
    LabParams,
    Note,
    satisfies,
)
from labctl.outpaths import check_out_dir, check_recordable
from labctl.params import resolve_params
from labctl.results import NOT_MEASURED, LabResult, MetricResult, RunReport
from labctl.returns import OddOutput
from labctl.run_records import write_evidence
from labctl.verify.builders import MAX_SEED

DEFAULT_SEED = 5
IMPL_CHOICES = ("reference", "clean-room", "both")
MAX_TIMEOUT_S = 3600.0


def local_clean_room() -> Path | None:
    """`clean_room/` in the current directory when it is a package; None when there is none.

    One that is there but is no package (a file, a folder without `__init__.py`) is refused:
    taken for absent, a learner's half-made room would be passed over for labctl's own."""
    local = Path("clean_room")
    if (local / "__init__.py").is_file():
        return local
    if local.exists() or local.is_symlink():
        raise UsageError(
            Msg(
                "./clean_room is here but is not a package (no __init__.py): add one, or name "
                "the clean room to use"
            )
        )
    return None


def default_clean_room() -> Path:
    """`clean_room/` in the current directory when it is a package, else the project's own."""
    return local_clean_room() or own_room()


@contextlib.contextmanager
def implementations(
    impl: str,
    clean_room: Path | None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    isolation: str = "auto",
) -> Iterator[dict[str, Implementation]]:
    """The implementations `impl` asks for; the clean room lives in a worker until the block ends.

    `clean-room` comes with the reference too, hidden: no lab passes garbage whatever `--impl`
    says, so the comparisons with the reference (each lab's `both` rows) decide a clean-room
    run as they decide `both`; the reference's own rows are not shown.
    """
    if impl not in IMPL_CHOICES:
        raise UsageError(
            Msg(
                "--impl must be one of {choices}, got {impl!r}",
                choices=", ".join(IMPL_CHOICES),
                impl=impl,
            )
        )
    chosen: dict[str, Implementation] = {}
    with contextlib.ExitStack() as stack:
        room = None
        if impl in ("clean-room", "both"):
            # Started first, loaded last: the worker boots on the other core while torch imports.
            room = stack.enter_context(
                CleanRoom(
                    clean_room or default_clean_room(),
                    timeout_s,
                    isolation=isolation,
                    defer_load=True,
                )
            )
        if impl in IMPL_CHOICES:
            import torch

            from labctl import reference
            from labctl.reference import v2 as reference_v2
            from labctl.reference.memory import peak_bytes

            # One thread, like the clean-room worker: float64 reductions then sum in one
            # order on every machine, and small ops do not pay for a thread pool.
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            stack.callback(torch.set_num_threads, threads)
            chosen["reference"] = Implementation(
                "reference",
                reference,
                meter=peak_bytes,
                later={2: reference_v2},
                hidden=impl == "clean-room",
            )
        if room is not None:
            room.wait_loaded()
            chosen["clean-room"] = Implementation("clean-room", room)
        yield chosen


def judge(lab: Lab, output: LabOutput, rows: set[str]) -> list[MetricResult]:
    """Attach each measurement's tolerance and verdict; a declared metric left unmeasured fails."""
    results = []
    for m in output.measurements:
        try:
            spec = lab.metric(m.name)
        except KeyError:
            raise LabctlError(
                f"lab {lab.id} reported a metric it does not declare: {m.name}"
            ) from None
        results.append(
            MetricResult(
                name=m.name,
                impl=m.impl,
                actual=m.actual,
                expected=spec.expected,
                passed=satisfies(m.actual, spec.expected),
                unit=spec.unit,
                timing=spec.timing,
                note=m.note,
            )
        )
    measured = {(m.name, m.impl) for m in output.measurements}
    for spec in lab.metrics:
        for row in spec.impls:
            if row in rows and (spec.name, row) not in measured:
                results.append(
                    MetricResult(
                        spec.name,
                        row,
                        math.nan,
                        spec.expected,
                        False,
                        spec.unit,
                        spec.timing,
                        NOT_MEASURED,
                    )
                )
    return results


def run_lab(
    lab: Lab, seed: int, impls: dict[str, Implementation], params: LabParams | None = None
) -> LabResult:
    """Run one lab (with its default parameters unless given) and judge it; writes nothing.

    A hidden reference (`--impl clean-room`) runs for the comparisons alone: the `both` rows
    are judged, the reference's own are not shown."""
    shown = {name for name, impl in impls.items() if not getattr(impl, "hidden", False)}
    rows = shown | ({"both"} if all(name in impls for name in IMPLS) else set())
    result = LabResult(lab, params=params or lab.params())
    impls = {name: impl.for_contract(lab.contract) for name, impl in impls.items()}
    start = time.perf_counter()
    older = _older_room(lab, impls.get("clean-room"))
    if older is not None and "reference" in shown:
        # A v1 room keeps working everywhere: a lab it cannot take runs on the reference
        # alone, as `--impl reference` does, and says so; no clean-room row is invented.
        impls = {"reference": impls["reference"]}
        rows = {"reference"}
    elif older is not None:
        result.fail(older)
        result.wall_time_s = time.perf_counter() - start
        return result
    try:
        # A room's garbage (zeros, NaN) reaches the labs' own arithmetic: the NaN or inf fails
        # the row that shows it, in the learner's words, where numpy's warning printed an
        # English line naming a file of labctl's.
        with np.errstate(all="ignore"):
            output = lab.run(LabContext(params=result.params, seed=seed, impls=impls))
            result.metrics = [m for m in judge(lab, output, rows) if m.impl in rows]
        result.figures = ([Note(older, flag=True)] if older is not None else []) + output.figures
    except CallError as exc:
        result.fail(Msg("clean room failed: {error}", error=exc.message))
        if "reference" in shown and len(impls) > 1:
            _keep_reference(result, lab, seed, impls, rows)
    except OddOutput as exc:
        _room_rows_fail(result, lab, seed, impls, rows, exc.message)
    except LabctlError as exc:
        result.fail(exc.message)
    except Exception as exc:
        if os.environ.get("LABCTL_DEBUG") == "1":
            raise
        crashed = Msg("{type}: {error}", type=type(exc).__name__, error=str(exc))
        if "clean-room" in impls and "reference" in impls:
            # Of the right form, yet too odd for the lab's arithmetic (an empty selection, a
            # value no formula takes): the room's rows fail, the lab does not crash, unless
            # the reference alone fails too (then it is the lab's own).
            odd = Msg("the lab could not use the clean room's outputs ({error})", error=crashed)
            _room_rows_fail(result, lab, seed, impls, rows, odd, crashed)
        else:
            result.fail(Msg("lab crashed: {error}", error=crashed))
    result.wall_time_s = time.perf_counter() - start
    return result


def _room_rows_fail(
    result: LabResult,
    lab: Lab,
    seed: int,
    impls: dict[str, Implementation],
    rows: set[str],
    why: str | Msg,
    crashed: str | Msg | None = None,
) -> None:
    """A clean room's output the lab could not take: its rows (and the comparisons) fail,
    unmeasured, and a flagged note says why; the reference's rows and figures are those of
    the reference alone. When the reference alone fails too (`crashed` says how the whole
    lab failed), the lab itself crashed."""
    figures: list = []
    measured: list[MetricResult] = []
    if "reference" in impls:
        try:
            with np.errstate(all="ignore"):
                only = {"reference": impls["reference"]}
                output = lab.run(LabContext(params=result.params, seed=seed, impls=only))
        except Exception as exc:
            if os.environ.get("LABCTL_DEBUG") == "1":
                raise
            error = crashed or Msg("{type}: {error}", type=type(exc).__name__, error=str(exc))
            result.fail(Msg("lab crashed: {error}", error=error))
            return
        measured = [m for m in judge(lab, output, rows & {"reference"}) if m.impl in rows]
        figures = list(output.figures)
    note = f"{NOT_MEASURED}: {why}"
    for spec in lab.metrics:
        for row in spec.impls:
            if row in rows and row != "reference":
                measured.append(
                    MetricResult(
                        spec.name, row, math.nan, spec.expected, False, spec.unit, spec.timing, note
                    )
                )
    result.metrics = measured
    result.figures = [Note(why, flag=True), *figures]


def _keep_reference(
    result: LabResult,
    lab: Lab,
    seed: int,
    impls: dict[str, Implementation],
    rows: set[str],
) -> None:
    """The clean room failed: run the reference alone so its numbers and figures still show;
    the clean room's rows stay, unmeasured and failing."""
    try:
        only = {"reference": impls["reference"]}
        output = lab.run(LabContext(params=result.params, seed=seed, impls=only))
    except Exception as exc:  # the failure shown is the clean room's; this one only adds to it
        result.fail(
            Msg(
                "{first}; {rest}",
                first=result.shown_error,
                rest=Msg("the reference alone failed too: {error}", error=message_of(exc)),
            )
        )
        return
    result.metrics = judge(lab, output, rows)
    result.figures = output.figures


def room_contract(path: Path) -> int:
    """The contract a lab may call on the room at `path`: the one it declares (read as text,
    never run here), and the newest for labctl's own room, which implements every version
    but declares none, so that verify and the v1 fault catalogue check it against v1."""
    if Path(path).resolve() == own_room().resolve():
        return max(VERSIONS)
    return declared_version(path)


def _older_room(lab: Lab, room: Implementation | None) -> Msg | None:
    """Why the clean room cannot take `lab` (it declares an older contract), or None. An
    in-process room (a test's) has no folder to read: it is what the lab needs."""
    path = getattr(room, "path", None) if room is not None and lab.contract > 1 else None
    if path is None:
        return None
    try:
        declared = room_contract(path)
    except ContractError as exc:
        return exc.args[0] if len(exc.args) == 1 else str(exc)
    if declared >= lab.contract:
        return None
    return Msg(
        "needs contract v{need}: the clean room declares v{have} (CONTRACT in its __init__.py), "
        "so this lab ran on the reference alone",
        need=lab.contract,
        have=declared,
    )


def check_options(seed: int, impl: str, timeout_s: float, out: Path) -> None:
    """Refuse bad options before any lab runs or anything is written."""
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(
            Msg("--seed must be an integer from 0 to {top}, got {seed}", top=MAX_SEED, seed=seed)
        )
    if impl not in IMPL_CHOICES:
        raise UsageError(
            Msg(
                "--impl must be one of {choices}, got {impl!r}",
                choices=", ".join(IMPL_CHOICES),
                impl=impl,
            )
        )
    if not (math.isfinite(timeout_s) and 0 < timeout_s <= MAX_TIMEOUT_S):
        raise UsageError(
            Msg(
                "--timeout must be a number of seconds above 0 and at most {top:g}, got {t}",
                top=MAX_TIMEOUT_S,
                t=timeout_s,
            )
        )
    check_out_dir(out)
    check_recordable(out)


def run_labs(
    ids: list[str],
    seed: int = DEFAULT_SEED,
    impl: str = "both",
    clean_room: Path | None = None,
    out: Path = Path("evidence/runs"),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Callable[[Lab, int, int], None] | None = None,
    settings: list[str] | None = None,
    isolation: str = "auto",
    finished: Callable[[LabResult], None] | None = None,
) -> RunReport:
    """Run the labs named by `ids` (or `all`) with `settings` (`NAME=VALUE`, `LAB.NAME=VALUE`),
    write their evidence under `out` (records in `out/<lab>/`, the manifest in `out`), report.

    `finished` hears of each lab once its evidence is written, as the labs end (the labs that
    time anything end first), so a caller interrupted later can still show the labs that are
    done; the report keeps the labs' order.

    Every option is checked before the first lab runs: a refused one writes nothing.
    """
    labs = registry.resolve(ids)
    check_options(seed, impl, timeout_s, out)
    params = resolve_params(labs, settings or [])
    start = time.perf_counter()
    room_path = clean_room or (default_clean_room() if impl != "reference" else None)
    # Named before the worker copies it: the records say which files ran.
    room = identify(room_path) if room_path else None
    store = EvidenceStore(out)
    with implementations(impl, room_path, timeout_s, isolation) as impls:
        level = isolation_of(impls)

        def one(lab: Lab) -> LabResult:
            return run_lab(lab, seed, impls, params[lab.id])

        ended: dict[int, LabResult] = {}
        for index, result in _two_at_a_time(labs, one, progress):
            write_evidence(result, store, Path("."), seed, impl, room, level)
            ended[index] = result
            if finished:
                finished(result)
    results = [ended[index] for index in sorted(ended)]
    return RunReport(results, seed, impl, room, time.perf_counter() - start, level)


def _two_at_a_time(
    labs: list[Lab],
    run: Callable[[Lab], LabResult],
    progress: Callable[[Lab, int, int], None] | None,
) -> Iterator[tuple[int, LabResult]]:
    """(index, result) of each lab as it ends, two labs computing at once: while one's
    reference runs in torch here, the other's calls run in the clean room's worker (which
    takes them one at a time), as verify runs the template's labs. A lab that times anything
    runs alone: its timings decide nothing, but a learner reads them. Those run first, one
    after the other, so that no lab waits beside an idle thread for one to start (run all's
    three made three such waits). Each lab draws its inputs from the seed alone, so the
    values are those of a run one by one."""
    timed = [i for i, lab in enumerate(labs) if any(m.timing for m in lab.metrics)]
    pool = ThreadPoolExecutor(max_workers=2)
    running: dict[Future, int] = {}
    try:
        for index in timed:
            if progress:
                progress(labs[index], index, len(labs))
            yield index, pool.submit(run, labs[index]).result()
        for index, lab in enumerate(labs):
            if index in timed:
                continue
            while len(running) == 2:
                yield from _ended(running)
            if progress:
                progress(lab, index, len(labs))
            running[pool.submit(run, lab)] = index
        while running:
            yield from _ended(running)
    finally:
        # Interrupted (Ctrl-C, an error): no lab not yet started starts; the one running
        # ends when its clean room closes, or its reference returns.
        pool.shutdown(wait=False, cancel_futures=True)


def _ended(running: dict[Future, int]) -> Iterator[tuple[int, LabResult]]:
    """The labs of `running` that have ended once one has, taken out of it."""
    ended, _ = wait(running, return_when=FIRST_COMPLETED)
    for future in sorted(ended, key=running.__getitem__):
        yield running.pop(future), future.result()


def isolation_of(impls: dict[str, Implementation]) -> str | None:
    """How the clean room's code runs (`sandbox` or `process`); None when none runs."""
    room = impls.get("clean-room")
    return room.isolation if room is not None else None
