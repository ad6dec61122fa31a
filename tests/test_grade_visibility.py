"""Visibility exactly as Gradescope defines it, in `feedback/`, `results.json` and `grade publish`.

`visible` is shown at once, `after_due_date` once the rubric's `due` has passed,
`after_published` once `labctl grade publish` ran, `hidden` never. A tiny class
(one learner, the stubs with a softmax that fails many checks) is graded with a
rubric holding one item of each value, with a due date in the future and in the
past, then published.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.grade import outputs
from labctl.grade.rubric import parse_rubric
from labctl.grade.score import ItemResult, Row, listed, score
from labctl.grade.visibility import Audience, audience
from labctl.verify.stubs import init_clean_room

VALUES = ("visible", "after_due_date", "after_published", "hidden")
ITEM = {
    "visible": "fn.softmax",
    "after_due_date": "fn.causal_mask",
    "after_published": "check.bad-input",
    "hidden": "fn.split_heads",
}
# softmax written to fail many checks at once: it edits its input, drops to float32 and
# never normalises.
MANY_FAULTS = """
def softmax(x, axis=-1):
    np.add(x, 1.0, out=x)
    return np.exp(x).astype(np.float32)
"""


def rubric_text(due: datetime | None) -> str:
    items = [
        {"id": ITEM["visible"], "kind": "function", "target": "softmax", "points": 4},
        {
            "id": ITEM["after_due_date"],
            "kind": "function",
            "target": "causal_mask",
            "points": 4,
            "visibility": "after_due_date",
        },
        {
            "id": ITEM["after_published"],
            "kind": "check",
            "target": "bad-input",
            "points": 6,
            "visibility": "after_published",
        },
        {
            "id": ITEM["hidden"],
            "kind": "function",
            "target": "split_heads",
            "points": 4,
            "visibility": "hidden",
        },
    ]
    data = {"schema": "labctl.rubric.v1", "name": "visibility test", "items": items}
    if due is not None:
        data["due"] = due.isoformat()
    return yaml.safe_dump(data, sort_keys=False)


@pytest.mark.parametrize(
    ("seen", "shown"),
    [
        (Audience(), {"visible"}),
        (Audience(due_passed=True), {"visible", "after_due_date"}),
        (Audience(published=True), {"visible", "after_published"}),
        (Audience(True, True), {"visible", "after_due_date", "after_published"}),
    ],
)
def test_each_value_is_shown_exactly_when_gradescope_shows_it(seen, shown):
    assert {v for v in VALUES if seen.sees(v)} == shown


def test_the_due_date_is_read_with_its_time_zone():
    now = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    due = parse_rubric(rubric_text(datetime(2025, 3, 1, 20, 0, tzinfo=UTC))).due_at
    assert not audience(due, False, now).due_passed
    assert audience(due, False, now + timedelta(hours=9)).due_passed
    # Without a due date, after_due_date items wait for publication.
    assert not audience(None, False, now).due_passed and audience(None, True, now).due_passed
    naive = rubric_text(None).replace("items:", "due: 2025-03-01T20:00:00\nitems:", 1)
    with pytest.raises(Exception, match="timezone"):
        parse_rubric(naive)


def test_the_default_rubric_sends_bad_input_after_published():
    from labctl.grade.rubric import load_rubric

    rubric = load_rubric()
    assert {i.id: i.visibility for i in rubric.items}["check.bad-input"] == "after_published"
    submission = next(i for i in rubric.items if i.kind == "submission")
    assert ".git" in submission.description and "92" in submission.description
    assert rubric.max_score - submission.points == 92


def _grade(klass: Path, out: Path, rubric: Path):
    args = ["grade", str(klass), "--out", str(out), "--rubric", str(rubric), "--jobs", "1"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _feedback(out: Path) -> dict:
    return json.loads((out / "feedback" / "ann.json").read_text())


@pytest.fixture(scope="module")
def klass(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("visibility") / "class"
    room = root / "ann" / "clean_room"
    init_clean_room(room)
    module = room / "transformer_block.py"
    text = module.read_text()
    start = text.index("def softmax(")
    end = text.index("\ndef ", start + 1)
    module.write_text(text[:start] + MANY_FAULTS.strip() + "\n\n" + text[end:])
    return root


@pytest.fixture(scope="module")
def undated(klass, tmp_path_factory) -> Path:
    """The --out of the class graded once with the rubric of no due date, read by the tests
    that need no other; one that changes the folder works on a copy."""
    base = tmp_path_factory.mktemp("undated")
    rubric = base / "rubric.yaml"
    rubric.write_text(rubric_text(None), encoding="utf-8")
    _grade(klass, base / "out", rubric)
    return base / "out"


@pytest.mark.parametrize("due_passed", [False, True])
def test_feedback_respects_the_due_date_and_publication(klass, tmp_path, due_passed):
    now = datetime.now(UTC)
    due = now - timedelta(days=1) if due_passed else now + timedelta(days=30)
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(rubric_text(due), encoding="utf-8")
    out = tmp_path / "out"
    _grade(klass, out, rubric)
    record = json.loads((out / "records" / "ann.json").read_text())
    messages = {i["id"]: i["message"] for i in record["items"]}

    before = _feedback(out)
    expect = {ITEM["visible"]} | ({ITEM["after_due_date"]} if due_passed else set())
    assert {i["id"] for i in before["items"]} == expect
    assert before["published"] is False
    text = json.dumps(before)
    assert ITEM["hidden"] not in text
    assert ITEM["after_published"] not in text and messages[ITEM["after_published"]] not in text
    assert before["max_score"] == 4 * len(expect)

    published = CliRunner().invoke(
        app, ["grade", "publish", str(out), "--rubric", str(rubric), "--json"]
    )
    assert published.exit_code == 0, published.output
    assert json.loads(published.stdout)["due_passed"] is due_passed
    after = _feedback(out)
    assert {i["id"] for i in after["items"]} == expect | {ITEM["after_published"]}
    assert after["published"] is True
    assert ITEM["hidden"] not in json.dumps(after)
    # Nothing was graded again, and a later run into the same folder keeps it published.
    assert json.loads((out / "records" / "ann.json").read_text()) == record
    again = _grade(klass, out, rubric)
    assert again["skipped"] == ["ann"]
    assert _feedback(out) == after

    # Gradescope applies the values itself: each test carries its item's, unchanged.
    results = json.loads((out / "gradescope" / "ann" / "results.json").read_text())
    assert {t["name"]: t["visibility"] for t in results["tests"]} == {ITEM[v]: v for v in VALUES}


def test_publish_refuses_another_rubric_and_a_folder_without_records(undated, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(undated, out)
    other = tmp_path / "other.yaml"
    other.write_text(rubric_text(None).replace("visibility test", "another"), encoding="utf-8")
    refused = CliRunner().invoke(app, ["grade", "publish", str(out), "--rubric", str(other)])
    assert refused.exit_code == 1
    assert "another rubric" in refused.output and "Traceback" not in refused.output
    assert _feedback(out)["published"] is False and not (out / "published.json").exists()
    empty = CliRunner().invoke(app, ["grade", "publish", str(tmp_path / "nothing")])
    assert empty.exit_code == 2 and "run labctl grade into it first" in empty.output


def test_every_failing_check_of_a_function_is_listed(undated):
    out = undated
    facts = json.loads((out / "records" / "ann.json").read_text())["facts"]["verify"]
    failing = [
        c["name"]
        for c in facts["checks"]
        if c["function"] == "softmax" and c["status"] == "fail" and c["name"] != "bad-input"
    ]
    assert len(failing) >= 4, failing
    message = _feedback(out)["items"][0]["message"]
    junit = (out / "junit.xml").read_text()
    # each by name: the first with their details, the rest named after "and N more"
    for name in failing:
        assert re.search(rf"(^|[ ;(\n]){re.escape(name)}(: |,|$|;)", message), name
        assert name in junit


def test_a_long_list_keeps_whole_checks_and_names_the_rest():
    parts = [(f"check-{n}", f"check-{n}: " + "x" * 150) for n in range(8)]
    text = listed(parts)
    assert len(text) <= 600
    kept = [p for p in parts if p[1] in text]
    assert kept == parts[: len(kept)] and len(kept) >= 2
    rest = [name for name, _ in parts[len(kept) :]]
    assert text.endswith(f"and {len(rest)} more: {', '.join(rest)}")
    assert listed(parts[:2]) == "; ".join(text for _, text in parts[:2])
    # a smaller budget (the diagnosis's sentence took the rest) keeps fewer, names all
    short = listed(parts, 300)
    assert len(short) <= 300 + 80 and all(name in short for name, _ in parts)


def _facts(sentence: str) -> dict:
    """What verify found of a tiled_attention failing four checks (bad-input among them)."""
    failing = ("dtype", "finite", "pure", "bad-input")
    checks = [
        {"function": "tiled_attention", "name": n, "status": "fail", "message": f"{n} fails"}
        for n in failing
    ]
    diagnosis = [{"function": "tiled_attention", "kind": "unmatched", "message": sentence}]
    verify = {"status": "loaded", "checks": checks, "diagnosis": diagnosis, "metrics": []}
    return {"error": None, "isolation": "sandbox", "verify": verify}


def _items(visibility: str) -> str:
    return yaml.safe_dump({
        "schema": "labctl.rubric.v1", "name": "t",
        "items": [
            {"id": "fn.tiled_attention", "kind": "function", "target": "tiled_attention",
             "points": 4},
            {"id": "check.bad-input", "kind": "check", "target": "bad-input", "points": 2,
             "visibility": visibility},
        ],
    })  # fmt: skip


def test_a_visible_item_says_nothing_of_a_check_not_shown_yet():
    """The diagnosis's sentence has a clause for each failing check: "it does not refuse bad
    input (block_size=0)" showed through a visible item before bad-input was published."""
    sentence = "tiled_attention: it does not refuse bad input (block_size=0): raise ValueError"
    for visibility, shown in (("after_published", False), ("visible", True)):
        row = score("ann", parse_rubric(_items(visibility)), _facts(sentence))
        message = next(i.message for i in row.items if i.id == "fn.tiled_attention")
        assert (sentence in message) is shown, visibility
        assert all(f"{n}: {n} fails" in message for n in ("dtype", "finite", "pure"))
        assert "bad input" not in message.replace(sentence, "")
        assert row.diagnosis == sentence  # the grader's gradebook keeps it


def test_a_sentence_longer_than_a_list_is_kept_whole_and_every_check_named():
    """An English diagnosis of 666 characters was cut at 600 mid-word ("raise ValueErr…") in
    the gradebook, feedback, JUnit and record, and the checks after it were dropped."""
    sentence = "tiled_attention: " + "; ".join(f"clause {n} says what to change" for n in range(25))
    assert len(sentence) > 700
    row = score("ann", parse_rubric(_items("visible")), _facts(sentence))
    message = next(i.message for i in row.items if i.id == "fn.tiled_attention")
    assert message.startswith(sentence + "\n") and "…" not in message
    assert all(n in message for n in ("dtype", "finite", "pure"))
    assert row.diagnosis == sentence


def test_feedback_of_an_after_due_date_item_waits_for_the_due_date():
    row = Row("ann", "graded", "", "process")
    row.items = [
        ItemResult("a", "function", "softmax", 4.0, 4.0, "visible", True, "ok"),
        ItemResult("b", "function", "rope", 0.0, 4.0, "after_due_date", False, "LATER", True),
    ]
    assert "LATER" not in json.dumps(outputs.feedback(row))
    assert "LATER" in json.dumps(outputs.feedback(row, Audience(due_passed=True)))
