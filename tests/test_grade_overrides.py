"""`overrides.yaml` on its own: validated strictly, each adjustment in the learner's outputs."""

from __future__ import annotations

import pytest

from labctl.errors import UsageError
from labctl.grade import outputs
from labctl.grade.overrides import OverridesError, load_overrides
from labctl.grade.score import ItemResult, Row

GOOD = """schema: labctl.grade-overrides.v1
overrides:
  - learner: ann
    points: 2
    reason: "bad-input regraded by hand"
  - learner: ann
    points: -0.5
    reason: "late README"
"""


def test_a_valid_file_gives_each_learner_its_adjustments(tmp_path):
    path = tmp_path / "overrides.yaml"
    path.write_text(GOOD)
    found = load_overrides(path)
    assert [o.points for o in found.of("ann")] == [2, -0.5] and found.of("bob") == []
    found.check_learners(["ann", "bob"], path.name)
    with pytest.raises(OverridesError, match="no learner ann"):
        found.check_learners(["bob"], path.name)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (GOOD.replace('reason: "late README"', 'reason: "  "'), "reason"),
        (GOOD.replace("points: 2", "points: 0"), "points"),
        (GOOD.replace("points: 2", "points: two"), "points"),
        # kept to the cent like every score: 0.125 showed beside a score that moved by 0.12
        (GOOD.replace("points: 2", "points: 0.125"), "finer than a cent"),
        # NaN was refused as "should be at most 1000": it is no number to add
        (GOOD.replace("points: 2", "points: .nan"), "points: should be a finite number"),
        (GOOD.replace("    points: 2\n", ""), "points"),
        (GOOD.replace("    points: 2\n", "    points: 2\n    item: fn.softmax\n"), "item"),
        (GOOD.replace("v1", "v9"), "schema"),
        (GOOD + "  - learner: bob\n    learner: cy\n    points: 1\n    reason: x\n", "twice"),
        ("overrides: [", "not valid YAML"),
    ],
)
def test_a_bad_file_is_refused_by_name(tmp_path, text, reason):
    path = tmp_path / "overrides.yaml"
    path.write_text(text)
    with pytest.raises(OverridesError, match=reason):
        load_overrides(path)


def test_an_overrides_file_that_is_not_yaml_is_one_line_naming_where(tmp_path):
    path = tmp_path / "overrides.yaml"
    path.write_text("overrides:\n  - learner: ann\n  learner: bob\n")
    with pytest.raises(OverridesError) as refused:
        load_overrides(path)
    said = str(refused.value.message)
    assert said.startswith("overrides.yaml is not valid YAML: line 3, column 3: "), said
    assert "\n" not in said


def test_a_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError):
        load_overrides(tmp_path / "nope.yaml")


def test_an_adjustment_reaches_the_score_the_gradebook_and_the_feedback():
    row = Row("ann", "graded", "", "process")
    row.items = [
        ItemResult("fn.softmax", "function", "softmax", 4, 4, "visible", True, "ok"),
        ItemResult("check.bad-input", "check", "bad-input", 0, 6, "hidden", False, "no", True),
    ]
    row.adjustments = [{"points": 2.0, "reason": "bad-input regraded by hand"}]
    assert row.score == 6.0
    feedback = outputs.feedback(row)
    assert feedback["score"] == 6.0 and feedback["adjustments"] == row.adjustments
    gradescope = outputs.gradescope_results(row)
    assert gradescope["score"] == 6.0
    assert "+2 points: bad-input regraded by hand" in gradescope["output"]
    lines = outputs.gradebook_csv([row], _rubric()).splitlines()
    header, values = lines[0].split(","), lines[1].split(",")
    cells = dict(zip(header, values, strict=True))
    assert cells["score"] == "6" and cells["adjustment"] == "2"
    assert cells["adjustment_reasons"] == "bad-input regraded by hand"


def _rubric():
    from labctl.grade.rubric import parse_rubric

    return parse_rubric(
        "schema: labctl.rubric.v1\nname: t\nitems:\n"
        "  - {id: fn.softmax, kind: function, target: softmax, points: 4}\n"
        "  - {id: check.bad-input, kind: check, target: bad-input, points: 6, visibility: hidden}\n"
    )
