"""The class's outputs, rebuilt from the learners' records on every run, each written atomically.

For the grader (everything, hidden items included):

- `gradebook.csv`: one row per learner: status, score, max, points per rubric
  item, isolation, diagnosis;
- `records/<learner>.json` (written by the runner): the row and the facts it came from;
- `junit.xml`: one testsuite per learner, one testcase per rubric item; a failed
  item is a `<failure>` with its message as the element text, an item that could
  not be graded (layout error, hang, crash) an `<error>`;
- `summary.json`: the counts and scores of the batch.

For the learner (what a learner may see):

- `feedback/<learner>.json`: the visible items only (hidden ones are absent:
  their names, messages and how many there are), and the score over them;
- `gradescope/<learner>/results.json`: Gradescope's results format. Every item
  is a test with Gradescope's `visibility`, so the Gradescope score is the
  whole score; Gradescope shows a learner no `hidden` or `after_published` test,
  and the `output` text a learner sees speaks of visible items only.
"""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from labctl.evidence.store import replace_atomically
from labctl.grade.layout import stem
from labctl.grade.rubric import Rubric
from labctl.grade.score import GRADED, Row
from labctl.i18n import _
from labctl.jsonsafe import dumps

FEEDBACK_SCHEMA = "labctl.grade-feedback.v1"
SUMMARY_SCHEMA = "labctl.grade-summary.v1"
_XML_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _xml_text(text: str) -> str:
    """Learner text made valid XML 1.0: control characters shown as escapes."""
    return _XML_UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _cell(value: object) -> object:
    """A spreadsheet cell that never starts a formula (learner text can reach the diagnosis)."""
    if isinstance(value, str) and value.startswith(_FORMULA):
        return "'" + value
    return value


def _points(value: float) -> str:
    return f"{value:g}"


def gradebook_csv(rows: list[Row], rubric: Rubric) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    ids = [item.id for item in rubric.items]
    writer.writerow(["learner", "status", "score", "max_score", *ids, "isolation", "diagnosis"])
    for row in rows:
        points = {i.id: _points(i.points) for i in row.items}
        writer.writerow(
            [
                _cell(row.learner),
                row.status,
                _points(row.score),
                _points(row.max_score),
                *(points.get(i, "") for i in ids),
                row.isolation or "",
                _cell(row.diagnosis),
            ]
        )
    return buffer.getvalue()


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


def _visible(row: Row):
    return [i for i in row.items if not i.hidden]


def feedback(row: Row) -> dict:
    """What the learner may see now: no hidden item, not even how many there are."""
    shown = _visible(row)
    document = {
        "schema": FEEDBACK_SCHEMA,
        "learner": row.learner,
        "status": row.status,
        "score": round(sum(i.points for i in shown), 6),
        "max_score": round(sum(i.max_points for i in shown), 6),
        "items": [i.to_json() for i in shown],
    }
    if row.status != GRADED:
        document["message"] = row.diagnosis
    return document


def _learner_output(row: Row) -> str:
    shown = _visible(row)
    passed = sum(1 for i in shown if i.passed)
    lines = [
        _("labctl: {passed} of {total} visible items passed.").format(
            passed=passed, total=len(shown)
        )
    ]
    if row.status != GRADED:
        lines.insert(0, row.diagnosis)
    return "\n".join(lines)


def gradescope_results(row: Row) -> dict:
    """Gradescope's results.json for one learner (score, output, tests[])."""
    return {
        "score": row.score,
        "output": _learner_output(row),
        "stdout_visibility": "hidden",
        "tests": [
            {
                "name": item.id,
                "score": item.points,
                "max_score": item.max_points,
                "status": "passed" if item.passed else "failed",
                "output": item.message if row.status == GRADED else row.diagnosis,
                "visibility": item.visibility,
            }
            for item in row.items
        ],
    }


def summary(rows: list[Row], rubric: Rubric) -> dict:
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
            }
            for r in rows
        ],
    }


def write_all(rows: list[Row], rubric: Rubric, out: Path) -> list[Path]:
    """Every output of the class under `out`; returns the files written."""
    written: list[Path] = []

    def put(path: Path, data: bytes) -> None:
        replace_atomically(path, data)
        written.append(path)

    put(out / "gradebook.csv", gradebook_csv(rows, rubric).encode("utf-8"))
    put(out / "junit.xml", junit_xml(rows))
    for row in rows:
        put(
            out / "feedback" / f"{stem(row.learner)}.json",
            (dumps(feedback(row)) + "\n").encode("utf-8"),
        )
        put(
            out / "gradescope" / stem(row.learner) / "results.json",
            (dumps(gradescope_results(row)) + "\n").encode("utf-8"),
        )
    put(out / "summary.json", (dumps(summary(rows, rubric)) + "\n").encode("utf-8"))
    return written


def write_similarity(pairs, threshold: float, out: Path) -> Path:
    """`similarity.json`: the pairs for a person to judge (never a score)."""
    path = out / "similarity.json"
    document = {"threshold": threshold, "pairs": [p.to_json() for p in pairs]}
    replace_atomically(path, (dumps(document) + "\n").encode("utf-8"))
    return path
