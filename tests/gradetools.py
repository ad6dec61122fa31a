"""A generated class for the grading tests: one learner per case the grader must handle.

Every learner's clean room is a learner's own correct room (`honestrooms`:
labctl's own, rewritten, since labctl's own room is base code and earns
nothing), or a catalogued fault of it (`labctl.faults`), or a small edit of it; the two learners with a
submission are copies of one small git repository in which the course
module's labs ran once, so their submission is a real `evidence template
--fill` (one of them with a claim changed afterwards).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from gittools import git, working_directory
from honestrooms import honest_fault, honest_room
from typer.testing import CliRunner

from labctl import faults, registry
from labctl.cli.main import app
from labctl.evidence.modules import DEFAULT_MODULE, MODULES
from labctl.grade.rubric import default_rubric_text
from labctl.runner import run_labs
from labctl.verify.stubs import init_clean_room

ROOM = faults.project_clean_room()
# A fault per kind of check: a course-table fault, stability, purity, a RoPE fault, and one
# only the hidden bad-input item catches.
FAULTS = ("mask-reversed", "softmax-no-max", "layer-norm-in-place", "rope-half-split")
HIDDEN_ONLY = "window-unchecked"
# The learner-level limit of a class of rooms that verify (no learner of such a class is meant
# to reach it): a whole room's verify, with a float32 probe per fixture and the call traces,
# took up to 19.5 s on two busy cores, so the limit is twice that. A class with submissions to
# re-measure gets the default limit instead (re-measuring runs the labs).
LEARNER_TIMEOUT = "40"
# The limit of a class whose learners never reach verify (a hang at import, an attack at
# import, an import refused by name, no clean room): no call of theirs runs, so the limit
# only sets when the pool stops a learner still loading, `HARD_STOP_AFTER_S` (5 s) past it.
# The others are decided in about a second on two busy cores (the attacker's load, the
# slowest, took 1.0 to 2.0 s), well inside those 7 s; the hanging learner, whose import never
# returns, costs the 7 s, not the 45 s of a 40 s limit. A room's import has --timeout
# (CALL_TIMEOUT, above those 7 s), so it is the pool's stop that ends it.
HANG_TIMEOUT = "2"
CALL_TIMEOUT = 50.0


def copy_room(dest: Path) -> Path:
    """A learner's own correct room (`honestrooms`: labctl's own is base code, worth nothing)."""
    return honest_room(dest)


def append(room: Path, module: str, source: str) -> None:
    with (room / f"{module}.py").open("a", encoding="utf-8") as handle:
        handle.write("\n\n" + source.strip() + "\n")


def rubric_without(tmp: Path, *kinds: str, name: str = "test rubric") -> Path:
    """The default rubric less the items of `kinds` (the lab metrics cost seconds each)."""
    data = yaml.safe_load(default_rubric_text())
    data["name"] = name
    data["items"] = [i for i in data["items"] if i["kind"] not in kinds]
    path = tmp / f"rubric-{'-'.join(kinds) or 'all'}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def submission_repo(root: Path, room: Path | None = None) -> Path:
    """A git repository holding the project's clean room (or `room`), in which the course
    module's labs ran on seed 5, with `submission.yaml` filled from those runs."""
    root.mkdir(parents=True)
    if room is not None:
        shutil.copytree(room, root / "clean_room")
    else:
        # A line of the learner's own: a verbatim copy is labctl's room, which submit refuses.
        append(copy_room(root / "clean_room"), "primitives", "# written by the learner")
    (root / "README.md").write_text("learner repository\n")
    git("init", "-q", cwd=root)
    git("add", "README.md", "clean_room", cwd=root)
    git("commit", "-q", "-m", "init", cwd=root)
    module = next(m for m in MODULES if m.id == DEFAULT_MODULE)
    table = registry.metric_table()
    labs = [
        lab.id for lab in registry.discover() if lab.id in {table[n][0].id for n in module.required}
    ]
    with working_directory(root):
        run_labs(
            labs, seed=5, impl="both", out=Path("evidence/runs"), clean_room=Path("clean_room")
        )
        filled = CliRunner().invoke(
            app, ["evidence", "template", "--module", DEFAULT_MODULE, "--fill"]
        )
    assert filled.exit_code == 0, filled.output
    (root / "submission.yaml").write_text(filled.stdout, encoding="utf-8")
    return root


def fabricate(path: Path) -> str:
    """Change one claim of a submission within its tolerance but beyond what reproduces."""
    data = yaml.safe_load(path.read_text("utf-8"))
    table = registry.metric_table()
    # The largest claim: 1% of it is far beyond what a re-measurement may differ by.
    row = max(
        (r for r in data["metrics"] if not table[r["name"]][1].timing),
        key=lambda r: abs(r["actual"]),
    )
    row["actual"] = row["actual"] * 1.01
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return row["name"]


def build_class(root: Path, repo: Path | None) -> dict[str, str]:
    """The class under `root` and a stray file; returns {learner: what it is}. Its hanging
    learner is in `build_hang_class`, with the rooms that never reach verify."""
    root.mkdir(parents=True)
    cases: dict[str, str] = {}
    if repo is not None:
        shutil.copytree(repo, root / "correct", symlinks=True)
        cases["correct"] = "correct, with a valid submission"
        shutil.copytree(repo, root / "fabricated", symlinks=True)
        cases["fabricated"] = (
            f"fabricated claim: {fabricate(root / 'fabricated' / 'submission.yaml')}"
        )
    copy_room(root / "no-submission" / "clean_room")
    cases["no-submission"] = "correct, no submission"
    for name in (*FAULTS, HIDDEN_ONLY):
        honest_fault(name, root / f"fault-{name}" / "clean_room")
        cases[f"fault-{name}"] = f"fault {name}"
    init_clean_room(root / "stubs" / "clean_room")
    cases["stubs"] = "clean-room init stubs"
    cases.update(crashing_room(root))
    cases.update(_never_verified(root))
    # A file at the top is no learner: listed as ignored, it has no row.
    (root / "stray-file.txt").write_text("not a learner\n")
    return cases


def crashing_room(root: Path) -> dict[str, str]:
    """The learner `crashing` under `root`, whose relu_ffn aborts its clean room's process;
    returns {learner: what it is}."""
    # A crash in a function nothing else is built on, with few calls: each call that ends the
    # clean room's process costs a fresh worker. A crashing softmax takes every function built
    # on it down too (about 70 fresh workers, 12 s of a learner's verify); tiled_attention's
    # calls cost 3 to 5 s, relu_ffn's about 1 s.
    crash = copy_room(root / "crashing" / "clean_room")
    append(crash, "primitives", "import os\n\ndef relu_ffn(x, w1, b1, w2, b2):\n    os.abort()")
    return {"crashing": "relu_ffn aborts the process"}


def build_hang_class(root: Path) -> dict[str, str]:
    """A class of learners that never reach verify, the hanging one among them (graded with
    `HANG_TIMEOUT`); returns {learner: what it is}."""
    root.mkdir(parents=True)
    room = copy_room(root / "hanging" / "clean_room")
    append(room, "primitives", "import time\nwhile True:\n    time.sleep(1)")
    return {"hanging": "never finishes loading", **_never_verified(root)}


def _never_verified(root: Path) -> dict[str, str]:
    attack = copy_room(root / "attacker" / "clean_room")
    append(attack, "primitives", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    torch_room = copy_room(root / "torch-importer" / "clean_room")
    append(torch_room, "primitives", "import torch")
    (root / "malformed").mkdir()
    (root / "malformed" / "notes.txt").write_text("my clean room is on my laptop\n")
    return {
        "attacker": "kills the process that loads it",
        "torch-importer": "imports torch",
        "malformed": "no clean_room/",
    }


def one_score_everywhere(out: Path, canvas: dict[str, str] | None = None) -> dict[str, float]:
    """Every score the batch in `out` shows, compared learner by learner: the gradebook's,
    its record's, summary.json's, Gradescope's results.json, the learner's feedback (the
    gradebook's score wherever the feedback shows every item; else the same rule over the
    items it shows) and, given `canvas` ({Student: learner}), canvas.csv's. Returns
    {files: score}. Fails on the first difference, naming the learner and the file."""
    import csv
    import json

    from labctl.grade.score import points_text

    with (out / "gradebook.csv").open(encoding="utf-8") as handle:
        book = list(csv.DictReader(handle))
    summary = {
        (r["learner"], r["score"]) for r in json.loads((out / "summary.json").read_text())["rows"]
    }
    ids = (
        [c for c in book[0] if c.startswith(("fn.", "check.", "metric.", "package", "submission"))]
        if book
        else []
    )
    scores: dict[str, float] = {}
    for row in book:
        files, score = row["files"], float(row["score"])
        where = f"{row['learner']} ({files})"
        scores[files] = score
        record = json.loads((out / "records" / f"{files}.json").read_text())
        assert record["score"] == score, (where, "record", record["score"], score)
        assert (record["learner"], score) in summary, (where, "summary.json")
        results = json.loads((out / "gradescope" / files / "results.json").read_text())
        assert results["score"] == score, (where, "results.json", results["score"], score)
        assert (
            round(sum(t["score"] for t in results["tests"]), 2)
            == float(sum(float(row[i]) for i in ids if row[i] != ""))
            or not ids
        ), (where, "results.json tests")
        seen = json.loads((out / "feedback" / f"{files}.json").read_text())
        shown = {i["id"] for i in seen["items"]}
        if shown == set(ids):
            assert seen["score"] == score, (where, "feedback", seen["score"], score)
        else:
            points = round(sum(float(row[i]) for i in shown), 6)
            percent = (record.get("late") or {}).get("penalty_percent", 0)
            extra = sum(a["points"] for a in record.get("adjustments") or [])
            expected = round(points - round(points * percent / 100, 2) + extra, 2)
            assert seen["score"] == expected, (where, "feedback (items kept back)", seen["score"])
        assert points_text(score) == row["score"], (where, "gradebook text")
    if canvas is not None:
        with (out / "canvas.csv").open(encoding="utf-8") as handle:
            table = list(csv.reader(handle))[2:]
        by_learner = {r["learner"]: r for r in book}
        for line in table:
            row = by_learner[canvas[line[0]]]
            expected = row["score"] if row["status"] == "graded" else ("", "0")
            assert line[-1] in (expected if isinstance(expected, tuple) else (expected,)), (
                canvas[line[0]],
                "canvas.csv",
                line[-1],
                row["score"],
            )
    return scores
