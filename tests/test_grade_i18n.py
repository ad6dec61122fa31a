"""`labctl grade` speaks the invocation's language to people; its machine outputs stay English.

Two learners (a copy of labctl's own clean room, so `--similarity` names it
as base code, and a catalogued fault) are graded once per language. The lines a person reads (the
summary, the similarity line, usage errors) and the text Gradescope shows a
learner follow `--lang` / LABCTL_LANG; column names, JSON keys and status
values are the same in both.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from gradetools import rubric_without
from honestrooms import honest_fault, own_copy
from typer.testing import CliRunner

from labctl.cli.main import app

# The environment of each run: nothing of this machine's locale leaks into the choice.
CLEAN = {"LABCTL_LANG": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": "", "COLUMNS": "200"}


def invoke(args: list[str], lang: str | None = None, env_lang: str = ""):
    prefix = ["--lang", lang] if lang else []
    result = CliRunner().invoke(app, [*prefix, *args], env={**CLEAN, "LABCTL_LANG": env_lang})
    assert "Traceback" not in result.output, result.output
    return result


@pytest.fixture(scope="module")
def klass(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("grade-i18n")
    own_copy(base / "class" / "copycat" / "clean_room")  # labctl's own: base code
    honest_fault("mask-reversed", base / "class" / "fault" / "clean_room")
    return base / "class", rubric_without(base, "metric", "submission")


@pytest.fixture(scope="module")
def runs(klass, tmp_path_factory) -> dict[str, tuple[str, Path]]:
    """The class graded in English and, through LABCTL_LANG, in Chinese: (stdout, --out)."""
    root, rubric = klass
    found = {}
    for lang in ("en", "zh"):
        out = tmp_path_factory.mktemp(f"out-{lang}") / "grades"
        args = ["grade", str(root), "--out", str(out), "--rubric", str(rubric), "--jobs", "1"]
        result = invoke([*args, "--similarity"], env_lang=lang)
        assert result.exit_code == 0, result.output
        found[lang] = (result.stdout, out)
    return found


def test_the_summary_and_similarity_lines_follow_the_language(runs):
    english, _ = runs["en"]
    chinese, _ = runs["zh"]
    assert "2 learners (2 graded; 2 graded in this run, 0 unchanged since the last run)" in english
    assert "base code: copycat: 100% of its clean room is base code" in english
    # The statuses are identifiers (English in both); the counts add up to the learners.
    assert "2 位学习者（2 graded；本次评分 2 位，0 位自上次运行以来未变）" in chinese
    assert "基础代码：copycat：其 clean room 有 100% 是基础代码" in chinese
    assert "learners" not in chinese and "base code:" not in chinese
    # Handed in as labctl's own room, it earns nothing, and the table says so in each language.
    assert "base code, no points: the whole clean room: softmax" in " ".join(english.split())
    assert "基础代码，不得分：整个cleanroom：softmax" in "".join(chinese.split())
    # The table's headers are words; the status value is an identifier in both.
    assert "学习者" in chinese and "隔离方式" in chinese and "graded" in chinese


def test_machine_outputs_keep_their_english_structure_and_gradescope_output_follows(runs):
    (_, en_out), (_, zh_out) = runs["en"], runs["zh"]

    def header(out: Path) -> list[str]:
        with (out / "gradebook.csv").open(encoding="utf-8") as handle:
            return next(csv.reader(handle))

    assert header(zh_out) == header(en_out)
    # verify's findings, made in the grading worker, reach the diagnosis in the batch's language.
    summary = {
        lang: json.loads((out / "summary.json").read_text("utf-8"))
        for lang, out in (("en", en_out), ("zh", zh_out))
    }
    fault = {
        lang: next(r for r in doc["rows"] if r["learner"] == "fault")
        for lang, doc in summary.items()
    }
    assert "matches fault `mask-reversed`" in fault["en"]["diagnosis"]
    assert "与故障 `mask-reversed` 相符" in fault["zh"]["diagnosis"]
    assert fault["zh"]["status"] == fault["en"]["status"] == "graded"
    assert set(fault["zh"]) == set(fault["en"])
    en = json.loads((en_out / "gradescope" / "fault" / "results.json").read_text("utf-8"))
    zh = json.loads((zh_out / "gradescope" / "fault" / "results.json").read_text("utf-8"))
    assert set(zh) == set(en)
    assert [sorted(t) for t in zh["tests"]] == [sorted(t) for t in en["tests"]]
    assert [(t["name"], t["status"], t["visibility"]) for t in zh["tests"]] == [
        (t["name"], t["status"], t["visibility"]) for t in en["tests"]
    ]
    assert "visible items passed" in en["output"]
    assert "可见的" in zh["output"] and "visible" not in zh["output"]
    assert en["tests"][0]["output"] == "passes every check"
    assert zh["tests"][0]["output"] == "通过全部检查"
    # labctl's own room: each function's output says it is base code, in each language.
    own = {
        lang: json.loads((out / "gradescope" / "copycat" / "results.json").read_text("utf-8"))
        for lang, out in (("en", en_out), ("zh", zh_out))
    }
    assert own["en"]["tests"][0]["output"].startswith("base code: softmax (primitives.py, lines")
    assert own["zh"]["tests"][0]["output"].startswith("基础代码：softmax（primitives.py，第 ")
    assert own["zh"]["score"] == own["en"]["score"] == 0


def test_usage_errors_follow_the_language(tmp_path):
    missing = tmp_path / "nobody"
    args = ["grade", "gradescope", str(missing), "--results", str(tmp_path / "r.json")]
    english = invoke(args)
    chinese = invoke(args, lang="zh")
    assert english.exit_code == chinese.exit_code == 2
    assert "is not a folder" in english.output
    assert "不是文件夹" in chinese.output and "is not a folder" not in chinese.output

    bad = ["grade", str(tmp_path), "--timeout", "0"]
    assert "必须是正的秒数" in invoke(bad, lang="zh").output
    assert "must be a positive number of seconds" in invoke(bad).output
    empty = ["grade", str(tmp_path / "class"), "--out", str(tmp_path / "grades")]
    (tmp_path / "class").mkdir()
    assert "里没有学习者文件夹" in invoke(empty, env_lang="zh").output


def test_a_chinese_bundle_grades_in_chinese_and_falls_back_in_chinese(klass, tmp_path):
    _, rubric = klass
    zip_path = tmp_path / "autograder.zip"
    made = invoke(["grade", "bundle", str(zip_path), "--rubric", str(rubric)], lang="zh")
    assert made.exit_code == 0, made.output
    assert "已写出" in made.stdout and "请上传到 Gradescope" in made.stdout
    with zipfile.ZipFile(zip_path) as archive:
        script = archive.read("run_autograder").decode("utf-8")
    assert '"$LABCTL" --lang zh grade gradescope' in script
    root = tmp_path / "autograder"
    root.mkdir()
    (root / "run_autograder").write_text(script, encoding="utf-8")
    # labctl missing altogether: the learner still reads why, in the bundle's language.
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), LABCTL=str(tmp_path / "no-such-labctl"))
    subprocess.run(["bash", str(root / "run_autograder")], env=env, check=True, timeout=60)
    fallback = json.loads((root / "results" / "results.json").read_text("utf-8"))
    assert fallback["score"] == 0 and fallback["tests"] == []
    assert (
        fallback["output"]
        == "自动评分程序未能为这份提交评分（labctl 退出码 127）。请告诉你的老师。"
    )


def test_a_shipped_rubrics_name_is_shown_in_the_chosen_language_and_a_tas_as_written():
    from importlib import resources

    from labctl.grade.rubric import SHIPPED_NAMES, load_rubric, parse_rubric
    from labctl.i18n import set_language

    shipped = [
        load_rubric(),
        parse_rubric(resources.files("labctl").joinpath("data/rubric-default-v2.yaml").read_text()),
    ]
    assert [r.name for r in shipped] == list(SHIPPED_NAMES)
    own = parse_rubric(
        load_rubric().model_dump_json(by_alias=True).replace(SHIPPED_NAMES[0], "Lab 8 rubric")
    )
    previous = set_language("zh")
    try:
        assert [r.shown_name for r in shipped] == [
            "labctl 默认评分标准（接口合同 v1，第8章 · Attention 与 Transformer Block 的学习者提交模板）",
            "labctl 默认评分标准（接口合同 v2，第8章 · Attention 与 Transformer Block 的学习者提交模板）",
        ]
        assert own.shown_name == "Lab 8 rubric"
    finally:
        set_language(previous)


def test_a_refused_submissions_problems_are_in_the_batch_language(tmp_path):
    from labctl.grade.task import remeasure
    from labctl.i18n import set_language

    folder = tmp_path / "ann"
    folder.mkdir()
    path = folder / "submission.yaml"
    path.write_text("schema: learn-llm.evidence.v1\nverified_at: <iso-date>\n", "utf-8")
    previous = set_language("zh")
    try:
        found = remeasure(path, folder, folder / "clean_room", 1.0, "process")
    finally:
        set_language(previous)
    reasons = [p["reason"] for p in found["problems"]]
    assert not found["accepted"] and reasons
    placeholder = next(r for r in reasons if "<iso-date>" in r)
    assert placeholder == "还留着占位符 <iso-date>"  # worded in Chinese
    english = remeasure(path, folder, folder / "clean_room", 1.0, "process")
    assert any(p["reason"] == "placeholder <iso-date> left" for p in english["problems"])
