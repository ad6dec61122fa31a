"""Submit a learner's evidence: validate it, re-measure every claim, keep it if it holds.

Re-verification never executes the strings in `commands` (they are only a
record of what the learner ran). labctl runs the labs itself, on the recorded
seed, and compares each claimed metric with its own measurement within that
metric's reproduction tolerance (`Metric.reproduces`). A claim's `impl` says
which row it speaks for; without one, a per-implementation metric is
re-measured on the clean room and a comparison metric on both. The clean room
is the one the submission names (`labctl.clean_room`, copied from the run
records by `template --fill`; `labctl.evidence.room` says where it may lie) whose
files must still be those the runs were made with, never labctl's own room; and that room
must pass `verify` before the submission is accepted. Timing metrics are never
re-measured: a timing does not reproduce. A metric outside the v1 tolerance
table cannot be re-measured, so it is refused as not reproducible.

An accepted submission is kept with its receipt (`labctl.evidence.receipt`);
its name is the digest of the record's content, so the same submission twice,
its room unchanged, is "already recorded" and nothing is written again. A refused submission
writes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from labctl import registry
from labctl.errors import CleanRoomError
from labctl.evidence import modules
from labctl.evidence.environment import project_root
from labctl.evidence.findings import Report, claim_impl, course_module, is_number
from labctl.evidence.models import EvidenceRecord
from labctl.evidence.receipt import DIGEST_CHARS, Reproduction, Submission, digest, keep, stored
from labctl.evidence.room import named_room
from labctl.evidence.store import EvidenceStore
from labctl.evidence.validate import validate_file
from labctl.i18n import N_, Msg
from labctl.isolation.levels import resolve_isolation
from labctl.isolation.sandbox import DEFAULT_TIMEOUT_S
from labctl.lab import IMPLS, Lab, Metric
from labctl.params import record_values
from labctl.runner import LabResult, implementations, run_lab
from labctl.verify.observe import PACKAGE

if TYPE_CHECKING:
    from labctl.verify.verify import VerifyReport


@dataclass
class _Claim:
    index: int
    lab: Lab
    metric: Metric
    impl: str
    claimed: float


def _submission_module(report: Report) -> None:
    module_id = report.data.get("module")
    if not isinstance(module_id, str) or report.flagged("module") or course_module(module_id):
        return
    report.warnings = [w for w in report.warnings if w.field != "module"]
    known = ", ".join(m.id for m in modules.MODULES)
    report.refuse(
        "module",
        Msg(
            "{module!r} is not a course module; submissions are for: {known}",
            module=module_id,
            known=known,
        ),
    )


def _claims(report: Report) -> list[_Claim]:
    """The claims labctl can re-measure; refuse the ones it cannot, note timings."""
    rows = report.data.get("metrics")
    if not isinstance(rows, list):
        return []
    table = registry.metric_table()
    claims = []
    for index, row in enumerate(rows):
        here = f"metrics[{index}]"
        if not isinstance(row, dict) or not isinstance(row.get("name"), str):
            continue
        name, actual = row["name"], row.get("actual")
        if report.flagged(f"{here}.name"):
            continue
        if name not in table:
            report.warnings = [w for w in report.warnings if w.field != f"{here}.name"]
            report.refuse(
                f"{here}.name",
                Msg(
                    "{name!r} is not in the tolerance table {version}: no lab measures it, so it "
                    "is not reproducible",
                    name=name,
                    version=registry.TOLERANCE_TABLE_VERSION,
                ),
            )
            continue
        if not is_number(actual) or not math.isfinite(actual):
            continue
        if report.flagged(f"{here}.actual") or report.flagged(f"{here}.impl"):
            continue  # refused already; re-measuring adds nothing
        lab, metric = table[name]
        impl = claim_impl(metric, row.get("impl"))
        if metric.timing:
            report.warn(
                here,
                Msg(
                    "{name} is a timing metric: not re-measured, timings do not reproduce",
                    name=name,
                ),
            )
            continue
        claims.append(_Claim(index, lab, metric, impl, float(actual)))
    return claims


def _mode(needed: set[str]) -> str:
    """What a lab runs on: both implementations when a claim compares them or speaks for
    each, else the one its claims speak for."""
    if "both" in needed or set(IMPLS) <= needed:
        return "both"
    (only,) = needed
    return only


def _measure(
    claims: list[_Claim],
    seed: int,
    clean_room: Path | None,
    timeout_s: float,
    isolation: str,
) -> tuple[dict[tuple[str, str], LabResult], dict[str, str]]:
    """Each lab run once, on just the implementations its claims need: {(lab, row): result},
    and {row: why it could not be measured}."""
    by_mode: dict[str, list[Lab]] = {}
    for lab in registry.discover():
        needed = {c.impl for c in claims if c.lab.id == lab.id}
        if needed:
            by_mode.setdefault(_mode(needed), []).append(lab)
    results: dict[tuple[str, str], LabResult] = {}
    broken: dict[str, Msg] = {}

    def run(mode: str, labs: list[Lab]) -> None:
        with implementations(mode, clean_room, timeout_s, isolation) as impls:
            rows = [*impls, "both"] if len(impls) == len(IMPLS) else list(impls)
            for lab in labs:
                result = run_lab(lab, seed, impls)
                for row in rows:
                    results[(lab.id, row)] = result

    for mode, labs in by_mode.items():
        try:
            run(mode, labs)
        except CleanRoomError as exc:
            for row in ("clean-room", "both"):
                # exc.message, not str(exc): a receipt's note stays English in every language
                broken[row] = Msg("the clean room could not be loaded: {error}", error=exc.message)
            if mode == "both":
                run("reference", labs)
    return results, broken


def _compare(
    claims: list[_Claim],
    seed: int,
    clean_room: Path | None,
    timeout_s: float,
    report: Report,
    isolation: str,
) -> list[Reproduction]:
    if not claims:
        return []
    results, broken = _measure(claims, seed, clean_room, timeout_s, isolation)
    done = []
    for claim in claims:
        here = f"metrics[{claim.index}]"
        item = Reproduction(here, claim.metric.name, claim.impl, claim.claimed)
        done.append(item)
        result = results.get((claim.lab.id, claim.impl))
        why = broken.get(claim.impl)
        if why is None and result is not None and result.error:
            why = Msg(
                "{lab} failed when re-measured: {error}", lab=claim.lab.id, error=result.shown_error
            )
        row = None
        if result is not None and why is None:
            row = next(
                (m for m in result.metrics if m.name == claim.metric.name and m.impl == claim.impl),
                None,
            )
            if row is None or not math.isfinite(row.actual):
                why = Msg(
                    "{lab} measured no {metric} ({impl}) on seed {seed}",
                    lab=claim.lab.id,
                    metric=claim.metric.name,
                    impl=claim.impl,
                    seed=seed,
                )
        if why is not None:
            item.reproduced, item.note = False, str(why)
            report.refuse(f"{here}.actual", Msg("not reproduced: {why}", why=why))
            continue
        item.measured = row.actual
        item.reproduced = claim.metric.reproduces(claim.claimed, row.actual)
        if not item.reproduced:
            spread = f"{claim.metric.reproduce_abs:g} + {claim.metric.reproduce_rel:g}·|measured|"
            report.refuse(
                f"{here}.actual",
                Msg(
                    "not reproduced: claimed {claimed!r}, labctl measured {measured!r} "
                    "({impl}, seed {seed}); a re-measurement may differ by at most {spread}",
                    claimed=claim.claimed,
                    measured=row.actual,
                    impl=claim.impl,
                    seed=seed,
                    spread=spread,
                ),
            )
    return done


def remeasure(
    report: Report, clean_room: Path | None, timeout_s: float, isolation: str = "auto"
) -> tuple[int | None, str | None, list[Reproduction]]:
    """Re-measure a validated submission's claims on `clean_room`: (seed, isolation used,
    reproductions). Claims that could never be re-measured (no room named, no usable seed)
    are refused in `report`."""
    if not isinstance(report.data, dict):
        return None, None, []
    _submission_module(report)
    seed = report.data.get("seed")
    usable = is_number(seed) and isinstance(seed, int) and seed >= 0
    if clean_room is None or not usable or report.flagged("seed"):
        _claims(report)
        report.tidy()
        return None, None, []
    level = resolve_isolation(isolation)
    done = _compare(_claims(report), seed, clean_room, timeout_s, report, level)
    report.tidy()
    return seed, level, done


def verify_room(room: Path, timeout_s: float, isolation: str) -> VerifyReport:
    """verify on the submission's room, nothing written: the one call that decides whether
    the room passes, on inputs the learner could not know in advance."""
    from labctl.verify.verify import verify_clean_room

    return verify_clean_room(
        room, timeout_s, out=None, measure=False, diagnose_failures=False, isolation=isolation
    )


def _verified(report: Report, room: Path, timeout_s: float, isolation: str) -> None:
    found = verify_room(room, timeout_s, isolation)
    if found.passed:
        return
    failing = [f for f in found.failing_functions() if f != PACKAGE]
    report.refuse(
        "labctl.clean_room",
        Msg(
            "the clean room fails verify ({functions}): a submission is accepted only for a "
            "room that passes `labctl verify clean-room`",
            functions=", ".join(failing) if failing else found.shown,
        ),
    )


def submit(
    path: Path,
    root: Path = Path("evidence"),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    now: datetime | None = None,
    isolation: str = "auto",
) -> Submission:
    """Validate `path`, re-measure its claims on the clean room it names (after checking that
    room is the learner's and unchanged since the runs), verify that room, and keep the
    submission under `root` when everything holds."""
    report = validate_file(Path(path), now=now)
    outcome = Submission(report)
    if not isinstance(report.data, dict):
        return outcome
    _submission_module(report)
    record = report.record
    if record is not None and record.labctl is not None and record.labctl.params_default is False:
        report.warn(
            "labctl.params_default",
            N_("made with non-default lab parameters; labctl re-measures with the labs' defaults"),
        )
    elif record is not None and (older := _older_defaults(record)):
        report.warn(
            "labctl.params",
            Msg(
                "made with another labctl's default parameters ({older}); labctl re-measures "
                "with this version's defaults",
                older=older,
            ),
        )
    store = EvidenceStore(root)
    folder = store.root / "submissions"
    # The room first: "already recorded" holds only for the room the record was accepted
    # with; a room changed since its runs (a passing room swapped for a failing one after
    # its first submission) was answered "already recorded" and never looked at again.
    clean_room = named_room(report, project_root(), near=Path(path).resolve().parent)
    if report.valid and record is not None and clean_room is not None:
        name = digest(record)[:DIGEST_CHARS]
        outcome.already = stored(folder / record.module, name)
        if outcome.already is not None:
            return outcome
    outcome.seed, outcome.isolation, outcome.reproductions = remeasure(
        report, clean_room, timeout_s, isolation
    )
    if clean_room is None:
        return outcome
    if report.valid:
        _verified(report, clean_room, timeout_s, outcome.isolation or isolation)
        report.tidy()
    if not report.valid or record is None:
        return outcome
    keep(outcome, store, record, clean_room)
    return outcome


def _older_defaults(record: EvidenceRecord) -> str:
    """The recorded defaults that are not this labctl's (a lab's defaults changed since)."""
    info = record.labctl
    if info is None or info.params is None:
        return ""
    lab = next((lab for lab in registry.discover() if lab.id == info.lab), None)
    if lab is None:
        return ""
    today = record_values(lab.params())
    return ", ".join(
        f"{name}={value} (now {today[name]})"
        for name, value in info.params.items()
        if name in today and today[name] != value
    )
