"""One learner's observation: verify the clean room, re-measure the submission.

This is the only part of grading that runs a learner's code, and it runs it
only through labctl's isolation layer (`verify_clean_room` and the
submission's re-measurement each hold the clean room in its own sandboxed
worker). It returns plain facts (JSON values); the points are given in the
batch's own process (`labctl.grade.score`), so the same facts score the same
wherever they were observed: a local worker, a Dask worker, or this process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from labctl.errors import LabctlError, UsageError
from labctl.i18n import Msg, _
from labctl.jsonsafe import finite


def run_verify(
    path: Path,
    timeout_s: float,
    memory_mb: int,
    isolation: str,
    measure: bool,
    seed: int,
    budget_s: float | None = None,
    contract_version: int = 1,
    metrics: list[str] | None = None,
):
    """`verify_clean_room` at the batch's seed with no evidence written, under the learner's
    time budget (the rule of `verify --budget`), measuring the template `metrics` (None: all
    of them); returns (report, isolation used)."""
    from labctl.verify.verify import verify_clean_room

    report = verify_clean_room(
        path,
        timeout_s,
        memory_mb,
        None,
        measure=measure,
        diagnose_failures=True,
        isolation=isolation,
        seed=seed,
        budget_s=budget_s,
        contract_version=contract_version,
        metrics=metrics,
    )
    return report, report.isolation


def remeasure(path: Path, folder: Path, room: Path, timeout_s: float, isolation: str) -> dict:
    """Validate the submission against the learner's folder and re-measure every claim.

    Like `labctl evidence submit` without keeping anything: the learner's folder
    is the repository the record speaks for (its commit, its artifacts), and the
    claims are re-measured on the learner's own clean room.
    """
    from labctl.evidence.room import named_room
    from labctl.evidence.submit import remeasure as remeasure_claims
    from labctl.evidence.validate import validate_file

    # The root is the learner's folder itself: its own `.git`, never one above it.
    report = validate_file(path, root=folder.resolve())
    named = named_room(report, folder.resolve())
    if named is not None and named != room.resolve():
        report.refuse(
            "labctl.clean_room.path",
            Msg(
                "names {path}, not the clean room graded ({graded}): the claims must be "
                "measured on the room handed in",
                path=str(named.relative_to(folder.resolve())),
                graded=room.name,
            ),
        )
        named = None
    reproduced = remeasure_claims(report, named, timeout_s, isolation)[2]
    return {
        "file": path.name,
        "accepted": report.valid,
        # in the batch's language, like verify's messages: a learner reads them in feedback
        "problems": [{**p.to_json(), "reason": _(p.shown)} for p in report.problems],
        "reproduced": [r.to_json() for r in reproduced],
    }


def _over_budget(path: Path, report) -> dict:
    """The submission of a room past its budget: not re-measured (that would run it longer)."""
    reason = _(Msg("not re-measured: {why}", why=report.shown))
    return {
        "file": path.name,
        "accepted": False,
        "problems": [{"field": "labctl.clean_room", "reason": reason}],
        "reproduced": [],
    }


def _verify_facts(report) -> dict:
    """verify's findings as JSON; their messages become the row's text, so they are written in
    the batch's language (verify's own `to_json` keeps English for its records)."""
    passed, total = report.functions_passed()

    def said(data: dict, key: str, shown) -> dict:
        if key in data:
            data[key] = _(shown)
        return data

    return {
        "seed": report.seed,
        "status": report.status,
        "message": _(report.shown),
        "passed": report.passed,
        "functions_passed": passed,
        "functions": total,
        # Past the learner's budget: the functions whose calls were never made.
        "over_budget": list(report.over_budget),
        "budget_s": report.budget_s,
        "checks": [
            {
                **{k: c.to_json()[k] for k in ("function", "name", "status")},
                "message": _(c.shown),
            }
            for c in report.checks
        ],
        "diagnosis": [said(d.to_json(), "message", d.shown) for d in report.diagnosis],
        "metrics": [said(m.to_json(), "note", m.shown_note) for m in report.metrics],
        # What the room printed: the grader's to read (records), never scored.
        "output_bytes": report.output_bytes,
        "output": report.output,
    }


def observe_learner(job: dict, started: Callable[[str], None] | None = None) -> dict:
    """The facts of one learner (see the module docstring); never raises for the learner's code.

    `job` holds: clean_room, submission (or None), folder, timeout_s, memory_mb,
    isolation, measure (the template metrics: those named in metrics, or all where it is
    None or absent), remeasure (the submission), seed
    (the batch's: every verify input is drawn from it), and budget_s (the learner's time
    budget, `--learner-timeout`; absent: verify's default).
    `started(level)` hears the isolation level resolved for this learner before
    any of its code runs: the one fact a caller still has when the learner then
    hangs or takes its worker down.
    """
    from labctl.isolation import resolve_isolation

    start = time.perf_counter()
    level = resolve_isolation(job["isolation"])
    if started is not None:
        started(level)
    facts: dict = {"error": None, "isolation": level}
    try:
        report, used = run_verify(
            Path(job["clean_room"]),
            job["timeout_s"],
            job["memory_mb"],
            level,
            job["measure"],
            job["seed"],
            # The learner's whole budget, so every message names the figure the TA set; the
            # moments spent before verify's clock starts are within the pool's hard stop.
            job.get("budget_s"),
            job.get("contract", 1),
            job.get("metrics"),
        )
        facts["isolation"] = used
        facts["verify"] = _verify_facts(report)
        if job["submission"] and job["remeasure"] and report.over_budget:
            facts["submission"] = _over_budget(Path(job["submission"]), report)
        elif job["submission"] and job["remeasure"]:
            facts["submission"] = remeasure(
                Path(job["submission"]),
                Path(job["folder"]),
                Path(job["clean_room"]),
                job["timeout_s"],
                level,
            )
    except UsageError:
        raise
    except LabctlError as exc:
        facts["error"] = {"kind": "refused", "message": str(exc)}
    facts["wall_time_s"] = round(time.perf_counter() - start, 3)
    return finite(facts)
