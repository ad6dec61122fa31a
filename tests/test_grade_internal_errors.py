"""`internal-error`: labctl failed, not the learner. Never a grade, never a passing batch.

The grading workers here are labctl's own, with one fault planted: a learner whose id
starts with `broken` meets the FileNotFoundError a folder named `labctl` in the working
directory once caused (`.../labctl/data/contract_v1.json`). A batch with such a row exits
1 and its `--json` says `"passed": false`; its Canvas export is not written; a batch whose
first learners all end in that one cause stops after them, says so once and writes no
gradebook; run again without the fault, those learners are graded, not read back.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from gradetools import copy_room
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.grade import pool, runner

RUBRIC = """schema: labctl.rubric.v1
name: one function
items:
  - {id: fn.softmax, kind: function, target: softmax, points: 4}
"""
CAUSE = "/nowhere/labctl/data/contract_v1.json"
# labctl's grading worker, with the fault planted in what it runs for each learner.
_BROKEN_FOR_SOME = f"""
import sys
from labctl.grade import task, worker
observe = task.observe_learner

def planted(job, started=None):
    if job["learner"].startswith("broken"):
        raise FileNotFoundError(2, "No such file or directory", {CAUSE!r})
    return observe(job, started)

task.observe_learner = planted
sys.exit(worker.main(sys.argv[1:]))
"""
ROSTER = "learner,Student,ID,SIS User ID,SIS Login ID,Section\nann,Ann,1,S1,ann,A\n"


@pytest.fixture
def planted(monkeypatch):
    monkeypatch.setattr(
        pool.LocalPool,
        "_command",
        lambda self, fd: [sys.executable, "-c", _BROKEN_FOR_SOME, str(fd)],
    )


def _class(root: Path, *learners: str) -> Path:
    for learner in learners:
        copy_room(root / learner / "clean_room")
    return root


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args), env={"NO_COLOR": "1", "COLUMNS": "200"})
    assert "Traceback" not in result.output, result.output
    return result


def grade(tmp_path: Path, klass: Path, *more: str):
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(RUBRIC, "utf-8")
    return invoke(
        "grade", "class", str(klass), "--out", str(tmp_path / "out"), "--rubric", str(rubric),
        "--jobs", "2", *more,
    )  # fmt: skip


def test_a_batch_with_an_internal_error_exits_1_and_does_not_pass(tmp_path, planted):
    (tmp_path / "roster.csv").write_text(ROSTER, "utf-8")
    klass = _class(tmp_path / "class", "ann", "broken-bob")
    result = grade(
        tmp_path, klass, "--json", "--export", "canvas", "--roster", str(tmp_path / "roster.csv")
    )
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["passed"] is False
    rows = {row["learner"]: row for row in document["rows"]}
    assert rows["ann"]["status"] == "graded" and rows["ann"]["score"] == 4
    assert rows["broken-bob"]["status"] == "internal-error"
    assert CAUSE in rows["broken-bob"]["diagnosis"]
    said = " ".join(result.stderr.split())
    assert said.count("ended in internal-error (broken-bob)") == 1, result.stderr
    # the whole class is not uploaded with a 0 that is no grade
    assert "--export skipped" in said
    assert not (tmp_path / "out" / "canvas.csv").exists()
    assert (tmp_path / "out" / "gradebook.csv").is_file()


def test_a_batch_whose_learners_all_fail_for_one_internal_cause_stops_and_says_so_once(
    tmp_path, monkeypatch, planted
):
    # Two more than the three it stops after: some are left ungraded, and each learner of the
    # run without the fault is a whole verify (seven cost two more for nothing).
    learners = [f"broken-{n}" for n in range(5)]
    klass = _class(tmp_path / "class", *learners)
    result = grade(tmp_path, klass)
    assert result.exit_code == 1, result.output
    said = " ".join(result.stderr.split())
    assert said.count("grading stopped after the first 3 learners") == 1, result.stderr
    assert CAUSE in said and "the other 2 were not graded" in said
    out = tmp_path / "out"
    assert len(list((out / runner.RECORDS).glob("*.json"))) == runner.STOP_AFTER_INTERNAL_ERRORS
    assert not (out / "gradebook.csv").exists()
    # The cause gone, every learner is graded: the internal errors are not read back.
    monkeypatch.undo()
    again = grade(tmp_path, klass, "--json")
    assert again.exit_code == 0, again.output
    document = json.loads(again.stdout)
    assert document["passed"] is True and document["statuses"] == {"graded": 5}
    assert sorted(document["graded"]) == learners and document["skipped"] == []


def test_a_gradescope_run_that_ends_in_an_internal_error_exits_1(tmp_path, planted):
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(RUBRIC, "utf-8")
    upload = copy_room(tmp_path / "broken-upload" / "clean_room").parent
    result = invoke(
        "grade", "gradescope", str(upload), "--results", str(tmp_path / "results.json"),
        "--work", str(tmp_path / "work"), "--rubric", str(rubric), "--json",
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["passed"] is False and document["status"] == "internal-error"
