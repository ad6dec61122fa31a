"""A clean room's identity (path, sha256 over its files, labctl's own or not), and verify's
refusal to guess a room and its time budget for a whole room.

The submission side (a room changed since the runs, labctl's own room, a room that fails
verify) runs in tests/test_evidence_submit.py, in its repository with the labs run once.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from clitools import invoke
from pydantic import ValidationError

from labctl import contract
from labctl.evidence.models import CleanRoomInfo, EvidenceRecord
from labctl.evidence.room import changes, identify, own_room, room_files


def copy_of_own(dest: Path) -> Path:
    shutil.copytree(own_room(), dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- the identity ------------------------------------------------------------------------


def test_a_copy_of_labctls_room_is_labctls_own_until_the_learner_changes_it(workdir):
    room = copy_of_own(workdir / "my_room")
    assert identify(own_room()).own is True
    first = identify(room)
    assert (first.path, first.own) == ("my_room", True)
    assert first.sha256 == identify(own_room()).sha256
    with (room / "attention.py").open("a") as handle:
        handle.write("# mine\n")
    second = identify(room)
    assert second.own is False and second.sha256 != first.sha256
    assert changes(first.files, second.files).changed == ("attention.py",)


def test_every_entry_counts_by_name_and_bytes_and_links_are_not_followed(workdir):
    room = workdir / "room"
    (room / "sub").mkdir(parents=True)
    (room / "__init__.py").write_text("")
    (room / "sub" / "a.py").write_bytes(b"x = 1\n")
    outside = workdir / "outside.py"
    outside.write_text("secret = 1\n")
    (room / "link.py").symlink_to(outside)
    files = room_files(room)
    assert sorted(files) == ["__init__.py", "link.py", "sub/a.py"]
    before = identify(room)
    outside.write_text("secret = 2\n")  # the link's target is not the room's
    assert identify(room).sha256 == before.sha256
    (room / "sub" / "a.py").rename(room / "sub" / "b.py")  # same bytes, another name
    renamed = changes(before.files, room_files(room))
    assert (renamed.added, renamed.removed) == (("sub/b.py",), ("sub/a.py",))
    # A cache is not the room (the sandbox's copy leaves it out; the process fallback
    # writes one there).
    (room / "sub" / "__pycache__").mkdir()
    (room / "sub" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert changes(before.files, room_files(room)).added == ("sub/b.py",)


def test_the_identity_is_validated_strictly_and_its_digest_must_match_its_files(workdir):
    good = identify(copy_of_own(workdir / "r")).model_dump()
    CleanRoomInfo.model_validate(good)
    for bad in (
        {**good, "sha256": "0" * 64},
        {**good, "own": "no"},
        {**good, "extra": 1},
        {**good, "files": {**good["files"], "x.py": "0" * 64}},
    ):
        with pytest.raises(ValidationError):
            CleanRoomInfo.model_validate(bad)


def test_records_of_an_older_labctl_that_name_the_room_by_path_still_read(workdir):
    record = {
        "schema": "learn-llm.evidence.v1",
        "module": "causal-attention",
        "commit": "unknown",
        "verified_at": "2026-05-01T10:00:00Z",
        "environment": "python 3.11",
        "seed": 5,
        "commands": [],
        "metrics": [],
        "artifacts": [],
        "cost": {"gross_usd": 0, "credit_usd": 0},
        "licenses": [],
        "known_failures": [],
        "labctl": {
            "version": "0",
            "contract_id": contract.CONTRACT_ID,
            "contract_sha256": contract.CONTRACT_V1_SHA256,
            "tolerances": "v1",
            "clean_room": "my_room",
        },
    }
    found = EvidenceRecord.model_validate(record, by_alias=True, by_name=False)
    assert found.labctl.clean_room == "my_room"
    record["labctl"]["clean_room"] = 7
    with pytest.raises(ValidationError, match="must be a mapping"):
        EvidenceRecord.model_validate(record, by_alias=True, by_name=False)


# -- verify names its room ------------------------------------------------------------------


def test_verify_without_a_path_and_without_clean_room_refuses(workdir):
    result = invoke("verify", "clean-room", "--no-metrics")
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: no ./clean_room here: name the clean room to verify, e.g. "
        "labctl verify clean-room --path my_room"
    )
    assert result.stdout == "" and not (workdir / "evidence").exists()


def test_verify_of_labctls_own_room_says_so(workdir):
    room = copy_of_own(workdir / "my_room")
    result = invoke("verify", "clean-room", "--path", str(room), "--no-metrics", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["clean_room"]["own"] is True and doc["clean_room"]["path"] == "my_room"
    assert "note: my_room is labctl's own clean room (or a copy of it), not yours" in " ".join(
        result.stderr.split()
    )
    folder = workdir / "evidence" / "verify"
    (path,) = [p for p in folder.glob("*.json") if not p.name.endswith("-report.json")]
    record = json.loads(path.read_text())
    assert record["labctl"]["clean_room"]["own"] is True
    with (room / "primitives.py").open("a") as handle:
        handle.write("# mine\n")
    mine = invoke("verify", "clean-room", "--path", str(room), "--no-metrics", "--json")
    assert json.loads(mine.stdout)["clean_room"]["own"] is False
    assert "labctl's own" not in mine.stderr


# -- the budget for a whole room --------------------------------------------------------

SLEEPY = """
import functools as _functools
import time as _time


def _sleepy(function):
    @_functools.wraps(function)
    def slow(*args, **kwargs):
        _time.sleep({seconds})
        return function(*args, **kwargs)

    return slow


for _name in {names!r}:
    globals()[_name] = _sleepy(globals()[_name])
"""


def test_a_room_whose_every_call_sleeps_just_under_the_timeout_ends_at_its_budget(workdir):
    room = copy_of_own(workdir / "sleepy")
    names = list(contract.function_names())
    with (room / "__init__.py").open("a") as handle:
        handle.write(SLEEPY.format(seconds=0.8, names=names))
    start = time.monotonic()
    result = invoke(
        "verify", "clean-room", "--path", str(room), "--timeout", "1", "--budget", "5",
        "--no-metrics", "--json",
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["passed"] is False and doc["status"] == "over-budget"
    assert doc["budget_s"] == 5.0
    # A budget of 5 s, the call running then stopped at it; the rest is start and stop.
    assert elapsed < 5 + 10, elapsed
    assert doc["not_run"] and doc["not_run"] == names[-len(doc["not_run"]) :]
    assert names[-1] in doc["not_run"] and len(doc["not_run"]) >= len(names) - 5
    assert doc["message"].startswith("over the time budget of 5 s: not run: ")
    for check in doc["checks"]:
        if check["function"] in doc["not_run"] and check["name"] not in ("contract",):
            assert check["status"] == "not-run", check
    human = invoke(
        "verify", "clean-room", "--path", str(room), "--timeout", "1", "--budget", "2",
        "--no-metrics",
    )  # fmt: skip
    assert human.exit_code == 1
    assert "over-budget: over the time budget of 2 s: not run: " in human.stdout


@pytest.mark.parametrize("budget", ["0", "-1", "nan"])
def test_a_budget_that_is_not_a_positive_number_is_a_usage_error(workdir, budget):
    result = invoke("verify", "clean-room", "--path", ".", "--budget", budget)
    assert result.exit_code == 2
    assert "--budget must be a positive number of seconds" in result.stderr


def test_the_default_budget_is_stated_in_help():
    result = invoke("verify", "clean-room", "--help")
    flat = " ".join(result.stdout.split())
    assert "--budget" in flat and "120" in flat


@pytest.mark.parametrize("command", ["run", "verify"])
def test_an_entry_of_the_room_that_cannot_be_read_is_named(workdir, monkeypatch, command):
    """A file of mode 000 (to a learner who is not root) or a folder of /proc ended `run
    --clean-room` and `evidence submit` with "internal error: PermissionError"; root reads
    any mode, so the error the kernel gives is given here."""
    from labctl.evidence import room as room_module

    room = copy_of_own(workdir / "my_room")
    (room / "notes.txt").write_text("mine\n")
    digest = room_module._entry_digest

    def refusing(path, mode):
        if path.name == "notes.txt":
            raise PermissionError(13, "Permission denied", str(path))
        return digest(path, mode)

    monkeypatch.setattr(room_module, "_entry_digest", refusing)
    if command == "run":
        args = ["run", "causal-attention", "--clean-room", "my_room", "--out", "out", "--json"]
    else:
        args = ["verify", "clean-room", "--path", "my_room", "--json"]
    result = invoke(*args)
    assert result.exit_code == 1, result.output
    said = json.loads(result.stdout)["error"]["message"]
    assert said == (
        "clean room my_room: cannot read notes.txt (Permission denied); a clean room holds "
        "only files you can read"
    ), said


def test_a_room_named_by_the_wrong_path_lists_ten_names_and_a_count():
    """A room's path set to `.` or `/etc` listed every file there in one problem's line."""
    now = {f"f{i:04d}.py": "0" for i in range(1200)}
    said = str(changes({"attention.py": "1"}, now).message())
    assert said == (
        "added " + ", ".join(f"f{i:04d}.py" for i in range(10)) + " and 1190 more; "
        "removed attention.py"
    )
