"""Every learner folder a platform hands out is graded, and one with no grade is exported by
a rule the TA chooses (issue 39).

A class of three: `Mary Ann Lee` (labctl's own room, a folder name with spaces: before, a
layout error, and 0 in canvas.csv), `syntax` (a room that does not load) and `malformed`
(no clean room). Graded once with the rubric less its lab metrics and submission, exported
to Canvas with each `--no-grade` rule; the grading folders a killed run left behind are
removed by the next one.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from gradetools import append, copy_room, one_score_everywhere, rubric_without
from typer.testing import CliRunner

from labctl.cli.main import app

ROSTER = (
    "learner,Student,ID,SIS User ID,SIS Login ID,Section\n"
    'Mary Ann Lee,"Lee, Mary Ann",1,,,A\nsyntax,Syn Tax,2,,,A\nmalformed,Mal Formed,3,,,A\n'
)
CANVAS = {"Lee, Mary Ann": "Mary Ann Lee", "Syn Tax": "syntax", "Mal Formed": "malformed"}


def dead_pid() -> int:
    """The id of a process that has ended."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("every-folder")
    klass = base / "class"
    copy_room(klass / "Mary Ann Lee" / "clean_room")
    append(copy_room(klass / "syntax" / "clean_room"), "primitives", "def softmax(x)\n    x")
    (klass / "malformed").mkdir()
    (base / "roster.csv").write_text(ROSTER, encoding="utf-8")
    # What a `kill -9` of labctl leaves: a grading folder whose worker is gone (its owner
    # named as labctl.grade.scratch names it); and another batch's, whose owner still runs.
    stale = Path(tempfile.mkdtemp(prefix="labctl-grading-"))
    (stale / ".owner").write_text(f"{dead_pid()} -\n")
    alive = Path(tempfile.mkdtemp(prefix="labctl-grading-"))
    (alive / ".owner").write_text(f"{os.getpid()} -\n")
    command = ["grade", str(klass), "--out", str(base / "out")]
    command += ["--rubric", str(rubric_without(base, "metric", "submission")), "--jobs", "2"]
    command += ["--export", "canvas", "--roster", str(base / "roster.csv")]
    result = CliRunner().invoke(app, [*command, "--json"])
    assert result.exit_code == 0, result.output
    yield base, command, json.loads(result.stdout), result.stderr, stale, alive
    shutil.rmtree(alive, ignore_errors=True)


def canvas(base: Path) -> dict[str, str]:
    with (base / "out" / "canvas.csv").open(encoding="utf-8") as handle:
        return {line[0]: line[-1] for line in list(csv.reader(handle))[2:]}


def test_a_folder_name_with_spaces_is_graded(graded):
    base, _, doc, _, _, _ = graded
    rows = {r["learner"]: r for r in doc["rows"]}
    assert rows["Mary Ann Lee"]["status"] == "graded"
    assert rows["Mary Ann Lee"]["score"] == rows["Mary Ann Lee"]["max_score"]
    assert canvas(base)["Lee, Mary Ann"] == f"{rows['Mary Ann Lee']['score']:g}"
    scores = one_score_everywhere(base / "out", CANVAS)
    # Its files are named by digest, and the gradebook says which.
    (files,) = [f for f in scores if f.startswith("learner-")]
    assert scores[files] == rows["Mary Ann Lee"]["score"]


def test_a_learner_with_no_grade_is_left_blank_and_named(graded):
    base, _, _, stderr, _, _ = graded
    cells = canvas(base)
    assert cells["Syn Tax"] == "" and cells["Mal Formed"] == ""
    said = " ".join(stderr.split())
    assert "syntax has no grade (not-loaded): left blank in canvas.csv" in said
    assert "malformed has no grade (layout-error): left blank in canvas.csv" in said


def test_no_grade_zero_exports_a_zero_and_names_it(graded, tmp_path):
    base, command, _, _, _, _ = graded
    zero = CliRunner().invoke(app, [*command, "--no-grade", "zero"])
    assert zero.exit_code == 0, zero.output
    cells = canvas(base)
    assert cells["Syn Tax"] == "0" and cells["Mal Formed"] == "0"
    assert "syntax has no grade (not-loaded): exported as 0" in " ".join(zero.stderr.split())
    wrong = CliRunner().invoke(app, [*command, "--no-grade", "maybe"])
    assert wrong.exit_code == 2 and "--no-grade maybe" in wrong.output


def test_a_row_not_graded_states_its_cause_once(graded):
    base, _, doc, _, _, _ = graded
    for learner in ("syntax", "malformed"):
        results = json.loads((base / "out" / "gradescope" / learner / "results.json").read_text())
        status = {r["learner"]: r["status"] for r in doc["rows"]}[learner]
        assert {t["output"] for t in results["tests"]} == {f"not graded: {status}"}, learner
        cause = "does not load: syntax error" if learner == "syntax" else "no clean_room/"
        assert results["output"].count(cause) == 1, results["output"]


def test_the_grading_folders_a_killed_run_left_are_removed(graded):
    _, _, _, _, stale, alive = graded
    assert not stale.exists()
    assert alive.exists()  # its owner (this process) still runs
