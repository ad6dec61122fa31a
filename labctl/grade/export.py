"""`labctl grade --export canvas --roster FILE`: a CSV Canvas's gradebook imports.

Canvas matches a row to a student by its first columns, `Student`, `ID`,
`SIS User ID`, `SIS Login ID` and `Section` (as its own gradebook export
writes them), and a column named `<assignment> (<assignment id>)` to an
assignment (a name without an id makes a new one). The second row,
`Points Possible`, gives the assignment's points, as in Canvas's export.

The roster maps learner ids (the class folder's names) to those columns: a CSV
whose header is `learner,Student,ID,SIS User ID,SIS Login ID,Section` (in any
order; `learner`, `Student` and one of `ID` or `SIS User ID` filled in each row; the
learner ids NFC-normalised, as the class folder's names are).
A graded learner the roster does not list is left out of the export and named in a
warning; so is a roster entry with no row.

A learner with no grade (any status but `graded`: `layout-error`, `refused`,
`not-loaded`, `hang`, `crash`; or an id two folders share) is exported by the TA's rule,
`NO_GRADE_BLANK` (the default: the cell is left empty, and Canvas's import leaves that
student's grade as it was) or `NO_GRADE_ZERO` (0 points), and named in a warning either way;
so is a learner whose submission time was not known (exported as on time).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from labctl.errors import LabctlError, UsageError
from labctl.evidence.store import replace_atomically
from labctl.grade.late import learner_key
from labctl.grade.score import GRADED, Row, points_text
from labctl.i18n import Msg
from labctl.textsafe import cell

CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
ROSTER_COLUMNS = ("learner", *CANVAS_COLUMNS)
POINTS_POSSIBLE = "    Points Possible"  # Canvas's own export indents it so
NO_GRADE_BLANK, NO_GRADE_ZERO = "blank", "zero"
NO_GRADE_RULES = (NO_GRADE_BLANK, NO_GRADE_ZERO)
CANVAS_FILE = "canvas.csv"


class RosterError(LabctlError):
    """A roster file that cannot be read or does not map learner ids to Canvas students."""


def read_roster(path: Path) -> dict[str, dict[str, str]]:
    """learner id -> its Canvas columns."""
    try:
        text = path.read_text("utf-8-sig")
    except FileNotFoundError:
        raise UsageError(Msg("--roster {path}: no such file", path=str(path))) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RosterError(Msg("cannot read {path}: {why}", path=str(path), why=str(exc))) from None
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in reader.fieldnames or []]
    if sorted(header) != sorted(ROSTER_COLUMNS):
        raise RosterError(
            Msg(
                "{path}: the header must be {columns} (in any order), got {header}",
                path=path.name,
                columns=",".join(ROSTER_COLUMNS),
                header=",".join(header) or "nothing",
            )
        )
    reader.fieldnames = header
    roster: dict[str, dict[str, str]] = {}
    for number, entry in enumerate(reader, start=2):
        values = {k: (v or "").strip() for k, v in entry.items() if k is not None}
        if None in entry or not values["learner"] or not values["Student"]:
            raise RosterError(
                Msg(
                    "{path} line {line}: every row needs its learner id and Student name",
                    path=path.name,
                    line=number,
                )
            )
        if not (values["ID"] or values["SIS User ID"]):
            raise RosterError(
                Msg(
                    "{path} line {line}: give the student's ID or SIS User ID",
                    path=path.name,
                    line=number,
                )
            )
        learner = learner_key(values["learner"])
        if learner in roster:
            raise RosterError(
                Msg("{path}: learner {learner} appears twice", path=path.name, learner=learner)
            )
        roster[learner] = {c: values[c] for c in CANVAS_COLUMNS}
    return roster


def canvas_csv(
    rows: Sequence[Row],
    roster: dict[str, dict[str, str]],
    assignment: str,
    max_score: float,
    no_grade: str = NO_GRADE_BLANK,
) -> tuple[str, list[Msg]]:
    """The import file and the warnings (learners left out, learners with no grade)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    # The column's name is the TA's (`--assignment`) or the rubric's: a cell like any other.
    writer.writerow([*CANVAS_COLUMNS, cell(assignment)])
    writer.writerow([POINTS_POSSIBLE, "", "", "", "", points_text(max_score)])
    warnings: list[Msg] = []
    by_id: dict[str, list[Row]] = {}
    for row in rows:
        by_id.setdefault(row.learner, []).append(row)
    for learner, student in roster.items():
        found = by_id.get(learner)
        if found is None:
            warnings.append(
                Msg("{learner} is in the roster but has no row: left out", learner=learner)
            )
            continue
        writer.writerow(
            [cell(student[c]) for c in CANVAS_COLUMNS] + [_grade(found, no_grade, warnings)]
        )
    for learner in by_id:
        if learner not in roster:
            warnings.append(
                Msg(
                    "{learner} is not in the roster: left out of the Canvas export",
                    learner=learner,
                )
            )
    return buffer.getvalue(), warnings


def _grade(rows: list[Row], no_grade: str, warnings: list[Msg]) -> str:
    """The cell of one rostered learner: its score, or the no-grade rule's blank or 0."""
    (row, *more) = rows
    late = row.late
    if not more and row.status == GRADED:
        if late is not None and not late.known:
            warnings.append(
                Msg(
                    "{learner}: no submission time, exported to Canvas as on time",
                    learner=row.learner,
                )
            )
        return points_text(row.score)
    # a status is an identifier, the same in every language
    why = Msg("{count} folders share this id", count=len(rows)) if more else row.status
    cell_text = "0" if no_grade == NO_GRADE_ZERO else ""
    warnings.append(
        Msg(
            "{learner} has no grade ({why}): {done} in canvas.csv",
            learner=row.learner,
            why=why,
            done=Msg("exported as 0") if cell_text else Msg("left blank"),
        )
    )
    return cell_text


def write_canvas(
    rows: Sequence[Row],
    roster: dict[str, dict[str, str]],
    assignment: str,
    max_score: float,
    out: Path,
    no_grade: str = NO_GRADE_BLANK,
) -> tuple[Path, list[Msg]]:
    """`canvas.csv` written for `roster` (`read_roster`, read before any learner is graded)."""
    text, warnings = canvas_csv(rows, roster, assignment, max_score, no_grade)
    path = out / CANVAS_FILE
    replace_atomically(path, text.encode("utf-8"))
    return path, warnings


def remove_stale(out: Path) -> Path | None:
    """An earlier run's `canvas.csv` removed from `out`, for a run that writes none: its scores
    would disagree with this run's gradebook. Returns it if it was there."""
    path = out / CANVAS_FILE
    if not (path.is_symlink() or path.is_file()):
        return None
    path.unlink()
    return path
