"""What labctl writes for tools keeps its messages in English in every language (README,
"中文与英文 / Chinese and English"): under `--lang zh` the terminal shows an error in Chinese,
while the `--json` document is the English one, word for word. Errors of `run`'s options,
`--set`, `report`, a rubric given to `grade`, and a lab whose clean room fails (its `run --json`
document and its evidence record)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from clitools import MASK_RAISES, invoke

# Nothing of this machine's locale leaks into the choice of language.
CJK = re.compile(r"[\u4e00-\u9fff]")
RUN = ["run", "causal-attention", "--impl", "reference"]
# What differs between two runs of one lab: how long it took.
TIMING = ("wall_time_s",)


@pytest.fixture
def place(tmp_path, monkeypatch) -> Path:
    """A working directory holding a file, an empty folder and three broken rubrics."""
    (tmp_path / "afile").write_text("x\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "class").mkdir()
    head = "schema: labctl.rubric.v1\nname: x\n"
    (tmp_path / "key-twice.yaml").write_text(head + "name: y\nitems: []\n")
    (tmp_path / "no-target.yaml").write_text(
        head + "items:\n  - {id: a, kind: function, target: nope, points: 1}\n"
    )
    (tmp_path / "id-twice.yaml").write_text(
        head + "items:\n  - {id: a, kind: submission, points: 1}\n"
        "  - {id: a, kind: package, points: 1}\n"
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


# (arguments, exit code, what the English document's message says)
CASES = {
    "seed": ([*RUN, "--seed", "-1"], 2, "--seed must be an integer from 0 to 4294967295, got -1"),
    "impl": (["run", "causal-attention", "--impl", "x"], 2, "--impl must be one of"),
    "timeout": ([*RUN, "--timeout", "0"], 2, "--timeout must be a number of seconds above 0"),
    "out is a file": ([*RUN, "--out", "afile/runs"], 2, "afile is not a directory"),
    "set malformed": ([*RUN, "--set", "T"], 2, "--set wants NAME=VALUE or LAB.NAME=VALUE"),
    "set unknown": (
        [*RUN, "--set", "nosuch=1"],
        2,
        "unknown parameter 'nosuch'; allowed: B: integer, B ≥ 1, B ≤ 64 (default 2); ",
    ),
    "set no lab has it": (
        ["run", "causal-attention", "gqa", "--impl", "reference", "--set", "nosuch=1"],
        2,
        "allowed: no lab being run has it",
    ),
    "set lab not run": ([*RUN, "--set", "gqa.T=4"], 2, "lab 'gqa' is not being run"),
    "set invalid value": (
        [*RUN, "--set", "T=abc"],
        2,
        "--set T=abc: not a valid value; allowed: T: integer, T ≥ 2, T ≤ 512 (default 8)",
    ),
    "set out of bounds": (
        [*RUN, "--set", "T=0"],
        2,
        "; allowed: T: integer, T ≥ 2, T ≤ 512 (default 8)",
    ),
    "set refused by the lab": (
        ["run", "gqa", "--impl", "reference", "--set", "Hkv=3"],
        2,
        "--set refused: gqa: Hkv = 3 must divide H = 8",
    ),
    "report root missing": (
        ["report", "--root", "missing", "--out", "r.html"],
        2,
        "--root missing: no such directory",
    ),
    "report no evidence": (["report", "--root", "empty"], 2, "no evidence under empty"),
    "report out is a folder": (["report", "--out", "empty"], 2, "--out empty: is a directory"),
    "report out under a file": (
        ["report", "--out", "afile/r.html"],
        2,
        "--out afile/r.html: afile is not a directory",
    ),
    "rubric key twice": (
        ["grade", "class", "class", "--out", "grades", "--rubric", "key-twice.yaml"],
        1,
        "key 'name' appears twice",
    ),
    "rubric no target": (
        ["grade", "class", "class", "--out", "grades", "--rubric", "no-target.yaml"],
        1,
        "items.0: function item 'a' needs a target among: ",
    ),
    "rubric id twice": (
        ["grade", "class", "class", "--out", "grades", "--rubric", "id-twice.yaml"],
        1,
        "(document): item id 'a' appears twice",
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_json_error_is_english_while_the_terminal_is_chinese(place, case):
    args, code, says = case
    documents = {}
    for lang in ("en", "zh"):
        result = invoke(*args, "--json", lang=lang)
        assert result.exit_code == code, result.output
        documents[lang] = json.loads(result.stdout)
        assert bool(CJK.search(result.stderr)) == (lang == "zh"), result.stderr
    assert documents["zh"] == documents["en"]
    message = documents["en"]["error"]["message"]
    assert says in message and not CJK.search(message), message


def _masked(document: dict) -> dict:
    for lab in document["labs"]:
        for key in TIMING:
            lab.pop(key)
        lab.pop("records")
    document.pop("wall_time_s")
    return document


def test_a_failing_clean_room_is_english_in_json_and_records(place):
    room = str(MASK_RAISES.materialize(place / "raising"))
    args = ["run", "causal-attention", "--clean-room", room, "--isolation", "process"]
    documents, records = {}, {}
    for lang in ("en", "zh"):
        out = place / f"out-{lang}"
        result = invoke(*args, "--out", str(out), "--json", lang=lang)
        assert result.exit_code == 1, result.output
        documents[lang] = _masked(json.loads(result.stdout))
        (record,) = out.glob("causal-attention/*.json")
        records[lang] = json.loads(record.read_text("utf-8"))["known_failures"]
    (lab,) = documents["en"]["labs"]
    assert lab["error"].startswith("clean room failed: causal_mask: raised RuntimeError")
    assert documents["zh"] == documents["en"]
    assert records["zh"] == records["en"] and records["en"][0] == lab["error"]
    # the terminal shows the same failure in Chinese
    shown = invoke(*args, "--out", str(place / "shown"), lang="zh")
    assert shown.exit_code == 1
    assert "clean room 失败：causal_mask：抛出 RuntimeError：not written yet" in shown.stdout


def test_report_problems_are_english_in_json(place):
    runs = place / "runs"
    made = invoke(*RUN, "--out", str(runs), lang="en")
    assert made.exit_code == 0, made.output
    (csv_file,) = runs.glob("causal-attention/*-attention-b0-h0-reference.csv")
    csv_file.write_text(csv_file.read_text().replace("0.", "9.", 1))
    args = ["report", "--root", str(runs), "--out", "r.html"]
    documents = {}
    for lang in ("en", "zh"):
        result = invoke(*args, "--json", lang=lang)
        assert result.exit_code == 0, result.output
        documents[lang] = json.loads(result.stdout)
    assert documents["zh"] == documents["en"]
    (lab,) = documents["en"]["labs"]
    (problem,) = lab["problems"]
    assert problem == f"artifact {csv_file.name} changed since the run (sha256 differs)"
    shown = invoke(*args, lang="zh")
    assert (
        f"causal-attention: 产物 {csv_file.name} 在运行之后被改动过（sha256 不一致）"
        in shown.stderr
    )


@pytest.mark.parametrize(
    "args",
    [("list", "--json"), ("show", "causal-attention", "--json"), ("doctor", "--json")],
    ids=["list", "show", "doctor"],
)
def test_the_documents_of_list_show_and_doctor_are_the_english_ones(args):
    """Lab titles, questions, parameter and metric texts, and how `auto` isolates: the screen
    shows them in Chinese, the document for tools in English, word for word."""
    english = invoke(*args)
    chinese = invoke(*args, lang="zh")
    assert english.exit_code == chinese.exit_code, chinese.output
    assert json.loads(chinese.stdout) == json.loads(english.stdout)
    if args[0] == "show":
        assert not CJK.search(json.loads(english.stdout)["question"])  # a text, in English
    assert CJK.search(invoke(*args[:-1], lang="zh").stdout)  # the screen is Chinese
