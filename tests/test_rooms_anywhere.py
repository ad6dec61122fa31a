"""A room in the learner's own folder, outside their repository, runs, verifies, fills and
submits in one try.

The learner's repository is `work/`; their room is `rooms/my_room` beside it. The labs and
verify run from `work/` on `../rooms/my_room` through the CLI, once; each test then works in
a copy of both folders. A record names the room by its files' digest and by a path
`evidence submit` resolves (absolute, or relative to the submission file, else to the
repository); `run` and `verify` say at record time what a class graded with `labctl grade`
will still refuse, and every refusal says in one line what to do.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from gittools import git
from honestrooms import honest_room
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.evidence import modules
from labctl.evidence.modules import MODULES
from labctl.evidence.room import identify, named_room
from labctl.evidence.validate import validate_file

MODULE = modules.Module(
    id="t-causal-attention",
    title="test module: the metrics causal-attention measures",
    section="tests",
    required=("future_token_invariance", "reference_output_max_error"),
)
OUTSIDE = "lies outside this repository"


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert "Traceback" not in result.output, result.output
    return result


def learner_room(dest: Path) -> Path:
    """A learner's own correct room (labctl's own is base code: `evidence submit` refuses it)."""
    return honest_room(dest)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """`work/` (a git repository) and `rooms/my_room`, with causal-attention run and the room
    verified from `work/`: (the folder holding both, run's result, verify's result)."""
    top = tmp_path_factory.mktemp("anywhere")
    work = top / "work"
    work.mkdir()
    (work / "README.md").write_text("learner repository\n")
    git("init", "-q", cwd=work)
    git("add", "README.md", cwd=work)
    git("commit", "-q", "-m", "init", cwd=work)
    learner_room(top / "rooms" / "my_room")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(work)
        room = "../rooms/my_room"
        run = invoke("run", "causal-attention", "--clean-room", room, "--seed", "5")
        verify = invoke("verify", "clean-room", "--path", room, "--no-metrics")
    return top, run, verify


@pytest.fixture
def work(made, tmp_path, monkeypatch) -> Path:
    """A fresh copy of both folders, `work/` the working directory, the test module known."""
    shutil.copytree(made[0], tmp_path / "t", symlinks=True)
    monkeypatch.chdir(tmp_path / "t" / "work")
    monkeypatch.setattr(modules, "MODULES", (*MODULES, MODULE))
    return tmp_path / "t" / "work"


def fill(work: Path, where: Path) -> Path:
    filled = invoke("evidence", "template", "--module", MODULE.id, "--fill")
    assert filled.exit_code == 0, filled.output
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(filled.stdout, "utf-8")
    return where


def submit(path: Path):
    return invoke("evidence", "submit", str(path), "--json")


def test_run_and_verify_record_the_room_beside_the_repository_and_say_where_it_lies(made):
    top, run, verify = made
    assert run.exit_code == 0 and verify.exit_code == 0, run.output + verify.output
    for said in (run.stderr, verify.stderr):
        assert " ".join(said.split()).count(OUTSIDE) == 1, said
    (record,) = (top / "work" / "evidence" / "runs" / "causal-attention").glob("*.json")
    room = json.loads(record.read_text("utf-8"))["labctl"]["clean_room"]
    assert room["path"] == "../rooms/my_room"
    assert room["sha256"] == identify(top / "rooms" / "my_room").sha256


def test_a_room_beside_the_repository_is_submitted_in_one_try(work):
    result = submit(fill(work, work / "submission.yaml"))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["accepted"] is True


def test_a_submission_kept_in_a_subfolder_finds_the_room_through_the_repository(work):
    result = submit(fill(work, work / "hand-in" / "submission.yaml"))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("named", ["absolute", "symlink"])
def test_a_room_named_by_an_absolute_path_or_through_a_symlink_is_taken(work, named):
    path = fill(work, work / "submission.yaml")
    data = yaml.safe_load(path.read_text("utf-8"))
    real = (work.parent / "rooms" / "my_room").resolve()
    if named == "absolute":
        data["labctl"]["clean_room"]["path"] = str(real)
    else:
        (work / "room").symlink_to(real)
        data["labctl"]["clean_room"]["path"] = "room"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), "utf-8")
    result = submit(path)
    assert result.exit_code == 0, result.output


def test_a_room_that_moved_is_refused_in_one_line_that_says_what_to_do(work):
    path = fill(work, work / "submission.yaml")
    (work.parent / "rooms").rename(work.parent / "moved")
    result = invoke("evidence", "submit", str(path))
    assert result.exit_code == 1
    lines = [line for line in result.stdout.splitlines() if "clean_room.path" in line]
    assert len(lines) == 1, result.stdout
    assert "'../rooms/my_room': no clean room there" in lines[0]
    assert "give its path as seen from the submission file, or an absolute one" in lines[0]


def test_a_graded_submission_naming_a_room_outside_the_folder_handed_in_is_refused(work):
    """A class graded: the room must be the one in the learner's folder (another learner's
    room, with its digest, would otherwise earn this learner its claims)."""
    path = fill(work, work / "submission.yaml")
    report = validate_file(path, root=work.resolve())
    assert named_room(report, work.resolve()) is None
    (problem,) = [p for p in report.problems if p.field == "labctl.clean_room.path"]
    assert "a graded submission's clean room is the one in the folder handed in" in problem.reason
    assert "run the labs on it and fill the template again" in problem.reason


def test_a_room_inside_the_repository_gets_no_note(work):
    from labctl.evidence.room import record_notes

    room = learner_room(work / "my_room")
    assert record_notes(identify(room), "--clean-room") == []
    assert OUTSIDE in str(record_notes(identify(work.parent / "rooms" / "my_room"), "--path")[0])
