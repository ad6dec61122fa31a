"""`labctl quiz`: every path of the command (interactive, --answers, --json, --list, refused
files, exit codes 0/1/2), and the library: each checkable answer is computed by the labs'
code (a fault in that code moves it), never typed; answers are read as the question asks.

Records go to tmp_path (never the repository's evidence/)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from labctl import reference
from labctl.cli.main import app
from labctl.i18n import set_language
from labctl.quiz import bank, check
from labctl.quiz.bank import GROUPS, QUESTIONS
from labctl.quiz.check import CORRECT, UNANSWERED, UNGRADED, WRONG, grade, shown

runner = CliRunner()
DECODE = reference.attention_decode
ENV = {"LABCTL_LANG": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": "", "COLUMNS": "100"}


@pytest.fixture(autouse=True)
def english_after():
    yield
    set_language("en")


@pytest.fixture(scope="module")
def solved() -> dict[str, object]:
    """Each checkable question's computed answer, once."""
    return {q.id: q.solve() for q in QUESTIONS if q.graded}


def _invoke(args, tmp_path, **kwargs):
    return runner.invoke(app, [*args, "--out", str(tmp_path / "quiz")], env=ENV, **kwargs)


def _right_answers(solved) -> dict[str, str]:
    return {q.id: shown(q, solved[q.id]) for q in QUESTIONS if q.graded}


def _records(tmp_path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "quiz").glob("quiz-*.json"))]


# ---- the command ------------------------------------------------------------------------


def test_every_answer_right_from_a_file_passes_with_exit_0_and_a_record(tmp_path, solved):
    answers = tmp_path / "answers.yaml"
    answers.write_text(json.dumps(_right_answers(solved)), encoding="utf-8")
    result = _invoke(["quiz", "--answers", str(answers)], tmp_path)
    assert result.exit_code == 0, result.output
    graded = sum(q.graded for q in QUESTIONS)
    prose = len(QUESTIONS) - graded
    assert f"{graded} correct, 0 wrong, 0 unanswered, {prose} prose" in result.output
    (kept,) = _records(tmp_path)
    assert kept["schema"] == "labctl.quiz.v1" and kept["passed"] is True
    assert kept["source"] == "file" and len(kept["answers_sha256"]) == 64
    assert {q["verdict"] for q in kept["questions"]} == {CORRECT, UNGRADED}


def test_the_chapters_printed_answer_is_graded_wrong_with_exit_1_and_the_section(tmp_path):
    answers = tmp_path / "answers.yaml"
    answers.write_text('softmax-2-1-0: "0.61, 0.22, 0.17"\nsoftmax-largest: 1\n', "utf-8")
    result = _invoke(["quiz", "--answers", str(answers), "--section", "hands-on-13.1"], tmp_path)
    assert result.exit_code == 1, result.output
    assert "§13.1 手算题" in result.output
    assert "labctl computes: 0.67, 0.24, 0.09" in result.output
    assert "1 correct, 1 wrong, 3 unanswered, 1 prose" in result.output
    (kept,) = _records(tmp_path)
    verdicts = {q["id"]: q["verdict"] for q in kept["questions"]}
    assert verdicts["softmax-2-1-0"] == WRONG and verdicts["softmax-largest"] == CORRECT
    assert verdicts["multi-turn"] == UNGRADED and verdicts["mha-params"] == UNANSWERED
    assert kept["groups"] == ["hands-on-13.1"]


def test_interactive_answers_are_read_one_question_at_a_time(tmp_path, solved):
    """Four checkable questions of §6.13 (one prose, asked nothing): a right shape, a wrong
    number, a skip, a choice."""
    typed = "(2, 4, 8, 8)\n0.5\n\nsplit\n"
    result = _invoke(["quiz", "--section", "parts-6.13"], tmp_path, input=typed)
    assert result.exit_code == 1, result.output
    assert result.output.count("your answer (empty to skip)") == 4
    assert "a right answer says:" in result.output and "labctl run mask-ablation" in result.output
    (kept,) = _records(tmp_path)
    assert kept["source"] == "interactive" and kept["answers_sha256"] is None
    assert [q["verdict"] for q in kept["questions"]] == [
        CORRECT, WRONG, UNANSWERED, UNGRADED, CORRECT
    ]  # fmt: skip


def test_json_prints_one_document_with_the_record_and_prompts_on_stderr(tmp_path):
    result = runner.invoke(
        app,
        ["quiz", "--section", "ch8-checklist", "--json", "--out", str(tmp_path / "quiz")],
        env=ENV,
        input="2\n\n",
    )
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["passed"] is False
    assert document["summary"] == {"correct": 1, "wrong": 0, "unanswered": 1, "ungraded": 2}
    assert Path(document["record"]).name.startswith("quiz-")
    assert "your answer" not in result.stdout and "your answer" in result.stderr


def test_json_from_a_file_holds_each_question_with_its_computed_answer(tmp_path):
    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps({"dot-product": 32, "query-axis": "-2"}), "utf-8")
    result = _invoke(["quiz", "--answers", str(answers), "--json"], tmp_path)
    document = json.loads(result.stdout)
    by_id = {q["id"]: q for q in document["questions"]}
    assert by_id["dot-product"]["verdict"] == CORRECT and by_id["dot-product"]["expected"] == "32"
    assert by_id["query-axis"] == {**by_id["query-axis"], "verdict": WRONG, "expected": "2"}
    assert result.exit_code == 1


def test_list_names_every_question_and_asks_nothing(tmp_path):
    result = _invoke(["quiz", "--list", "--json"], tmp_path)
    assert result.exit_code == 0
    listed = json.loads(result.stdout)["questions"]
    assert [q["id"] for q in listed] == [q.id for q in QUESTIONS]
    assert not (tmp_path / "quiz").exists()
    shown_table = _invoke(["quiz", "--list"], tmp_path)
    assert shown_table.exit_code == 0 and "kv-cache-bytes" in shown_table.stdout


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("dot-product: [32, [1]]\n", "must be text, a number or a list"),
        ("- 32\n", "expected a mapping of question id to answer"),
        ("dot-prodcut: 32\n", "'dot-prodcut' is no question's id"),
        ("dot-product: {a: 1}\n", "must be text, a number or a list"),
        ("dot-product: [unclosed\n", "not YAML or JSON (line"),
        (b"dot-product: \xff\n", "not UTF-8 text"),
        # read by PyYAML as the last value, graded wrong in silence
        ("dot-product: 32\ndot-product: 33\n", "duplicate key 'dot-product' (first at line 1)"),
        # more digits than Python converts ended in "internal error: ValueError"
        ("dot-product: " + "9" * 5000 + "\n", "not readable: ValueError: Exceeds the limit"),
    ],
)
def test_a_bad_answers_file_is_refused_in_one_error_with_exit_1(tmp_path, content, says):
    answers = tmp_path / "answers.yaml"
    (answers.write_bytes if isinstance(content, bytes) else answers.write_text)(content)
    result = _invoke(["quiz", "--answers", str(answers)], tmp_path)
    assert result.exit_code == 1
    # One message, wrapped at 80 columns like every line labctl prints: read it unwrapped.
    said = " ".join(result.stderr.split())
    assert said.startswith("error: ") and said.count("error:") == 1 and says in said, said
    assert "Traceback" not in result.output
    assert not (tmp_path / "quiz").exists()  # nothing graded, nothing written


def test_a_missing_answers_file_is_refused_and_json_still_gets_a_document(tmp_path):
    result = _invoke(["quiz", "--answers", str(tmp_path / "nope.yaml"), "--json"], tmp_path)
    assert result.exit_code == 2  # a usage error, as a missing file is for every command
    document = json.loads(result.stdout)
    assert document["passed"] is False and "nope.yaml: no such file" in document["error"]["message"]


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_an_answers_file_that_is_a_fifo_or_a_device_is_refused_not_read(tmp_path, kind):
    """A FIFO once waited for a writer forever; /dev/zero says it holds 0 bytes and was read
    until labctl's memory ran out."""
    if kind == "fifo":
        named = tmp_path / "answers.yaml"
        os.mkfifo(named)
    else:
        named = Path("/dev/zero")
    result = _invoke(["quiz", "--answers", str(named)], tmp_path)
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    expected = "a FIFO" if kind == "fifo" else "a character device"
    assert said == f"error: {named}: is {expected}, not a regular file", said
    assert not (tmp_path / "quiz").exists()


def test_an_unknown_section_is_a_usage_error_with_exit_2(tmp_path):
    result = _invoke(["quiz", "--section", "13.1"], tmp_path)
    assert result.exit_code == 2
    assert "unknown section '13.1'" in result.stderr and "hands-on-13.1" in result.stderr


def test_chinese_asks_and_explains_in_chinese(tmp_path):
    answers = tmp_path / "answers.yaml"
    answers.write_text("dot-product: 31\n", "utf-8")
    result = runner.invoke(
        app,
        ["--lang", "zh", "quiz", "--answers", str(answers), "--section", "ch8-closed-book",
         "--out", str(tmp_path / "quiz")],
        env=ENV,
    )  # fmt: skip
    assert result.exit_code == 1
    assert "错误" in result.stdout and "labctl 算出" in result.stdout
    assert "What is dot_product" not in result.stdout


# ---- the library ------------------------------------------------------------------------


def test_every_question_is_cited_in_a_group_and_every_group_has_questions():
    assert {q.group for q in QUESTIONS} == set(GROUPS)
    assert len({q.id for q in QUESTIONS}) == len(QUESTIONS)
    for q in QUESTIONS:
        assert q.section == GROUPS[q.group]
        assert q.lab, q.id
        assert q.graded or len(q.contains) >= 2, q.id


def test_each_right_answer_grades_correct_and_a_nudged_one_wrong(solved):
    for q in QUESTIONS:
        if not q.graded:
            continue
        expected = solved[q.id]
        assert grade(q, shown(q, expected), expected).verdict == CORRECT, q.id
        assert grade(q, _nudged(q, expected), expected).verdict == WRONG, q.id


def _nudged(q, expected):
    if q.kind == "number":
        return str(float(expected) + 2 * q.tolerance + 1)
    if q.kind == "numbers":
        return ", ".join(str(float(v) + 2 * q.tolerance + 1) for v in expected)
    if q.kind == "shape":
        return str((*tuple(expected)[::-1], 1))
    if q.kind == "shapes":
        return "; ".join(str((*tuple(s), 1)) for s in expected)
    return next(key for key, _ in q.choices if key != expected)


def test_the_answers_the_chapters_print_are_computed_not_typed(solved):
    """§13.4's key (0.61, 0.22, 0.17) and §7.4's 10.7 GB are wrong; 第8章's L x W rounds."""
    assert solved["softmax-2-1-0"] == pytest.approx([0.665, 0.245, 0.090], abs=0.001)
    assert solved["kv-cache-bytes"] == 2 * 4096 * 8 * 128 * 2 * 80
    assert solved["swa-reach-large"] == 32 * 4095 + 1
    assert solved["locate-shape-fault"] == "split"
    assert solved["query-axis"] == 2
    assert solved["dk64-gradient"] == "shrinks"
    assert solved["no-scale-top-weight"] == "rises"


@pytest.mark.parametrize(
    ("question", "function", "fault"),
    [
        ("softmax-2-1-0", "softmax", lambda x, axis=-1: np.exp(x) / np.exp(x).sum() ** 0.5),
        ("masked-takes-part", "causal_mask", lambda t_q, t_k=None: np.zeros((t_q, t_q), bool)),
        ("swa-reach-small", "sliding_window_mask",
         lambda t, w, t_k=None: np.triu(np.ones((t, t), bool), 1)),
        ("scores-shape", "scaled_dot_product_attention",
         lambda q, k, v, mask=None, scale=None: (v, np.ones((*q.shape[:3], 1)))),
        ("kv-cache-bytes", "attention_decode",
         lambda x, pk, pv, wq, wk, wv, wo, h, hkv=None, *a: DECODE(x, pk, pv, wq, wq, wq, wo, h, h)),
    ],
)  # fmt: skip
def test_a_fault_in_the_code_a_question_is_solved_with_moves_its_answer(
    monkeypatch, solved, question, function, fault
):
    monkeypatch.setattr(reference, function, fault)
    assert bank.by_id(question).solve() != solved[question]


@pytest.mark.parametrize(
    ("kind_of", "answer", "verdict"),
    [
        ("dot-product", " ≈ 32.0 ", CORRECT),
        ("dot-product", "thirty-two", WRONG),
        ("mha-params", "16,777,216", CORRECT),
        ("mha-params", "1.6777216e7", CORRECT),
        ("mha-params", "16 777 217", WRONG),
        ("scores-shape", "[2, 4, 8, 8]", CORRECT),
        ("scores-shape", "2x4x8x8", CORRECT),
        ("scores-shape", "(B, H, T, T)", WRONG),
        ("softmax-2-1-0", [0.665, 0.245, 0.09], CORRECT),
        ("softmax-2-1-0", "0.67 0.24 0.09", CORRECT),
        ("softmax-2-1-0", "0.67, 0.24", WRONG),
        ("masked-takes-part", "No", CORRECT),
        ("masked-takes-part", "maybe", WRONG),
        ("dk64-typical", "8.4", CORRECT),
        ("dk64-typical", "8.6", WRONG),
        ("dk64-typical", "nan", WRONG),
        ("dot-product", None, UNANSWERED),
        ("dot-product", "  ", UNANSWERED),
    ],
)
def test_answers_are_read_as_the_question_asks(solved, kind_of, answer, verdict):
    q = bank.by_id(kind_of)
    assert grade(q, answer, solved[kind_of]).verdict == verdict


def test_a_wrong_reading_says_why():
    q = bank.by_id("scores-shape")
    graded = grade(q, "(B, H, T, T)", (2, 4, 8, 8))
    assert graded.verdict == WRONG and graded.problem == "not a shape"
    choice = grade(bank.by_id("masked-takes-part"), "maybe", "no")
    assert str(choice.problem.render(str)) == "not one of: yes, no"


def test_a_choice_may_be_answered_by_its_label_in_either_language():
    q = bank.by_id("dk64-gradient")
    assert grade(q, "shrinks towards zero", "shrinks").verdict == CORRECT
    set_language("zh")
    from labctl.i18n import _

    assert grade(q, _("shrinks towards zero"), "shrinks").verdict == CORRECT


def test_an_answers_file_too_large_is_refused(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (check.MAX_FILE_BYTES + 1))
    with pytest.raises(check.QuizError, match="too large"):
        check.read_answers(big)


def test_every_cited_section_is_in_the_course():
    from test_citations import chapter_lines, problem

    text = chapter_lines()
    assert [(g, problem(s, text)) for g, s in GROUPS.items() if problem(s, text)] == []


@pytest.mark.parametrize("json_", [False, True])
def test_an_out_that_is_a_file_is_refused_before_the_first_question(tmp_path, json_):
    """It was found only when the record was written, after every answer had been typed:
    an internal error (FileExistsError), the answers lost."""
    taken = tmp_path / "taken"
    taken.write_text("mine\n")
    args = ["quiz", "--section", "ch8-closed-book", "--out", str(taken)]
    result = runner.invoke(app, args + (["--json"] if json_ else []), env=ENV, input="32\n")
    assert result.exit_code == 2, result.output
    assert "your answer" not in result.output  # nothing asked
    said = json.loads(result.stdout)["error"]["message"] if json_ else result.stderr
    assert f"--out {taken}: {taken} is not a directory" in " ".join(said.split()), said
    assert "internal error" not in result.output
    assert taken.read_text() == "mine\n"


def test_the_answer_hint_is_in_chinese_too(tmp_path):
    """`answer as:` was translated and its hint ("a shape, e.g. (1, 2, 3)") was not."""
    result = runner.invoke(
        app,
        ["--lang", "zh", "quiz", "--section", "parts-6.13", "--out", str(tmp_path / "quiz")],
        env=ENV,
        input="\n" * 10,
    )
    assert result.exit_code == 1, result.output
    assert "答案写法：一个形状，如 (1, 2, 3)" in result.stdout, result.stdout
    assert "a shape" not in result.stdout and "a number" not in result.stdout


def test_a_lone_surrogate_in_an_answer_is_refused_in_words(tmp_path):
    """`"\\ud800"` read as half a character: the record could not be written, an internal
    error (UnicodeEncodeError) after grading."""
    answers = tmp_path / "answers.yaml"
    answers.write_text('dot-product: "3\\ud8002"\n')
    result = _invoke(["quiz", "--answers", str(answers), "--json"], tmp_path)
    assert result.exit_code == 1, result.output
    said = json.loads(result.stdout)["error"]["message"]
    assert said == (
        f"{answers}: the text '3\\ud8002' holds a lone surrogate, half of a character: write "
        "the character itself"
    ), said
    assert not (tmp_path / "quiz").exists()


def test_an_out_named_with_an_escape_is_shown_escaped(tmp_path, monkeypatch, solved):
    """`record: DIR/quiz-….json` printed the folder's ESC sequence raw, driving the terminal."""
    monkeypatch.chdir(tmp_path)
    answers = tmp_path / "answers.yaml"
    answers.write_text("dot-product: 32\n")
    args = ["quiz", "--answers", str(answers), "--section", "ch8-closed-book"]
    result = runner.invoke(app, [*args, "--out", "q\x1b[31mx"], env=ENV)
    assert result.exit_code == 1, result.output
    said = " ".join(result.stdout.split())  # wrapped at 100 columns
    assert "\x1b" not in said and "record: q\\x1b[31mx/quiz-" in said, said
