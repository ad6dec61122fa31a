"""`labctl verify clean-room`: prove a clean room against its contract (v1, v2), keep the record.

The course's L3 requirement (第8章 · Attention 与 Transformer Block, "L3 clean-room 要求"): rewrite the block from
the frozen interface without importing the reference, keep a failure-before /
fix-after record, and show parity with the reference. One call does it:

1. observe the clean room (static import scan, load in a sandboxed worker with
   the runtime guard, every fixture call with a timeout and a memory limit);
2. evaluate every check (`labctl.verify.checks`) for the package and for each
   contract function;
3. diagnose each failing function (`labctl.verify.diagnosis`);
4. measure the course template's five metrics (第8章 · Attention 与 Transformer Block, 学习者提交模板) on the clean
   room, through the labs that declare them (`labctl.registry.metric_table`);
5. write an evidence record and append a line to the history of verify runs,
   pass or fail, so the failure-before / fix-after record keeps itself
   (`labctl.verify.record`).

Every input of steps 1 and 4 (fixtures, probes, causal variants, bad input,
the labs' inputs) is drawn from one seed chosen at run time unless the caller
gives one: no answer can be known in advance. The seed is in the report, the
record and the history line, so `--seed N` reproduces a run exactly.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from labctl import contract, memo, registry
from labctl.errors import CleanRoomError, UsageError
from labctl.evidence.environment import now_iso
from labctl.evidence.models import CleanRoomInfo
from labctl.evidence.modules import DEFAULT_MODULE, MODULES
from labctl.evidence.records import shown_path
from labctl.evidence.room import identify
from labctl.i18n import Msg
from labctl.isolation import resolve_isolation
from labctl.isolation.loader import resolve_package_dir
from labctl.isolation.sandbox import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, CleanRoom
from labctl.verify import fixtures as fx
from labctl.verify.builders import MAX_SEED, SEED, fresh_seed
from labctl.verify.checks import evaluate
from labctl.verify.diagnosis import diagnose
from labctl.verify.observe import RoomObservation, observe
from labctl.verify.record import DEFAULT_OUT, check_out_dir, write_evidence
from labctl.verify.report import TemplateMetric, VerifyReport

# The wall-clock time one room's calls may take in all (`--budget`). The project's clean room
# makes its few hundred calls in seconds; a room whose every call sleeps just under the
# per-call timeout is stopped here instead of running for half an hour.
DEFAULT_BUDGET_S = 120.0


# --------------------------------------------------------------------------
# The course template's metrics, through the labs that declare them
# --------------------------------------------------------------------------


def template_metrics(
    room: CleanRoom,
    progress: Callable[[str], None] | None = None,
    seed: int = SEED,
    names: Sequence[str] | None = None,
) -> list[TemplateMetric]:
    """The course template's metrics (第8章 · Attention 与 Transformer Block, 学习者提交模板) measured with the reference and this clean room:
    those in `names` (a grading rubric's), None: every one.

    Each metric is measured by the lab that declares it in the v1 tolerance
    table, its inputs drawn from `seed`; a lab that does not exist yet is
    skipped with a note, so this keeps working while labs are added. Only the labs of the
    metrics asked for run.
    """
    from labctl import reference
    from labctl.lab import Implementation
    from labctl.runner import run_lab

    required = _asked(names)
    try:
        table = registry.measuring(required)
    except Exception as exc:  # a lab module being written may not import yet
        return [
            TemplateMetric(
                name,
                note=Msg("not measured: the labs could not be listed ({error})", error=str(exc)),
            )
            for name in required
        ]
    # In a grading worker the reference's calls on the labs' inputs give what they gave for
    # the learner before (`labctl.memo`): the same inputs, the same values, computed once.
    target = memo.Remembered(reference, contract.function_names(2), "reference")
    impls = {
        "reference": Implementation("reference", target if memo.enabled() else reference),
        "clean-room": Implementation("clean-room", room),
    }
    labs = {table[name][0].id: table[name][0] for name in required if name in table}

    def one(lab) -> object:
        if progress:
            progress(Msg("the course template's metrics: lab {lab}", lab=lab.id))
        return run_lab(lab, seed, impls)

    # Two labs at a time: one computes the reference (torch, in this process) while the
    # other's calls run in the room's worker, which takes them one at a time. Each lab
    # draws its own inputs from `seed`, so the values are those of a run one by one.
    with ThreadPoolExecutor(max_workers=2) as pool:
        by_lab = dict(zip(labs, pool.map(one, labs.values()), strict=True))
    measured: list[TemplateMetric] = []
    for name in required:
        if name not in table:
            measured.append(
                TemplateMetric(name, note=Msg("not measured: no lab declares this metric yet"))
            )
            continue
        lab, metric = table[name]
        result = by_lab[lab.id]
        rows = {m.impl: m for m in result.metrics if m.name == name}
        row = rows.get("clean-room") or rows.get("both")
        if row is None or not math.isfinite(row.actual):
            if row is None:
                why = result.shown_error or Msg("the lab reported no clean-room row")
            else:
                # a NaN or inf has no number to keep in a record: the note says which it was
                why = (
                    result.shown_error
                    or row.note
                    or Msg("the clean room's value is {value}", value=str(row.actual))
                )
            measured.append(
                TemplateMetric(
                    name,
                    metric.expected,
                    lab=lab.id,
                    unit=metric.unit,
                    note=Msg("not measured: {why}", why=why),
                )
            )
            continue
        measured.append(
            TemplateMetric(
                name,
                row.expected,
                row.actual,
                row.impl,
                row.passed,
                row.unit,
                lab.id,
                row.note,
            )
        )
    return measured


def template_reference(seed: int, names: Sequence[str] | None = None) -> None:
    """The reference's side of the labs of the template metrics in `names` (None: all), at
    `seed`, computed into `labctl.memo` and nothing else: what `template_metrics` then reads
    instead of computing. Processes sharing a memo folder split the labs (`memo.taking`):
    each computes the labs it takes and reads the others' results."""
    from labctl import reference
    from labctl.lab import Implementation
    from labctl.runner import run_lab

    try:
        table = registry.measuring(_asked(names))
    except Exception:  # reported where the metrics are measured
        return
    target = memo.Remembered(reference, contract.function_names(2), "reference")
    impls = {"reference": Implementation("reference", target)}
    for lab in {lab.id: lab for lab, _metric in table.values()}.values():
        with memo.taking(f"template-reference-{lab.id}-{seed}") as mine:
            if mine:
                run_lab(lab, seed, impls)


def _asked(names: Sequence[str] | None) -> list[str]:
    """The course template's metrics among `names` (None: all of them), in its order."""
    required = next(m for m in MODULES if m.id == DEFAULT_MODULE).required
    return [name for name in required if names is None or name in names]


# --------------------------------------------------------------------------
# The whole verification
# --------------------------------------------------------------------------


def _warm_quietly(seed: int, version: int) -> None:
    """Every reference output of contract `version` at `seed`; a failure here is left for
    the main thread's `warm_reference` to raise where it can be reported."""
    try:
        fx.warm_reference(contract.function_names(version), seed, version)
    except Exception:  # raised again, and reported, in the main thread
        return


def _import_reference() -> None:
    """torch and the reference, imported for the template's labs; a failure is left for the
    labs, which report it where it can be shown."""
    try:
        import labctl.reference  # noqa: F401
    except Exception:
        return


def verify_clean_room(
    path: str | Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    out: Path | None = DEFAULT_OUT,
    *,
    measure: bool = True,
    diagnose_failures: bool = True,
    progress: Callable[[str], None] | None = None,
    isolation: str = "auto",
    seed: int | None = None,
    budget_s: float | None = DEFAULT_BUDGET_S,
    contract_version: int | None = None,
    metrics: Sequence[str] | None = None,
) -> VerifyReport:
    """Verify the clean room at `path`; write evidence under `out` unless it is None.

    Every input is drawn from `seed`; None draws a fresh one (`builders.fresh_seed`),
    which the report keeps. Pass the published `builders.SEED` for the course's fixtures.

    Raises UsageError when `path` does not exist or is not a directory, when
    `out` cannot hold the records, or when `isolation` asks for a sandbox this
    machine lacks; every other problem of the clean room (it does not load,
    breaks the import policy, hangs, crashes, is wrong, sends a forged reply)
    is a failing check of the report. Past `budget_s` (None: no budget) the calls
    left are not run and the report's status is `over-budget`, which never passes.
    `contract_version` is the contract checked; None: the one the room declares. With
    `measure`, `metrics` names the template metrics measured (None: all of them).
    """
    start = time.perf_counter()
    if contract_version is not None:
        contract.check_version(contract_version)
    contract.verify_pin()
    seed = check_seed(fresh_seed() if seed is None else seed)
    level = resolve_isolation(isolation)
    if out is not None:
        check_out_dir(out)
    try:
        root = resolve_package_dir(path)  # a missing directory is a UsageError (exit 2)
    except CleanRoomError as exc:
        seen = RoomObservation(
            Path(path).resolve(),
            status="unloadable",
            message=Msg("does not load: {error}", error=exc.message),
            isolation=level,
            seed=seed,
        )
        return _finish(
            seen, Path(path), timeout_s, memory_mb, out, [], start, diagnose_failures, None
        )
    # Named before the worker copies it: the record says which files were verified.
    room = identify(Path(path))
    measured: list[TemplateMetric] = []
    warming: list[threading.Thread] = []
    if measure:
        # The template's labs wait for torch (~1 s to import) once the room's calls are done;
        # imported while the sandbox starts and the room loads, it is off that path. Without
        # the labs, torch waits for a room that loads (`warm_meanwhile`).
        warming.append(threading.Thread(target=_import_reference, name="labctl-import-reference"))
        warming[-1].start()

    def measure_metrics(room: CleanRoom) -> None:
        if measure:
            measured.extend(template_metrics(room, progress, seed, metrics))

    def warm_meanwhile(seen: RoomObservation) -> None:
        # The reference (torch: ~1.5 s to import) is computed while the room's calls run
        # in its worker; a clean room that does not load costs no torch.
        thread = threading.Thread(
            target=_warm_quietly, args=(seed, seen.contract), name="labctl-warm-reference"
        )
        thread.start()
        warming.append(thread)

    seen = observe(
        root,
        timeout_s,
        memory_mb,
        with_room=measure_metrics,
        progress=progress,
        isolation=level,
        seed=seed,
        budget_s=budget_s,
        contract_version=contract_version,
        on_load=warm_meanwhile,
    )
    for thread in warming:
        thread.join()
    contract.verify_pin(version=seen.contract)
    # Whatever the warming thread did not compute is computed here, before the diagnosis
    # starts its threads.
    fx.warm_reference(
        tuple(f for f, run in seen.runs.items() if not run.not_implemented), seed, seen.contract
    )
    if measure and not measured:
        # Whole, whatever stopped the labs: a room over its budget loaded (no message of its own).
        why = (
            Msg("over the time budget of {budget:g} s", budget=seen.budget_s)
            if seen.over_budget
            else Msg("the clean room {message}", message=seen.message)
        )
        measured = [
            TemplateMetric(name, note=Msg("not measured: {why}", why=why))
            for name in _asked(metrics)
        ]
    if progress and diagnose_failures:
        progress(Msg("diagnosis"))
    return _finish(
        seen, Path(path), timeout_s, memory_mb, out, measured, start, diagnose_failures, room
    )


def _finish(
    seen: RoomObservation,
    path: Path,
    timeout_s: float,
    memory_mb: int,
    out: Path | None,
    metrics: list[TemplateMetric],
    start: float,
    diagnose_failures: bool,
    room: CleanRoomInfo | None,
) -> VerifyReport:
    results = evaluate(seen)
    # Past the budget the room has had its time: no diagnosis runs it further.
    diagnosed = diagnose_failures and not seen.over_budget
    diagnosis = diagnose(seen, results, timeout_s, memory_mb) if diagnosed else []
    status, message = seen.status, seen.message
    if seen.over_budget:
        status = "over-budget"
        message = Msg(
            "over the time budget of {budget:g} s: not run: {functions}",
            budget=seen.budget_s,
            functions=", ".join(seen.over_budget),
        )
    report = VerifyReport(
        path=shown_path(path),
        status=status,
        message=message,
        checks=results,
        diagnosis=diagnosis,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        seed=seen.seed,
        isolation=seen.isolation,
        metrics=metrics,
        verified_at=now_iso(),
        clean_room=room,
        budget_s=seen.budget_s,
        over_budget=list(seen.over_budget),
        contract=seen.contract,
        declared=seen.declared,
        output_bytes=seen.output_bytes,
        output=seen.output,
    )
    report.wall_time_s = time.perf_counter() - start
    if out is not None:
        write_evidence(report, out)
    return report


def check_seed(seed: int) -> int:
    """Refuse a seed numpy and torch cannot both take (the labs seed both)."""
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(
            Msg("--seed must be an integer from 0 to {top}, got {seed}", top=MAX_SEED, seed=seed)
        )
    return seed
