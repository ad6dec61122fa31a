"""The learner template (第8章 · Attention 与 Transformer Block, 学习者提交模板): its placeholders never pass for results."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from coursetools import chapters
from typer.testing import CliRunner

from labctl import registry
from labctl.cli.main import app
from labctl.course import CH8
from labctl.evidence.modules import DEFAULT_MODULE, MODULES
from labctl.evidence.validate import PLACEHOLDER

TEMPLATE_METRICS = (
    "future_token_invariance",
    "reference_output_max_error",
    "no_mask_future_prefix_influence",
    "scale_ablation_max_weight_delta",
    "residual_ablation_max_output_delta",
)


def invoke(*args: str):
    result = CliRunner(env={"COLUMNS": "300"}).invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def problem_fields(result) -> list[str]:
    return [p["field"] for p in json.loads(result.stdout)["problems"]]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_default_module_is_the_course_template():
    assert DEFAULT_MODULE == "07-attention-transformer"
    assert MODULES[0].required == TEMPLATE_METRICS


def test_blank_template_has_the_five_metrics_and_versioned_tolerances():
    result = invoke("evidence", "template")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("# learn-llm.evidence.v1 submission template")
    data = yaml.safe_load(result.stdout)
    assert data["schema"] == "learn-llm.evidence.v1"
    assert data["module"] == DEFAULT_MODULE
    assert [m["name"] for m in data["metrics"]] == list(TEMPLATE_METRICS)
    table = registry.metric_table()
    for row in data["metrics"]:
        assert row["actual"] == "<recorded-value>"
        if row["name"] in table:
            assert row["expected"] == table[row["name"]][1].expected
        else:
            assert row["expected"] == "<versioned-tolerance>"
    assert data["commit"] == "<learner-commit-sha>"
    assert data["artifacts"] == ["<learner-repo-relative-artifact-path>"]


def test_blank_template_as_json():
    result = invoke("evidence", "template", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["metrics"][0]["actual"] == "<recorded-value>"


def test_unknown_module_is_a_usage_error():
    result = invoke("evidence", "template", "--module", "99-nope")
    assert result.exit_code == 2
    assert "unknown module" in result.stderr


def test_unchanged_template_is_refused_for_its_placeholders(tmp_path):
    text = invoke("evidence", "template").stdout
    path = tmp_path / "sub.yaml"
    path.write_text(text)
    result = invoke("evidence", "validate", str(path), "--json")
    assert result.exit_code == 1
    fields = problem_fields(result)
    for name in ("commit", "verified_at", "environment", "artifacts[0]", "known_failures[0]"):
        assert name in fields
    for index in range(5):
        assert f"metrics[{index}].actual" in fields
    for key in ("source", "version", "license", "attribution", "redistribution"):
        assert f"licenses[0].{key}" in fields
    reasons = {p["field"]: p["reason"] for p in json.loads(result.stdout)["problems"]}
    assert reasons["metrics[2].actual"] == "placeholder <recorded-value> left"
    # and submit refuses it too, writing nothing
    result = invoke("evidence", "submit", str(path), "--root", str(tmp_path / "ev"), "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["accepted"] is False
    assert not (tmp_path / "ev").exists()


def test_human_output_is_one_line_per_problem(tmp_path):
    path = tmp_path / "sub.yaml"
    path.write_text(invoke("evidence", "template").stdout)
    result = invoke("evidence", "validate", str(path))
    lines = result.stdout.splitlines()
    # A claim's problem names its metric and implementation after the index.
    shown = "metrics[2] (no_mask_future_prefix_influence, clean-room): actual placeholder"
    assert f"{shown} <recorded-value> left" in lines
    assert lines[-1].startswith("invalid: ")
    problems = [line for line in lines[:-1] if not line.startswith("warning: ")]
    field = r"[\w.\[\]()]+(?: \([\w\[\]=-]+, [\w-]+\))?"
    assert all(re.match(rf"^{field}: ", line) for line in problems), problems


def _course_template() -> str:
    """The submission template 第8章 prints (the course text, from `$LABCTL_COURSE_DIR`)."""
    text = chapters()[CH8.key].read_text("utf-8")
    section = text[text.index("学习者提交模板") :]
    start = section.index("schema: learn-llm.evidence.v1")
    block = section[start:]
    end = block.index("\n\n")
    return block[:end] + "\n"


def test_course_template_verbatim_is_refused(tmp_path):
    text = _course_template()
    placeholders = [(m.group(0)) for m in PLACEHOLDER.finditer(text)]
    assert (
        len(placeholders) == 17
    )  # commit, date, env, 2 tolerances, 5 actuals, artifact, 5 licence, failure
    path = tmp_path / "course.yaml"
    path.write_text(text)
    result = invoke("evidence", "validate", str(path), "--json")
    assert result.exit_code == 1
    problems = json.loads(result.stdout)["problems"]
    left = [p for p in problems if p["reason"].startswith("placeholder ")]
    assert len(left) == 17
    assert {"metrics[0].expected", "metrics[1].expected"} <= {p["field"] for p in left}


def test_fill_without_records_keeps_placeholders_and_says_what_to_run(tmp_path):
    result = invoke("evidence", "template", "--fill", "--root", str(tmp_path / "evidence"))
    assert result.exit_code == 0
    assert "no machine records" in result.stderr
    assert "labctl run" in result.stderr
    data = yaml.safe_load(result.stdout)
    assert data["metrics"][0]["actual"] == "<recorded-value>"
    assert not (tmp_path / "evidence").exists()
