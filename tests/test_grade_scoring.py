"""Scoring policy: what one bug costs under `cascade` and `independent`, and a check that could
not run charged to its own function only.

One class, graded once with the default rubric (metrics on): a room with the catalogued
`no-sqrt-dk` fault (scaled_dot_product_attention forgets √d_k), a room whose
tiled_attention never returns (so its bad-input check is not run), a room that does not
load, a folder without a clean room and a stray file. The rows are then scored again from
their recorded facts under each policy, as the batch's process scores them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from gradetools import append, copy_room
from honestrooms import honest_fault
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.grade.rubric import RubricError, default_rubric_text, parse_rubric
from labctl.grade.score import score

# What the √d_k fault breaks in the clean room: scaled_dot_product_attention and the four
# functions built on it (4 points each), and the two template metrics that see the scale.
BUILT_ON_SDPA = ("multi_head_attention", "attention_decode", "transformer_block", "decoder_forward")
SCALE_METRICS = ("metric.reference_output_max_error", "metric.scale_ablation_max_weight_delta")


def rubric(scoring: str | None):
    data = yaml.safe_load(default_rubric_text())
    if scoring is not None:
        data["scoring"] = scoring
    return parse_rubric(yaml.safe_dump(data, allow_unicode=True))


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> tuple[Path, dict]:
    base = tmp_path_factory.mktemp("scoring")
    klass = base / "class"
    honest_fault("no-sqrt-dk", klass / "scale" / "clean_room")
    room = copy_room(klass / "loop" / "clean_room")
    append(
        room,
        "attention",
        # It never returns, asleep: a busy loop spent its whole --timeout of CPU for nothing.
        "import time\n\n"
        "def tiled_attention(q, k, v, block_size, causal=True, scale=None):\n"
        "    while True:\n        time.sleep(1)",
    )
    broken = copy_room(klass / "syntax" / "clean_room")
    append(broken, "primitives", "def softmax(x, axis=-1)\n    return x")
    (klass / "malformed").mkdir()
    (klass / "stray.txt").write_text("not a learner\n")
    out = base / "out"
    result = CliRunner().invoke(
        app, ["grade", str(klass), "--out", str(out), "--jobs", "1", "--timeout", "3", "--json"]
    )
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def facts(out: Path, learner: str) -> dict:
    return json.loads((out / "records" / f"{learner}.json").read_text())["facts"]


def checked(out: Path, learner: str) -> list[str]:
    """The functions the bad-input check applies to (those with bad inputs in the contract)."""
    return [
        c["function"] for c in facts(out, learner)["verify"]["checks"] if c["name"] == "bad-input"
    ]


def share(out: Path, learner: str, earned: int) -> float:
    """What the bad-input item pays when `earned` of its functions earn their share."""
    return round(6 * earned / len(checked(out, learner)), 2)


def lost(row) -> dict[str, float]:
    return {i.id: round(i.max_points - i.points, 6) for i in row.items if i.points < i.max_points}


def test_a_single_sdpa_scale_bug_costs_24_points_under_cascade(graded):
    out, _ = graded
    row = score("scale", rubric("cascade"), facts(out, "scale"))
    broken = ("scaled_dot_product_attention", *BUILT_ON_SDPA)
    kept = share(out, "scale", len([f for f in checked(out, "scale") if f not in broken]))
    expected = {
        "fn.scaled_dot_product_attention": 4.0,
        **{f"fn.{name}": 4.0 for name in BUILT_ON_SDPA},
        **{metric: 2.0 for metric in SCALE_METRICS},
        "check.bad-input": round(6 - kept, 6),  # the broken functions' shares
        "submission": 8.0,  # the room has no submission
    }
    assert lost(row) == expected
    assert row.score == round(100 - 24 - (6 - kept) - 8, 2)


def test_the_same_bug_costs_8_points_under_independent_and_names_the_dependency(graded):
    out, _ = graded
    row = score("scale", rubric("independent"), facts(out, "scale"))
    kept = share(out, "scale", len(checked(out, "scale")) - 1)  # all but SDPA's own share
    assert lost(row) == {
        "fn.scaled_dot_product_attention": 4.0,
        **{metric: 2.0 for metric in SCALE_METRICS},
        "check.bad-input": round(6 - kept, 6),
        "submission": 8.0,
    }
    assert row.score == round(100 - 8 - (6 - kept) - 8, 2)
    items = {i.id: i for i in row.items}
    for name in BUILT_ON_SDPA:
        message = items[f"fn.{name}"].message
        assert items[f"fn.{name}"].passed and "scoring: independent" in message, message
        assert "scaled_dot_product_attention" in message, message


def test_cascade_is_the_default_and_an_unknown_policy_is_refused(graded):
    out, doc = graded
    assert rubric(None).scoring == "cascade"
    assert {r["learner"]: r["score"] for r in doc["rows"]}["scale"] == score(
        "scale", rubric(None), facts(out, "scale")
    ).score
    with pytest.raises(RubricError, match="scoring"):
        rubric("lenient")


def test_a_check_not_run_is_charged_to_its_own_function_only(graded):
    """tiled_attention hangs: it loses its own item and its share of bad-input, and the other
    functions keep theirs (before the shares, the whole item was kept)."""
    out, _ = graded
    verify = facts(out, "loop")["verify"]
    unrun = [c for c in verify["checks"] if c["status"] == "not-run"]
    assert ("tiled_attention", "bad-input") in {(c["function"], c["name"]) for c in unrun}
    for policy in ("cascade", "independent"):
        row = score("loop", rubric(policy), facts(out, "loop"))
        items = {i.id: i for i in row.items}
        kept = share(out, "loop", len(checked(out, "loop")) - 1)
        assert items["check.bad-input"].points == kept
        assert "not run for: tiled_attention" in items["check.bad-input"].message
        assert lost(row) == {
            "fn.tiled_attention": 4.0,
            "check.bad-input": round(6 - kept, 6),
            "submission": 8.0,
        }


def test_a_check_earns_a_share_only_for_a_function_seen_to_work(graded):
    """Points only for work (issue 42): under cascade the five functions the √d_k fault breaks
    earn no bad-input share; under independent the four built on SDPA are not charged, so
    they earn theirs."""
    out, _ = graded
    broken = {"scaled_dot_product_attention", *BUILT_ON_SDPA}
    functions = checked(out, "scale")
    assert broken <= set(functions)  # each of them refuses bad input: the shares are theirs
    cascade = {i.id: i for i in score("scale", rubric("cascade"), facts(out, "scale")).items}
    assert cascade["check.bad-input"].points == share(out, "scale", len(functions) - 5)
    assert "fails its own checks" in cascade["check.bad-input"].message
    independent = score("scale", rubric("independent"), facts(out, "scale")).items
    assert {i.id: i for i in independent}["check.bad-input"].points == share(
        out, "scale", len(functions) - 1
    )


def test_a_check_that_ran_for_no_function_earns_nothing():
    checks = [
        {"function": f, "name": "bad-input", "status": "not-run", "message": "not run: x"}
        for f in ("softmax", "rope")
    ]
    verify = {
        "status": "loaded",
        "message": "",
        "checks": checks,
        "diagnosis": [],
        "metrics": [],
    }
    row = score("ann", rubric("cascade"), {"error": None, "verify": verify})
    item = next(i for i in row.items if i.id == "check.bad-input")
    assert not item.passed and item.points == 0 and "could not run" in item.message


def test_a_room_that_does_not_load_is_not_loaded_not_graded(graded):
    _, doc = graded
    rows = {r["learner"]: r for r in doc["rows"]}
    assert rows["syntax"]["status"] == "not-loaded" and rows["syntax"]["score"] == 0
    assert rows["malformed"]["status"] == "layout-error"
    assert "stray.txt" not in rows and doc["ignored"] == [{"name": "stray.txt", "kind": "file"}]
    assert doc["statuses"] == {"graded": 2, "not-loaded": 1, "layout-error": 1}
    assert sum(doc["statuses"].values()) == doc["learners"] == 4
    # The mean is over the four learners' rows; the stray file is no row.
    assert doc["mean_score"] == round(sum(r["score"] for r in doc["rows"]) / 4, 6)


def test_the_summary_line_counts_add_up(graded, tmp_path):
    out, _ = graded
    klass = out.parent / "class"
    result = CliRunner().invoke(app, ["grade", str(klass), "--out", str(out), "--timeout", "3"])
    assert result.exit_code == 0, result.output
    line = " ".join(result.stdout.split())
    assert (
        "4 learners (2 graded, 1 layout-error, 1 not-loaded; 0 graded in this run, 4 unchanged"
        in line
    ), line


@pytest.mark.parametrize("points", [33.333333, 0.125])
def test_points_finer_than_a_cent_are_refused(points):
    """Scores are kept to the cent: three items of 33.333333 gave a full score of 100 out of a
    maximum of 99.999999 (gradebook, canvas.csv's Points Possible), and an item of 0.125 a
    score of 0.12 beside its 0.125."""
    data = yaml.safe_load(default_rubric_text())
    data["items"][0]["points"] = points
    with pytest.raises(RubricError, match="finer than a cent"):
        parse_rubric(yaml.safe_dump(data))
    data["items"][0]["points"] = 33.33
    data["bonus_points"] = points
    with pytest.raises(RubricError, match="finer than a cent"):
        parse_rubric(yaml.safe_dump(data))
