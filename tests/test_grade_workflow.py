"""A TA's workflow end to end: late work, overrides, the Canvas export, --only and --force.

Three learners, each a copy of the project's clean room (ann, bob, cy), graded with a
20-point rubric due 2026-03-01T23:59:00+08:00 at 10 % per started day (cap 30 %, grace 15
minutes). bob's folder is a git repository whose commit is dated long before the due date:
the TA's times say he handed in 1.5 days late, and that is what counts.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from gittools import GIT
from gradetools import copy_room, one_score_everywhere
from typer.testing import CliRunner

from labctl.cli.main import app

RUBRIC = """schema: labctl.rubric.v1
name: workflow rubric
due: "2026-03-01T23:59:00+08:00"
late: {unit: day, penalty_percent: 10, cap_percent: 30, grace_minutes: 15}
items:
  - {id: fn.softmax, kind: function, target: softmax, points: 10}
  - {id: fn.rope, kind: function, target: rope, points: 10}
"""
# ann inside the grace, bob 1.5 days late (2 started days: 20 %); cy is not listed.
TIMES = "learner,submitted_at\nann,2026-03-02T00:10:00+08:00\nbob,2026-03-03T11:59:00+08:00\n"
OVERRIDES = """schema: labctl.grade-overrides.v1
overrides:
  - learner: cy
    points: -3
    reason: "copied the README of another group"
"""
ROSTER = (
    "learner,Student,ID,SIS User ID,SIS Login ID,Section\n"
    'ann,"Lovelace, Ada",1001,S1001,ada,A\n'
    'bob,"Babbage, Charles",1002,S1002,cb,A\n'
)
CANVAS = {"Lovelace, Ada": "ann", "Babbage, Charles": "bob"}


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return result


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("workflow")
    klass = base / "class"
    for learner in ("ann", "bob", "cy"):
        copy_room(klass / learner / "clean_room")
    env = dict(os.environ, GIT_AUTHOR_DATE="2020-01-01T00:00:00Z")
    env["GIT_COMMITTER_DATE"] = "2020-01-01T00:00:00Z"
    for step in (["init", "-q"], ["add", "clean_room"], ["commit", "-q", "-m", "on time!"]):
        subprocess.run([*GIT, *step], cwd=klass / "bob", env=env, check=True, capture_output=True)
    for name, text in (
        ("rubric.yaml", RUBRIC),
        ("times.csv", TIMES),
        ("overrides.yaml", OVERRIDES),
        ("roster.csv", ROSTER),
    ):
        (base / name).write_text(text, encoding="utf-8")
    out = base / "out"
    first = invoke(*grade_args(base, out), "--json")
    assert first.exit_code == 0, first.output
    return base, out, json.loads(first.stdout), first.stderr


def grade_args(base: Path, out: Path, times: str = "times.csv") -> list[str]:
    return [
        "grade",
        str(base / "class"),
        "--out",
        str(out),
        "--rubric",
        str(base / "rubric.yaml"),
        "--jobs",
        "1",
        "--submitted-at",
        str(base / times),
        "--overrides",
        str(base / "overrides.yaml"),
        "--export",
        "canvas",
        "--roster",
        str(base / "roster.csv"),
        "--assignment",
        "Lab 8 (4242)",
    ]


def gradebook(out: Path) -> dict[str, dict]:
    with (out / "gradebook.csv").open(encoding="utf-8") as handle:
        return {row["learner"]: row for row in csv.DictReader(handle)}


def test_lateness_comes_from_the_tas_times_not_the_learners_git(setup):
    _, out, doc, _ = setup
    rows = {r["learner"]: r for r in doc["rows"]}
    assert rows["ann"]["score"] == 20 and rows["ann"]["late"]["penalty_percent"] == 0
    # bob's commit says 2020; the TA's time says 1.5 days late: 2 started days, 20 %.
    assert rows["bob"]["late"]["units"] == 2 and rows["bob"]["late"]["penalty_percent"] == 20
    assert rows["bob"]["score"] == 16 and rows["bob"]["late_penalty"] == 4
    book = gradebook(out)
    assert book["ann"]["late"] == "on-time" and book["ann"]["late_penalty"] == "0"
    assert book["bob"]["late"] == "2 day" and book["bob"]["late_penalty"] == "4"
    assert book["bob"]["submitted_at"] == "2026-03-03T11:59:00+08:00"
    feedback = json.loads((out / "feedback" / "bob.json").read_text())
    assert feedback["score"] == 16 and feedback["late"]["penalty_percent"] == 20
    results = json.loads((out / "gradescope" / "bob" / "results.json").read_text())
    assert results["score"] == 16 and "2 day(s) late: 20% of the score" in results["output"]


def test_a_learner_missing_from_the_times_is_named_and_treated_as_on_time(setup):
    _, out, doc, stderr = setup
    assert "no submission time for cy: treated as on time" in " ".join(stderr.split())
    assert gradebook(out)["cy"]["late"] == "unknown"
    assert {r["learner"]: r for r in doc["rows"]}["cy"]["late"]["submitted_at"] is None


def test_an_override_is_recorded_and_shown_with_its_reason(setup):
    _, out, doc, _ = setup
    assert {r["learner"]: r for r in doc["rows"]}["cy"]["score"] == 17
    book = gradebook(out)["cy"]
    assert book["adjustment"] == "-3" and "copied the README" in book["adjustment_reasons"]
    feedback = json.loads((out / "feedback" / "cy.json").read_text())
    assert feedback["score"] == 17
    assert feedback["adjustments"] == [
        {"points": -3.0, "reason": "copied the README of another group"}
    ]


def test_the_canvas_export_is_what_canvas_imports(setup):
    _, out, doc, stderr = setup
    assert "canvas.csv" in doc["files"]
    table = list(csv.reader((out / "canvas.csv").open(encoding="utf-8")))
    assert table == [
        ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lab 8 (4242)"],
        ["    Points Possible", "", "", "", "", "20"],
        ["Lovelace, Ada", "1001", "S1001", "ada", "A", "20"],
        ["Babbage, Charles", "1002", "S1002", "cb", "A", "16"],
    ]
    assert "cy is not in the roster" in " ".join(stderr.split())


def test_one_score_everywhere_before_and_after_publishing(setup):
    """Issue 39: `grade publish` showed bob 20 where Canvas had 16 (his late penalty dropped)
    and cy 20 instead of 17 (her override dropped)."""
    base, out, _, _ = setup
    before = one_score_everywhere(out, CANVAS)
    assert before == {"ann": 20, "bob": 16, "cy": 17}
    published = invoke("grade", "publish", str(out), "--rubric", str(base / "rubric.yaml"))
    assert published.exit_code == 0, published.output
    assert one_score_everywhere(out, CANVAS) == before
    feedback = json.loads((out / "feedback" / "bob.json").read_text())
    assert feedback["published"] and feedback["late"]["penalty_percent"] == 20
    assert json.loads((out / "feedback" / "cy.json").read_text())["adjustments"][0]["points"] == -3
    # Graded again into the published folder: the same scores still.
    again = invoke(*grade_args(base, out))
    assert again.exit_code == 0, again.output
    assert one_score_everywhere(out, CANVAS) == before


def test_an_override_past_the_maximum_is_refused_unless_the_rubric_allows_bonus(setup, tmp_path):
    """Issue 39: an override of +50 gave 118/100 without a word."""
    base, out, _, _ = setup
    bonus = tmp_path / "overrides.yaml"
    bonus.write_text(OVERRIDES.replace("learner: cy", "learner: ann").replace("-3", "5"))
    args = grade_args(base, tmp_path / "out")
    args[args.index("--overrides") + 1] = str(bonus)
    refused = invoke(*args)
    assert refused.exit_code == 1, refused.output
    said = " ".join(refused.output.split())
    assert "ann (25)" in said and "outside 0 to 20 points" in said, said
    assert "grade publish refuses the folder" in said, said  # records were rewritten
    assert not (tmp_path / "out" / "gradebook.csv").exists()
    rubric = tmp_path / "bonus.yaml"
    rubric.write_text(RUBRIC + "bonus_points: 5\n")
    args[args.index("--rubric") + 1] = str(rubric)
    allowed = invoke(*args, "--json")
    assert allowed.exit_code == 0, allowed.output
    assert {r["learner"]: r["score"] for r in json.loads(allowed.stdout)["rows"]}["ann"] == 25
    one_score_everywhere(tmp_path / "out", CANVAS)


def test_an_extension_is_one_line_and_needs_no_override(setup, tmp_path):
    """Issue 39: an extension meant an override computed by hand (+20 % of the score) that went
    stale at the next regrade. bob's own due date is a line of --extensions (or a third column
    of the times): his work is on time, and his feedback says whose date counted."""
    base, out, _, _ = setup
    extensions = tmp_path / "extensions.csv"
    extensions.write_text("learner,due_at\nbob,P2D\n")
    done = invoke(*grade_args(base, out), "--extensions", str(extensions), "--json")
    assert done.exit_code == 0, done.output
    rows = {r["learner"]: r for r in json.loads(done.stdout)["rows"]}
    assert rows["bob"]["score"] == 20 and rows["bob"]["late"]["extended"]
    assert rows["bob"]["late"]["due_at"] == "2026-03-03T23:59:00+08:00"
    assert gradebook(out)["bob"]["due_at"] == "2026-03-03T23:59:00+08:00"
    results = json.loads((out / "gradescope" / "bob" / "results.json").read_text())
    assert "own due date (an extension): 2026-03-03T23:59:00+08:00" in results["output"]
    one_score_everywhere(out, CANVAS)
    # The same date as a third column of the times; the two sources disagreeing is refused.
    times = tmp_path / "times.csv"
    times.write_text(TIMES.replace("11:59:00+08:00", "11:59:00+08:00,2026-03-03T12:00:00+08:00"))
    args = grade_args(base, out)
    args[args.index("--submitted-at") + 1] = str(times)
    column = invoke(*args, "--json")
    assert column.exit_code == 0, column.output
    assert {r["learner"]: r["score"] for r in json.loads(column.stdout)["rows"]}["bob"] == 20
    clash = invoke(*args, "--extensions", str(extensions))
    assert clash.exit_code == 1 and "bob has two due dates" in " ".join(clash.output.split())
    # Without them, bob is 2 days late again: nothing was kept by hand.
    assert json.loads(invoke(*grade_args(base, out), "--json").stdout)["rows"][1]["score"] == 16


def test_new_times_change_the_penalty_without_regrading_anyone(setup, tmp_path):
    base, out, _, _ = setup
    (base / "times-late.csv").write_text(TIMES + "cy,2026-03-10T00:00:00Z\n")
    again = invoke(*grade_args(base, out, "times-late.csv"), "--json")
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert doc["graded"] == [] and sorted(doc["skipped"]) == ["ann", "bob", "cy"]
    # 9 started days past the due date: the 30 % cap; then the override's -3.
    assert {r["learner"]: r for r in doc["rows"]}["cy"]["score"] == 20 * 0.7 - 3
    one_score_everywhere(out, CANVAS)


def test_only_regrades_the_learners_named_and_keeps_the_other_rows(setup):
    base, out, _, _ = setup
    # ann's files change: without --only she would be regraded; with --only bob she is not.
    (base / "class" / "ann" / "notes.txt").write_text("changed\n")
    only = invoke(*grade_args(base, out), "--only", "bob", "--json")
    assert only.exit_code == 0, only.output
    doc = json.loads(only.stdout)
    assert doc["graded"] == ["bob"] and sorted(doc["skipped"]) == ["ann", "cy"]
    one_score_everywhere(out, CANVAS)
    # Issue 39: `--only ID --force` regraded the whole class; --only scopes --force too.
    scoped = invoke(*grade_args(base, out), "--only", "bob", "--force", "--json")
    assert scoped.exit_code == 0, scoped.output
    doc = json.loads(scoped.stdout)
    assert doc["graded"] == ["bob"] and sorted(doc["skipped"]) == ["ann", "cy"]
    # --only scopes --seed too: one seed per batch, so a new one with --only is refused.
    reseeded = invoke(*grade_args(base, out), "--only", "bob", "--seed", "7")
    assert reseeded.exit_code == 2 and "--seed 7 with --only" in " ".join(reseeded.output.split())
    forced = invoke(*grade_args(base, out), "--force", "--json")
    assert forced.exit_code == 0, forced.output
    assert sorted(json.loads(forced.stdout)["graded"]) == ["ann", "bob", "cy"]
    one_score_everywhere(out, CANVAS)


def test_a_learner_gone_from_the_class_leaves_no_files_and_nothing_to_publish(setup, tmp_path):
    """A learner removed from the class (or renamed by a digest after a clash) kept its old
    feedback, results and record in OUT, and `grade publish` published them beside the
    batch's: two scores for one learner, one for a learner no longer there."""
    base, out, _, _ = setup
    klass, copy = tmp_path / "class", tmp_path / "out"
    shutil.copytree(base / "class", klass)
    shutil.copytree(out, copy)
    shutil.rmtree(klass / "ann")
    args = ["grade", str(klass), "--out", str(copy), "--rubric", str(base / "rubric.yaml")]
    args += ["--jobs", "1", "--overrides", str(base / "overrides.yaml")]
    result = invoke(*args, "--submitted-at", str(base / "times.csv"))
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert "learners not in this batch: ann" in said
    # times.csv still lists ann: said, not dropped silently (a typo would cancel a penalty)
    assert "submission times for learners not in this class, not used: ann" in said
    for left in ("feedback/ann.json", "records/ann.json", "gradescope/ann"):
        assert not (copy / left).exists(), left
    assert (copy / "feedback" / "bob.json").is_file()
    published = invoke("grade", "publish", str(copy), "--rubric", str(base / "rubric.yaml"))
    assert published.exit_code == 0, published.output
    assert sorted(p.stem for p in (copy / "feedback").glob("*.json")) == ["bob", "cy"]
    one_score_everywhere(copy)


@pytest.mark.parametrize("where", ["class/grades", "class"])
def test_an_out_folder_inside_the_class_folder_is_refused_before_anything_is_written(setup, where):
    """The next run graded OUT's own folders as learners (a `grades` row of 0, the class's
    mean halved)."""
    base, _, _, _ = setup
    out = base / where
    before = sorted(p.name for p in (base / "class").iterdir())
    result = invoke(*grade_args(base, out), "--json")
    assert result.exit_code == 2, result.output
    assert "is inside the class folder" in json.loads(result.stdout)["error"]["message"]
    assert sorted(p.name for p in (base / "class").iterdir()) == before


def test_only_a_learner_the_class_does_not_hold_is_a_usage_error(setup):
    base, out, _, _ = setup
    result = invoke(*grade_args(base, out), "--only", "zoe")
    assert result.exit_code == 2 and "--only: no learner zoe" in result.output


def test_an_override_for_a_learner_the_class_does_not_hold_is_refused(setup, tmp_path):
    base, out, _, _ = setup
    (tmp_path / "overrides.yaml").write_text(OVERRIDES.replace("learner: cy", "learner: zoe"))
    args = grade_args(base, out)
    args[args.index("--overrides") + 1] = str(tmp_path / "overrides.yaml")
    result = invoke(*args)
    assert result.exit_code == 1 and "no learner zoe" in result.output


def test_gradescope_takes_the_time_from_submission_metadata(setup, tmp_path):
    base, _, _, _ = setup
    metadata = tmp_path / "submission_metadata.json"
    # bob's own commit is dated 2020; Gradescope says 1 day 4 hours past due: 2 started days.
    metadata.write_text(json.dumps({"created_at": "2026-03-02T12:00:00.5-08:00"}))
    results = tmp_path / "results.json"
    done = invoke(
        "grade",
        "gradescope",
        str(base / "class" / "bob"),
        "--results",
        str(results),
        "--work",
        str(tmp_path / "work"),
        "--rubric",
        str(base / "rubric.yaml"),
        "--submission-metadata",
        str(metadata),
    )
    assert done.exit_code == 0, done.output
    document = json.loads(results.read_text())
    assert document["score"] == 16 and "2 day(s) late: 20%" in document["output"]
    one_score_everywhere(tmp_path / "work")


def test_on_gradescope_the_learners_own_due_date_rules_over_the_rubric(setup, tmp_path):
    """Issue 39: the bundle baked in the rubric's due date and ignored the assignment's due date
    and the learner's extension in submission_metadata.json."""
    base, _, _, _ = setup
    metadata = tmp_path / "submission_metadata.json"
    document = {
        "created_at": "2026-03-02T12:00:00.5-08:00",  # 2 started days past the rubric's date
        "assignment": {"due_date": "2026-03-01T23:59:00.000000+08:00", "late_due_date": None},
        "users": [{"email": "b@example.edu", "id": 2, "name": "Bob",
                   "assignment": {"due_date": "2026-03-03T00:00:00.000000-08:00"}}],
    }  # fmt: skip
    metadata.write_text(json.dumps(document))

    def graded(work: str) -> dict:
        results = tmp_path / f"{work}.json"
        done = invoke(
            "grade", "gradescope", str(base / "class" / "bob"), "--results", str(results),
            "--work", str(tmp_path / work), "--rubric", str(base / "rubric.yaml"),
            "--submission-metadata", str(metadata),
        )  # fmt: skip
        assert done.exit_code == 0, done.output
        one_score_everywhere(tmp_path / work)
        return json.loads(results.read_text())

    extended = graded("extended")
    assert extended["score"] == 20 and "late" not in extended["output"]
    assert "own due date (an extension): 2026-03-03T00:00:00-08:00" in extended["output"]
    # The assignment's own due date rules over the rubric's too: a day later than the
    # rubric's, bob is 1 started day late, not 2.
    del document["users"]
    document["assignment"]["due_date"] = "2026-03-02T23:59:00+08:00"
    metadata.write_text(json.dumps(document))
    moved = graded("moved")
    assert moved["score"] == 18 and "1 day(s) late: 10%" in moved["output"]
    assert "extension" not in moved["output"]


def test_a_roster_it_refuses_stops_the_run_before_any_learner_is_graded(setup, tmp_path):
    """A roster listing a learner twice was refused only once the class was graded: the
    gradebook was the new run's, canvas.csv and the class page the earlier run's."""
    base, _, _, _ = setup
    roster = tmp_path / "roster.csv"
    roster.write_text(ROSTER + 'bob,"Babbage, Charles",1002,S1002,cb,A\n', encoding="utf-8")
    args = grade_args(base, tmp_path / "out")
    args[args.index("--roster") + 1] = str(roster)
    refused = invoke(*args, "--json")
    assert refused.exit_code == 1, refused.output
    assert "learner bob appears twice" in json.loads(refused.stdout)["error"]["message"]
    assert not (tmp_path / "out" / "records").exists()
    assert not (tmp_path / "out" / "gradebook.csv").exists()


def test_a_run_without_the_export_removes_the_canvas_csv_an_earlier_run_left(setup, tmp_path):
    """An earlier run's canvas.csv stayed in OUT beside a gradebook whose scores had changed
    since, without a word: a TA uploading the file in OUT uploaded old grades."""
    base, out, _, _ = setup
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    assert (copy / "canvas.csv").is_file()
    args = grade_args(base, copy)
    cut = args.index("--export")
    del args[cut : cut + 6]  # --export canvas --roster FILE --assignment NAME
    done = invoke(*args, "--json")
    assert done.exit_code == 0, done.output
    assert not (copy / "canvas.csv").exists()
    assert "canvas.csv" not in json.loads(done.stdout)["files"]
    assert "removed canvas.csv of an earlier run" in " ".join(done.stderr.split())
    again = invoke(*args)  # nothing left to remove: nothing said
    assert again.exit_code == 0 and "removed canvas.csv" not in again.stderr


def test_only_keeps_each_kept_rows_identical_to_as_it_was_graded(setup, tmp_path):
    """`--only ann` worked out every row's identical_to from the folders as they are now:
    cy's kept row, graded as a copy of ann's and bob's rooms, lost them once cy's files
    changed, and a changed room could read as "the same clean room" as a learner whose
    recorded score differs."""
    base, out, _, _ = setup
    klass, copy = tmp_path / "class", tmp_path / "out"
    shutil.copytree(base / "class", klass)
    shutil.copytree(out, copy)
    before = {name: row["identical_to"] for name, row in gradebook(copy).items()}
    assert before["cy"].split() == ["ann", "bob"]
    with (klass / "cy" / "clean_room" / "primitives.py").open("a") as handle:
        handle.write("\n# changed after grading\n")
    args = grade_args(base, copy)
    args[1] = str(klass)
    done = invoke(*args, "--only", "ann", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["graded"] == ["ann"]
    assert {name: row["identical_to"] for name, row in gradebook(copy).items()} == before
    # Graded again, cy's row is its changed room's: no one else's.
    regraded = invoke(*args, "--json")
    assert regraded.exit_code == 0, regraded.output
    assert gradebook(copy)["cy"]["identical_to"] == ""
    assert gradebook(copy)["ann"]["identical_to"] == "bob"


def test_a_run_refused_after_grading_leaves_nothing_for_publish_to_disagree_with(setup, tmp_path):
    """A run refused after grading (an override out of range) had rewritten bob's record
    without his late penalty, and `grade publish` then gave him 20 in his feedback where the
    gradebook, Gradescope and Canvas still said 16. Publish now refuses such a folder until a
    run into it finishes."""
    base, out, _, _ = setup
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    rubric = str(base / "rubric.yaml")
    bad = tmp_path / "overrides.yaml"
    bad.write_text(OVERRIDES.replace("learner: cy", "learner: ann").replace("-3", "5"))
    args = grade_args(base, copy)
    args[args.index("--overrides") + 1] = str(bad)
    refused = invoke(*args, "--only", "bob", "--json")
    assert refused.exit_code == 1, refused.output
    assert json.loads(refused.stdout)["error"]["kind"] == "refused"
    assert gradebook(copy)["bob"]["score"] == "16"
    feedback = (copy / "feedback" / "bob.json").read_bytes()
    published = invoke("grade", "publish", str(copy), "--rubric", rubric, "--json")
    assert published.exit_code == 1, published.output
    error = json.loads(published.stdout)["error"]["message"]
    assert "did not finish" in error and "nothing published" in error, error
    assert (copy / "feedback" / "bob.json").read_bytes() == feedback
    again = invoke(*grade_args(base, copy))
    assert again.exit_code == 0, again.output
    published = invoke("grade", "publish", str(copy), "--rubric", rubric)
    assert published.exit_code == 0, published.output
    assert one_score_everywhere(copy, CANVAS) == {"ann": 20, "bob": 16, "cy": 17}


def test_a_class_refused_before_grading_says_so_in_its_error_alone(tmp_path):
    """The progress bar, stopped without having started, printed an empty line on stderr
    before every error raised while the class was read (here, an empty class folder)."""
    (tmp_path / "class").mkdir()
    result = invoke("grade", str(tmp_path / "class"), "--out", str(tmp_path / "out"), "--json")
    assert result.exit_code == 2, result.output
    # "error:" first (a long path may wrap the line right after it)
    assert result.stderr.startswith("error:"), repr(result.stderr)
    assert "holds no learner folders" in json.loads(result.stdout)["error"]["message"]
