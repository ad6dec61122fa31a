"""`labctl evidence validate` and `submit` tell the learner why, in the chosen language: each
reason and warning on the terminal is translated (`--lang zh` / LABCTL_LANG=zh), while field
paths, metric names and the learner's own values stay as written; `--json` keeps the English
reasons whatever the language."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from clitools import CLEAN, filled_record
from gittools import git
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.errors import CleanRoomError
from labctl.evidence import modules
from labctl.i18n import Msg, _, set_language

MODULE = modules.Module(
    id="t-messages", title="test module", section="tests", required=("future_weight_max",)
)
HAN = range(0x4E00, 0xA000)


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A learner's git repository with one commit, as the working directory."""
    root = tmp_path / "learner"
    root.mkdir()
    (root / "README.md").write_text("x\n")
    git("init", "-q", cwd=root)
    git("add", "README.md", cwd=root)
    git("commit", "-q", "-m", "init", cwd=root)
    monkeypatch.chdir(root)
    monkeypatch.setattr(modules, "MODULES", (*modules.MODULES, MODULE))
    return root


def record(root: Path, **fields) -> dict:
    mine = {"module": MODULE.id, "commit": git("rev-parse", "HEAD", cwd=root)}
    return filled_record(**{**mine, **fields})


def written(root: Path, data: dict) -> Path:
    path = root / "evidence.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), "utf-8")
    return path


def invoke(*args: str, lang: str | None = None, env_lang: str = ""):
    prefix = ["--lang", lang] if lang else []
    result = CliRunner().invoke(app, [*prefix, *args], env={**CLEAN, "LABCTL_LANG": env_lang})
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def has_han(text: str) -> bool:
    return any(ord(char) in HAN for char in text)


# (fields changed in a good record, the English line, the Chinese line)
CASES = {
    "missing": (
        {"environment": None},
        "environment: missing; learn-llm.evidence.v1 requires it",
        "environment: 缺失；learn-llm.evidence.v1 要求必须有它",
    ),
    "negative seed": (
        {"seed": -1},
        "seed: -1 is negative; seeds are non-negative integers",
        "seed: -1 是负数；种子是非负整数",
    ),
    "unknown field": (
        {"colour": "blue"},
        "colour: unknown field; learn-llm.evidence.v1 has no field 'colour'",
        "colour: 未知字段；learn-llm.evidence.v1 没有字段 'colour'",
    ),
    "placeholder": (
        {"commit": "<learner-commit-sha>"},
        "commit: placeholder <learner-commit-sha> left",
        "commit: 还留着占位符 <learner-commit-sha>",
    ),
    "outside tolerance": (
        {"metrics": [{"name": "future_weight_max", "expected": "==0", "actual": 0.5}]},
        "metrics[0] (future_weight_max, clean-room): actual 0.5 does not satisfy ==0",
        "metrics[0] (future_weight_max, clean-room): actual 0.5 不满足 ==0",
    ),
    "passed contradicts": (
        {
            "metrics": [
                {"name": "future_weight_max", "expected": "==0", "actual": 0.0, "passed": False}
            ]
        },
        "metrics[0] (future_weight_max, clean-room): passed says False, but 0.0 satisfies ==0",
        "metrics[0] (future_weight_max, clean-room): passed 写的是 False，但 0.0 满足 ==0",
    ),
    # a labctl validator's message that reaches the learner through pydantic
    "validator": (
        {"commit": "xyz"},
        "commit: must be a git commit sha (7 to 64 hex digits) or 'unknown'",
        "commit: 必须是 git 提交 sha（7 到 64 个十六进制数字）或 'unknown'",
    ),
    # pydantic's error by its type, never its English sentence
    "pydantic type": (
        {"seed": "five"},
        "seed: should be an integer (got a string)",
        "seed: 应是整数（实际是字符串）",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_validate_shows_each_reason_in_chinese(repo, case):
    fields, english, chinese = CASES[case]
    path = written(repo, record(repo, **fields))
    zh = invoke("evidence", "validate", str(path), lang="zh")
    assert zh.exit_code == 1, zh.output
    assert chinese in zh.stdout.splitlines(), zh.stdout
    assert english not in zh.stdout
    assert "无效：evidence.yaml: 1 个问题" in zh.stdout
    by_env = invoke("evidence", "validate", str(path), env_lang="zh")
    assert by_env.stdout == zh.stdout


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_validate_in_english_is_unchanged(repo, case):
    fields, english, chinese = CASES[case]
    path = written(repo, record(repo, **fields))
    en = invoke("evidence", "validate", str(path))
    assert en.exit_code == 1
    assert en.stdout.splitlines() == [english, "invalid: evidence.yaml: 1 problem"]
    assert not has_han(en.stdout)


def test_a_warning_is_shown_in_chinese(repo):
    path = written(repo, record(repo, known_failures=["the loss spikes at step 3"]))
    zh = invoke("evidence", "validate", str(path), lang="zh")
    assert zh.exit_code == 0, zh.output
    assert "警告：known_failures: 记录列出了 1 个已知失败" in zh.stdout.splitlines(), zh.stdout
    en = invoke("evidence", "validate", str(path))
    assert "warning: known_failures: the record lists 1 known failure(s)" in en.stdout


def test_every_problem_at_once_in_chinese_and_json_stays_english(repo):
    fields = {k: v for case in ("missing", "negative seed", "unknown field") for k, v in
              CASES[case][0].items()}  # fmt: skip
    path = written(repo, record(repo, **fields, known_failures=["a crash"]))
    zh = invoke("evidence", "validate", str(path), lang="zh")
    assert "无效：evidence.yaml: 3 个问题" in zh.stdout
    for case in ("missing", "negative seed", "unknown field"):
        assert CASES[case][2] in zh.stdout and CASES[case][1] not in zh.stdout
    en_json = invoke("evidence", "validate", str(path), "--json")
    zh_json = invoke("evidence", "validate", str(path), "--json", lang="zh")
    assert zh_json.stdout == en_json.stdout
    doc = json.loads(zh_json.stdout)
    reasons = [p["reason"] for p in doc["problems"] + doc["warnings"]]
    assert "-1 is negative; seeds are non-negative integers" in reasons
    assert "the record lists 1 known failure(s)" in reasons
    assert not has_han(zh_json.stdout)


def test_a_learner_value_is_shown_escaped_in_chinese(repo):
    path = written(repo, record(repo, commands=["labctl run <lab\x1b[2J>"]))
    zh = invoke("evidence", "validate", str(path), lang="zh")
    assert "commands[0]: 还留着占位符 <lab\\x1b[2J>" in zh.stdout.splitlines(), zh.stdout
    assert "\x1b" not in zh.stdout


# A record that names no clean room: submit cannot know whose code made it.
ROOM_EN = (
    "labctl.clean_room: names no clean room identity (path, sha256, files): run the labs with "
    "--clean-room my_room and fill the template again"
)
ROOM_ZH = (
    "labctl.clean_room: 没有写明 clean room 的身份（path、sha256、files）：请用 --clean-room "
    "my_room 运行实验，再重新填写模板"
)


def test_submit_refusals_in_chinese_english_and_json(repo, tmp_path):
    metrics = [
        {"name": "future_weight_max", "expected": "==0", "actual": 0.5},
        {"name": "made_up_metric", "expected": "==0", "actual": 0.0},
    ]
    path = written(repo, record(repo, metrics=metrics))
    store = str(tmp_path / "store")
    english = (
        "metrics[1] (made_up_metric): name 'made_up_metric' is not in the tolerance table v4: "
        "no lab measures it, so it is not reproducible"
    )
    chinese = (
        "metrics[1] (made_up_metric): name 'made_up_metric' 不在容差表 v4 中："
        "没有实验测量它，因此无法复现"
    )
    zh = invoke("evidence", "submit", str(path), "--root", store, lang="zh")
    assert zh.exit_code == 1, zh.output
    lines = zh.stdout.splitlines()
    assert chinese in lines, zh.stdout
    assert CASES["outside tolerance"][2] in lines
    assert english not in zh.stdout
    assert ROOM_ZH in lines
    assert "已拒绝：evidence.yaml: 3 个问题" in zh.stdout
    en = invoke("evidence", "submit", str(path), "--root", store)
    assert en.stdout.splitlines() == [
        CASES["outside tolerance"][1],
        english,
        ROOM_EN,
        "refused: evidence.yaml: 3 problems; nothing written",
    ]
    en_json = invoke("evidence", "submit", str(path), "--root", store, "--json")
    zh_json = invoke("evidence", "submit", str(path), "--root", store, "--json", lang="zh")
    assert zh_json.stdout == en_json.stdout
    reasons = [p["reason"] for p in json.loads(zh_json.stdout)["problems"]]
    assert reasons == [
        "0.5 does not satisfy ==0",
        "'made_up_metric' is not in the tolerance table v4: no lab measures it, so it is not "
        "reproducible",
        ROOM_EN.removeprefix("labctl.clean_room: "),
    ]
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*.yaml"))


def test_a_clean_room_error_in_a_refusal_stays_english_for_receipts_and_json():
    """`str(error)` is already in the chosen language; `error.message` (what submit puts in a
    refusal's note) keeps the message, English until it is shown."""
    error = CleanRoomError(Msg("not implemented yet: {functions}", functions="softmax"))
    previous = set_language("zh")
    try:
        message = error.message
        assert str(message) == "not implemented yet: softmax"
        assert _(message) == "尚未实现：softmax"
        assert str(error) == "尚未实现：softmax"
    finally:
        set_language(previous)
    assert CleanRoomError("room", 2).message == "('room', 2)"


@pytest.mark.parametrize("command", ["validate", "submit"])
def test_a_file_named_with_an_escape_and_a_newline_is_shown_escaped_on_one_line(repo, command):
    """`valid: FILE` / `refused: FILE: …` printed the name as it is: its ESC sequence drove the
    terminal and its newline split the verdict's line in two. --json keeps the exact name."""
    source = written(repo, record(repo))
    path = source.rename(source.with_name("ev\x1b[31mil\nname.yaml"))
    result = invoke("evidence", command, str(path))
    last = result.stdout.splitlines()[-1]
    assert "\x1b" not in result.stdout, result.stdout
    assert "ev\\x1b[31mil\\x0aname.yaml" in last, result.stdout
    document = json.loads(invoke("evidence", command, str(path), "--json").stdout)
    assert document["file"].endswith("ev\x1b[31mil\nname.yaml")
