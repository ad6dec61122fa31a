"""Under `--lang zh` no English word reaches the terminal: every `--help`, every command a
learner meets first, the error paths, and (slow) every lab's tables and notes.

`zhwords.english_words` finds each Latin-letter word that is not an identifier of
labctl or of the course (allow-list derived from the registry, the contract and
the command tree, plus the glossary's short list). A planted English translation
is caught, so the sweep is shown able to fail.
"""

from __future__ import annotations

import ast

import pytest
import typer
from typer.testing import CliRunner
from zhwords import english_words

from labctl import registry
from labctl.cli.main import app
from labctl.i18n import catalog, set_language

runner = CliRunner()
# Wide enough that no table is stacked or cut: what is checked here is the words.
ZH = {"LABCTL_LANG": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": "", "COLUMNS": "200"}


@pytest.fixture(autouse=True)
def english_after():
    yield
    set_language("en")


def _commands() -> list[list[str]]:
    found: list[list[str]] = []

    def walk(command, path: list[str]) -> None:
        found.append(path)
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def zh(*args: str, typed: tuple[str, ...] = ()):
    """The result of `labctl --lang zh ARGS`, and the English words in all it printed;
    `typed` are words of the command line itself, which an error may quote."""
    result = runner.invoke(app, ["--lang", "zh", *args], env=ZH, prog_name="labctl")
    return result, english_words(result.output, frozenset(typed))


@pytest.mark.parametrize("path", _commands(), ids=lambda p: " ".join(p) or "labctl")
def test_every_help_is_chinese(path):
    result, words = zh(*path, "--help")
    assert result.exit_code == 0, result.output
    assert ("用法：" in result.output) and ("显示本帮助并退出。" in result.output)
    assert not words, words


@pytest.mark.parametrize("lab_id", [lab.id for lab in registry.discover()])
def test_show_is_chinese(lab_id):
    result, words = zh("show", lab_id)
    assert result.exit_code == 0, result.output
    assert not words, words


@pytest.mark.parametrize(
    ("args", "code", "says", "typed"),
    [
        (["list"], 0, "实验列表", ()),
        (["contract", "show"], 0, "含义", ()),
        (["show", "all"], 2, "show 只接受一个实验 id", ()),
        (["show", "nosuch"], 2, "未知的实验 'nosuch'", ("nosuch",)),
        (["run", "nosuch"], 2, "未知的实验 'nosuch'", ("nosuch",)),
        (["run"], 2, "缺少参数", ()),
        (["nosuch"], 2, "没有命令 'nosuch'", ("nosuch",)),
        (["list", "extra"], 2, "多出了参数", ("extra",)),
        (["run", "gqa", "--seed", "abc"], 2, "应是整数", ()),
        (["run", "gqa", "--seed"], 2, "需要一个值", ()),
        (["run", "gqa", "--bogus"], 2, "没有选项 --bogus", ()),
        (["run", "gqa", "--set", "C=0"], 2, "应不小于 1", ()),
        (["run", "gqa", "--set", "H=3"], 2, "H = 3 必须整除 C = 64", ()),
        (["run", "gqa", "--set", "C=abc"], 2, "不是合法的值", ()),
        (["run", "gqa", "--set", "nosuch=1"], 2, "未知参数", ("nosuch",)),
        (["evidence", "validate", "no-such-file.yaml"], 2, "没有这个文件", ()),
    ],
)
def test_commands_and_refusals_are_chinese(args, code, says, typed, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result, words = zh(*args, typed=typed)
    assert result.exit_code == code, result.output
    assert says in " ".join(result.output.split()), result.output
    assert not words, words


@pytest.mark.parametrize("command", ["validate", "submit"])
def test_evidence_on_a_bad_submission_is_chinese(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "submission.yaml"
    bad.write_text("schema: learn-llm.evidence.v1\nmodule: m1\nseed: five\ncommit: xyz\n")
    result, words = zh("evidence", command, str(bad), typed=("m1",))
    assert result.exit_code == 1, result.output
    assert "seed: 应是整数（实际是字符串）" in result.output
    assert ("无效：" if command == "validate" else "已拒绝：") in result.output
    assert not words, words


def test_doctor_is_chinese():
    result, words = zh("doctor")
    assert result.exit_code in (0, 1), result.output
    assert "沙箱" in result.output
    assert not words, words


def test_clean_room_init_writes_chinese_docstrings_and_refuses_in_chinese(tmp_path):
    room = tmp_path / "room"
    result, words = zh("clean-room", "init", str(room))
    assert result.exit_code == 0 and not words, (result.output, words)
    source = (room / "transformer_block.py").read_text("utf-8")
    tree = ast.parse(source)  # still Python once the docstrings are Chinese
    docstrings = [ast.get_docstring(tree)] + [
        ast.get_docstring(node) for node in tree.body if isinstance(node, ast.FunctionDef)
    ]
    assert len(docstrings) == 20 and "接口合同的约定" in docstrings[0]
    # the stubs' own words; signatures and formulas are identifiers
    assert not english_words("\n".join(docstrings)), english_words("\n".join(docstrings))
    again, words = zh("clean-room", "init", str(room))
    assert again.exit_code == 1 and "不是空目录" in again.output and not words, again.output


def test_contract_check_of_a_stub_room_is_chinese(tmp_path):
    room = tmp_path / "room"
    zh("clean-room", "init", str(room))
    result, words = zh("contract", "check", "--path", str(room), "--isolation", "process")
    assert result.exit_code == 1, result.output
    assert "其中 19 个还是桩" in " ".join(result.output.split())
    assert not words, words


def test_a_planted_english_translation_is_caught(monkeypatch):
    """The sweep can fail: one catalog entry put back to English shows up as its words."""
    monkeypatch.setitem(catalog("zh"), "Parameters", "Parameters you may change")
    result, words = zh("show", "gqa")
    assert result.exit_code == 0
    assert {w.split(" in ")[0] for w in words} == {"'Parameters'", "'you'", "'may'", "'change'"}


def test_identifiers_pass_and_prose_does_not():
    assert not english_words(
        "scaled_score_var[d_k=16]  在 [0.9, 1.1] 内  通过  labctl run all --set T=16 "
        "causal-attention 的 query 与 key；NotImplementedError；64 MiB"
    )
    line = "通过  1/1 experiments succeeded quickly"
    assert english_words(line) == [
        f"{w!r} in {line!r}" for w in ("experiments", "succeeded", "quickly")
    ]


@pytest.fixture(scope="module")
def run_all(tmp_path_factory):
    """Every lab on the reference, once (the clean-room side has the same words)."""
    out = tmp_path_factory.mktemp("runs")
    result = runner.invoke(
        app, ["--lang", "zh", "run", "all", "--impl", "reference", "--out", str(out)], env=ZH
    )
    set_language("en")
    return result


@pytest.mark.slow
def test_every_lab_run_is_chinese(run_all):
    assert run_all.exit_code == 0, run_all.output
    assert all(lab.id in run_all.output for lab in registry.discover())
    words = english_words(run_all.output)
    assert not words, words
