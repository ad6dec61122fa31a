"""Two languages: the choice of language, the catalog reader, the catalog's completeness,
and Chinese output with no English sentence left in it (identifiers aside)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.errors import UsageError
from labctl.faults import project_clean_room
from labctl.i18n import N_, Msg, _, catalog, choose, language, po, set_language


def _script(name: str):
    """A development script of scripts/ (not part of the package), loaded as a module."""
    path = Path(__file__).resolve().parent.parent / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


extract = _script("i18n_extract")

runner = CliRunner()
ZH = {"LABCTL_LANG": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": "", "COLUMNS": "100"}


@pytest.fixture(autouse=True)
def english_after():
    yield
    set_language("en")


# ---- choosing the language ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "env", "expected"),
    [
        ("zh", {"LABCTL_LANG": "en", "LANG": "en_US.UTF-8"}, "zh"),
        ("en", {"LABCTL_LANG": "zh", "LANG": "zh_CN.UTF-8"}, "en"),
        (None, {"LABCTL_LANG": "zh_CN.UTF-8", "LANG": "en_US"}, "zh"),
        (None, {"LABCTL_LANG": "fr", "LANG": "zh_TW.UTF-8"}, "zh"),
        (None, {"LC_ALL": "zh_CN.UTF-8", "LANG": "en_US"}, "zh"),
        (None, {"LC_ALL": "C", "LC_MESSAGES": "zh_CN"}, "en"),  # the first set one decides
        (None, {"LC_MESSAGES": "zh_CN", "LANG": "en_US"}, "zh"),
        (None, {"LANG": "zh_HK.Big5"}, "zh"),
        (None, {"LANG": "de_DE.UTF-8"}, "en"),
        (None, {}, "en"),
    ],
)
def test_lang_option_then_labctl_lang_then_locale_then_english(option, env, expected):
    assert choose(option, env) == expected


def test_the_cli_picks_the_language_from_the_option_and_the_environment():
    by_option = runner.invoke(app, ["--lang", "zh", "show", "gqa"], env=ZH)
    by_env = runner.invoke(app, ["show", "gqa"], env={**ZH, "LABCTL_LANG": "zh"})
    by_locale = runner.invoke(app, ["show", "gqa"], env={**ZH, "LANG": "zh_CN.UTF-8"})
    english = runner.invoke(app, ["show", "gqa"], env={**ZH, "LANG": "C.UTF-8"})
    chinese = _(N_("Course sections"))
    assert chinese == "Course sections"  # outside an invocation the language is English again
    for result in (by_option, by_env, by_locale):
        assert result.exit_code == 0, result.output
        assert "课程章节" in result.output
    assert english.exit_code == 0 and "Course sections" in english.output
    assert "课程章节" not in english.output
    assert language() == "en"


def test_help_is_translated_even_when_printed_before_any_callback():
    result = runner.invoke(app, ["--help"], env={**ZH, "LABCTL_LANG": "zh"})
    assert result.exit_code == 0
    assert "运行注意力与 Transformer Block 的实验" in result.output
    sub = runner.invoke(app, ["--lang", "zh", "show", "--help"], env=ZH)
    assert sub.exit_code == 0 and "一个实验 id" in sub.output
    assert "选项" in sub.output and "Options" not in sub.output
    from typer import rich_utils

    assert rich_utils.OPTIONS_PANEL_TITLE == "Options"  # put back after the invocation


def test_an_unknown_language_is_a_usage_error():
    result = runner.invoke(app, ["--lang", "fr", "list"], env=ZH)
    assert result.exit_code == 2


def test_errors_are_shown_in_the_chosen_language():
    result = runner.invoke(app, ["--lang", "zh", "show", "no-such-lab"], env=ZH)
    assert result.exit_code == 2
    assert "未知的实验 'no-such-lab'" in result.output
    assert str(
        UsageError(Msg("unknown lab {lab!r}; known labs: {known}, or all", lab="x", known="y"))
    ) == ("unknown lab 'x'; known labs: y, or all")


# ---- the catalog reader ---------------------------------------------------------------------

PO = r"""# a comment
msgid ""
msgstr "Language: zh\n"

#: somewhere.py:1
msgid "one {n} line"
msgstr "一 {n} 行"

#, fuzzy
msgid "guessed"
msgstr "猜的"

msgid ""
"two "
"lines\n"
"with \"quotes\""
msgstr "两行\n带\"引号\""

msgid "untranslated"
msgstr ""
"""


def test_po_reader_joins_continued_strings_and_skips_fuzzy_and_empty_entries():
    entries = po.parse(PO)
    assert [e.msgid for e in entries] == [
        "",
        "one {n} line",
        "guessed",
        'two lines\nwith "quotes"',
        "untranslated",
    ]
    assert entries[2].fuzzy
    table = po.translations(entries)
    assert table == {"one {n} line": "一 {n} 行", 'two lines\nwith "quotes"': '两行\n带"引号"'}


def test_po_writer_round_trips_through_the_reader():
    texts = ["plain", 'quote " and \\ backslash', "two\nlines\n", "tab\there"]
    text = "\n".join(po.format_entry(t, t.upper()) for t in texts)
    assert [(e.msgid, e.msgstr) for e in po.parse(text)] == [(t, t.upper()) for t in texts]


@pytest.mark.parametrize(
    "bad",
    [
        'msgid "a"\nmsgctxt "b"\n',
        'msgid "a"\n',
        '"floating"\n',
        "msgid a\nmsgstr b\n",
        'msgid "a\\q"\nmsgstr ""\n',
        'msgid "a"b"\nmsgstr ""\n',
    ],
)
def test_po_reader_refuses_what_it_does_not_understand(bad):
    with pytest.raises(po.CatalogError):
        po.parse(bad)


# ---- completeness ---------------------------------------------------------------------------


def test_zh_catalog_translates_every_message():
    gaps = extract.check("zh")
    assert not gaps, (
        f"{len(gaps)} gaps in labctl/i18n/locale/zh/LC_MESSAGES/labctl.po "
        "(`python scripts/i18n_extract.py --update zh` appends the missing msgids):\n"
        + "\n".join(gaps)
    )


def _catalog_text() -> str:
    from labctl.i18n import catalog_path

    return catalog_path("zh").read_text("utf-8")


def _replace_entry(text: str, msgid: str, new: str) -> str:
    old = po.format_entry(msgid, catalog("zh")[msgid])
    assert old in text, msgid
    return text.replace(old, new)


def test_the_completeness_check_fails_on_each_kind_of_gap():
    text = _catalog_text()
    title = "Causal attention, proved by assertions"
    template = "unknown lab {lab!r}; known labs: {known}, or all"
    fuzzy = "Print the version."
    text = _replace_entry(text, title, "")  # missing
    text = _replace_entry(text, "Metrics", po.format_entry("Metrics", ""))  # empty
    text = _replace_entry(text, fuzzy, "#, fuzzy\n" + po.format_entry(fuzzy, "版本"))
    text = _replace_entry(text, template, po.format_entry(template, "未知的实验 {name!r}"))
    text += "\n" + po.format_entry("pass", "又一个")  # duplicate
    gaps = extract.check("zh", text)
    assert any(g.startswith("missing:") and title in g and "causal_attention.py" in g for g in gaps)
    assert any(g.startswith("empty translation:") and "'Metrics'" in g for g in gaps)
    assert any(g.startswith("fuzzy translation:") and fuzzy in g for g in gaps)
    assert any(g.startswith("placeholders differ") and "['known', 'lab']" in g for g in gaps)
    assert any(g.startswith("duplicate msgid") and "'pass'" in g for g in gaps)


def test_extraction_refuses_a_marker_around_an_fstring(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.py").write_text('x = 3\nN_(f"{x} items")\nMsg("{n} items", n=x)\n_(variable)\n')
    found, problems = extract.source_messages(package)
    assert [f.msgid for f in found] == ["{n} items"]
    assert len(problems) == 1 and "m.py:2" in problems[0]


def test_msg_renders_translated_templates_and_nested_messages():
    set_language("zh")
    message = Msg(
        "unknown lab {lab!r}; known labs: {known}, or all",
        lab="gqa",
        known=Msg("name at least one lab, or all"),
    )
    assert message.render(_) == "未知的实验 'gqa'；已有的实验：至少指定一个实验，或 all，或 all"
    assert str(message).startswith("unknown lab 'gqa'")  # str() is the English source


# ---- no English sentence left in Chinese output ---------------------------------------------

# Three or more English words in a row, each of two letters or more, separated by single
# spaces: a sentence. Identifiers (metric_names, ids, code) contain `_`, `-`, digits, dots or
# brackets and never match a word.
ENGLISH_RUN = re.compile(r"(?<![\w.\-\[/`'])[A-Za-z]{2,}(?: [A-Za-z]{2,}){2,}(?![\w\-(\[.`'])")
# Course headings are the chapters' own words (a citation), and these are proper names.
ALLOWED = (
    "Transformer Block",
    "On Layer Normalization in the Transformer Architecture",
    "Xiong et al",
)


COMMAND = re.compile(r"labctl(?: [\w.\-=/]+)*")


def _check_names() -> set[str]:
    from labctl.cli.verify import _SHORT

    return {*_SHORT, *_SHORT.values()}


def _course_words() -> tuple[str, ...]:
    """The course's own headings, quoted verbatim in citations (some hold English terms)."""
    from labctl import registry
    from labctl.course import CHAPTERS

    headings = {
        t for lab in registry.discover() for s in lab.sections for t in (s.heading, s.part) if t
    }
    return (*ALLOWED, *headings, *(c.title for c in CHAPTERS))


def english_sentences(output: str) -> list[str]:
    """Runs of English words, once commands, verify's check names (identifiers) and the
    course's own headings are out."""
    names = re.compile(
        r"(?<![\w-])(?:" + "|".join(sorted(_check_names(), key=len, reverse=True)) + r")(?![\w-])"
    )
    found = []
    for line in names.sub("·", COMMAND.sub("", output)).splitlines():
        for match in ENGLISH_RUN.finditer(line):
            if not any(
                match.group(0) in allowed or allowed in match.group(0)
                for allowed in _course_words()
            ):
                found.append(f"{match.group(0)!r} in {line.strip()!r}")
    return found


def test_the_sentence_detector_catches_english_and_passes_identifiers():
    english = runner.invoke(app, ["--lang", "en", "show", "causal-attention"], env=ZH)
    assert english_sentences(english.output)
    assert not english_sentences(
        "scaled_score_var[d_k=16]  in [0.9, 1.1]  通过  labctl run all --set T=16"
    )
    assert english_sentences("通过  1/1 labs passed in 6.0 s")


@pytest.mark.parametrize(
    "args",
    [
        ["list"],
        ["show", "causal-attention"],
        ["show", "scale-ablation"],
        ["show", "mask-ablation"],
        ["show", "residual-ablation"],
        ["show", "gqa"],
        ["show", "kv-cache"],
        ["show", "no-such-lab"],
        ["run", "no-such-lab"],
    ],
)
def test_zh_output_has_no_english_sentence(args):
    result = runner.invoke(app, ["--lang", "zh", *args], env=ZH)
    assert result.exit_code in (0, 2), result.output
    assert not english_sentences(result.output), english_sentences(result.output)


@pytest.mark.slow
def test_zh_run_has_no_english_sentence(tmp_path):
    run = runner.invoke(
        app, ["--lang", "zh", "run", "causal-attention", "--out", str(tmp_path)], env=ZH
    )
    assert run.exit_code == 0, run.output
    assert not english_sentences(run.output), english_sentences(run.output)


def _zh_verify(tmp_path) -> list[str]:
    result = runner.invoke(
        app,
        [
            "--lang",
            "zh",
            "verify",
            "clean-room",
            "--path",
            str(project_clean_room()),
            "--no-metrics",
            "--out",
            str(tmp_path),
        ],
        env=ZH,
    )
    assert result.exit_code == 0, result.output
    # stderr says the seed the fixtures were drawn with, then that the room is labctl's own,
    # in Chinese too; the report is stdout.
    assert "生成；用 --seed" in result.stderr
    assert "注意：" in result.stderr and not english_sentences(result.stderr)
    return result.stdout.splitlines()


@pytest.mark.slow
def test_zh_verify_has_no_english_sentence_of_its_own(tmp_path):
    lines = _zh_verify(tmp_path)
    # The first line is the package checks: their names, then their (translated) messages.
    assert lines[0].split("：")[1].startswith("加载")
    assert not english_sentences("\n".join(lines)), english_sentences("\n".join(lines))


@pytest.mark.slow
def test_zh_verify_check_messages_are_translated(tmp_path):
    lines = _zh_verify(tmp_path)
    assert not english_sentences(lines[0])
    assert "工作进程" in lines[0], lines[0]


# ---- faults and contract deviations -----------------------------------------------------------


def test_zh_contract_check_names_a_deviation_in_chinese_and_json_stays_english(tmp_path):
    import shutil

    from labctl.faults import project_clean_room

    room = tmp_path / "room"
    shutil.copytree(project_clean_room(), room, ignore=shutil.ignore_patterns("__pycache__"))
    with (room / "__init__.py").open("a", encoding="utf-8") as handle:
        handle.write("\n\ndef rope(x, pos, theta=1000.0):\n    return x\n")
    result = runner.invoke(app, ["--lang", "zh", "contract", "check", "--path", str(room)], env=ZH)
    assert result.exit_code == 1, result.output
    flat = " ".join(result.output.split())
    assert "参数：缺少 positions；多出 pos" in flat, flat
    assert "parameters:" not in flat
    document = json.loads(
        runner.invoke(
            app, ["--lang", "zh", "contract", "check", "--path", str(room), "--json"], env=ZH
        ).stdout
    )
    rope = next(f for f in document["functions"] if f["function"] == "rope")
    assert rope["deviations"] == ["parameters: missing positions; unexpected pos"]


@pytest.mark.slow
def test_zh_verify_diagnosis_describes_the_fault_in_chinese(tmp_path):
    from labctl.faults import get as get_fault

    room = get_fault("no-sqrt-dk").materialize(tmp_path / "clean_room")
    args = ["verify", "clean-room", "--path", str(room), "--no-metrics", "--out", str(tmp_path)]
    result = runner.invoke(app, ["--lang", "zh", *args], env=ZH)
    assert result.exit_code == 1, result.output
    flat = " ".join(result.output.split())
    assert "分数没有除以 sqrt(D)：默认 scale 为 1" in flat, flat
    assert "第8章 · Attention 与 Transformer Block 故障注入与预期信号" in flat
    assert "scores are not divided" not in flat
    document = json.loads(runner.invoke(app, ["--lang", "zh", *args, "--json"], env=ZH).stdout)
    assert any(
        "scores are not divided by sqrt(D)" in d["message"] for d in document["diagnosis"]
    ), document["diagnosis"]


def test_the_zh_catalog_holds_nothing_obsolete():
    # `python scripts/i18n_extract.py --prune zh` removes what no code shows any more
    assert extract.obsolete("zh") == []


def test_prune_removes_obsolete_entries_and_keeps_area_headings(tmp_path, monkeypatch):
    catalog = tmp_path / "labctl.po"
    catalog.write_text(
        'msgid ""\nmsgstr ""\n"Language: zh\\n"\n\n'
        '# lab: nowhere\nmsgid "a message no code shows"\nmsgstr "没有代码显示的消息"\n\n'
        'msgid "passes every check"\nmsgstr "通过全部检查"\n',
        "utf-8",
    )
    monkeypatch.setattr(extract, "catalog_path", lambda lang: catalog)
    assert extract.prune("zh") == ["a message no code shows"]
    text = catalog.read_text("utf-8")
    assert "没有代码显示的消息" not in text and "# lab: nowhere" in text
    assert [e.msgid for e in po.parse(text, "zh")] == ["", "passes every check"]
    assert extract.prune("zh") == []


def test_a_timeout_reads_in_the_chosen_language_and_its_detail_stays_english():
    from labctl.errors import CallError
    from labctl.verify.observe import _failed

    exc = CallError(
        "softmax",
        "timeout",
        "no answer within 20 s (stopped)",
        shown=Msg("no answer within {seconds:g} s (stopped){printed}", seconds=20.0, printed=""),
    )
    outcome = _failed("softmax", exc)
    previous = set_language("zh")
    try:
        assert _(outcome.message) == "没有返回：20 秒内没有应答（已停止）"
    finally:
        set_language(previous)
    assert str(outcome.message) == "did not return: no answer within 20 s (stopped)"
    assert exc.detail == "no answer within 20 s (stopped)"


def test_an_import_the_policy_refuses_is_named_in_the_chosen_language():
    from labctl.verify.observe import Located

    seen = [Located("room/a.py:2", "imports torch"), Located("room/b.py:5", "imports from scipy")]
    previous = set_language("zh")
    try:
        assert [_(v.shown()) for v in seen] == [
            "room/a.py:2：导入了 torch",
            "room/b.py:5：从 scipy 导入",
        ]
    finally:
        set_language(previous)
    assert [str(v.shown()) for v in seen] == [str(v) for v in seen]  # English as the guard wrote
    other = Located("room/c.py:1", "syntax error")
    assert other.shown() == "room/c.py:1: syntax error"


def test_a_list_of_messages_is_listed_in_each_language():
    """A diagnosis's failing checks, one Msg each, listed: each translated, and the list's
    comma the language's own (、 in Chinese)."""
    from labctl.i18n import declared, listed

    checks = listed([declared(N_("parity")), declared(N_("pure")), declared(N_("shape"))])
    assert _(checks) == "parity, pure, shape"
    previous = set_language("zh")
    try:
        assert _(checks) == "对拍、纯函数、" + _("shape")
        assert _("shape") != "shape"
    finally:
        set_language(previous)
    assert listed([]) == "" and listed(["x"]) == "x"
