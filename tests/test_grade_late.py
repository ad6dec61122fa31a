"""Late work on its own: the rubric's `due:` and `late:`, the lateness rule, the time files.

The rule (`labctl.grade.late`): within the grace, on time; past it, every started day (or
hour) from the due date costs `penalty_percent` of the score, up to `cap_percent`.
"""

from __future__ import annotations

import json
import os
import unicodedata
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from labctl.errors import UsageError
from labctl.grade.late import (
    LateError,
    LatePolicy,
    lateness,
    read_extensions,
    read_gradescope_metadata,
    read_submitted_csv,
)
from labctl.grade.rubric import RubricError, default_rubric_text, parse_rubric
from labctl.grade.score import ItemResult, Row

DUE = datetime.fromisoformat("2026-03-01T23:59:00+08:00")
PER_DAY = LatePolicy(unit="day", penalty_percent=10, cap_percent=30, grace_minutes=15)


def test_on_time_and_inside_the_grace_cost_nothing():
    early = lateness(DUE - timedelta(days=1), DUE, PER_DAY)
    assert early.label() == "on-time" and early.penalty_percent == 0 and early.late_s == 0
    grace = lateness(DUE + timedelta(minutes=14, seconds=59), DUE, PER_DAY)
    assert grace.label() == "on-time" and grace.penalty_percent == 0


def test_one_and_a_half_days_late_is_two_started_days():
    late = lateness(DUE + timedelta(days=1.5), DUE, PER_DAY)
    assert late.units == 2 and late.penalty_percent == 20 and late.label() == "2 day"
    assert late.late_s == pytest.approx(1.5 * 86400, abs=1e-6)
    # Past the grace, lateness counts from the due date, not from the end of the grace.
    just = lateness(DUE + timedelta(minutes=16), DUE, PER_DAY)
    assert just.units == 1 and just.penalty_percent == 10


def test_past_the_cap_the_penalty_stays_at_the_cap():
    late = lateness(DUE + timedelta(days=9), DUE, PER_DAY)
    assert late.units == 9 and late.penalty_percent == 30


def test_a_per_hour_penalty_counts_started_hours():
    per_hour = LatePolicy(unit="hour", penalty_percent=2.5)
    late = lateness(DUE + timedelta(hours=3, minutes=1), DUE, per_hour)
    assert late.units == 4 and late.penalty_percent == 10 and late.label() == "4 hour"


def test_the_penalty_is_a_share_of_the_score_and_adjustments_come_after():
    row = Row("ann", "graded", "", "process")
    row.items = [ItemResult("a", "function", "softmax", 7.5, 10, "visible", True, "")]
    row.late = lateness(DUE + timedelta(days=1.5), DUE, PER_DAY)
    assert row.late_penalty == 1.5 and row.score == 6.0
    row.adjustments = [{"points": 2, "reason": "regraded"}]
    assert row.score == 8.0


def rubric_text(**extra) -> str:
    data = yaml.safe_load(default_rubric_text())
    data.update(extra)
    return yaml.safe_dump(data, allow_unicode=True)


def test_the_rubric_takes_a_due_date_with_a_timezone_and_late_rules():
    text = rubric_text(late={"unit": "day", "penalty_percent": 10, "cap_percent": 50})
    text += "due: 2026-03-01T23:59:00+08:00\n"  # unquoted: YAML's own timestamp
    rubric = parse_rubric(text)
    assert rubric.due_at == DUE and rubric.late.cap_percent == 50
    quoted = parse_rubric(rubric_text(due="2026-03-01T15:59:00Z"))
    assert quoted.due_at == DUE


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"due": "2026-03-01T23:59:00"}, "timezone"),
        ({"due": "next friday"}, "timezone"),
        ({"late": {"unit": "day", "penalty_percent": 10}}, "due date"),
        ({"due": "2026-03-01T23:59:00Z", "late": {"unit": "week", "penalty_percent": 10}}, "unit"),
        ({"due": "2026-03-01T23:59:00Z", "late": {"unit": "day", "penalty_percent": 0}}, "penalty"),
        ({"due": "2026-03-01T23:59:00Z", "late": {"unit": "day", "percent": 10}}, "percent"),
    ],
)
def test_bad_late_rules_are_refused_by_name(extra, reason):
    with pytest.raises(RubricError, match=reason):
        parse_rubric(rubric_text(**extra))


def test_the_submission_times_csv(tmp_path):
    path = tmp_path / "times.csv"
    path.write_text(
        "learner,submitted_at\nann,2026-03-01T10:00:00+08:00\nbob,2026-03-02T01:00:00Z\n"
    )
    times = read_submitted_csv(path).submitted
    assert times["ann"] == datetime.fromisoformat("2026-03-01T10:00:00+08:00")
    assert times["bob"].utcoffset() == timedelta(0)
    for bad, reason in (
        ("ann,2026-03-01T10:00:00\n", "timezone"),
        ("ann,yesterday\n", "ISO 8601"),
        ("ann,2026-03-01T10:00:00Z\nann,2026-03-01T11:00:00Z\n", "twice"),
        ("ann,2026-03-01T10:00:00Z,next week\n", "ISO 8601"),
    ):
        path.write_text(bad)
        with pytest.raises(LateError, match=reason):
            read_submitted_csv(path)
    with pytest.raises(UsageError, match="no such file"):
        read_submitted_csv(tmp_path / "missing.csv")


def test_an_extension_is_a_third_column_of_the_times(tmp_path):
    path = tmp_path / "times.csv"
    path.write_text(
        "learner,submitted_at,due_at\n"
        "ann,2026-03-01T10:00:00+08:00,\n"
        "bob,2026-03-04T01:00:00Z,2026-03-04T23:59:00+08:00\n"
    )
    times = read_submitted_csv(path)
    assert set(times.submitted) == {"ann", "bob"}
    assert times.due == {"bob": datetime.fromisoformat("2026-03-04T23:59:00+08:00")}
    # bob handed in 1 h before his own due date: on time, whatever the rubric's date.
    late = lateness(times.submitted["bob"], times.due["bob"], PER_DAY, extended=True)
    assert late.label() == "on-time" and late.extended and late.due_at.startswith("2026-03-04")


def test_the_extensions_file_takes_a_date_or_a_duration(tmp_path):
    path = tmp_path / "extensions.csv"
    nfd = unicodedata.normalize("NFD", "Zoë")
    path.write_text(f"learner,due_at\nann,2026-03-05T12:00:00Z\nbob,P2D\n{nfd},PT36H\n")
    found = read_extensions(path, DUE)
    assert found["ann"] == datetime.fromisoformat("2026-03-05T12:00:00+00:00")
    assert found["bob"] == DUE + timedelta(days=2)
    assert found["Zoë"] == DUE + timedelta(hours=36)  # NFC, as the folder's name is
    with pytest.raises(LateError, match="needs the rubric's due date"):
        read_extensions(path, None)
    for bad in ("ann,tomorrow\n", "ann,P\n", "ann,2D\n", "ann,P2D\nann,P3D\n"):
        path.write_text(bad)
        with pytest.raises(LateError):
            read_extensions(path, DUE)
    # past the calendar: an OverflowError came out as labctl's internal error
    for past in ("P999999999D", "P3000000D", "P99999999999W"):
        path.write_text(f"ann,{past}\n")
        with pytest.raises(LateError, match=f"line 1: the extension {past} ends past"):
            read_extensions(path, DUE)


def test_the_times_third_column_takes_a_duration_as_the_extensions_file_does(tmp_path):
    """A `P2D` in the times' due_at column was refused with a message about the submission
    time, though the same cell of --extensions takes it."""
    path = tmp_path / "times.csv"
    path.write_text("learner,submitted_at,due_at\nann,2026-03-02T10:00:00Z,P2D\n")
    assert read_submitted_csv(path, DUE).due == {"ann": DUE + timedelta(days=2)}
    with pytest.raises(LateError, match="line 2: an extension by a duration needs the rubric's"):
        read_submitted_csv(path)
    path.write_text("ann,2026-03-02T10:00:00Z,soon\n")
    with pytest.raises(LateError, match="line 1: expected learner,due_at"):
        read_submitted_csv(path, DUE)


def test_gradescope_metadata_gives_created_at(tmp_path):
    path = tmp_path / "submission_metadata.json"
    path.write_text(json.dumps({"created_at": "2026-03-02T12:00:00.365935-08:00", "id": 7}))
    said = read_gradescope_metadata(path)
    assert said.created_at == datetime.fromisoformat("2026-03-02T12:00:00.365935-08:00")
    assert said.assignment_due is None and said.extension is None
    path.write_text(json.dumps({"id": 7}))
    with pytest.raises(LateError, match="created_at"):
        read_gradescope_metadata(path)


def test_gradescope_metadata_due_dates_rule_the_learner_first(tmp_path):
    """Gradescope's format (submission_metadata.json): `assignment.due_date` is the
    assignment's; each `users[].assignment.due_date` is that user's own, an extension in."""
    path = tmp_path / "submission_metadata.json"
    document = {
        "created_at": "2026-03-03T12:00:00.000000-08:00",
        "assignment": {"due_date": "2026-03-01T23:59:00.000000-08:00", "late_due_date": None},
        "users": [
            {"email": "a@example.edu", "id": 1, "name": "A", "assignment": {
                "due_date": "2026-03-01T23:59:00.000000-08:00"}},
            {"email": "b@example.edu", "id": 2, "name": "B", "assignment": {
                "due_date": "2026-03-04T23:59:00.000000-08:00"}},
        ],
    }  # fmt: skip
    path.write_text(json.dumps(document))
    # A group's due date is its latest member's: one member's extension is the group's.
    said = read_gradescope_metadata(path)
    assert said.extension == datetime.fromisoformat("2026-03-04T23:59:00-08:00")
    assert said.assignment_due == datetime.fromisoformat("2026-03-01T23:59:00-08:00")
    document["users"] = document["users"][:1]  # the assignment's date: no extension
    path.write_text(json.dumps(document))
    assert read_gradescope_metadata(path).extension is None
    document["assignment"]["due_date"] = "soon"
    path.write_text(json.dumps(document))
    with pytest.raises(LateError, match="due_date"):
        read_gradescope_metadata(path)


CREATED = '"created_at": "2026-03-03T12:00:00-08:00"'


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        ("{" + CREATED + ", " + CREATED + "}", "key 'created_at' appears twice"),
        ("{" + CREATED + ', "assignment": "x"}', "assignment is str, not an object"),
        ("{" + CREATED + ', "users": "y"}', "users is str, not a list"),
        ("{" + CREATED + ', "users": [1, "x", null]}', r"users\[\] is int, not an object"),
        ("{" + CREATED + ', "users": [{"assignment": []}]}', r"users\[\].assignment is list"),
    ],
)
def test_gradescope_metadata_of_another_shape_is_refused_by_name(tmp_path, text, reason):
    """Issue 39's TA: nested JSON was labctl's internal error (a RecursionError), and a file of
    another shape was taken without a word, the rubric's due date quietly ruling instead."""
    path = tmp_path / "submission_metadata.json"
    path.write_text(text)
    with pytest.raises(LateError, match=reason):
        read_gradescope_metadata(path)


def test_nested_gradescope_metadata_is_refused_before_grading(tmp_path):
    from typer.testing import CliRunner

    from labctl.cli.main import app

    (tmp_path / "submission").mkdir()
    metadata = tmp_path / "submission_metadata.json"
    metadata.write_text("[" * 100_000 + "]" * 100_000)
    args = ["grade", "gradescope", str(tmp_path / "submission"), "--results",
            str(tmp_path / "results.json"), "--work", str(tmp_path / "work"),
            "--submission-metadata", str(metadata), "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args, env={"NO_COLOR": "1", "COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "refused" and "nested too deeply" in error["message"]
    assert str(metadata) in error["message"]
    assert not (tmp_path / "results.json").exists()


@pytest.mark.parametrize("flag", ["--submitted-at", "--extensions"])
def test_a_times_file_that_is_a_fifo_or_a_device_is_refused_in_words(tmp_path, flag):
    """A FIFO named as the submission times once left `grade` waiting for a writer forever,
    and /dev/zero was read until memory ran out: each is now a usage error naming it."""
    from typer.testing import CliRunner

    from labctl.cli.main import app

    (tmp_path / "class" / "ann").mkdir(parents=True)
    fifo = tmp_path / "times.csv"
    os.mkfifo(fifo)
    for named, kind in ((fifo, "a FIFO"), (Path("/dev/zero"), "a character device")):
        args = ["grade", str(tmp_path / "class"), "--out", str(tmp_path / "out"), flag, str(named)]
        result = CliRunner().invoke(app, args, env={"NO_COLOR": "1", "COLUMNS": "200"})
        assert result.exit_code == 2, result.output
        assert f"error: {named}: is {kind}, not a regular file" in result.stderr
        assert not (tmp_path / "out" / "gradebook.csv").exists()
    with pytest.raises(UsageError, match="is a FIFO, not a regular file"):
        read_gradescope_metadata(fifo)
