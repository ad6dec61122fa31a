"""`labctl grade publish OUT`: the learners' feedback once the grades are published.

Nothing is graded again: each learner's feedback is rebuilt from the record
the batch kept (`OUT/records/`), now with the `after_published` items, and the
`after_due_date` ones once the rubric's due date has passed (or when it has
none). `hidden` items stay out. `OUT/published.json` marks the folder
published, so a later `labctl grade` into it keeps the published feedback.
The rubric must be the one the records were graded with (its digest is in
every record): another one would show items the learner was never graded on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from labctl.errors import LabctlError, UsageError
from labctl.evidence.store import replace_atomically
from labctl.grade.outputs import feedback, json_bytes, seen_by
from labctl.grade.records import RECORD_SCHEMA, RECORDS, read_record, row_from_record, unfinished
from labctl.grade.rubric import Rubric
from labctl.grade.visibility import PUBLISHED, PUBLISHED_SCHEMA, audience
from labctl.i18n import Msg


class PublishError(LabctlError):
    """The records in OUT cannot be published with the rubric given."""


@dataclass
class Published:
    learners: int
    due_passed: bool
    files: list[Path] = field(default_factory=list)


def publish(out: Path, rubric: Rubric, now: datetime | None = None) -> Published:
    """Write `OUT/feedback/` as published (see the module docstring)."""
    folder = out / RECORDS
    if not folder.is_dir():
        raise UsageError(
            Msg("{path} holds no grading records: run labctl grade into it first", path=str(out))
        )
    if unfinished(out):
        raise PublishError(
            Msg(
                "{path}: its last labctl grade run did not finish (interrupted, or refused "
                "after grading), so its records are not its gradebook's; nothing published: "
                "run that labctl grade command again, then publish",
                path=str(out),
            )
        )
    stems = sorted(p.stem for p in folder.glob("*.json") if p.is_file() and not p.is_symlink())
    records = {stem: read_record(out, stem) for stem in stems}
    unreadable = [stem for stem, record in records.items() if record is None]
    if unreadable:
        raise PublishError(
            Msg(
                "records not in the {schema} format, nothing published: {files}",
                schema=RECORD_SCHEMA,
                files=", ".join(f"{RECORDS}/{s}.json" for s in unreadable),
            )
        )
    if not records:
        raise UsageError(
            Msg("{path} holds no grading records: run labctl grade into it first", path=str(out))
        )
    other = sorted(s for s, r in records.items() if r.get("rubric_sha256") != rubric.sha256())
    if other:
        raise PublishError(
            Msg(
                "{count} records were graded with another rubric than {rubric} (its digest "
                "differs), nothing published: give the batch's rubric with --rubric",
                count=len(other),
                rubric=rubric.shown_name,
            )
        )
    now = now or datetime.now(UTC)
    when = now.isoformat(timespec="seconds")
    marker = {"schema": PUBLISHED_SCHEMA, "published_at": when, "rubric_sha256": rubric.sha256()}
    # The same rows as the batch's outputs: lateness, extensions and adjustments are in
    # each record, so a learner's score here is the gradebook's.
    done = Published(len(records), audience(rubric.due_at, True, now).due_passed)
    for stem, record in records.items():
        row = row_from_record(record)
        path = out / "feedback" / f"{stem}.json"
        replace_atomically(path, json_bytes(feedback(row, seen_by(row, rubric, True, now))))
        done.files.append(path)
    replace_atomically(out / PUBLISHED, json_bytes(marker))
    done.files.append(out / PUBLISHED)
    return done
