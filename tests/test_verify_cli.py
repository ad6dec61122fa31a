"""`labctl verify clean-room` on the command line: output, JSON, exit codes, course metrics."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labctl import registry
from labctl.cli.main import app
from labctl.errors import UsageError
from labctl.evidence.models import EvidenceRecord
from labctl.evidence.store import EvidenceStore
from labctl.faults import get as get_fault
from labctl.faults import project_clean_room
from labctl.verify.record import read_history
from labctl.verify.verify import verify_clean_room

# Content, not layout, is tested here: a terminal wide enough that no line wraps.
runner = CliRunner(env={"COLUMNS": "300"})


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A scratch working directory, so evidence never lands in the repository."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def causal_lab_only(monkeypatch):
    """The v1 tolerance table cut down to the fast causal-attention lab (as if the others were
    still being written): two template metrics measurable, three not yet."""
    table = {
        name: entry
        for name, entry in registry.metric_table().items()
        if entry[0].id == "causal-attention"
    }
    monkeypatch.setattr(registry, "metric_table", lambda: table)
    monkeypatch.setattr(
        registry, "measuring", lambda names: {n: table[n] for n in names if n in table}
    )


def test_json_is_one_document_with_the_issues_fields(workdir):
    result = runner.invoke(
        app,
        ["verify", "clean-room", "--path", str(project_clean_room()), "--json", "--no-metrics"],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["passed"] is True
    assert document["diagnosis"] == []
    assert document["tolerances"] == "v1"
    for item in document["checks"]:
        assert {"function", "name", "passed", "max_error", "message"} <= set(item)
        assert isinstance(item["passed"], bool)
        assert item["max_error"] is None or isinstance(item["max_error"], (int, float))
    parity = [c for c in document["checks"] if c["name"] == "parity"]
    assert len(parity) == 19 and all(c["margin"] < 1 for c in parity)
    assert document["records"] and not any(r.startswith("/") for r in document["records"])
    assert (workdir / "evidence" / "verify" / "history.jsonl").exists()


def test_human_output_is_a_table_then_diagnosis_then_a_verdict(workdir):
    room = get_fault("no-sqrt-dk").materialize(workdir / "clean_room")
    result = runner.invoke(app, ["verify", "clean-room", "--path", str(room), "--no-metrics"])
    assert result.exit_code == 1
    text = result.output
    assert "function" in text and "parity" in text
    assert "scaled_dot_product_attention" in text
    assert "failures" in text and "diagnosis" in text
    flat = " ".join(text.split())
    assert "matches fault `no-sqrt-dk`" in flat
    assert "see 第8章 · Attention 与 Transformer Block 故障注入与预期信号: 忘记除以 √d_k" in flat
    assert "multi_head_attention fails because scaled_dot_product_attention fails" in flat
    last = [line for line in text.splitlines() if line.strip()][-1]
    assert last.startswith("FAIL") and "functions pass every check" in last
    # The parity tolerances the checks used, as the record names them (not the labs' table).
    assert "tolerances v1," in last and "tolerances v4" not in last
    assert "Traceback" not in text


def test_default_path_is_the_clean_room_in_the_working_directory(workdir):
    shutil.copytree(
        project_clean_room(), workdir / "clean_room", ignore=shutil.ignore_patterns("__pycache__")
    )
    result = runner.invoke(app, ["verify", "clean-room", "--json", "--no-metrics"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["path"] == "clean_room"


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--path", "no/such/room"], 2, "no such directory"),
        (["--path", ".", "--timeout", "0"], 2, "--timeout must be a positive"),
        (["--bogus"], 2, "No such option"),
    ],
)
def test_usage_errors_exit_2(workdir, args, code, words):
    result = runner.invoke(app, ["verify", "clean-room", *args, "--no-metrics"])
    assert result.exit_code == code
    assert words in result.output
    assert "Traceback" not in result.output


def test_a_missing_room_is_refused_without_a_seed_to_rerun_with(workdir):
    result = runner.invoke(app, ["verify", "clean-room", "--path", "no/such/room"])
    assert result.exit_code == 2
    # nothing was drawn: the one line is the refusal, no "rerun with --seed" before it
    assert result.stderr.strip().splitlines() == [
        "error: clean room no/such/room: no such directory"
    ]


def test_an_unloadable_or_refused_clean_room_is_one_clear_line_and_exit_1(workdir):
    room = workdir / "room"
    shutil.copytree(project_clean_room(), room, ignore=shutil.ignore_patterns("__pycache__"))
    (room / "attention.py").write_text("import torch\n", encoding="utf-8")
    result = runner.invoke(app, ["verify", "clean-room", "--path", str(room), "--no-metrics"])
    assert result.exit_code == 1
    # The report is stdout (stderr begins with the seed the fixtures were drawn with).
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(" ".join(lines).split("FAIL")) == 2  # one verdict
    assert "refused" in lines[0] and "room/attention.py:1: imports torch" in " ".join(lines)
    assert read_history(workdir / "evidence" / "verify")[-1]["passed"] is False

    (room / "attention.py").write_text("def oops(:\n", encoding="utf-8")
    result = runner.invoke(app, ["verify", "clean-room", "--path", str(room), "--no-metrics"])
    assert result.exit_code == 1
    assert "syntax error in room/attention.py:1" in " ".join(result.output.split())

    (room / "__init__.py").unlink()
    result = runner.invoke(app, ["verify", "clean-room", "--path", str(room), "--no-metrics"])
    assert result.exit_code == 1
    assert "not a package" in result.output


@pytest.mark.parametrize(
    "source",
    [
        "import scipy\n",  # found by the scan before the room loads
        "__import__('importlib').import_module('sci' + 'py')\n",  # refused by the guard at load
    ],
)
def test_a_refusal_names_the_import_in_the_learners_language(workdir, source):
    room = workdir / "room"
    shutil.copytree(project_clean_room(), room, ignore=shutil.ignore_patterns("__pycache__"))
    (room / "helpers.py").write_text(source, encoding="utf-8")
    with (room / "__init__.py").open("a", encoding="utf-8") as init:
        init.write("from . import helpers  # noqa: F401\n")
    args = ["--lang", "zh", "verify", "clean-room", "--path", str(room), "--no-metrics"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    shown = " ".join(result.stdout.split())
    assert "room/helpers.py:1：导入了 scipy" in shown, shown
    assert "imports" not in shown and "breaks" not in shown


def test_the_course_template_metrics_are_measured_and_kept(tmp_path, causal_lab_only):
    out = tmp_path / "ev" / "verify"
    report = verify_clean_room(project_clean_room(), 20.0, out=out, measure=True)
    assert report.passed
    metrics = {m.name: m for m in report.metrics}
    assert set(metrics) == {
        "future_token_invariance",
        "reference_output_max_error",
        "no_mask_future_prefix_influence",
        "scale_ablation_max_weight_delta",
        "residual_ablation_max_output_delta",
    }
    assert metrics["future_token_invariance"].actual == 0.0
    assert metrics["future_token_invariance"].impl == "clean-room"
    assert metrics["reference_output_max_error"].impl == "both"
    assert metrics["reference_output_max_error"].passed
    missing = metrics["scale_ablation_max_weight_delta"]
    assert missing.actual is None and "no lab declares this metric yet" in missing.note
    record_path = next(p for p in out.glob("*.json") if not p.name.endswith("-report.json"))
    record = EvidenceRecord.model_validate(json.loads(record_path.read_text("utf-8")))
    names = {m.name for m in record.metrics}
    assert {"future_token_invariance", "reference_output_max_error"} <= names
    assert any("scale_ablation_max_weight_delta" in k for k in record.known_failures)


def test_a_failing_clean_room_keeps_its_failing_metric(tmp_path, causal_lab_only):
    room = get_fault("mask-reversed").materialize(tmp_path / "clean_room")
    report = verify_clean_room(room, 20.0, out=None, measure=True)
    invariance = next(m for m in report.metrics if m.name == "future_token_invariance")
    assert invariance.actual > 1e-12 and invariance.passed is False


def test_metrics_of_a_refused_clean_room_are_noted_not_measured(tmp_path, causal_lab_only):
    room = get_fault("merge-heads-imports-torch").materialize(tmp_path / "clean_room")
    report = verify_clean_room(room, 20.0, out=None, measure=True)
    assert report.status == "refused"
    assert all(m.actual is None and "refused" in m.note for m in report.metrics)


def test_a_room_whose_folder_name_is_not_utf8_is_verified_and_recorded_escaped(workdir):
    """A name a learner's filesystem allows but UTF-8 cannot carry: verified like any other,
    shown and recorded with its byte escaped, never an internal error."""
    room = workdir / "room-\udcff"  # the byte 0xff, as Python names it
    shutil.copytree(project_clean_room(), room, ignore=shutil.ignore_patterns("__pycache__"))
    args = ["verify", "clean-room", "--path", "room-\udcff", "--no-metrics", "--seed", "5"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["passed"] is True and document["path"] == "room-\\udcff"
    (record,) = (workdir / "evidence" / "verify").glob("*-seed5-*[0-9a-f].json")
    saved = json.loads(record.read_text("utf-8"))
    assert saved["labctl"]["clean_room"]["path"] == "room-\\udcff"


def test_a_template_metric_that_comes_out_nan_says_so(causal_lab_only):
    """A room whose MHA returns NaN: the metric has no number to keep, and its note said
    nothing ('not measured: ')."""
    from garbage import nan_room

    from labctl.verify.verify import template_metrics

    measured = {m.name: m for m in template_metrics(nan_room("multi_head_attention"))}
    assert measured["future_token_invariance"].note == (
        "not measured: the clean room's value is nan"
    )


def _fifo(path):
    os.mkfifo(path)


def _dev_zero(path):
    path.symlink_to("/dev/zero")


def _garbled(path):
    path.write_text("{not json", "utf-8")


@pytest.mark.parametrize(
    ("where", "make", "code", "words"),
    [
        ("module-manifest-v1.json", _fifo, 2, "module-manifest-v1.json: is a FIFO"),
        ("module-manifest-v1.json", _dev_zero, 2, "is a character device"),
        ("module-manifest-v1.json", Path.mkdir, 1, "unreadable manifest"),
        ("module-manifest-v1.json", _garbled, 1, "unreadable manifest"),
        ("verify/history.jsonl", _fifo, 2, "history.jsonl: is a FIFO"),
        ("verify/history.jsonl", _dev_zero, 2, "is a character device"),
        ("verify/history.jsonl", Path.mkdir, 2, "history.jsonl: is a directory"),
    ],
)
def test_an_evidence_folder_that_cannot_take_the_run_is_refused_before_anything_is_written(
    workdir, where, make, code, words
):
    """A FIFO as the manifest or the history hung verify forever; a garbled manifest was
    refused only after the record and report were written, without their history line."""
    (workdir / "evf" / "verify").mkdir(parents=True)
    make(workdir / "evf" / where)
    args = ["verify", "clean-room", "--path", str(project_clean_room()), "--no-metrics"]
    result = runner.invoke(app, [*args, "--out", "evf/verify", "--json"], env={"NO_COLOR": "1"})
    assert result.exit_code == code, result.output
    message = json.loads(result.stdout)["error"]["message"]
    assert words in message, message
    if make is _garbled:
        assert "move it aside and run again" in message
    assert [p.name for p in (workdir / "evf" / "verify").iterdir()] in ([], ["history.jsonl"])


def test_a_history_that_became_a_fifo_after_the_check_is_refused_not_waited_on(tmp_path):
    store = EvidenceStore(tmp_path)
    os.mkfifo(tmp_path / "history.jsonl")
    with pytest.raises(UsageError, match="is a FIFO"):
        store.append_line(Path("history.jsonl"), {"a": 1})


def test_the_root_folder_is_named_not_left_empty(workdir):
    result = runner.invoke(app, ["verify", "clean-room", "--path", "/", "--json", "--no-metrics"])
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["path"] == "/"


def test_a_room_folder_named_with_a_newline_forges_no_line_of_the_note(workdir):
    from labctl.evidence.room import identify, record_notes

    room = shutil.copytree(project_clean_room(), workdir / "mine\nPASS  forged")
    (note,) = record_notes(identify(room), "--path")
    assert "mine\\x0aPASS  forged is labctl's own clean room" in str(note)
    assert "\n" not in str(note)
