"""Base code earns nothing: labctl's own clean room, or the course's `--base` code, in whole or
in part, as is or rewritten, is flagged in the gradebook, the feedback, summary.json, the
table and at the Canvas export, and its functions score 0.

One class, graded once through CliRunner (the rubric without lab metrics or submission):
labctl's own room as handed in; the same with every local renamed, the comments dropped,
every name in parentheses and an unused statement after every statement; a learner's own
room (`honestrooms`) whose softmax is labctl's, rewritten so; that learner's room as is;
and a learner who handed in the course's starting code (`--base`).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from gradetools import rubric_without
from honestrooms import honest_room, own_copy
from similarityrooms import EINSUM, pad, parenthesise, rename_locals, rewrite_room, write_room
from typer.testing import CliRunner

from labctl import contract
from labctl.cli.main import app

V1 = contract.function_names(1)


def _disguise(text: str) -> str:
    return pad(parenthesise(rename_locals(text)))


def _with_labctls_softmax(room: Path) -> tuple[int, int]:
    """Append labctl's softmax, rewritten, to the learner's primitives.py (the def that wins);
    returns its lines there."""
    return _with_labctls(room, "softmax")


def _with_labctls(room: Path, function: str) -> tuple[int, int]:
    own = own_copy(room.parent / "labctl-room")
    theirs = _disguise((own / "primitives.py").read_text())
    start = theirs.index(f"def {function}(")
    end = theirs.index("\ndef ", start + 1)
    mine = (room / "primitives.py").read_text().rstrip("\n") + "\n\n\n"
    first = mine.count("\n") + 1
    code = theirs[start:end].rstrip("\n") + "\n"
    (room / "primitives.py").write_text(mine + code)
    return first, first + code.count("\n") - 1


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("basecode")
    klass = base / "class"
    own_copy(klass / "own" / "clean_room")
    rewrite_room(klass / "own" / "clean_room", klass / "disguised" / "clean_room", _disguise)
    honest_room(klass / "honest" / "clean_room")
    partial = honest_room(klass / "partial" / "clean_room")
    lines = _with_labctls_softmax(partial)
    starter = write_room(base / "starter", EINSUM)
    write_room(klass / "starter-only" / "clean_room", EINSUM)
    roster = base / "roster.csv"
    roster.write_text(
        "learner,Student,ID,SIS User ID,SIS Login ID,Section\n"
        + "".join(f"{n},{n.title()},{i},,,\n" for i, n in enumerate(sorted(
            ["own", "disguised", "honest", "partial", "starter-only"]), 1))
    )  # fmt: skip
    out = base / "out"
    result = CliRunner().invoke(
        app,
        ["grade", str(klass), "--out", str(out), "--rubric",
         str(rubric_without(base, "metric", "submission")), "--jobs", "2", "--base",
         str(starter), "--export", "canvas", "--roster", str(roster)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    with (out / "gradebook.csv").open(newline="") as handle:
        rows = {r["learner"]: r for r in csv.DictReader(handle)}
    return out, rows, result, lines, starter


def _feedback(out: Path, learner: str) -> dict:
    return json.loads((out / "feedback" / f"{learner}.json").read_text())


@pytest.mark.parametrize("learner", ["own", "disguised"])
def test_labctls_own_room_as_is_or_disguised_earns_nothing_and_is_flagged(graded, learner):
    out, rows, result, _, _ = graded
    row = rows[learner]
    assert row["status"] == "graded"
    assert float(row["score"]) == 0.0, row
    assert all(float(row[f"fn.{name}"]) == 0.0 for name in V1), row
    assert row["base_code"].startswith("the whole clean room: ")
    assert row["base_code"].endswith("(labctl's own clean room)")
    assert set(row["base_code"].split(": ", 1)[1].split(" (")[0].split(", ")) == set(V1)
    feedback = _feedback(out, learner)
    assert feedback["base_code"]["whole"] is True
    assert {f["function"] for f in feedback["base_code"]["functions"]} == set(V1)
    assert {f["source"] for f in feedback["base_code"]["functions"]} == {"labctl"}
    item = next(i for i in feedback["items"] if i["id"] == "fn.softmax")
    assert item["points"] == 0 and item["message"].startswith("base code: softmax (primitives.py")
    assert "is labctl's own clean room's code, not yours: it earns no points" in item["message"]
    said = " ".join(result.stderr.split())
    assert f"canvas.csv: {learner}'s score gives no points to base code" in said


def test_a_learners_room_with_labctls_softmax_loses_that_function_only(graded):
    out, rows, _, lines, _ = graded
    partial, honest = rows["partial"], rows["honest"]
    assert float(partial["fn.softmax"]) == 0.0
    assert partial["base_code"] == "softmax (labctl's own clean room)"
    for name in V1:
        if name != "softmax":
            assert partial[f"fn.{name}"] == honest[f"fn.{name}"], name
    # The rest of its checks judge the learner's own functions: the bad-input item stands.
    assert partial["check.bad-input"] == honest["check.bad-input"] != "0"
    (flagged,) = _feedback(out, "partial")["base_code"]["functions"]
    assert (flagged["function"], flagged["file"], tuple(flagged["lines"])) == (
        "softmax",
        "primitives.py",
        lines,
    )


def test_a_learners_own_room_is_not_base_code(graded):
    out, rows, result, _, _ = graded
    honest = rows["honest"]
    assert honest["base_code"] == ""
    assert all(float(honest[f"fn.{name}"]) == 4.0 for name in V1), honest
    assert "base_code" not in _feedback(out, "honest")
    assert "honest's score gives no points" not in result.stderr


def test_the_courses_starting_code_earns_nothing_and_the_learner_reads_no_path(graded):
    out, rows, _, _, starter = graded
    row = rows["starter-only"]
    assert row["base_code"].endswith(f"({starter})")
    assert float(row["fn.softmax"]) == 0.0 and float(row["score"]) == 0.0
    feedback = _feedback(out, "starter-only")
    assert {f["source"] for f in feedback["base_code"]["functions"]} == {"course"}
    assert str(starter) not in json.dumps(feedback)
    item = next(i for i in feedback["items"] if i["id"] == "fn.softmax")
    assert "is the course's starting code, not yours" in item["message"]
    summary = json.loads((out / "summary.json").read_text())
    flagged = {r["learner"]: r["base_code"] for r in summary["rows"]}
    assert flagged["honest"]["functions"] == [] and flagged["own"]["whole"] is True


def test_a_base_code_function_earns_no_share_of_a_check_item(tmp_path):
    # rope is labctl's in one room, the learner's own in the other: the bad-input item's
    # share for rope goes to no one, and the rest of the item is still earned.
    klass = tmp_path / "class"
    honest_room(klass / "honest" / "clean_room")
    _with_labctls(honest_room(klass / "partial" / "clean_room"), "rope")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["grade", str(klass), "--out", str(out), "--rubric",
         str(rubric_without(tmp_path, "metric", "submission")), "--jobs", "2"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output

    def item(learner: str) -> dict:
        record = json.loads((out / "records" / f"{learner}.json").read_text())
        return next(i for i in record["items"] if i["id"] == "check.bad-input")

    partial, honest = item("partial"), item("honest")
    assert honest["passed"] and honest["points"] == honest["max_points"], honest
    assert not partial["passed"] and 0 < partial["points"] < honest["points"], partial
    assert "no share for base code: rope" in partial["message"], partial["message"]


def _bound_through_globals(room: Path) -> None:
    """Every contract name renamed `NAME_` (defs, calls, imports) and bound to NAME by a
    `globals()[...] =` at the end of each file, which no static reading follows."""
    import ast
    import re

    for path in room.glob("*.py"):
        text = path.read_text()
        for name in V1:
            text = re.sub(rf"(?<![.\w]){name}\b", f"{name}_", text)
        bound = set()
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef):
                bound.add(node.name)
            elif isinstance(node, ast.ImportFrom):
                bound.update(a.asname or a.name for a in node.names)
        held = [n for n in V1 if f"{n}_" in bound]
        path.write_text(text + "\n" + "".join(f'globals()["{n}"] = {n}_\n' for n in held))


def test_a_copy_bound_where_no_static_reading_follows_is_still_base_code(tmp_path):
    """labctl's own room with every def renamed and bound through globals() scored 92/100:
    no `def NAME` was left for the binding to reach, so nothing was judged. A copy of
    labctl's own function of a name is base code wherever it sits and however it is bound."""
    from labctl.fingerprints.base import base_functions, load_base

    room = own_copy(tmp_path / "clean_room")
    _bound_through_globals(room)
    assert "def softmax(" not in (room / "primitives.py").read_text()
    verdict = base_functions(room, list(V1), load_base())
    assert sorted(f.function for f in verdict.functions) == sorted(V1)
    assert verdict.whole


# What honest learners write alike, dictated by the formula: never labctl's code.
TEXTBOOK = """
import numpy as np


def sinusoidal_positions(seq_len, d_model):
    pos = np.arange(seq_len)[:, None]
    i = np.arange(0, d_model, 2)
    ang = pos / 10000.0 ** (i / d_model)
    pe = np.zeros((seq_len, d_model))
    pe[:, 0::2] = np.sin(ang)
    pe[:, 1::2] = np.cos(ang[:, : d_model // 2])
    return pe


def softmax(x, axis=-1):
    arr = np.asarray(x)
    biggest = np.max(arr, axis=axis, keepdims=True)
    biggest = np.where(np.isneginf(biggest), 0, biggest)
    expd = np.exp(arr - biggest)
    total = np.sum(expd, axis=axis, keepdims=True)
    return np.divide(expd, total, out=np.zeros_like(expd), where=total > 0)
"""


def test_short_code_a_formula_dictates_is_not_labctls(tmp_path):
    """The textbook sinusoidal table shared 13 of its 18 fingerprints with labctl's (0.72), a
    six-line stable softmax 8 of 14: both were flagged as labctl's code, not the learner's."""
    from labctl.fingerprints.base import base_functions, load_base

    room = tmp_path / "clean_room"
    room.mkdir()
    (room / "__init__.py").write_text(TEXTBOOK)
    verdict = base_functions(room, list(V1), load_base())
    assert verdict.judged == 2 and verdict.functions == []
