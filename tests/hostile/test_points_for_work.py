"""Points only for work (issue 42): a room whose every function is `raise ValueError`
"refuses every bad input", and before earned the 6 bad-input points of the default rubric
(and the bad-input shares of nothing else). Its own class folder, graded through CliRunner
with the rubric less its lab metrics and submission; beside it labctl's own room, which
earns every point, so the rule is shown to pay for work too."""

from __future__ import annotations

import json
import re

import pytest
from gradetools import copy_room, rubric_without
from typer.testing import CliRunner

from hostile.attacks import require_sandbox
from labctl.cli.main import app
from labctl.verify.stubs import init_clean_room


def refusing_room(room):
    """The `clean-room init` stubs, each raising ValueError instead of NotImplementedError."""
    init_clean_room(room)
    for module in room.glob("*.py"):
        source = module.read_text("utf-8")
        module.write_text(
            re.sub(
                r"raise NotImplementedError\(.*\)$", 'raise ValueError("no")', source, flags=re.M
            ),
            encoding="utf-8",
        )
    return room


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    require_sandbox()
    base = tmp_path_factory.mktemp("refuse-all")
    refusing_room(base / "class" / "refuser" / "clean_room")
    copy_room(base / "class" / "honest" / "clean_room")
    rubric = rubric_without(base, "metric", "submission")
    result = CliRunner().invoke(
        app,
        ["grade", str(base / "class"), "--out", str(base / "out"), "--rubric", str(rubric),
         "--jobs", "2", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return {
        learner: json.loads((base / "out" / "records" / f"{learner}.json").read_text())
        for learner in ("refuser", "honest")
    }


def test_a_room_that_refuses_everything_earns_no_bad_input_points(graded):
    refuser = graded["refuser"]
    checks = refuser["facts"]["verify"]["checks"]
    # The attack is real: bad-input passes for every function, nothing else does.
    assert {c["status"] for c in checks if c["name"] == "bad-input"} == {"pass"}
    item = next(i for i in refuser["items"] if i["id"] == "check.bad-input")
    assert item["points"] == 0 and not item["passed"], item
    functions = sum(1 for c in checks if c["name"] == "bad-input")
    assert f"0 of {functions} functions earn their share" in item["message"]
    assert refuser["score"] == 0


def test_an_honest_room_earns_every_bad_input_point(graded):
    honest = graded["honest"]
    item = next(i for i in honest["items"] if i["id"] == "check.bad-input")
    assert item["points"] == 6 and item["passed"]
    assert honest["score"] == honest["max_score"]
