"""The Chinese catalog follows docs/glossary.md and the typographic rules written there.

The glossary's table names, for each term, the variants labctl never uses; every
translation is checked against them. Typography: no space after a full-width
colon, one kind of semicolon per message, a space between a Chinese character and
a Latin letter. Each check is shown failing on a planted entry.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labctl.i18n import catalog_path, po

GLOSSARY = Path(__file__).resolve().parents[1] / "docs" / "glossary.md"
CJK = "\u4e00-\u9fff"


def forbidden_terms(text: str) -> dict[str, str]:
    """Each forbidden variant of the glossary's table, with the Chinese term to use instead."""
    terms: dict[str, str] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("English", "---"):
            continue
        for variant in re.findall(r"`([^`]+)`", cells[2]):
            terms[variant] = cells[1]
    return terms


def _translations(text: str | None = None) -> list[po.Entry]:
    entries = po.parse(text if text is not None else catalog_path("zh").read_text("utf-8"))
    return [e for e in entries if e.msgid and e.msgstr]


def glossary_problems(entries: list[po.Entry], terms: dict[str, str]) -> list[str]:
    return [
        f"line {e.line}: {variant!r} (use {use!r}) in {e.msgstr!r}"
        for e in entries
        for variant, use in terms.items()
        if variant in e.msgstr
    ]


def typography_problems(entries: list[po.Entry]) -> list[str]:
    problems = []
    for e in entries:
        text = e.msgstr
        if re.search("： ", text):
            problems.append(f"line {e.line}: a space after a full-width colon in {text!r}")
        if "；" in text and ";" in text:
            problems.append(f"line {e.line}: '；' and ';' mixed in {text!r}")
        if re.search(f"[{CJK}][A-Za-z]|[A-Za-z][{CJK}]", text):
            problems.append(f"line {e.line}: no space between Chinese and Latin in {text!r}")
    return problems


def test_the_glossary_forbids_the_variants_the_issue_names():
    terms = forbidden_terms(GLOSSARY.read_text("utf-8"))
    for variant, use in {
        "掩码": "遮罩",
        "契约": "接口合同",
        "KV 缓存": "KV Cache",
        "分块 attention": "分块注意力",
        "batch 大小": "批大小",
    }.items():
        assert terms.get(variant) == use, (variant, terms.get(variant))


def test_no_translation_uses_a_term_the_glossary_forbids():
    terms = forbidden_terms(GLOSSARY.read_text("utf-8"))
    problems = glossary_problems(_translations(), terms)
    assert not problems, "\n".join(problems)


def test_no_translation_breaks_the_typographic_rules():
    problems = typography_problems(_translations())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("msgstr", "says"),
    [
        ("因果掩码", "'掩码'"),
        ("冻结的 clean room 接口，契约 v1。", "'契约'"),
        ("KV 缓存：精确的解码", "'KV 缓存'"),
        ("分块 attention：online softmax", "'分块 attention'"),
    ],
)
def test_a_planted_forbidden_term_is_caught(msgstr, says):
    text = po.format_entry("x", msgstr)
    problems = glossary_problems(_translations(text), forbidden_terms(GLOSSARY.read_text("utf-8")))
    assert any(says in p for p in problems), problems


@pytest.mark.parametrize(
    ("msgstr", "says"),
    [
        ("理由： 舍入", "full-width colon"),
        ("先减去最大值；再做 softmax; 得到 1", "mixed"),
        ("对float32 求和", "between Chinese and Latin"),
    ],
)
def test_a_planted_typographic_fault_is_caught(msgstr, says):
    problems = typography_problems(_translations(po.format_entry("x", msgstr)))
    assert len(problems) == 1 and says in problems[0], problems


@pytest.mark.parametrize("name", ["README.zh-CN.md", "docs/learners.zh-CN.md"])
def test_the_chinese_docs_use_the_glossary_s_terms(name):
    """The Chinese pages say what the catalog says (被屏蔽, KV Cache, Transformer Block...)."""
    text = (GLOSSARY.parents[1] / name).read_text("utf-8")
    terms = forbidden_terms(GLOSSARY.read_text("utf-8"))
    found = [f"{variant!r} (use {use!r})" for variant, use in terms.items() if variant in text]
    assert not found, found


def test_parameters_and_a_parameter_count_are_the_glossary_s_two_terms():
    """`contract show` labelled a function's parameters 参数量 (how many weights), the term of
    the decoder's parameter count, which shared their English word."""
    said = {e.msgid: e.msgstr for e in _translations()}
    assert said["parameters"] == "参数"
    assert said["parameter count"] == "参数量"
