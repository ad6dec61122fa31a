"""A room over its time budget keeps the points of what ran (issue 39).

One learner: the project's clean room whose tiled_attention sleeps half a second per call,
graded with the default rubric less its submission item and a 8 s `--learner-timeout`, so
the budget runs out inside tiled_attention (it has about 20 calls), long after the first
16 functions passed. Those keep their 4 points each and their shares of bad-input; the
functions the budget left unrun, their shares and the template metrics lose theirs, each
with a whole message.
"""

from __future__ import annotations

import json

import pytest
from gradetools import append, copy_room, rubric_without
from typer.testing import CliRunner

from labctl import contract
from labctl.cli.main import app
from labctl.grade.rubric import load_rubric

SLOW = """
_tiled = tiled_attention


def tiled_attention(q, k, v, block_size, causal=True, scale=None):
    import time

    time.sleep(0.5)
    return _tiled(q, k, v, block_size, causal, scale)
"""


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    base = tmp_path_factory.mktemp("budget")
    append(copy_room(base / "class" / "slow" / "clean_room"), "attention", SLOW)
    rubric = rubric_without(base, "submission")
    result = CliRunner().invoke(
        app,
        ["grade", str(base / "class"), "--out", str(base / "out"), "--rubric", str(rubric),
         "--jobs", "1", "--timeout", "3", "--learner-timeout", "8", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    record = json.loads((base / "out" / "records" / "slow.json").read_text())
    return record, load_rubric(rubric)


def test_functions_that_ran_keep_their_points_over_budget(graded):
    record, rubric = graded
    verify = record["facts"]["verify"]
    assert verify["status"] == "over-budget" and record["status"] == "graded"
    unrun = verify["over_budget"]
    assert "tiled_attention" in unrun and "softmax" not in unrun
    items = {i["id"]: i for i in record["items"]}
    ran = [f for f in contract.function_names() if f not in unrun]
    for function in ran:
        assert items[f"fn.{function}"]["points"] == 4, items[f"fn.{function}"]
    for function in unrun:
        item = items[f"fn.{function}"]
        assert item["points"] == 0 and item["message"] == "not run: over the time budget of 8 s"
    checked = [c["function"] for c in verify["checks"] if c["name"] == "bad-input"]
    share = round(6 * len([f for f in checked if f in ran]) / len(checked), 2)
    assert items["check.bad-input"]["points"] == share
    assert (
        items["package"]["points"] == items["package"]["max_points"] if "package" in items else True
    )
    assert record["score"] == round(4 * len(ran) + share, 2)


def test_every_message_over_budget_is_whole(graded):
    """The metric items said `not measured: the clean room ` (cut off): the room loaded, so
    it had no message of its own to finish the sentence."""
    record, _ = graded
    for item in record["items"]:
        if item["kind"] == "metric":
            assert item["points"] == 0
            assert item["message"] == "not measured: over the time budget of 8 s", item
    assert "tiled_attention" in record["diagnosis"] and "8 s" in record["diagnosis"]
