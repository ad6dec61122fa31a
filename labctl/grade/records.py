"""A learner's grading record, `OUT/records/<stem>.json`: what the batch keeps of each row.

A record holds the row (status, items, diagnosis), the key that says whether it still stands
(the learner's inputs, the rubric, labctl's version, the options that change a verdict), the
facts observed, and the score as the outputs show it (lateness and adjustments in). `grade`
reuses a record whose key matches; `--only` keeps every other learner's as it is;
`grade publish` reads them back.
"""

from __future__ import annotations

import json
from pathlib import Path

import labctl
from labctl.evidence.environment import now_iso
from labctl.evidence.store import replace_atomically
from labctl.grade.late import Lateness
from labctl.grade.layout import Learner
from labctl.grade.rubric import Rubric
from labctl.grade.score import ItemResult, Row, observed

RECORD_SCHEMA = "labctl.grade-record.v1"
RECORDS = "records"


def identical_rooms(learners: list[Learner], rooms: list[str]) -> list[list[str]]:
    """For each learner, the other learners whose clean room had the very same files when
    their row was graded (`rooms`: each row's room digest, "" for none)."""
    by_room: dict[str, list[str]] = {}
    for learner, room in zip(learners, rooms, strict=True):
        if room:
            by_room.setdefault(room, []).append(learner.id)
    return [
        [other for other in by_room.get(room, []) if other != learner.id] if room else []
        for learner, room in zip(learners, rooms, strict=True)
    ]


def graded_room(learner: Learner, record: dict) -> str:
    """The digest of the clean room a kept record graded: the record's own, or for a record
    that names none (written before it was kept), the folder's where its inputs are unchanged.
    A row kept under `--only` while its files changed is compared as it was graded."""
    kept = record.get("room_sha256")
    if isinstance(kept, str):
        return kept
    return learner.room_sha256 if record.get("inputs_sha256") == learner.inputs_sha256 else ""


def row_from_record(record: dict) -> Row:
    row = Row(record["learner"], record["status"], record["diagnosis"], record["isolation"])
    row.items = [
        ItemResult(
            i["id"],
            i["kind"],
            i["target"],
            i["points"],
            i["max_points"],
            i["visibility"],
            i["passed"],
            i["message"],
            i["visibility"] != "visible",
        )
        for i in record["items"]
    ]
    late = record.get("late")
    row.late = Lateness.from_json(late) if late else None
    row.adjustments = list(record.get("adjustments") or [])
    row.due_at = record.get("due_at")
    return observed(row, record.get("facts"))


def settled(record: dict, row: Row) -> dict:
    """`record` with the row's score as the outputs show it: lateness and adjustments in."""
    return {
        **record,
        "score": row.score,
        "late_penalty": row.late_penalty,
        "due_at": row.due_at,
        "late": row.late.to_json() if row.late else None,
        "adjustments": list(row.adjustments),
    }


def record_of(row: Row, learner: Learner, key: str, rubric: Rubric, facts: dict | None) -> dict:
    return {
        "schema": RECORD_SCHEMA,
        "learner": row.learner,
        "key": key,
        "inputs_sha256": learner.inputs_sha256,
        "room_sha256": learner.room_sha256,
        "rubric": rubric.name,
        "rubric_sha256": rubric.sha256(),
        "labctl_version": labctl.__version__,
        "graded_at": now_iso(),
        "status": row.status,
        "score": row.score,
        "max_score": row.max_score,
        "isolation": row.isolation,
        "diagnosis": row.diagnosis,
        "layout": learner.error.to_json() if learner.error else None,
        "items": [i.to_json() for i in row.items],
        "facts": facts,
    }


def read_record(out: Path, stem: str) -> dict | None:
    path = out / RECORDS / f"{stem}.json"
    try:
        record = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("schema") == RECORD_SCHEMA else None


# Written before a run rewrites its first record, removed once every output is written: while
# it is there, the records may be a run ahead of the gradebook (an interrupted run, or one
# refused after grading, an override out of range), and `grade publish` would publish scores
# the gradebook, Gradescope's results and canvas.csv do not show.
UNFINISHED = ".unfinished.json"


def begin_run(out: Path) -> None:
    replace_atomically(out / UNFINISHED, json.dumps({"started_at": now_iso()}).encode("utf-8"))


def end_run(out: Path) -> None:
    (out / UNFINISHED).unlink(missing_ok=True)


def unfinished(out: Path) -> bool:
    return (out / UNFINISHED).exists() or (out / UNFINISHED).is_symlink()
