"""The parts of `labctl grade` on their own: rubric, layout, outputs, reference cache, bundle."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import unicodedata
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from gradetools import copy_room, rubric_without
from typer.testing import CliRunner

from labctl import contract
from labctl.cli.main import app
from labctl.grade import outputs
from labctl.grade.layout import check_learner, discover, stem
from labctl.grade.rubric import RubricError, load_rubric, parse_rubric
from labctl.grade.score import ItemResult, Row
from labctl.verify import fixtures, reference_cache
from labctl.verify.stubs import init_clean_room

ROOT = Path(__file__).resolve().parents[1]


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return result


# -- rubric ----------------------------------------------------------------------------


def test_the_default_rubric_scores_every_contract_function_and_every_template_metric():
    rubric = load_rubric()
    assert rubric.max_score == 100
    targets = {i.target for i in rubric.items if i.kind == "function"}
    assert targets == set(contract.function_names())
    assert sum(1 for i in rubric.items if i.kind == "metric") == 5
    assert [i.id for i in rubric.items if i.hidden] == ["check.bad-input"]
    function_item = next(i for i in rubric.items if i.kind == "function")
    assert "bad-input" not in rubric.function_checks(function_item)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("schema: labctl.rubric.v1\nname: a\nname: b\nitems: []\n", "appears twice"),
        ("schema: labctl.rubric.v2\nname: a\nitems: []\n", "schema"),
        ("schema: labctl.rubric.v1\nname: a\nitems: []\n", "items"),
        (
            "schema: labctl.rubric.v1\nname: a\nitems:\n"
            "  - {id: x, kind: metric, target: made_up, points: 1}\n",
            "needs a target",
        ),
        (
            "schema: labctl.rubric.v1\nname: a\nitems:\n  - {id: x, kind: submission, points: 0}\n",
            "greater than 0",
        ),
        (
            "schema: labctl.rubric.v1\nname: a\nitems:\n"
            "  - {id: x, kind: submission, points: 1, visibility: secret}\n",
            "visibility",
        ),
        (
            "schema: labctl.rubric.v1\nname: a\nitems:\n"
            "  - {id: x, kind: submission, points: 1}\n  - {id: x, kind: package, points: 1}\n",
            "appears twice",
        ),
        (
            "schema: labctl.rubric.v1\nname: a\nitems:\n"
            "  - {id: x, kind: submission, points: 1, weight: 2}\n",
            "weight",
        ),
        ("[unclosed", "not valid YAML"),
    ],
)
def test_a_bad_rubric_names_what_is_wrong(text, reason):
    with pytest.raises(RubricError, match=reason):
        parse_rubric(text)


# -- layout ----------------------------------------------------------------------------


def test_layout_errors_are_named_per_learner(tmp_path):
    root = tmp_path / "class"
    copy_room(root / "ok" / "clean_room")
    (root / "ok" / "submission.yaml").write_text("x: 1\n")
    copy_room(root / "two" / "clean_room")
    (root / "two" / "submission.yaml").write_text("x: 1\n")
    (root / "two" / "submission.json").write_text("{}\n")
    (root / "nopkg" / "clean_room").mkdir(parents=True)
    (root / "nopkg" / "clean_room" / "a.py").write_text("x = 1\n")
    copy_room(root / "link" / "clean_room")
    (root / "link" / "clean_room" / "out.py").symlink_to("/etc/hostname")
    (root / "bad  id").mkdir()  # two spaces: a name no platform gives
    found = {learner.id: learner for learner in discover(root)}
    assert found["ok"].error is None and found["ok"].submission.name == "submission.yaml"
    assert len(found["ok"].inputs_sha256) == 64
    assert found["two"].error.code == "two-submissions"
    assert found["nopkg"].error.code == "not-a-package"
    assert found["link"].error.code == "symlink"
    assert found["bad  id"].error.code == "bad-id"
    assert found["bad  id"].stem.startswith("invalid-")


def test_a_flat_upload_is_the_room_when_unambiguous(tmp_path):
    root = tmp_path / "class"
    copy_room(root / "nested" / "clean_room")
    copy_room(root / "flat")  # the room's files at the folder's top, as Gradescope uploads them
    (root / "flat" / "submission.yaml").write_text("x: 1\n")
    (root / "flat" / ".git").mkdir()
    (root / "flat" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    copy_room(root / "both")
    copy_room(root / "both" / "helpers")  # a second package beside the top's __init__.py
    (root / "loose").mkdir()
    (root / "loose" / "attention.py").write_text("x = 1\n")
    found = {learner.id: learner for learner in discover(root)}
    flat, nested = found["flat"], found["nested"]
    assert flat.error is None and flat.clean_room == root / "flat"
    assert flat.submission == root / "flat" / "submission.yaml"
    # the same room either way: its digest leaves out the repository and the submission
    assert flat.room_sha256 == nested.room_sha256 != ""
    assert found["both"].error.code == "ambiguous"
    assert "helpers/" in found["both"].error.message
    assert found["loose"].error.code == "no-clean-room"
    assert "__init__.py at the top" in found["loose"].error.message


def test_a_flat_upload_is_graded_like_the_same_room_in_clean_room(tmp_path):
    root = tmp_path / "class"
    copy_room(root / "nested" / "clean_room")
    copy_room(root / "flat")
    out = tmp_path / "out"
    rubric = rubric_without(tmp_path, "metric", "submission")
    result = CliRunner().invoke(
        app,
        ["grade", "class", str(root), "--out", str(out), "--rubric", str(rubric), "--jobs", "1",
         "--isolation", "process", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = {r["learner"]: r for r in json.loads(result.stdout)["rows"]}
    assert rows["flat"]["status"] == rows["nested"]["status"] == "graded"
    assert rows["flat"]["score"] == rows["nested"]["score"] == rows["flat"]["max_score"]
    assert rows["flat"]["identical_to"] == ["nested"]  # one room, uploaded two ways


def test_learner_ids_are_the_names_platforms_hand_out_nfc(tmp_path):
    """A learner id is Unicode letters, marks and digits (NFC-normalised), single spaces and
    the punctuation of names; files are named by a plain ASCII id itself and by a digest of
    the folder's bytes otherwise. NFC and NFD spellings of one name are one id: both folders
    are refused by name, never two rows of one learner."""
    root = tmp_path / "class"
    decomposed = unicodedata.normalize("NFD", "Zoë")  # as a zip made on macOS names it
    good = ("张三", "Mary Ann Lee", "José", "O'Brien", "ana.b_c-1", "हिन्दी")
    bad = ("x  y", "x ", "-dash", "a\u202eb", "a" * 129, "a\u200db", "a\tb")
    for name in (*good, decomposed, "Zoë", *bad):
        copy_room(root / name / "clean_room")
    learners = discover(root)
    by_folder = {learner.folder.name: learner for learner in learners}
    for name in good:
        assert by_folder[name].error is None and by_folder[name].id == name, name
    assert by_folder["ana.b_c-1"].stem == "ana.b_c-1"
    for name in (decomposed, "Zoë"):
        error = by_folder[name].error
        assert by_folder[name].id == "Zoë" and error.code == "same-id", name
        assert "'Zoe\\u0308'" in error.message and "'Zo\\xeb'" in error.message
    # Two folders whose names normalise alike keep apart in every output file.
    stems = {learner.stem for learner in learners}
    assert len(stems) == len(learners)
    for name in ("张三", "Mary Ann Lee"):
        assert by_folder[name].stem.startswith("learner-") and by_folder[name].stem.isascii()
    for name in bad:
        error = by_folder[name].error
        assert error is not None and error.code == "bad-id", name
        assert "letters and digits (any script), single spaces" in error.message
        assert by_folder[name].stem.startswith("invalid-")


def test_a_folder_named_like_a_digest_never_shares_a_learners_files(tmp_path):
    """Issue 42: a folder named `learner-<digest of 张三>` took 张三's record, feedback and
    Gradescope files; and names alike but for case share one file on macOS and Windows."""
    root = tmp_path / "class"
    for name in ("张三", stem("张三"), "Bob", "bob"):
        copy_room(root / name / "clean_room")
    by_folder = {learner.folder.name: learner for learner in discover(root)}
    assert by_folder[stem("张三")].error is None
    assert by_folder[stem("张三")].stem != by_folder["张三"].stem
    assert len({learner.stem.casefold() for learner in by_folder.values()}) == 4
    assert by_folder["Bob"].stem.startswith("learner-")


def test_the_inputs_digest_follows_the_files_not_git_or_caches(tmp_path):
    room = copy_room(tmp_path / "a" / "clean_room")
    before = check_learner(tmp_path / "a").inputs_sha256
    (room / "__pycache__").mkdir(exist_ok=True)
    (room / "__pycache__" / "x.pyc").write_bytes(b"\0")
    (tmp_path / "a" / ".git").mkdir()
    (tmp_path / "a" / ".git" / "index").write_bytes(b"changed")
    assert check_learner(tmp_path / "a").inputs_sha256 == before
    with (room / "primitives.py").open("a") as handle:
        handle.write("\n# edited\n")
    assert check_learner(tmp_path / "a").inputs_sha256 != before


# -- outputs ---------------------------------------------------------------------------


def _row(message: str) -> Row:
    row = Row("ann", "graded", message, "process")
    row.items = [
        ItemResult("fn.softmax", "function", "softmax", 0.0, 4.0, "visible", False, message)
    ]
    return row


def test_learner_text_cannot_start_a_spreadsheet_formula_or_break_the_xml():
    rubric = parse_rubric(
        "schema: labctl.rubric.v1\nname: a\nitems:\n"
        "  - {id: fn.softmax, kind: function, target: softmax, points: 4}\n"
    )
    nasty = '=HYPERLINK("x")\x1b[2J\x00 <b>&'
    table = list(csv.DictReader(io.StringIO(outputs.gradebook_csv([_row(nasty)], rubric))))
    assert table[0]["diagnosis"] == '\'=HYPERLINK("x")\\x1b[2J\\x00 <b>&'
    root = ET.fromstring(outputs.junit_xml([_row(nasty)]))
    failure = root.find("testsuite/testcase/failure")
    assert "\\x1b" in failure.text and "\\x00" in failure.text and "<b>&" in failure.text


# -- the reference cache ---------------------------------------------------------------


@pytest.fixture
def signing_key(monkeypatch):
    monkeypatch.setenv(reference_cache.KEY_ENV, "5a" * 32)


def test_the_reference_cache_round_trips_and_refuses_a_stale_or_damaged_file(
    tmp_path, signing_key, monkeypatch
):
    fixtures.warm_reference(("softmax", "split_heads"))
    wanted = {
        k: v
        for k, v in fixtures._REFERENCE.items()
        if k[0] == 5 and k[1] in ("softmax", "split_heads")
    }
    assert wanted
    path = reference_cache.save(wanted, 5, tmp_path)
    read: dict = {}
    assert reference_cache.load(read, 5, tmp_path) == len(wanted)
    for key, value in wanted.items():
        got = read[key]
        assert type(got) is type(value)
        for a, b in zip(
            got if isinstance(got, tuple) else (got,),
            value if isinstance(value, tuple) else (value,),
            strict=True,
        ):
            assert a.dtype == b.dtype and np.array_equal(a, b)  # bit for bit: tolerance 0
    # Another seed's outputs are another file: none of these is served for it.
    assert reference_cache.load({}, 6, tmp_path) == 0
    # A damaged file is ignored and named as edited: its signature no longer holds.
    blob = bytearray(path.read_bytes())
    blob[-20] ^= 0xFF
    path.write_bytes(bytes(blob))
    assert reference_cache.load({}, 5, tmp_path) == 0
    assert reference_cache.discard_edited(5, tmp_path) == path and not path.exists()
    # A cache signed with another key (a batch's secrets lost) is another file: not an edit.
    reference_cache.save(wanted, 5, tmp_path)
    monkeypatch.setenv(reference_cache.KEY_ENV, "77" * 32)
    assert reference_cache.load({}, 5, tmp_path) == 0
    assert reference_cache.discard_edited(5, tmp_path) is None


def test_a_process_already_holding_the_outputs_still_writes_the_batchs_file(
    tmp_path, signing_key, monkeypatch
):
    """A second batch at a seed, in a process that computed the outputs for the first: its
    workers get a file too, and do not each import torch to compute them again."""
    fixtures.warm_reference(("softmax",), 5)  # held in this process, no cache asked for
    monkeypatch.setenv(reference_cache.ENV, str(tmp_path / "batch"))
    fixtures.warm_reference(("softmax",), 5)
    read: dict = {}
    assert reference_cache.load(read, 5, tmp_path / "batch") > 0
    assert "softmax" in {key[1] for key in read}
    # The file already holding every output wanted is not written again.
    written = reference_cache.path_of(tmp_path / "batch", 5).stat()
    fixtures.warm_reference(("softmax",), 5)
    again = reference_cache.path_of(tmp_path / "batch", 5).stat()
    assert (again.st_ino, again.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)


def test_the_cache_is_off_unless_asked_for(monkeypatch, tmp_path):
    monkeypatch.delenv(reference_cache.ENV, raising=False)
    assert reference_cache.save({}, 5, None) is None
    assert reference_cache.load({}, 5) == 0
    # A folder without the key is off too: nothing unsigned is written or read.
    monkeypatch.setenv(reference_cache.ENV, str(tmp_path))
    monkeypatch.delenv(reference_cache.KEY_ENV, raising=False)
    assert reference_cache.save({(5, "softmax", "x"): np.zeros(1)}, 5) is None
    assert list(tmp_path.iterdir()) == []


# -- metric items ----------------------------------------------------------------------


def test_metric_items_score_the_template_metrics_on_the_learners_clean_room(tmp_path, monkeypatch):
    """Workers that import torch for the labs compute the reference's outputs on the fixtures
    and write the batch's cache: the batch's own process computes nothing (it would import
    torch for it, a third time, while the workers start)."""
    computed_here: list = []
    warm = fixtures.warm_reference
    monkeypatch.setattr(
        fixtures, "warm_reference", lambda *a, **k: computed_here.append(a) or warm(*a, **k)
    )
    data = yaml.safe_load(rubric_without(tmp_path, "function", "check", "submission").read_text())
    rubric = tmp_path / "metrics.yaml"
    rubric.write_text(yaml.safe_dump(data, sort_keys=False))
    root = tmp_path / "class"
    copy_room(root / "correct" / "clean_room")
    init_clean_room(root / "stubs" / "clean_room")
    result = invoke(
        "grade",
        str(root),
        "--out",
        str(tmp_path / "out"),
        "--rubric",
        str(rubric),
        "--jobs",
        "1",
        "--json",
    )
    assert result.exit_code == 0, result.output
    rows = {r["learner"]: r for r in json.loads(result.stdout)["rows"]}
    assert rows["correct"]["score"] == rows["correct"]["max_score"] == 10
    assert rows["stubs"]["score"] == 0
    record = json.loads((tmp_path / "out" / "records" / "stubs.json").read_text())
    assert all("not measured" in i["message"] or "=" in i["message"] for i in record["items"])
    assert computed_here == []
    assert len(list((tmp_path / "out" / ".reference-cache").glob("reference-*.bin"))) == 1


def test_a_rubric_s_metric_items_are_all_the_labs_run_for(tmp_path):
    """A rubric scoring one template metric runs the one lab that measures it, not the four
    of the template: the learner's record holds that metric alone, and its points."""
    data = yaml.safe_load(rubric_without(tmp_path, "function", "check", "submission").read_text())
    data["items"] = [
        i for i in data["items"] if i["target"] == "residual_ablation_max_output_delta"
    ]
    rubric = tmp_path / "one-metric.yaml"
    rubric.write_text(yaml.safe_dump(data, sort_keys=False))
    root = tmp_path / "class"
    copy_room(root / "correct" / "clean_room")
    args = ["grade", str(root), "--out", str(tmp_path / "out"), "--rubric", str(rubric)]
    result = invoke(*args, "--jobs", "1", "--json")
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)["rows"][0]
    assert row["score"] == row["max_score"] == 2
    record = json.loads((tmp_path / "out" / "records" / "correct.json").read_text())
    measured = [m["name"] for m in record["facts"]["verify"]["metrics"]]
    assert measured == ["residual_ablation_max_output_delta"], measured


# -- the Gradescope bundle -------------------------------------------------------------


def test_the_bundle_runs_as_gradescope_would_run_it(tmp_path):
    rubric = rubric_without(tmp_path, "metric", "submission")
    zip_path = tmp_path / "autograder.zip"
    made = invoke(
        "grade", "bundle", str(zip_path), "--rubric", str(rubric), "--timeout", "5", "--json"
    )
    assert made.exit_code == 0, made.output
    autograder = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path) as archive:
        names = archive.namelist()
        assert {"setup.sh", "run_autograder", "rubric.yaml"} <= set(names)
        assert (
            "labctl-src/pyproject.toml" in names
            and "labctl-src/labctl/data/rubric-default.yaml" in names
        )
        assert not any("__pycache__" in n for n in names)
        archive.extractall(autograder / "source")
        assert archive.getinfo("run_autograder").external_attr >> 16 & 0o111
    baked = load_rubric(autograder / "source" / "rubric.yaml")
    assert baked.sha256() == load_rubric(rubric).sha256()
    shutil.copy(autograder / "source" / "run_autograder", autograder / "run_autograder")
    copy_room(autograder / "submission" / "clean_room")
    env = dict(
        os.environ,
        AUTOGRADER_ROOT=str(autograder),
        LABCTL=str(Path(sys.executable).parent / "labctl"),
    )
    subprocess.run(
        ["bash", str(autograder / "run_autograder")],
        cwd=autograder,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    results = json.loads((autograder / "results" / "results.json").read_text())
    assert results["score"] == load_rubric(rubric).max_score
    assert isinstance(results["output"], str)
    for test in results["tests"]:
        assert set(test) >= {"name", "score", "max_score", "status", "output", "visibility"}
        assert test["status"] == "passed"
    # labctl failing outright still leaves a results.json that says so.
    broken = dict(env, LABCTL=str(tmp_path / "no-such-labctl"))
    (autograder / "results" / "results.json").unlink()
    subprocess.run(
        ["bash", str(autograder / "run_autograder")],
        cwd=autograder,
        env=broken,
        check=True,
        capture_output=True,
        timeout=60,
    )
    fallback = json.loads((autograder / "results" / "results.json").read_text())
    assert fallback["score"] == 0 and "could not grade" in fallback["output"]


def test_labctl_help_and_list_do_not_import_the_grading_stack():
    code = (
        "import sys; from labctl.cli.main import app; "
        "bad = [m for m in ('torch', 'matplotlib', 'copydetect', 'distributed') if m in sys.modules]; "
        "print(bad)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert done.stdout.strip() == "[]"


def test_a_hidden_item_is_absent_from_the_learners_documents():
    row = Row("ann", "graded", "", "process")
    row.items = [
        ItemResult(
            "fn.softmax", "function", "softmax", 4.0, 4.0, "visible", True, "passes every check"
        ),
        ItemResult(
            "secret.probe", "check", "bad-input", 0.0, 6.0, "hidden", False, "SECRET-MESSAGE", True
        ),
    ]
    document = json.dumps(outputs.feedback(row))
    assert "secret.probe" not in document and "SECRET-MESSAGE" not in document
    assert outputs.feedback(row)["max_score"] == 4.0
    results = outputs.gradescope_results(row)
    shown = [t for t in results["tests"] if t["visibility"] == "visible"]
    assert "SECRET" not in json.dumps(shown) + results["output"]
    assert "of 1 visible items" in results["output"]
    assert [t["visibility"] for t in results["tests"] if t["name"] == "secret.probe"] == ["hidden"]


def test_a_rubric_refusal_reads_in_the_graders_language():
    """pydantic's own sentences ('Field required', 'Extra inputs are not permitted') are
    English only: the refusal is worded from each error's kind."""
    from labctl.grade.rubric import RubricError, parse_rubric
    from labctl.i18n import _, set_language

    previous = set_language("zh")
    try:
        with pytest.raises(RubricError) as refused:
            parse_rubric("schema: labctl.rubric.v1\nbogus: 1\n")
        text = _(refused.value.message)
    finally:
        set_language(previous)
    assert "Field required" not in text and "Extra inputs" not in text, text
    assert "bogus: 这里没有这个字段" in text, text


def test_grade_rubric_prints_the_default_as_yaml_or_one_json_document():
    from labctl.grade.rubric import load_rubric, parse_rubric

    runner = CliRunner()
    text = runner.invoke(app, ["grade", "rubric"])
    assert text.exit_code == 0
    assert parse_rubric(text.stdout).dump() == load_rubric().dump()
    document = runner.invoke(app, ["grade", "rubric", "--json"])
    assert document.exit_code == 0
    assert json.loads(document.stdout) == {"passed": True, "rubric": load_rubric().dump()}


def test_a_kept_record_is_compared_by_the_room_it_graded(tmp_path):
    """identical_to for a row `--only` keeps: the room its record graded (kept in the record
    since stop 55); for an older record that names none, the folder's own where the inputs
    are unchanged, else no room at all (never the changed folder's)."""
    from labctl.grade.records import graded_room, identical_rooms

    copy_room(tmp_path / "ann" / "clean_room")
    ann = check_learner(tmp_path / "ann")
    assert graded_room(ann, {"room_sha256": "f" * 64}) == "f" * 64
    assert graded_room(ann, {"inputs_sha256": ann.inputs_sha256}) == ann.room_sha256
    assert graded_room(ann, {"inputs_sha256": "0" * 64}) == ""
    for name in ("bob", "cy"):
        copy_room(tmp_path / name / "clean_room")
    learners = [ann, check_learner(tmp_path / "bob"), check_learner(tmp_path / "cy")]
    assert identical_rooms(learners, ["a", "a", ""]) == [["bob"], ["ann"], []]
