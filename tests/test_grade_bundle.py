"""`run_autograder` keeps only a results.json labctl wrote.

The script `grade bundle` writes is run as Gradescope would run it, with
AUTOGRADER_ROOT in tmp_path and LABCTL pointed at a fake labctl (a shell script)
that forges Gradescope's results.json where Gradescope reads it, then fails, is
killed, or succeeds with results of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from clitools import invoke

FORGED = {"score": 100, "output": "forged", "tests": []}
GRADED = {"score": 7, "output": "graded by labctl", "tests": []}


@pytest.fixture(scope="module")
def run_autograder(tmp_path_factory) -> str:
    zip_path = tmp_path_factory.mktemp("bundle") / "autograder.zip"
    made = invoke("grade", "bundle", str(zip_path))
    assert made.exit_code == 0, made.output
    with zipfile.ZipFile(zip_path) as archive:
        return archive.read("run_autograder").decode("utf-8")


def fake_labctl(tmp: Path, then: str) -> Path:
    """A labctl that forges $AUTOGRADER_ROOT/results/results.json, writes GRADED to the path
    it is given with --results, then runs `then`."""
    path = tmp / "fake-labctl"
    path.write_text(
        "#!/usr/bin/env bash\n"
        'while [ "$#" -gt 0 ]; do\n'
        '    if [ "$1" = --results ]; then results="$2"; fi\n'
        "    shift\n"
        "done\n"
        f"printf '%s' '{json.dumps(FORGED)}' > \"$AUTOGRADER_ROOT/results/results.json\"\n"
        f"printf '%s' '{json.dumps(GRADED)}' > \"$results\"\n"
        f"{then}\n"
    )
    path.chmod(0o755)
    return path


def run(script: str, tmp: Path, labctl: Path) -> dict:
    root = tmp / "autograder"
    (root / "results").mkdir(parents=True, exist_ok=True)
    (root / "run_autograder").write_text(script, encoding="utf-8")
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), LABCTL=str(labctl), LABCTL_LANG="")
    done = subprocess.run(
        ["bash", str(root / "run_autograder")], env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (root / "results").iterdir()) == ["results.json"]
    return json.loads((root / "results" / "results.json").read_text("utf-8"))


def test_labctl_that_succeeds_is_what_gradescope_reads(run_autograder, tmp_path):
    assert run(run_autograder, tmp_path, fake_labctl(tmp_path, "exit 0")) == GRADED


def test_a_results_json_there_before_the_run_is_removed(run_autograder, tmp_path):
    (tmp_path / "autograder" / "results").mkdir(parents=True)
    (tmp_path / "autograder" / "results" / "results.json").write_text(json.dumps(FORGED))
    quiet = tmp_path / "quiet-labctl"
    quiet.write_text("#!/usr/bin/env bash\nexit 3\n")
    quiet.chmod(0o755)
    assert run(run_autograder, tmp_path, quiet) == {
        "score": 0,
        "output": "The autograder could not grade this submission (labctl exit code 3). "
        "Please tell your instructor.",
        "tests": [],
    }


def test_labctl_that_fails_leaves_a_zero_that_names_the_exit_code(run_autograder, tmp_path):
    got = run(run_autograder, tmp_path, fake_labctl(tmp_path, "exit 1"))
    assert got["score"] == 0 and got["tests"] == []
    assert got["output"] == (
        "The autograder could not grade this submission (labctl exit code 1). "
        "Please tell your instructor."
    )


def test_labctl_killed_leaves_a_zero_that_names_the_signal(run_autograder, tmp_path):
    got = run(run_autograder, tmp_path, fake_labctl(tmp_path, "kill -KILL $$"))
    assert got["score"] == 0 and got["tests"] == []
    assert got["output"] == (
        "The autograder could not grade this submission (labctl was stopped by signal KILL). "
        "Please tell your instructor."
    )
