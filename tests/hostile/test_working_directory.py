"""Where the grader stands runs nothing and changes no grade.

A grader runs `labctl grade` from wherever they are: inside the class folder a platform's
download made, in the folder above it (beside their clone of labctl, a folder named
`labctl`), or, on Gradescope, inside one learner's upload (`labctl grade gradescope
"$PWD"`). Each of those folders may hold a folder named like a module labctl imports:
`labctl`, `numpy`, `torch`, `yaml`, `clean_room`, `string`, or a file `json.py`. A learner
may name their own folder so. Whatever imported one of them from the working directory
would run it as the grader, outside the sandbox (grading workers started as
`python -m labctl.grade.worker` put the working directory first on their import path).

Each hostile module here writes a marker when it is imported and then hands the import on
to the real module, as an attacker who wants to stay unseen would; a marker is code run.
Every learner hands in labctl's own room, so every row must be graded with full points.
The console script runs, as a grader runs it (not `python -c`, whose own path starts with
the working directory). Under CI=true a missing sandbox fails rather than skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from gradetools import copy_room

from hostile.attacks import require_sandbox

# Every name the issue saw taken from the working directory, and `string`, `json` (stdlib
# modules a worker imports as it starts).
NAMES = ("labctl", "numpy", "torch", "yaml", "clean_room", "string", "json")
# Two function items and one metric: the metric makes the grading worker import torch and
# run a lab, as the default rubric does. Graded from a learner's upload, the room the labs
# run on is the one whose folder holds a torch; elsewhere the functions alone are scored,
# without the labs' seconds (`stances` says why).
RUBRIC = """schema: labctl.rubric.v1
name: working directory
items:
  - {id: fn.softmax, kind: function, target: softmax, points: 4}
  - {id: fn.causal_mask, kind: function, target: causal_mask, points: 4}
  - {id: metric.future_token_invariance, kind: metric, target: future_token_invariance, points: 2}
"""
FUNCTIONS_ONLY = "".join(line for line in RUBRIC.splitlines(True) if "kind: metric" not in line)
FULL, FUNCTIONS_FULL = 10, 8
SHIM = """\
import importlib, os, sys
with open(os.path.join({markers!r}, "{name}"), "a") as _f:
    _f.write(f"{{os.getpid()}} {{os.getuid()}} {{__file__}}\\n")
# step aside, as an attacker who wants to stay unseen would: the real module takes over
_here = os.path.dirname(os.path.abspath(__file__))
if os.path.basename(__file__) == "__init__.py":
    _here = os.path.dirname(_here)
_path = list(sys.path)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
del sys.modules[__name__]
try:
    sys.modules[__name__] = importlib.import_module(__name__)
finally:
    sys.path[:] = _path
"""


def _labctl() -> str:
    """The console script beside this interpreter: what a grader types."""
    found = shutil.which("labctl", path=str(Path(sys.executable).parent))
    assert found, "the labctl console script is not installed beside this Python"
    return found


def plant(folder: Path, name: str, markers: Path) -> None:
    """A module `name` in `folder` that records its import (a package; `json` a file)."""
    code = SHIM.format(markers=str(markers), name=name)
    if name == "json":
        (folder / "json.py").write_text(code, "utf-8")
        return
    (folder / name).mkdir(parents=True, exist_ok=True)
    (folder / name / "__init__.py").write_text(code, "utf-8")


def grade(cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [_labctl(), *args, "--json"],
        cwd=cwd, env={**env, "NO_COLOR": "1"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    try:
        document = json.loads(done.stdout)
    except ValueError:
        document = {}
    return done, document


def flat_room(folder: Path, name: str, markers: Path) -> None:
    """A learner folder that is a correct room, flat (its package's files at the top), and,
    imported by the name of the folder, the module of that name."""
    copy_room(folder)
    init = folder / "__init__.py"
    room = init.read_text("utf-8")
    shim = SHIM.format(markers=str(markers), name=name)
    guarded = f"if __name__ == {name!r}:\n{textwrap.indent(shim, '    ')}"
    init.write_text(f"{guarded}else:\n{textwrap.indent(room, '    ')}", "utf-8")


def _class(root: Path, markers: Path | None = None) -> Path:
    """A class of correct rooms; with `markers`, a learner named after each module, its room
    flat so that its folder is a package of that name (json: a stray file at the top)."""
    root.mkdir(parents=True)
    copy_room(root / "ann" / "clean_room")
    for name in NAMES if markers else ():
        if name == "json":
            plant(root, name, markers)
        else:
            flat_room(root / name, name, markers)
    return root


def _markers(top: Path, stance: str) -> Path:
    markers = top / f"markers-{stance}"
    markers.mkdir()
    markers.chmod(0o777)
    return markers


@pytest.fixture(scope="module")
def stances(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, dict, Path, int]]:
    """Each place a grader stands, graded once: {stance: (process, its --json, markers, the
    full score of its rubric)}."""
    require_sandbox()
    top = tmp_path_factory.mktemp("working-directory")
    rubric, functions = top / "rubric.yaml", top / "functions.yaml"
    rubric.write_text(RUBRIC, "utf-8")
    functions.write_text(FUNCTIONS_ONLY, "utf-8")
    found = {}

    markers = _markers(top, "inside")
    klass = _class(top / "inside" / "submissions", markers)
    # The functions alone, one worker for the whole class: the labs would cost seconds for
    # each of its seven learners, and a worker that took the grader's folder for its import
    # path would run this folder's numpy, json and string as it starts, labs or not. Every
    # worker starts alike, wherever the grader stands: the upload's, which runs the labs,
    # is the one to catch a torch taken from the working directory for them.
    run = grade(
        klass, "grade", "class", ".", "--out", "../grades", "--rubric", str(functions),
        "--jobs", "1",
    )  # fmt: skip
    found["inside the class folder"] = (*run, markers, FUNCTIONS_FULL)

    markers = _markers(top, "above")
    above = top / "above"
    _class(above / "submissions")
    for name in NAMES:
        plant(above, name, markers)
    run = grade(
        above, "grade", "class", "submissions", "--out", "grades", "--rubric", str(functions)
    )
    found["above the class folder"] = (*run, markers, FUNCTIONS_FULL)

    # The layout the issue met: the folder above the class holds the grader's clone of labctl
    # (no __init__.py at its top: a namespace package `labctl` for whatever looks there).
    clone = top / "beside-a-clone"
    _class(clone / "submissions")
    (clone / "labctl").mkdir()
    (clone / "labctl" / "README.md").write_text("# labctl\n", "utf-8")
    (clone / "labctl" / "pyproject.toml").write_text('[project]\nname = "labctl"\n', "utf-8")
    run = grade(
        clone, "grade", "class", "submissions", "--out", "grades", "--rubric", str(functions)
    )
    found["beside a clone of labctl"] = (*run, _markers(top, "clone"), FUNCTIONS_FULL)

    # Inside one learner's upload, as Gradescope's run_autograder stands.
    markers = _markers(top, "upload")
    upload = top / "autograder" / "submission"
    copy_room(upload / "clean_room")
    for name in NAMES:
        if name != "clean_room":  # the upload's own clean_room is the room
            plant(upload, name, markers)
    run = grade(
        upload, "grade", "gradescope", str(upload), "--results", str(top / "results.json"),
        "--work", str(top / "work"), "--rubric", str(rubric),
    )  # fmt: skip
    found["inside a learner's upload"] = (*run, markers, FULL)
    return found


@pytest.mark.parametrize("stance", ["inside the class folder", "above the class folder",
                                    "inside a learner's upload"])  # fmt: skip
@pytest.mark.parametrize("name", NAMES)
def test_a_module_named_like_one_labctl_imports_is_never_run(stances, stance, name):
    done, _, markers, _ = stances[stance]
    marker = markers / name
    ran = marker.read_text("utf-8") if marker.exists() else ""
    assert ran == "", f"{name} in the working directory ran as the grader ({ran.strip()})"


@pytest.mark.parametrize(
    "stance", ["inside the class folder", "above the class folder", "beside a clone of labctl"]
)
def test_every_learner_keeps_full_points_and_the_batch_passes(stances, stance):
    done, document, _, full = stances[stance]
    assert done.returncode == 0, (done.stderr[-3000:], document)
    assert document["passed"] is True
    rows = {row["learner"]: (row["status"], row["score"]) for row in document["rows"]}
    assert rows and set(rows.values()) == {("graded", full)}, rows


def test_the_upload_graded_from_inside_keeps_full_points(stances, tmp_path):
    done, document, _, full = stances["inside a learner's upload"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert document["status"] == "graded"
    results = json.loads(Path(document["results"]).read_text("utf-8"))
    assert results["score"] == full, results
