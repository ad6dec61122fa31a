"""The errors a learner meets first are shown in the chosen language (`--lang zh`): a clean
room that is missing, a file, not a package or does not parse; `--out` that cannot be written;
`clean-room init` onto a file; an evidence file that is missing, a folder or a FIFO; an unknown
module; a broken manifest. Paths and option names stay as written, the exit code does not change
with the language, and `--json` error documents are the same English document in both."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from clitools import invoke

from labctl.errors import StoreError
from labctl.evidence import modules
from labctl.evidence.store import MANIFEST_NAME, write_new
from labctl.i18n import set_language
from labctl.isolation import bwrap, levels

# Nothing of this machine's locale leaks into the choice of language.
VERIFY = ["verify", "clean-room", "--no-metrics", "--isolation", "process", "--timeout", "20"]
# What differs between two runs of one verify: when it ran, how long, where it wrote.
RUN_FIELDS = ("wall_time_s", "verified_at", "records")
MANIFEST = {"schema": "labctl.module-manifest.v1", "modules": {}}


@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    """A working directory holding a file, a folder without __init__.py, a room that does not
    parse, a FIFO and two evidence roots with broken manifests."""
    (tmp_path / "afile").write_text("x\n")
    (tmp_path / "nopkg").mkdir()
    (tmp_path / "room").mkdir()
    (tmp_path / "room" / "__init__.py").write_text("def softmax(:\n")
    (tmp_path / "raising").mkdir()
    (tmp_path / "raising" / "__init__.py").write_text("raise RuntimeError('boom at import')\n")
    os.mkfifo(tmp_path / "pipe.yaml")
    (tmp_path / "garbled").mkdir()
    (tmp_path / "garbled" / MANIFEST_NAME).write_text("{not json")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / MANIFEST_NAME).write_text(json.dumps({"schema": "x", "modules": {}}))
    monkeypatch.chdir(tmp_path)
    return tmp_path


# (arguments, exit code, the English line, the Chinese line); every command here has --json.
CASES = {
    "room missing": (
        [*VERIFY, "--path", "missing"],
        2,
        "error: clean room missing: no such directory",
        "错误：clean room missing：没有这个目录",
    ),
    "room is a file": (
        [*VERIFY, "--path", "afile"],
        2,
        "error: clean room afile: not a directory",
        "错误：clean room afile：不是目录",
    ),
    "out is a file": (
        [*VERIFY, "--out", "afile"],
        2,
        "error: --out afile: not a directory (nothing was written)",
        "错误：--out afile：不是目录（什么也没有写入）",
    ),
    "out under a file": (
        [*VERIFY, "--out", "afile/verify"],
        2,
        "error: --out afile/verify: afile is not a directory (nothing was written)",
        "错误：--out afile/verify：afile 不是目录（什么也没有写入）",
    ),
    "init onto a file": (
        ["clean-room", "init", "afile"],
        1,
        "error: afile exists and is not a directory; clean-room init writes a new one",
        "错误：afile 已存在且不是目录；clean-room init 只新建一个目录来写入",
    ),
    "evidence missing": (
        ["evidence", "validate", "missing.yaml"],
        2,
        "error: missing.yaml: no such file",
        "错误：missing.yaml：没有这个文件",
    ),
    "evidence is a folder": (
        ["evidence", "validate", "nopkg"],
        2,
        "error: nopkg: is a directory, not an evidence file",
        "错误：nopkg：是一个目录，不是证据文件",
    ),
    "evidence is a FIFO": (
        ["evidence", "validate", "pipe.yaml"],
        2,
        "error: pipe.yaml: is a FIFO, not a regular file",
        "错误：pipe.yaml：是命名管道（FIFO），不是普通文件",
    ),
    "submit with no time limit": (
        ["evidence", "submit", "afile", "--timeout", "0"],
        2,
        "error: --timeout must be a positive number of seconds, got 0",
        "错误：--timeout 必须是正的秒数，收到的是 0",
    ),
    "faults with a negative memory limit": (
        ["faults", "--memory-mb", "-1"],
        2,
        "error: --memory-mb must be 0 (no limit) or at least 512, got -1: below that the "
        "clean-room process cannot hold labctl's own inputs",
        "错误：--memory-mb 必须为 0（不限制）或至少 512，收到的是 -1：低于此值，clean room "
        "进程容纳不下 labctl 自己的输入",
    ),
    "verify with a time limit past a day": (
        ["verify", "clean-room", "--path", "nopkg", "--timeout", "1e10"],
        2,
        "error: --timeout must be at most 86400 seconds (a day), got 1e+10",
        "错误：--timeout 最多为 86400 秒（一天），收到的是 1e+10",
    ),
    "verify with a memory limit the kernel cannot hold": (
        ["verify", "clean-room", "--path", "nopkg", "--memory-mb", "9000000000000"],
        2,
        "error: --memory-mb must be at most 1048576 (1 TiB), or 0 for no limit, got 9000000000000",
        "错误：--memory-mb 最多为 1048576（1 TiB），或为 0（不限制），收到的是 9000000000000",
    ),
    "verify with too little memory for labctl's own inputs": (
        ["verify", "clean-room", "--path", "nopkg", "--memory-mb", "64"],
        2,
        "error: --memory-mb must be 0 (no limit) or at least 512, got 64: below that the "
        "clean-room process cannot hold labctl's own inputs",
        "错误：--memory-mb 必须为 0（不限制）或至少 512，收到的是 64：低于此值，clean room "
        "进程容纳不下 labctl 自己的输入",
    ),
    "grade out under a file": (
        ["grade", "class", "nopkg", "--out", "afile/x"],
        2,
        "error: --out afile/x: afile is not a directory",
        "错误：--out afile/x：afile 不是目录",
    ),
    "gradescope results is a folder": (
        ["grade", "gradescope", "nopkg", "--results", "nopkg"],
        2,
        "error: --results nopkg: is a directory; name a file",
        "错误：--results nopkg：是一个目录；请给出文件名",
    ),
    "bundle under a file": (
        ["grade", "bundle", "afile/x.zip"],
        2,
        "error: OUT.zip afile/x.zip: afile is not a directory",
        "错误：OUT.zip afile/x.zip：afile 不是目录",
    ),
    "faults out under a file": (
        ["faults", "--out", "afile/x"],
        2,
        "error: --out afile/x: afile is not a directory",
        "错误：--out afile/x：afile 不是目录",
    ),
    "unknown isolation": (
        [*VERIFY[:3], "--isolation", "bogus"],
        2,
        "error: --isolation must be one of auto, sandbox, process, got 'bogus'",
        "错误：--isolation 必须是 auto, sandbox, process 之一，收到的是 'bogus'",
    ),
    "report root missing": (
        ["report", "--root", "nowhere"],
        2,
        "error: --root nowhere: no such directory",
        "错误：--root nowhere：",
    ),
    "unknown module": (
        ["evidence", "template", "--module", "nope"],
        2,
        "error: unknown module 'nope'; known modules: ",
        "错误：未知模块 'nope'；已知模块：",
    ),
    "garbled manifest": (
        ["evidence", "template", "--fill", "--root", "garbled"],
        1,
        f"error: garbled/{MANIFEST_NAME}: unreadable manifest (",
        f"错误：garbled/{MANIFEST_NAME}：manifest 无法读取（",
    ),
    "foreign manifest": (
        ["evidence", "template", "--fill", "--root", "foreign"],
        1,
        f"error: foreign/{MANIFEST_NAME}: not a labctl.module-manifest.v1 manifest",
        f"错误：foreign/{MANIFEST_NAME}：不是 labctl.module-manifest.v1 的 manifest",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_error_in_both_languages(place, case):
    args, code, english, chinese = CASES[case]
    en, zh = invoke(*args), invoke(*args, lang="zh")
    assert (en.exit_code, zh.exit_code) == (code, code), (en.output, zh.output)
    assert english in en.output and chinese not in en.output, en.output
    assert chinese in zh.output, zh.output
    en_json = json.loads(invoke(*args, "--json").stdout)
    zh_json = json.loads(invoke(*args, "--json", lang="zh").stdout)
    assert zh_json == en_json
    assert en_json["error"]["message"].startswith(english.removeprefix("error: "))
    assert en_json["error"]["exit_code"] == code


@pytest.mark.parametrize(
    ("room", "english", "chinese"),
    [
        (
            "room",
            "does not load: syntax error in room/__init__.py:1: invalid syntax",
            "无法加载：room/__init__.py:1 有语法错误：invalid syntax",
        ),
        (
            "nopkg",
            "does not load: clean room nopkg: not a package (no __init__.py)",
            "无法加载：clean room nopkg：不是一个包（没有 __init__.py）",
        ),
        (
            "raising",
            "does not load: importing the clean room failed at raising/__init__.py:1: "
            "RuntimeError: boom at import",
            "无法加载：导入 clean room 时在 raising/__init__.py:1 失败：RuntimeError: boom at import",
        ),
    ],
)
def test_room_that_does_not_load(place, room, english, chinese):
    """A syntax error is found in the clean room's own process and shown translated in labctl's;
    the verdict document (and the place of the error) stays English."""
    # One seed for both languages: the documents are compared whole.
    args = [*VERIFY, "--path", room, "--out", str(place / "out"), "--seed", "5"]
    en, zh = invoke(*args), invoke(*args, lang="zh")
    assert (en.exit_code, zh.exit_code) == (1, 1), (en.output, zh.output)
    assert english in en.output and chinese in zh.output, zh.output
    en_json = json.loads(invoke(*args, "--json").stdout)
    zh_json = json.loads(invoke(*args, "--json", lang="zh").stdout)
    for document in (en_json, zh_json):
        for name in RUN_FIELDS:
            document.pop(name)
    assert zh_json == en_json
    assert en_json["message"] == english


def test_out_not_writable(place, monkeypatch):
    """(root writes anywhere, so the filesystem refuses a file in the folder where labctl
    tries one: os.access would say yes to root even on a read-only filesystem.)"""
    (place / "locked").mkdir()
    real = tempfile.TemporaryFile

    def refusing(*args, dir=None, **kwargs):
        if dir is not None and Path(dir).name == "locked":
            raise PermissionError(13, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "TemporaryFile", refusing)
    args = [*VERIFY, "--out", "locked/verify"]
    en, zh = invoke(*args), invoke(*args, lang="zh")
    assert (en.exit_code, zh.exit_code) == (2, 2)
    assert "error: --out locked/verify: locked is not writable (nothing was written)" in en.output
    assert "错误：--out locked/verify：locked 不可写（什么也没有写入）" in zh.output
    assert json.loads(invoke(*args, "--json", lang="zh").stdout) == json.loads(
        invoke(*args, "--json").stdout
    )


def test_no_working_sandbox(place, monkeypatch):
    monkeypatch.setattr(levels, "sandbox_status", lambda: bwrap.SandboxStatus(False, "no bwrap"))
    args = ["verify", "clean-room", "--no-metrics", "--isolation", "sandbox", "--path", "room"]
    en, zh = invoke(*args), invoke(*args, lang="zh")
    assert (en.exit_code, zh.exit_code) == (2, 2)
    assert "error: --isolation sandbox: no working sandbox: no bwrap" in en.output
    assert "错误：--isolation sandbox：没有可用的沙箱：no bwrap" in zh.output
    assert json.loads(invoke(*args, "--json", lang="zh").stdout) == json.loads(
        invoke(*args, "--json").stdout
    )


def test_template_warnings(place, monkeypatch):
    """`evidence template` warns, translated, of a metric no lab measures and of a manifest
    entry that is not a record; the metric and the paths stay as written."""
    module = modules.Module(
        id="t-errors", title="test module", section="tests", required=("nobody_measures_this",)
    )
    monkeypatch.setattr(modules, "MODULES", (*modules.MODULES, module))
    (place / "store").mkdir()
    manifest = {**MANIFEST, "modules": {"causal-attention": {"record": "gone.json"}}}
    (place / "store" / MANIFEST_NAME).write_text(json.dumps(manifest))
    default = modules.MODULES[0].id
    en = invoke("evidence", "template", "--module", module.id)
    zh = invoke("evidence", "template", "--module", module.id, lang="zh")
    assert (en.exit_code, zh.exit_code) == (0, 0)
    assert "no lab measures nobody_measures_this yet: its tolerance is left blank" in en.output
    assert "警告：还没有实验测量 nobody_measures_this：它的容差留空" in zh.output
    fill = ["evidence", "template", "--module", default, "--fill", "--root", "store"]
    en, zh = invoke(*fill), invoke(*fill, lang="zh")
    assert "the manifest points causal-attention at gone.json, which is not a record" in en.output
    assert "警告：manifest 把 causal-attention 指向 gone.json，但它不是一条记录" in zh.output
    # no record at all: the warning, and the file's own comments, in the learner's language
    assert "警告：store 下没有 " in zh.output and "no machine records" not in zh.output
    blank = invoke("evidence", "template", "--module", default, lang="zh")
    assert blank.stdout.startswith(f"# 模块 {default} 的 learn-llm.evidence.v1 提交模板\n")
    assert "Every <...> is unfilled" not in blank.stdout


def test_store_refuses_in_chinese(tmp_path):
    """The store's refusal to overwrite, read where no command reaches it (submit catches it)."""
    target = tmp_path / "kept.json"
    write_new(target, b"{}")
    previous = set_language("zh")
    try:
        with pytest.raises(StoreError) as caught:
            write_new(target, b"{}")
        assert str(caught.value) == f"{target} 已存在；证据从不覆盖"
        assert caught.value.english() == f"{target} already exists; evidence is never overwritten"
    finally:
        set_language(previous)


def test_a_rubric_or_overrides_nested_too_deep_is_refused_in_words(place):
    """100,000 nested lists: Python's parser recursion ends, which was an internal error."""
    (place / "deep.yaml").write_text("[" * 100_000 + "]" * 100_000)
    for args in (
        ["grade", "bundle", "r.zip", "--rubric", "deep.yaml"],
        ["grade", "class", "nopkg", "--out", "grades", "--overrides", "deep.yaml"],
    ):
        en, zh = invoke(*args), invoke(*args, lang="zh")
        assert "nested too deeply" in en.output and "internal" not in en.output, en.output
        assert "嵌套太深" in zh.output, zh.output
        assert en.exit_code == zh.exit_code != 0


def test_evidence_refused_by_labctl_s_own_rules_says_why_in_chinese(place):
    (place / "twice.yaml").write_text("schema: a\nschema: b\n")
    (place / "alias.yaml").write_text("a: &x 1\nb: *x\n")
    zh = invoke("evidence", "validate", "twice.yaml", lang="zh")
    assert "键 'schema' 重复（第一次出现在第 1 行）" in zh.output, zh.output
    zh = invoke("evidence", "validate", "alias.yaml", lang="zh")
    assert "证据中不允许使用别名" in zh.output, zh.output


def test_report_refuses_a_language_it_does_not_speak(place):
    """`report --lang fr` wrote an English report and exited 0; now a usage error, worded
    with the languages there are."""
    result = invoke("report", "--lang", "fr")
    assert result.exit_code == 2 and not (place / "evidence" / "report.html").exists()
    assert "'fr' is not one of 'zh', 'en'" in " ".join(result.output.split())
    document = json.loads(invoke("report", "--lang", "fr", "--json").stdout)
    assert document["error"]["exit_code"] == 2


@pytest.mark.parametrize("made", ["folder", "file"])
def test_a_clean_room_here_that_is_no_package_is_refused_not_passed_over(place, made):
    """An empty ./clean_room (or a file of that name) was taken for absent: run measured
    labctl's own room instead, and verify said there was no ./clean_room."""
    if made == "folder":
        (place / "clean_room").mkdir()
    else:
        (place / "clean_room").write_text("x\n")
    for args in (["run", "causal-attention"], [*VERIFY]):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert "./clean_room is here but is not a package" in " ".join(result.output.split())


def test_a_room_whose_import_hangs_is_said_in_chinese(place):
    (place / "sleepy").mkdir()
    (place / "sleepy" / "__init__.py").write_text("import time\ntime.sleep(60)\n")
    zh = invoke(*VERIFY[:3], "--path", "sleepy", "--timeout", "1", "--no-metrics", lang="zh")
    assert zh.exit_code == 1, zh.output
    shown = " ".join(zh.output.split())
    assert "加载 clean room：" in shown and "loading the clean room" not in shown, shown


@pytest.mark.parametrize(
    "args",
    [
        ["run", "gqa", "--impl", "reference"],
        [*VERIFY, "--path", "room"],
    ],
    ids=["run", "verify"],
)
def test_an_out_named_by_bytes_that_are_not_utf8_is_refused_before_anything_is_written(place, args):
    """The records name their files as text: `--out runs<0xff>` once wrote the run's tables and
    then stopped on an internal error (a pydantic ValidationError) with the record unwritten."""
    out = os.fsdecode(b"runs\xff")
    en, zh = invoke(*args, "--out", out), invoke(*args, "--out", out, lang="zh")
    assert (en.exit_code, zh.exit_code) == (2, 2)
    assert "the name is not UTF-8 text, which the records must hold" in en.output
    assert "这个名字不是 UTF-8 文本" in zh.output
    document = json.loads(invoke(*args, "--out", out, "--json").stdout)
    assert document["error"]["kind"] == "usage"
    assert not (place / out).exists()
