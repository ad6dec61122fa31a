"""On Gradescope, learner code never runs as root, nor outside a sandbox unless the grader said so.

The bundle's `run_autograder` is run as Gradescope runs it (as root, AUTOGRADER_ROOT in
tmp_path), with this labctl. The learner's room, at import, rewrites the running
`run_autograder` and leaves a forged results.json: a root worker at the process level
(where bubblewrap cannot start) did both, and the result became 100, "FORGED".

- Without a working sandbox (LABCTL_BWRAP names no binary), `run_autograder` runs
  nothing and leaves 0 points that say why.
- Built with `--allow-process-isolation`, it grades at the process level, where the
  worker is uid 65534: the room can rewrite nothing, and labctl's own result stands.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from clitools import invoke
from gradetools import append, copy_room, rubric_without

ATTACK = """
import os as _os, pathlib as _p
_root = _p.Path({ROOT!r})
try:
    (_root / "run_autograder").write_text("#!/bin/sh\\necho FORGED\\n")
    (_root / "results" / "pwned").write_text("ran as " + str(_os.getuid()))
except OSError:
    pass
"""


def autograder(tmp_path: Path, *options: str) -> Path:
    """The bundle unpacked as Gradescope lays it out, with an attacking submission."""
    if os.geteuid() != 0:
        pytest.skip("Gradescope runs run_autograder as root; this test needs root too")
    root = tmp_path / "autograder"
    rubric = rubric_without(tmp_path, "metric", "submission")
    zip_path = tmp_path / "autograder.zip"
    made = invoke("grade", "bundle", str(zip_path), "--rubric", str(rubric), *options)
    assert made.exit_code == 0, made.output
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(root / "source")
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    (root / "run_autograder").chmod(0o755)
    room = copy_room(root / "submission" / "clean_room")
    append(room, "primitives", ATTACK.replace("{ROOT!r}", repr(str(root))))
    return root


def run(root: Path, **env: str) -> dict:
    environment = dict(
        os.environ,
        AUTOGRADER_ROOT=str(root),
        LABCTL=str(Path(sys.executable).parent / "labctl"),
        LABCTL_LANG="",
        **env,
    )
    done = subprocess.run(
        ["bash", str(root / "run_autograder")],
        cwd=root,
        env=environment,
        capture_output=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return json.loads((root / "results" / "results.json").read_text("utf-8"))


def test_without_a_sandbox_run_autograder_runs_nothing_and_says_why(tmp_path):
    root = autograder(tmp_path)
    script = (root / "run_autograder").read_text("utf-8")
    results = run(root, LABCTL_BWRAP=str(tmp_path / "no-bwrap"))
    assert results["score"] == 0 and results["tests"] == [], results
    assert (
        "only inside a sandbox" in results["output"]
        and "bwrap is not installed" in results["output"]
    ), results["output"]
    assert not (root / "results" / "pwned").exists()
    assert (root / "run_autograder").read_text("utf-8") == script


def test_with_process_isolation_allowed_the_learner_runs_as_nobody(tmp_path):
    root = autograder(tmp_path, "--isolation", "process", "--allow-process-isolation")
    script = (root / "run_autograder").read_text("utf-8")
    results = run(root)
    assert not (root / "results" / "pwned").exists()
    assert (root / "run_autograder").read_text("utf-8") == script
    assert "FORGED" not in json.dumps(results)
    assert results["score"] > 0, results  # labctl graded the (correct) room


def test_a_bundle_for_the_process_level_needs_the_flag_that_says_so(tmp_path):
    made = invoke("grade", "bundle", str(tmp_path / "a.zip"), "--isolation", "process")
    assert made.exit_code == 2 and "--allow-process-isolation" in made.output
