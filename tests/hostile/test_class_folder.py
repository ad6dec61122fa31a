"""A class folder holding every odd entry at once still grades to a complete gradebook.

One class: a correct learner (labctl's own clean room), two learners who hand
in the untouched `clean-room init` stubs (identical files), a folder whose name
is not UTF-8, a folder nested 1,100 levels deep, a FIFO, a socket and a device
inside learners' folders, a symbolic link in `.git/` and one in `__pycache__/`
pointing outside, a room of bytecode only, a room whose `__pycache__/` holds
the correct bytecode beside a stub, a room whose import raises a message full of
terminal escapes, bidi controls and a byte that is not UTF-8, and at the top a
stray file and a FIFO. Graded once with `labctl grade` through CliRunner (the
rubric without lab metrics or submission, two workers); the tests read that run.
Under CI=true a missing sandbox fails rather than skips.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import stat
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from gradetools import copy_room, rubric_without
from typer.testing import CliRunner

from hostile.attacks import require_sandbox
from hostile.odd_rooms import bytecode_only, cached_beside_stub, nest, unnest
from labctl.cli.main import app
from labctl.grade.layout import stem
from labctl.verify.stubs import init_clean_room

DEPTH = 1_100
BAD_NAME = b"bad-\xff-name"
SHOWN_BAD = "bad-\\xff-name"
# ESC ] (OSC: set the window title), BEL, ESC [ (CSI: red), a right-to-left override, a lone
# surrogate (a byte that is not UTF-8), a formula start after a newline.
HOSTILE_MESSAGE = "\\x1b]0;pwned\\x07\\x1b[31mred \\u202eevil\\u202c \\udcff\\n=cmd|' /C calc'!A0"
RAW = ("\x1b", "\x07", "\u202e", "\u202c")


def file_stem(learner: str) -> str:
    """The name of a learner's output files: from the folder's real name (its bytes)."""
    return stem(os.fsdecode(BAD_NAME)) if learner == SHOWN_BAD else stem(learner)


def build(root: Path, outside: Path) -> dict[str, str]:
    """The class under `root`; returns {learner id as shown: the layout code it must get}."""
    root.mkdir()
    expected = {"correct": "", "stubs-a": "", "stubs-b": "", "cached": "", "escapes": ""}
    copy_room(root / "correct" / "clean_room")
    init_clean_room(root / "stubs-a" / "clean_room")
    init_clean_room(root / "stubs-b" / "clean_room")
    cached_beside_stub(root / "cached" / "clean_room")
    copy_room(root / "escapes" / "clean_room")
    with (root / "escapes" / "clean_room" / "__init__.py").open("a", encoding="utf-8") as handle:
        handle.write(f'\nraise RuntimeError("{HOSTILE_MESSAGE}")\n')

    bytecode_only(root / "bytecode" / "clean_room")
    expected["bytecode"] = "not-source"
    bad = os.path.join(os.fsencode(root), BAD_NAME)
    os.makedirs(os.path.join(bad, b"clean_room"))
    (Path(os.fsdecode(bad)) / "clean_room" / "__init__.py").write_text("")
    expected[SHOWN_BAD] = "bad-id"
    copy_room(root / "deep" / "clean_room")
    nest(root / "deep" / "notes", DEPTH)
    expected["deep"] = "too-deep"
    copy_room(root / "fifo" / "clean_room")
    os.mkfifo(root / "fifo" / "clean_room" / "pipe.py")
    expected["fifo"] = "special-file"
    copy_room(root / "sock" / "clean_room")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(root / "sock" / "s"))
    listener.close()
    expected["sock"] = "special-file"
    try:
        copy_room(root / "device" / "clean_room")
        os.mknod(root / "device" / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
        expected["device"] = "special-file"
    except PermissionError:  # not root: no device can be made, the rest still runs
        pass
    copy_room(root / "git-link" / "clean_room")
    (root / "git-link" / ".git" / "objects").mkdir(parents=True)
    (root / "git-link" / ".git" / "objects" / "pack").symlink_to(outside)
    expected["git-link"] = "symlink"
    copy_room(root / "cache-link" / "clean_room")
    cache = root / "cache-link" / "clean_room" / "__pycache__"
    cache.mkdir()
    (cache / f"primitives.{sys.implementation.cache_tag}.pyc").symlink_to(outside / "secret.pyc")
    expected["cache-link"] = "symlink"

    (root / "stray.txt").write_text("not a learner\n")
    os.mkfifo(root / "top-pipe")
    # A Mac's and a class repository's own entries: neither a learner nor dropped in silence.
    (root / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    copy_room(root / ".zoe" / "clean_room")
    return expected


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    require_sandbox()
    base = tmp_path_factory.mktemp("odd-class")
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret.pyc").write_bytes(b"not for labctl to read")
    expected = build(base / "class", outside)
    out = base / "grades"
    rubric = rubric_without(base, "metric", "submission")
    command = ["grade", str(base / "class"), "--out", str(out), "--rubric", str(rubric)]
    command += ["--jobs", "2", "--timeout", "10"]
    result = CliRunner().invoke(app, [*command, "--json"])
    yield expected, out, result, command
    unnest(base / "class" / "deep" / "notes", DEPTH)


def test_the_batch_finishes_with_one_row_per_learner_folder(graded):
    expected, out, result, _ = graded
    assert "Traceback" not in result.output
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    rows = {r["learner"]: r for r in doc["rows"]}
    assert sorted(rows) == sorted(expected)
    assert doc["learners"] == len(expected) == sum(doc["statuses"].values())
    for learner, code in expected.items():
        record = json.loads((out / "records" / f"{file_stem(learner)}.json").read_text("utf-8"))
        if code:
            assert rows[learner]["status"] == "layout-error", learner
            assert record["layout"]["code"] == code, learner
        elif learner == "escapes":  # its import raises: the room never loads
            assert rows[learner]["status"] == "not-loaded", learner
        else:
            assert rows[learner]["status"] == "graded", learner
    # Stray entries at the top are listed as ignored, not learners, not in the mean.
    assert doc["ignored"] == [
        {"name": ".DS_Store", "kind": "file"},
        {"name": ".zoe", "kind": "hidden-folder"},
        {"name": "stray.txt", "kind": "file"},
        {"name": "top-pipe", "kind": "special-file"},
    ]
    assert "ignored stray.txt (file)" in result.stderr
    assert "ignored .zoe (hidden-folder)" in result.stderr
    mean = sum(r["score"] for r in doc["rows"]) / len(doc["rows"])
    assert doc["mean_score"] == pytest.approx(mean, abs=1e-6)


def test_the_correct_learner_gets_every_function_item(graded):
    _, out, _, _ = graded
    items = json.loads((out / "records" / "correct.json").read_text("utf-8"))["items"]
    functions = [i for i in items if i["kind"] == "function"]
    assert functions and all(i["passed"] for i in functions), [
        i for i in functions if not i["passed"]
    ]


def test_identical_submissions_each_get_their_row_naming_the_other(graded):
    _, out, result, _ = graded
    rows = {r["learner"]: r for r in json.loads(result.stdout)["rows"]}
    assert rows["stubs-a"]["identical_to"] == ["stubs-b"]
    assert rows["stubs-b"]["identical_to"] == ["stubs-a"]
    assert rows["correct"]["identical_to"] == []
    with (out / "gradebook.csv").open(newline="", encoding="utf-8") as handle:
        table = {r["learner"]: r for r in csv.DictReader(handle)}
    assert table["stubs-a"]["identical_to"] == "stubs-b"
    # What a learner reads never names another learner.
    feedback = (out / "feedback" / "stubs-a.json").read_text("utf-8")
    assert "stubs-b" not in feedback


def test_a_name_that_is_not_utf8_is_a_named_row_and_every_output_is_written(graded):
    _, out, result, _ = graded
    shown = SHOWN_BAD
    row = next(r for r in json.loads(result.stdout)["rows"] if r["learner"] == shown)
    assert row["status"] == "layout-error" and "not a learner id" in row["diagnosis"]
    name = file_stem(shown)
    assert name.startswith("invalid-")
    for path in (
        out / "feedback" / f"{name}.json",
        out / "gradescope" / name / "results.json",
        out / "records" / f"{name}.json",
    ):
        json.loads(path.read_text("utf-8"))
    suites = ET.parse(out / "junit.xml").getroot().findall("testsuite")
    assert shown in {s.get("name") for s in suites}
    assert shown in (out / "gradebook.csv").read_text("utf-8")


def test_bytecode_is_never_graded(graded):
    _, out, result, _ = graded
    rows = {r["learner"]: r for r in json.loads(result.stdout)["rows"]}
    assert "primitives.pyc (not-source)" in rows["bytecode"]["diagnosis"]
    assert rows["bytecode"]["score"] == 0
    # The correct bytecode beside a stub softmax is not what runs.
    items = json.loads((out / "records" / "cached.json").read_text("utf-8"))["items"]
    softmax = next(i for i in items if i["id"] == "fn.softmax")
    assert softmax["passed"] is False


def test_learner_text_is_escaped_in_the_gradebook_and_exact_in_json(graded):
    _, out, result, _ = graded
    text = (out / "gradebook.csv").read_text("utf-8")
    assert not any(c in text for c in RAW)
    with (out / "gradebook.csv").open(newline="", encoding="utf-8") as handle:
        row = next(r for r in csv.DictReader(handle) if r["learner"] == "escapes")
    assert "\\x1b]0;pwned\\x07\\x1b[31mred \\u202eevil\\u202c \\udcff\\x0a=cmd" in row["diagnosis"]
    # JSON keeps the exact text; a lone surrogate, which UTF-8 cannot carry, was written
    # `\udcff` as it came from the worker.
    doc = json.loads(result.stdout)
    diagnosis = next(r for r in doc["rows"] if r["learner"] == "escapes")["diagnosis"]
    assert "\x1b]0;pwned\x07\x1b[31mred \u202eevil\u202c \\udcff\n=cmd" in diagnosis
    # The terminal (stderr: progress and warnings) never gets them raw.
    assert not any(c in result.stderr for c in RAW)


def test_the_table_on_the_terminal_escapes_learner_text_and_resumes(graded):
    expected, out, _, command = graded
    again = CliRunner().invoke(app, command, env={"COLUMNS": "400"})
    assert again.exit_code == 0, again.output
    assert not any(c in again.output for c in RAW)
    assert "\\x1b]0;pwned" in again.stdout and SHOWN_BAD in again.stdout
    assert "same clean room as stubs-b" in again.stdout
    # Nothing changed: every learner, the two identical ones included, is read back.
    assert f"{len(expected)} learners (" in again.stdout
    assert f"; 0 graded in this run, {len(expected)} unchanged" in again.stdout


def test_the_resume_key_covers_the_git_payload_not_its_config(tmp_path):
    from labctl.grade.layout import check_learner

    copy_room(tmp_path / "a" / "clean_room")
    git = tmp_path / "a" / ".git"
    (git / "objects" / "ab").mkdir(parents=True)
    (git / "objects" / "ab" / "cdef").write_bytes(b"payload one")
    (git / "config").write_text("[core]\n")
    before = check_learner(tmp_path / "a").inputs_sha256
    (git / "config").write_text("[core]\n\tbare = false\n")
    (git / "index").write_bytes(b"rewritten by git status")
    assert check_learner(tmp_path / "a").inputs_sha256 == before
    (git / "objects" / "ab" / "cdef").write_bytes(b"payload two")
    assert check_learner(tmp_path / "a").inputs_sha256 != before
