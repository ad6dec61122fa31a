"""The class's outputs, rebuilt from the learners' records on every run, each written atomically.

For the grader (everything, hidden items included):

- `gradebook.csv`: one row per learner: status, score, max, points per rubric
  item, isolation, diagnosis, the learners whose clean room is identical, lateness and
  adjustments, and `base_code`: the functions that are base code (`labctl.grade.basecode`);
  learner text in it escaped (`labctl.textsafe.cell`: no control character, no
  formula);
- `records/<learner>.json` (written by the runner): the row and the facts it came from;
- `junit.xml`: one testsuite per learner, one testcase per rubric item; a failed
  item is a `<failure>` with its message as the element text, an item that could
  not be graded (layout error, hang, crash) an `<error>`;
- `summary.json`: the counts and scores of the batch, and the entries of the
  class folder ignored (files, not learners).

For the learner (what a learner may see):

- `feedback/<learner>.json`: the items the learner may see now
  (`labctl.grade.visibility`: the others are absent, their names, messages and
  how many there are), and the score over them; `labctl grade publish` writes
  it again with the items shown once the grades are published;
- `gradescope/<learner>/results.json`: Gradescope's results format. Every item
  is a test with its rubric `visibility`, which Gradescope applies itself, so
  the Gradescope score is the whole score; the top `output` (always shown)
  states why a learner could not be graded once and speaks of visible items only.
"""

from __future__ import annotations

import contextlib
import csv
import io
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from labctl.evidence.store import replace_atomically
from labctl.grade import basecode
from labctl.grade.late import parse_time
from labctl.grade.layout import Ignored, stem
from labctl.grade.rubric import Rubric
from labctl.grade.score import GRADED, Row, points_text
from labctl.grade.visibility import Audience, audience, published_at
from labctl.i18n import N_, _
from labctl.isolation.sandbox import OUTPUT_LIMIT
from labctl.jsonsafe import dumps
from labctl.textsafe import cell, json_text, shown

FEEDBACK_SCHEMA = "labctl.grade-feedback.v1"
SUMMARY_SCHEMA = "labctl.grade-summary.v1"


def _xml_text(text: str) -> str:
    """Learner text made valid XML 1.0 and safe on a terminal: control characters escaped."""
    return shown(text, lines=True).replace("\ufffe", "\\ufffe").replace("\uffff", "\\uffff")


_points = points_text


def gradebook_csv(
    rows: list[Row],
    rubric: Rubric,
    identical: Sequence[Sequence[str]] | None = None,
    stems: Sequence[str] | None = None,
) -> str:
    """The grader's table; `files` names each learner's output files (`records/`,
    `feedback/`, `gradescope/`), a digest where the learner's id is not a plain ASCII name."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    ids = [item.id for item in rubric.items]
    writer.writerow(
        [
            "learner",
            "status",
            "score",
            "max_score",
            *ids,
            "isolation",
            "diagnosis",
            "identical_to",
            *LATE_COLUMNS,
            "base_code",
            "files",
        ]
    )
    for index, row in enumerate(rows):
        points = {i.id: _points(i.points) for i in row.items}
        writer.writerow(
            [
                cell(row.learner),
                row.status,
                _points(row.score),
                _points(row.max_score),
                *(points.get(i, "") for i in ids),
                row.isolation or "",
                cell(row.diagnosis),
                cell(" ".join(identical[index]) if identical else ""),
                *_late_cells(row),
                cell(basecode.flag(row.base_code)),
                stems[index] if stems else stem(row.learner),
            ]
        )
    return buffer.getvalue()


# Lateness and the TA's adjustments: score = the items' points - late_penalty + adjustment;
# then what the learner's room printed. (Its time is in summary.json: the gradebook of two
# runs of one batch is the same file.)
LATE_COLUMNS = (
    "due_at",
    "submitted_at",
    "late",
    "late_penalty",
    "adjustment",
    "adjustment_reasons",
    "printed",
)


def _size(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def printed(row: Row) -> str:
    """The gradebook's flag for a room that printed: how much, and what the record kept."""
    if not row.output_bytes:
        return ""
    if row.output_bytes <= OUTPUT_LIMIT:
        return _("printed {size}").format(size=_size(row.output_bytes))
    return _("printed {size}; kept the first {kept}").format(
        size=_size(row.output_bytes), kept=_size(OUTPUT_LIMIT)
    )


def _late_cells(row: Row) -> list[str]:
    late = row.late
    return [
        row.due_at or "",
        late.submitted_at or "" if late else "",
        late.label() if late else "",
        _points(row.late_penalty) if late else "",
        _points(sum(a["points"] for a in row.adjustments)) if row.adjustments else "",
        cell(" | ".join(a["reason"] for a in row.adjustments)),
        printed(row),
    ]


def _late_json(row: Row) -> dict:
    """What the learner and the grader are told of lateness and adjustments (no points of
    hidden items: the penalty is a share, the adjustments the TA's own)."""
    document: dict = {}
    if row.late is not None:
        document["late"] = row.late.to_json()
    if row.adjustments:
        document["adjustments"] = list(row.adjustments)
    return document


def junit_xml(rows: list[Row]) -> bytes:
    failures = sum(1 for r in rows for i in r.items if not i.passed and r.status == GRADED)
    errors = sum(len(r.items) for r in rows if r.status != GRADED)
    tests = sum(len(r.items) for r in rows)
    root = ET.Element(
        "testsuites",
        name="labctl grade",
        tests=str(tests),
        failures=str(failures),
        errors=str(errors),
    )
    for row in rows:
        graded = row.status == GRADED
        suite = ET.SubElement(
            root,
            "testsuite",
            name=row.learner,
            tests=str(len(row.items)),
            failures=str(sum(1 for i in row.items if not i.passed) if graded else 0),
            errors=str(0 if graded else len(row.items)),
        )
        props = ET.SubElement(suite, "properties")
        for name, value in (
            ("status", row.status),
            ("score", _points(row.score)),
            ("max_score", _points(row.max_score)),
            ("isolation", row.isolation or ""),
        ):
            ET.SubElement(props, "property", name=name, value=value)
        for item in row.items:
            case = ET.SubElement(suite, "testcase", classname=row.learner, name=item.id)
            if item.passed:
                continue
            message = item.message if graded else row.diagnosis
            tag = "failure" if graded else "error"
            element = ET.SubElement(case, tag, message=_xml_text(message.splitlines()[0][:200]))
            element.text = _xml_text(message)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def seen_by(row: Row, rubric: Rubric, published: bool, now=None) -> Audience:
    """What this learner may see now: `after_due_date` items from the learner's own due date
    (an extension's, else the rubric's)."""
    due = parse_time(row.due_at) if row.due_at else rubric.due_at
    return audience(due, published, now)


def feedback(row: Row, seen: Audience | None = None) -> dict:
    """What the learner may see (`seen`; default: before the due date, unpublished): no item
    kept back, not even how many there are."""
    seen = seen or Audience()
    shown = [i for i in row.items if seen.sees(i.visibility)]
    document = {
        "schema": FEEDBACK_SCHEMA,
        "learner": row.learner,
        "status": row.status,
        "published": seen.published,
        "score": row.adjusted(sum(i.points for i in shown)),
        "max_score": round(sum(i.max_points for i in shown), 6),
        "items": [i.to_json() for i in shown],
        **_late_json(row),
    }
    if row.status != GRADED:
        document["message"] = row.diagnosis
    if row.base_code and row.base_code.get("functions"):
        document["base_code"] = basecode.learner_json(row.base_code)
    return document


def _learner_output(row: Row) -> str:
    """Gradescope's top `output`, which every learner sees: the cause of a row not graded,
    once, then the count of the items shown at once."""
    shown = [i for i in row.items if i.visibility == "visible"]
    passed = sum(1 for i in shown if i.passed)
    lines = [
        _("labctl: {passed} of {total} visible items passed.").format(
            passed=passed, total=len(shown)
        )
    ]
    if row.status != GRADED:
        lines.insert(0, row.diagnosis)
    late = row.late
    if late is not None and late.extended and late.due_at:
        lines.append(_("Your own due date (an extension): {due}.").format(due=late.due_at))
    if late is not None and late.units:
        said = (
            N_("Handed in {units} day(s) late: {percent:g}% of the score taken off.")
            if late.unit_word == "day"
            else N_("Handed in {units} hour(s) late: {percent:g}% of the score taken off.")
        )
        lines.append(_(said).format(units=late.units, percent=late.penalty_percent))
    for adjustment in row.adjustments:
        lines.append(
            _("Adjusted by {points:+g} points: {reason}").format(
                points=adjustment["points"], reason=adjustment["reason"]
            )
        )
    return "\n".join(lines)


def gradescope_results(row: Row) -> dict:
    """Gradescope's results.json for one learner (score, output, tests[]); a row not graded
    gives each test its short "not graded" message, the cause being in `output`."""
    return {
        "score": row.score,
        "output": _learner_output(row),
        "output_format": "text",
        "stdout_visibility": "hidden",
        "tests": [
            {
                "name": item.id,
                "score": item.points,
                "max_score": item.max_points,
                "status": "passed" if item.passed else "failed",
                "output": item.message,
                "output_format": "text",
                "visibility": item.visibility,
            }
            for item in row.items
        ],
    }


def summary(
    rows: list[Row],
    rubric: Rubric,
    identical: Sequence[Sequence[str]] | None = None,
    ignored: Sequence[Ignored] = (),
) -> dict:
    """The batch's counts (one row per learner; ignored entries are no row) and its rows."""
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row.status] = statuses.get(row.status, 0) + 1
    scores = [r.score for r in rows]
    return {
        "schema": SUMMARY_SCHEMA,
        "rubric": rubric.name,
        "rubric_sha256": rubric.sha256(),
        "learners": len(rows),
        "statuses": statuses,
        "max_score": rubric.max_score,
        "mean_score": round(sum(scores) / len(scores), 6) if scores else None,
        "rows": [
            {
                "learner": r.learner,
                "status": r.status,
                "score": r.score,
                "max_score": r.max_score,
                "isolation": r.isolation,
                "diagnosis": r.diagnosis,
                "identical_to": list(identical[index]) if identical else [],
                "late_penalty": r.late_penalty,
                "wall_time_s": r.wall_time_s,
                "output_bytes": r.output_bytes,
                "base_code": r.base_code,
                **_late_json(r),
            }
            for index, r in enumerate(rows)
        ],
        "ignored": [entry.to_json() for entry in ignored],
    }


def json_bytes(document: dict) -> bytes:
    """A JSON document as UTF-8, whatever text it holds (see `textsafe.json_text`)."""
    return (json_text(dumps(document)) + "\n").encode("utf-8")


def write_all(
    rows: list[Row],
    rubric: Rubric,
    out: Path,
    stems: Sequence[str] | None = None,
    identical: Sequence[Sequence[str]] | None = None,
    ignored: Sequence[Ignored] = (),
) -> list[Path]:
    """Every output of the class under `out`; returns the files written.

    `stems` names each row's files (the learners' own, from their folders' real
    names; by default derived from the row's learner id)."""
    files = [
        (out / "gradebook.csv", gradebook_csv(rows, rubric, identical, stems).encode("utf-8")),
        (out / "junit.xml", junit_xml(rows)),
    ]
    published = published_at(out) is not None
    for index, row in enumerate(rows):
        name = stems[index] if stems else stem(row.learner)
        seen = seen_by(row, rubric, published)
        files.append((out / "feedback" / f"{name}.json", json_bytes(feedback(row, seen))))
        files.append(
            (out / "gradescope" / name / "results.json", json_bytes(gradescope_results(row)))
        )
    files.append((out / "summary.json", json_bytes(summary(rows, rubric, identical, ignored))))
    # Each file is flushed to disk before it replaces the last run's: one at a time, a class
    # of 30 waited 0.4 s on 60-odd fsyncs; side by side, the disk takes them together.
    with ThreadPoolExecutor(max_workers=8) as writers:
        list(writers.map(lambda file: replace_atomically(*file), files))
    return [path for path, _data in files]


def remove_stale(out: Path, stems: Sequence[str], records: str) -> list[str]:
    """Remove the files of learners this batch has no row for (gone from the class, or now
    named by a digest after a clash of names): their old feedback, Gradescope results and
    record (`records`, the folder's name) stayed beside the batch's, and `grade publish`
    published every record in OUT, an old score with it. Returns their names, sorted."""
    keep = set(stems)
    gone: set[str] = set()
    for folder in (records, "feedback"):
        for path in (out / folder).glob("*.json"):
            if path.stem not in keep and (path.is_symlink() or path.is_file()):
                path.unlink()
                gone.add(path.stem)
    for path in (out / "gradescope").glob("*/results.json"):
        if path.parent.name not in keep and not path.parent.is_symlink():
            path.unlink()
            with contextlib.suppress(OSError):
                path.parent.rmdir()
            gone.add(path.parent.name)
    return sorted(gone)
