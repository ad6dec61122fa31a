"""`results.json` against Gradescope's autograder specification, and the cause stated once.

The shape is checked key by key against the specification's fields and values
(top level: score, execution_time, output, output_format, test_output_format,
test_name_format, visibility, stdout_visibility, extra_data, tests, leaderboard;
each test: score, max_score, status, name, name_format, number, output,
output_format, tags, visibility, extra_data).
"""

from __future__ import annotations

import pytest

from labctl.grade import outputs
from labctl.grade.rubric import load_rubric
from labctl.grade.score import ItemResult, Row, failed_row

TOP = {
    "score",
    "execution_time",
    "output",
    "output_format",
    "test_output_format",
    "test_name_format",
    "visibility",
    "stdout_visibility",
    "extra_data",
    "tests",
    "leaderboard",
}
TEST = {
    "score",
    "max_score",
    "status",
    "name",
    "name_format",
    "number",
    "output",
    "output_format",
    "tags",
    "visibility",
    "extra_data",
}
FORMATS = {"text", "html", "simple_format", "md", "ansi"}
VISIBILITY = {"visible", "hidden", "after_due_date", "after_published"}


def check_results(doc: dict) -> None:
    """Gradescope's rules for results.json, as the specification states them."""
    assert set(doc) <= TOP, set(doc) - TOP
    assert "score" in doc or all("score" in t for t in doc["tests"])
    assert isinstance(doc["score"], (int, float))
    assert isinstance(doc["output"], str)
    assert doc.get("output_format", "text") in FORMATS
    assert doc.get("stdout_visibility", "hidden") in VISIBILITY
    for test in doc["tests"]:
        assert set(test) <= TEST, set(test) - TEST
        assert isinstance(test["name"], str) and test["name"]
        assert isinstance(test["score"], (int, float)) and isinstance(
            test["max_score"], (int, float)
        )
        assert 0 <= test["score"] <= test["max_score"]
        assert test["status"] in ("passed", "failed")
        assert test["visibility"] in VISIBILITY
        assert test.get("output_format", "text") in FORMATS
        assert isinstance(test["output"], str)
    assert doc["score"] == pytest.approx(sum(t["score"] for t in doc["tests"]))


def test_a_graded_row_meets_the_specification():
    row = Row("ann", "graded", "", "process")
    row.items = [
        ItemResult("fn.softmax", "function", "softmax", 4.0, 4.0, "visible", True, "ok"),
        ItemResult(
            "check.bad-input", "check", "bad-input", 0.0, 6.0, "after_published", False, "no", True
        ),
    ]
    doc = outputs.gradescope_results(row)
    check_results(doc)
    assert doc["output_format"] == "text"
    assert doc["output"] == "labctl: 1 of 1 visible items passed."


@pytest.mark.parametrize("status", ["layout-error", "hang", "crash", "refused"])
def test_a_row_not_graded_states_its_cause_once_at_the_top(status):
    cause = "no clean_room/ folder; upload the folder that holds clean_room/"
    row = failed_row("ann", load_rubric(), status, cause)
    doc = outputs.gradescope_results(row)
    check_results(doc)
    assert doc["output"].count(cause) == 1
    assert doc["output"].startswith(f"{status}: {cause}")
    for test in doc["tests"]:
        assert cause not in test["output"]
        assert test["output"] == f"not graded: {status}"
    assert doc["score"] == 0
