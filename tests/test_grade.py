"""`labctl grade` end to end on a generated class: every row, every output format, no leaks.

The class (tests/gradetools.py) holds a correct learner with a valid
submission, one whose submission has a fabricated claim, one without a
submission, catalogued faults, the `clean-room init` stubs, one that crashes, one that kills the process loading it, one that
imports torch, a folder without a clean room and a stray file. It is graded
once (two workers, with --similarity); the tests read that run's outputs. The
rubric is the default less its lab-metric items (each costs seconds of lab
runs per learner; `test_grade_metrics.py` covers them). The hanging learner is
in `test_grade_parallel.py`'s class of learners that never reach verify, with its own short
time limit.
"""

from __future__ import annotations

import csv
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from gradetools import (
    FAULTS,
    HIDDEN_ONLY,
    build_class,
    copy_room,
    rubric_without,
    submission_repo,
)
from typer.testing import CliRunner

from labctl import faults
from labctl.cli.main import app
from labctl.grade.layout import check_learner
from labctl.grade.outputs import LATE_COLUMNS
from labctl.grade.rubric import load_rubric, parse_rubric
from labctl.grade.runner import GradeOptions, learner_key

HIDDEN_ID = "check.bad-input"
GRADESCOPE_VISIBILITY = {"visible", "hidden", "after_due_date", "after_published"}


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def grade(klass: Path, out: Path, rubric: Path, *extra: str):
    result = invoke(
        "grade",
        str(klass),
        "--out",
        str(out),
        "--rubric",
        str(rubric),
        "--json",
        *extra,
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def klass(tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    base = tmp_path_factory.mktemp("grade")
    repo = submission_repo(base / "repo")
    cases = build_class(base / "class", repo)
    return base / "class", cases, rubric_without(base, "metric")


@pytest.fixture(scope="module")
def graded(klass, tmp_path_factory) -> tuple[Path, dict]:
    root, _, rubric = klass
    out = tmp_path_factory.mktemp("out") / "grades"
    return out, grade(root, out, rubric, "--jobs", "2", "--similarity")


def rows(doc: dict) -> dict[str, dict]:
    return {r["learner"]: r for r in doc["rows"]}


def record(out: Path, learner: str) -> dict:
    return json.loads((out / "records" / f"{learner}.json").read_text())


def items(out: Path, learner: str) -> dict[str, dict]:
    return {i["id"]: i for i in record(out, learner)["items"]}


# -- every row, with its verdict -----------------------------------------------------


def test_every_learner_has_a_row_with_its_expected_verdict(klass, graded):
    _, cases, _ = klass
    out, doc = graded
    found = rows(doc)
    assert sorted(found) == sorted(cases)
    assert doc["graded"] and not doc["skipped"]
    full = doc["max_score"]
    assert found["correct"]["status"] == "graded" and found["correct"]["score"] == full
    assert found["correct"]["isolation"] in ("sandbox", "process")
    assert items(out, "correct")["submission"]["passed"] is True

    fabricated = items(out, "fabricated")
    assert fabricated["submission"]["passed"] is False
    assert "not reproduced" in fabricated["submission"]["message"]
    assert found["fabricated"]["score"] == full - fabricated["submission"]["max_points"]

    missing = items(out, "no-submission")["submission"]
    assert missing["passed"] is False and "no submission" in missing["message"]
    assert found["no-submission"]["score"] == full - missing["max_points"]

    for name in FAULTS:
        fault = faults.get(name)
        got = items(out, f"fault-{name}")
        assert found[f"fault-{name}"]["status"] == "graded"
        assert got[f"fn.{fault.function}"]["passed"] is False, name
        assert found[f"fault-{name}"]["score"] < full - missing["max_points"]
    hidden_only = items(out, f"fault-{HIDDEN_ONLY}")
    assert hidden_only[HIDDEN_ID]["passed"] is False
    assert hidden_only[f"fn.{faults.get(HIDDEN_ONLY).function}"]["passed"] is True

    stubs = items(out, "stubs")
    assert not any(i["passed"] for i in stubs.values())
    assert "not implemented" in found["stubs"]["diagnosis"]

    assert items(out, "crashing")["fn.relu_ffn"]["passed"] is False
    assert "crashes" in found["crashing"]["diagnosis"]
    assert found["crashing"]["status"] == "graded"
    # Under the process fallback the attack kills the grading worker (a crash of this row
    # alone); in a sandbox it cannot see that process, and its clean room does not load.
    assert found["attacker"]["status"] in ("crash", "not-loaded")
    assert found["attacker"]["score"] == 0
    assert found["torch-importer"]["score"] == 0
    assert found["torch-importer"]["status"] == "refused"  # as verify says, not "not-loaded"
    assert "import policy" in found["torch-importer"]["diagnosis"]
    assert found["malformed"]["status"] == "layout-error"
    assert "no clean_room/" in found["malformed"]["diagnosis"]
    assert "stray-file.txt" not in found
    assert doc["ignored"] == [{"name": "stray-file.txt", "kind": "file"}]


def test_every_row_records_its_inputs_digest_and_isolation(graded):
    out, doc = graded
    for learner, row in rows(doc).items():
        data = record(out, learner)
        assert len(data["inputs_sha256"]) in (0, 64)
        assert data["rubric_sha256"] == doc["rubric_sha256"]
        if row["status"] == "graded":
            assert data["isolation"] in ("sandbox", "process")


# -- the formats ---------------------------------------------------------------------


def test_gradebook_csv_has_one_row_per_learner_and_a_column_per_item(klass, graded):
    _, cases, rubric_path = klass
    out, doc = graded
    rubric = yaml.safe_load(rubric_path.read_text())
    with (out / "gradebook.csv").open(newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [r["learner"] for r in table] == sorted(cases)
    ids = [i["id"] for i in rubric["items"]]
    assert list(table[0]) == [
        "learner",
        "status",
        "score",
        "max_score",
        *ids,
        "isolation",
        "diagnosis",
        "identical_to",
        *LATE_COLUMNS,
        "base_code",
        "files",
    ]
    for row in table:
        points = sum(float(row[i]) for i in ids)
        assert points == pytest.approx(float(row["score"]), abs=1e-9)
        assert row["status"] == rows(doc)[row["learner"]]["status"]


def test_junit_xml_has_a_suite_per_learner_and_a_case_per_item(klass, graded):
    _, cases, rubric_path = klass
    out, doc = graded
    n_items = len(yaml.safe_load(rubric_path.read_text())["items"])
    root = ET.parse(out / "junit.xml").getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert sorted(s.get("name") for s in suites) == sorted(cases)
    failures = errors = 0
    for suite in suites:
        cases_ = suite.findall("testcase")
        assert len(cases_) == n_items == int(suite.get("tests"))
        failed = [c for c in cases_ if c.find("failure") is not None]
        errored = [c for c in cases_ if c.find("error") is not None]
        assert len(failed) == int(suite.get("failures"))
        assert len(errored) == int(suite.get("errors"))
        for case in failed + errored:
            element = (
                case.find("failure") if case.find("failure") is not None else case.find("error")
            )
            assert element.text and element.get("message")
        failures, errors = failures + len(failed), errors + len(errored)
        status = rows(doc)[suite.get("name")]["status"]
        assert (len(errored) == n_items) == (status != "graded")
    assert int(root.get("failures")) == failures and int(root.get("errors")) == errors
    assert int(root.get("tests")) == n_items * len(cases)
    correct = next(s for s in suites if s.get("name") == "correct")
    assert not correct.findall("testcase/failure")


def test_gradescope_results_json_keys_and_types(klass, graded):
    _, cases, _ = klass
    out, _ = graded
    for learner in cases:
        data = json.loads((out / "gradescope" / learner / "results.json").read_text())
        assert isinstance(data["score"], (int, float)) and isinstance(data["output"], str)
        assert isinstance(data["tests"], list) and data["tests"]
        for test in data["tests"]:
            assert set(test) >= {"name", "score", "max_score", "status", "output", "visibility"}
            assert isinstance(test["name"], str) and isinstance(test["output"], str)
            assert isinstance(test["score"], (int, float)) and isinstance(
                test["max_score"], (int, float)
            )
            assert test["status"] in ("passed", "failed")
            assert test["visibility"] in GRADESCOPE_VISIBILITY
        assert data["score"] == pytest.approx(sum(t["score"] for t in data["tests"]))


def test_hidden_items_never_reach_what_a_learner_sees(graded):
    out, _ = graded
    learner = f"fault-{HIDDEN_ONLY}"
    hidden = items(out, learner)[HIDDEN_ID]
    assert hidden["passed"] is False and hidden["message"]
    n_visible = sum(1 for i in items(out, learner).values() if i["visibility"] == "visible")
    # The grader's outputs hold it ...
    assert HIDDEN_ID in (out / "gradebook.csv").read_text()
    assert HIDDEN_ID in (out / "junit.xml").read_text()
    # ... the learner's do not: not its name, not its message, not how many there are.
    feedback_text = (out / "feedback" / f"{learner}.json").read_text()
    feedback = json.loads(feedback_text)
    assert HIDDEN_ID not in feedback_text and "bad-input" not in feedback_text
    assert hidden["message"] not in feedback_text
    assert len(feedback["items"]) == n_visible
    assert feedback["max_score"] == sum(i["max_points"] for i in feedback["items"])
    assert feedback["score"] == sum(i["points"] for i in feedback["items"])
    results = json.loads((out / "gradescope" / learner / "results.json").read_text())
    seen = [t for t in results["tests"] if t["visibility"] in ("visible", "after_due_date")]
    seen_text = json.dumps(seen) + results["output"]
    assert "bad-input" not in seen_text and hidden["message"] not in seen_text
    assert f"of {n_visible} visible items" in results["output"]
    kept_back = [t for t in results["tests"] if t["name"] == HIDDEN_ID]
    assert [t["visibility"] for t in kept_back] == ["after_published"]


def test_similarity_counts_the_stubs_as_base_code_and_pairs_the_same_room(graded):
    out, doc = graded
    found = doc["similarity"]
    assert json.loads((out / "similarity.json").read_text()) == found
    rooms = found["rooms"]
    assert rooms["stubs"]["base_share"] == 1.0
    named = {frozenset((p["a"], p["b"])): p for p in found["pairs"]}
    assert not any("stubs" in pair for pair in named)
    # "correct" is "no-submission"'s room with a comment added: every function shared.
    same = named[frozenset(("correct", "no-submission"))]
    assert {m["a_function"] for m in same["shared_functions"]} >= {"softmax", "rope"}
    assert (out / "similarity.html").is_file()


# -- resume --------------------------------------------------------------------------


def test_a_second_run_skips_the_unchanged_and_regrades_a_changed_learner(klass, graded, tmp_path):
    root, cases, rubric = klass
    out, first = graded
    class_copy, out_copy = tmp_path / "class", tmp_path / "grades"
    shutil.copytree(root, class_copy, symlinks=True)
    shutil.copytree(out, out_copy)
    again = grade(class_copy, out_copy, rubric, "--jobs", "1")
    assert again["graded"] == [] and sorted(again["skipped"]) == sorted(cases)
    assert [(r["learner"], r["score"]) for r in again["rows"]] == [
        (r["learner"], r["score"]) for r in first["rows"]
    ]
    # The learner fixes the bug: only that learner is graded again, and now passes.
    fixed = f"fault-{FAULTS[1]}"
    shutil.rmtree(class_copy / fixed / "clean_room")
    copy_room(class_copy / fixed / "clean_room")
    third = grade(class_copy, out_copy, rubric, "--jobs", "1")
    assert third["graded"] == [fixed]
    assert rows(third)[fixed]["score"] > rows(first)[fixed]["score"]
    # A changed rubric, or changed options, is another key: everyone would be graded again.
    learner = check_learner(class_copy / fixed)
    base = load_rubric(rubric)
    data = yaml.safe_load(rubric.read_text())
    data["items"][0]["points"] = 5
    other = parse_rubric(yaml.safe_dump(data))
    key = learner_key(learner, base, GradeOptions())
    assert key == learner_key(check_learner(class_copy / fixed), base, GradeOptions(jobs=7))
    assert key != learner_key(learner, other, GradeOptions())
    assert key != learner_key(learner, base, GradeOptions(timeout_s=3.0))


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("schema: labctl.rubric.v1\nname: x\nname: y\nitems: []\n", "line 3, column 1"),
        ("schema: labctl.rubric.v1\nname: [x\nitems: []\n", "line 3, column 6"),
        ("schema: labctl.rubric.v1\n\tname: x\n", "line 2, column 1"),
    ],
)
def test_a_rubric_that_is_not_yaml_is_one_line_naming_where(tmp_path, text, where):
    """PyYAML's own text (three or four lines, a snippet of the file under a caret) was the
    error as it came, in the terminal and in --json's message alike."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    args = ["grade", str(tmp_path), "--out", str(tmp_path / "grades"), "--rubric", str(bad)]
    result = invoke(*args, "--json")
    assert result.exit_code == 1, result.output
    message = json.loads(result.stdout)["error"]["message"]
    assert message.startswith("bad.yaml is not valid YAML: " + where), message
    assert "\n" not in message
    said = CliRunner().invoke(app, ["--lang", "zh", *args], env={"COLUMNS": "300"})
    assert said.exit_code == 1 and len(said.stderr.strip().splitlines()) == 1, said.stderr
    assert "第 " in said.stderr and " 列：" in said.stderr, said.stderr


def test_a_bad_rubric_is_refused_before_anything_runs(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: labctl.rubric.v1\nname: x\nname: y\nitems: []\n")
    out = tmp_path / "grades"
    result = invoke("grade", str(tmp_path), "--out", str(out), "--rubric", str(bad))
    assert result.exit_code == 1 and "appears twice" in result.output
    bad.write_text(
        "schema: labctl.rubric.v1\nname: x\nitems:\n  - {id: a, kind: function, target: nope, points: 1}\n"
    )
    result = invoke("grade", str(tmp_path), "--out", str(out), "--rubric", str(bad))
    assert result.exit_code == 1 and "needs a target" in result.output
    assert not out.exists()


def test_sandbox_is_refused_where_there_is_none(tmp_path, monkeypatch):
    from labctl.isolation import bwrap

    # A machine without bubblewrap: the probe looks for a binary that does not exist.
    monkeypatch.setenv(bwrap.ENV_BWRAP, "/nonexistent/bwrap")
    bwrap.sandbox_status.cache_clear()
    root = tmp_path / "class"
    copy_room(root / "one" / "clean_room")
    result = invoke(
        "grade",
        str(root),
        "--out",
        str(tmp_path / "grades"),
        "--isolation",
        "sandbox",
        "--rubric",
        str(rubric_without(tmp_path, "metric", "submission")),
    )
    bwrap.sandbox_status.cache_clear()
    assert result.exit_code == 2 and "sandbox" in result.output
    assert not (tmp_path / "grades").exists() or not any((tmp_path / "grades").iterdir())
    # a refused batch prints its error alone, no progress bar of a grading that never began
    assert "grading" not in result.output and "0/?" not in result.output


def test_a_class_folder_that_is_none_is_refused_with_no_progress_bar(tmp_path):
    result = invoke("grade", str(tmp_path / "nodir"), "--out", str(tmp_path / "grades"))
    assert result.exit_code == 2
    said = " ".join(result.output.split())  # the terminal's width folds a long path
    assert said == f"error: {tmp_path / 'nodir'} is not a folder of learner folders"
