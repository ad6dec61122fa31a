"""A clean room is source: bytecode never runs, the scan follows no link, escapes stay escaped.

Each test is its own room, verified through CliRunner at both isolation
levels where they differ (the process fallback loads the learner's folder
itself, the sandbox a copy of it). Under CI=true a missing sandbox fails
rather than skips.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gradetools import copy_room
from typer.testing import CliRunner

from hostile.attacks import require_sandbox
from hostile.odd_rooms import bytecode_only, cached_beside_stub
from labctl.cli.main import app

LEVELS = ("sandbox", "process")
ESCAPES = "\\x1b]0;pwned\\x07\\x1b[31mred \\u202eevil\\u202c"
RAW = ("\x1b", "\x07", "\u202e", "\u202c")


def verify(room: Path, level: str, *extra: str):
    if level == "sandbox":
        require_sandbox()
    result = CliRunner().invoke(
        app,
        [
            "verify",
            "clean-room",
            "--path",
            str(room),
            "--no-metrics",
            "--isolation",
            level,
            "--timeout",
            "10",
            "--out",
            str(room.parent / "verify"),
            *extra,
        ],
    )
    assert "Traceback" not in result.output, result.output
    return result


@pytest.mark.parametrize("level", LEVELS)
def test_a_room_of_bytecode_is_refused_with_the_files_named(tmp_path, level):
    room = tmp_path / "clean_room"
    bytecode_only(room)
    result = verify(room, level, "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["passed"] is False
    text = json.dumps(doc)
    assert "primitives.pyc (not-source)" in text and "attention.pyc (not-source)" in text


@pytest.mark.parametrize("level", LEVELS)
def test_correct_bytecode_beside_a_stub_is_never_what_runs(tmp_path, level):
    room = tmp_path / "clean_room"
    cached_beside_stub(room)
    result = verify(room, level, "--json")
    assert result.exit_code == 1, result.output
    checks = json.loads(result.stdout)["checks"]
    runs = next(c for c in checks if c["function"] == "softmax" and c["name"] == "runs")
    assert runs["status"] == "fail" and "NotImplementedError" in json.dumps(runs)


def test_a_link_in_the_rooms_git_folder_is_never_followed(tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text("import torch\n")
    room = copy_room(tmp_path / "clean_room")
    (room / ".git" / "hooks").mkdir(parents=True)
    (room / ".git" / "hooks" / "post.py").symlink_to(outside)
    # Refused in labctl's process before any worker starts: one level says it for both.
    result = verify(room, "process", "--json")
    assert result.exit_code == 1, result.output
    text = json.dumps(json.loads(result.stdout))
    assert ".git/hooks/post.py (symlink)" in text
    assert "imports torch" not in text  # the scan did not read the file the link points to


def test_escapes_in_an_exception_message_are_shown_escaped_on_the_terminal(tmp_path):
    room = copy_room(tmp_path / "clean_room")
    with (room / "primitives.py").open("a", encoding="utf-8") as handle:
        handle.write(f'\n\ndef softmax(x, axis=-1):\n    raise ValueError("{ESCAPES}")\n')
    result = verify(room, "process")
    assert result.exit_code == 1, result.output
    assert not any(c in result.output for c in RAW), [c for c in RAW if c in result.output]
    assert ESCAPES in result.stdout  # escaped, as written in the source
    # --json keeps the exact text, which JSON escapes itself.
    checks = json.loads(verify(room, "process", "--json").stdout)["checks"]
    runs = next(c for c in checks if c["function"] == "softmax" and c["name"] == "runs")
    assert "\x1b]0;pwned\x07\x1b[31mred \u202eevil\u202c" in runs["message"]
