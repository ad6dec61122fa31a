"""Every gradebook row names the isolation its learner's code ran under, hang and crash included.

A learner stopped by its time limit, or whose grading worker died, never sent
facts back; its row still says which level the worker resolved before the
learner's code started. Only a learner whose code never ran (a layout error)
has no level. Nor does such a learner leave a file behind: a worker killed at the
limit or by the learner runs no cleanup of its own.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile

import pytest
from gradetools import CALL_TIMEOUT, HANG_TIMEOUT, append, copy_room, rubric_without
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.isolation import resolve_isolation


@pytest.fixture(scope="module")
def klass(tmp_path_factory):
    root = tmp_path_factory.mktemp("isolation") / "class"
    hang = copy_room(root / "hanging" / "clean_room")
    append(hang, "primitives", "import time\nwhile True:\n    time.sleep(1)")
    # Under `process` run by another user this kills the grading worker (a crash row); as
    # root the worker is uid 65534, which may not signal it, and in a sandbox it cannot see
    # that process: only its own clean room fails to load.
    attack = copy_room(root / "attacker" / "clean_room")
    append(attack, "primitives", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    (root / "malformed").mkdir()
    (root / "malformed" / "notes.txt").write_text("no clean room here\n")
    return root, rubric_without(root.parent, "metric", "submission")


@pytest.mark.parametrize("requested", ["auto", "process"])
def test_hang_and_crash_rows_name_the_isolation_used_and_leave_no_files(
    klass, requested, tmp_path, monkeypatch
):
    root, rubric = klass
    level = resolve_isolation(requested)  # its probe's files are this process's, until it exits
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)  # labctl's own temporary files there too
    out = tmp_path / "grades"
    result = CliRunner().invoke(
        app,
        [
            "grade",
            str(root),
            "--out",
            str(out),
            "--rubric",
            str(rubric),
            "--jobs",
            "1",
            "--timeout",
            str(CALL_TIMEOUT),
            "--learner-timeout",
            HANG_TIMEOUT,  # no learner here reaches verify
            "--isolation",
            requested,
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = {r["learner"]: r for r in json.loads(result.stdout)["rows"]}
    assert rows["hanging"]["status"] == "hang"
    if level == "process":
        assert rows["attacker"]["status"] == ("not-loaded" if os.geteuid() == 0 else "crash")
    assert rows["hanging"]["isolation"] == level
    assert rows["attacker"]["isolation"] == level
    # No clean room: nothing ran, so no level is claimed.
    assert rows["malformed"]["status"] == "layout-error"
    assert rows["malformed"]["isolation"] is None

    with (out / "gradebook.csv").open(encoding="utf-8") as handle:
        book = {r["learner"]: r for r in csv.DictReader(handle)}
    assert book["hanging"]["isolation"] == level
    assert book["attacker"]["isolation"] == level
    assert book["malformed"]["isolation"] == ""
    record = json.loads((out / "records" / "hanging.json").read_text("utf-8"))
    assert record["isolation"] == level
    assert sorted(p.name for p in scratch.iterdir()) == []
