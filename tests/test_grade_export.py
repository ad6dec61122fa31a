"""The Canvas export on its own: the roster's checks and the file Canvas's gradebook imports."""

from __future__ import annotations

import csv
import io

import pytest

from labctl.errors import UsageError
from labctl.grade.export import RosterError, canvas_csv, read_roster
from labctl.grade.score import ItemResult, Row

ROSTER = (
    "learner,Student,ID,SIS User ID,SIS Login ID,Section\n"
    'ann,"Lovelace, Ada",1001,S1001,ada,Section A\n'
    "bob,=cmd|' /C calc'!A0,1002,,bob,Section B\n"
    'cy,"Li, Cy",,S1003,cy,Section A\n'
)


def row(learner: str, points: float) -> Row:
    found = Row(learner, "graded", "", "process")
    found.items = [ItemResult("fn.softmax", "function", "softmax", points, 4, "visible", True, "")]
    return found


def test_canvas_csv_has_canvas_columns_points_possible_and_one_row_per_rostered_learner(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text(ROSTER)
    roster = read_roster(path)
    text, warnings = canvas_csv(
        [row("ann", 4), row("bob", 2.5), row("dan", 1)], roster, "Lab 8 (12345)", 4
    )
    table = list(csv.reader(io.StringIO(text)))
    assert table[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lab 8 (12345)"]
    assert table[1] == ["    Points Possible", "", "", "", "", "4"]
    assert table[2] == ["Lovelace, Ada", "1001", "S1001", "ada", "Section A", "4"]
    # A name that would start a spreadsheet formula is kept as text.
    assert table[3] == ["'=cmd|' /C calc'!A0", "1002", "", "bob", "Section B", "2.5"]
    assert len(table) == 4
    said = [str(w) for w in warnings]
    assert any("cy is in the roster but has no row" in w for w in said)
    assert any("dan is not in the roster" in w for w in said)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("learner,Student,ID\nann,Ada,1\n", "header"),
        ("learner,Student,ID,SIS User ID,SIS Login ID,Section\nann,,1,,,\n", "Student"),
        ("learner,Student,ID,SIS User ID,SIS Login ID,Section\nann,Ada,,,ada,\n", "SIS User ID"),
        (ROSTER + "ann,Ada again,9,,,\n", "twice"),
    ],
)
def test_a_bad_roster_is_refused_by_name(tmp_path, text, reason):
    path = tmp_path / "roster.csv"
    path.write_text(text)
    with pytest.raises(RosterError, match=reason):
        read_roster(path)


def test_a_missing_roster_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError):
        read_roster(tmp_path / "nope.csv")


def test_an_assignment_name_that_starts_a_formula_is_kept_as_text(tmp_path):
    """`--assignment` (or the rubric's name) was written to the header as it was: a
    spreadsheet opening canvas.csv ran `=HYPERLINK(...)` as a formula."""
    path = tmp_path / "roster.csv"
    path.write_text(ROSTER)
    text, _ = canvas_csv([row("ann", 4)], read_roster(path), '=HYPERLINK("http://x","Lab")', 4)
    header = next(csv.reader(io.StringIO(text)))
    assert header[-1] == '\'=HYPERLINK("http://x","Lab")'
