"""Every section a lab cites is found verbatim in the course text (`$LABCTL_COURSE_DIR`).

A numbered section (`§6.13`, `§01.5`) is the line `6.13 <heading>`; a stage of
第8章 (`阶段二`) is the line `阶段二：<heading>`; `本章验收` is its own line. A cited
`part` must be in that section's text, between its heading and the next heading of
the same kind, so a table cited under 阶段六 that the text prints under 阶段五 fails.
"""

from __future__ import annotations

import re

import pytest
from coursetools import chapters

from labctl import registry
from labctl.course import CH8, CHAPTERS, HANDS_ON, PARTS, Section

STAGE = re.compile(r"^(阶段[一二三四五六七八九十]+|本章验收)(?:：(.*))?$")
# `6.13 ...`, `1.5.1 ...`, `01. ...`, `13.2 ...`; not a list item such as `1. 构造...`
NUMBERED = re.compile(r"^(\d+(?:\.\d+)+|\d\d)\.? (.+)$")


def chapter_lines() -> dict[str, list[str]]:
    """Each chapter's lines, keyed by chapter (skips, or fails under CI=true, without them)."""
    return {
        key: [line.rstrip() for line in path.read_text("utf-8").splitlines()]
        for key, path in chapters().items()
    }


def regions(lines: list[str], chapter_key: str, number: str) -> list[tuple[str, list[str]]]:
    """(heading, body lines) for every place the text heads a section `number`."""
    if chapter_key == CH8.key:
        starts = [(i, m) for i, line in enumerate(lines) if (m := STAGE.match(line))]
        out = []
        for n, (i, match) in enumerate(starts):
            if match.group(1) == number:
                end = starts[n + 1][0] if n + 1 < len(starts) else len(lines)
                out.append((match.group(2) or "", lines[i + 1 : end]))
        return out
    wanted = number.removeprefix("§")
    depth = wanted.lstrip("0").count(".")
    out = []
    for i, line in enumerate(lines):
        match = NUMBERED.match(line)
        if not match or match.group(1) != wanted:
            continue
        end = len(lines)
        for j in range(i + 1, len(lines)):
            other = NUMBERED.match(lines[j])
            if other and other.group(1).lstrip("0").count(".") <= depth:
                end = j
                break
        out.append((match.group(2), lines[i + 1 : end]))
    return out


def problem(section: Section, text: dict[str, list[str]]) -> str | None:
    """Why `section` is not verbatim in the course, or None."""
    places = regions(text[section.chapter.key], section.chapter.key, section.number)
    if not places:
        return f"{section.number} is no heading of {section.chapter.title}"
    headed = [body for heading, body in places if heading == section.heading]
    if not headed:
        return f"{section.number}'s heading is {places[0][0]!r}, not {section.heading!r}"
    if section.part and not any(section.part in "\n".join(body) for body in headed):
        return f"{section.part!r} is not in {section.number} {section.heading}"
    return None


def cited() -> list[tuple[str, Section]]:
    from labctl.labs.worked_examples_rows import ROWS

    found = [(lab.id, s) for lab in registry.discover() for s in lab.sections]
    found += [(f"worked-examples row {row.what}", row.section) for row in ROWS]
    return found


@pytest.fixture(scope="module")
def text() -> dict[str, list[str]]:
    found = chapter_lines()
    assert set(found) == {c.key for c in CHAPTERS}, sorted(found)
    return found


def test_every_cited_section_is_verbatim_in_the_course(text):
    problems = [f"{where}: {why}" for where, s in cited() if (why := problem(s, text))]
    assert problems == []


def test_the_check_refuses_a_shortened_heading_a_suffix_and_a_part_under_the_wrong_stage(text):
    assert (
        problem(Section(PARTS, "§6.13", "动手：用断言验证注意力，而不是只看热力图"), text) is None
    )
    shortened = Section(PARTS, "§6.13", "动手：用断言验证注意力（实验 03）")
    assert "heading is" in problem(shortened, text)
    assert problem(Section(PARTS, "§6.99", "没有这一节"), text).endswith(PARTS.title)
    table = "故障注入与预期信号"
    assert problem(Section(CH8, "阶段六", "动手实验", part=table), text) is not None
    swa = "现代长上下文变体深探——滑动窗口注意力（SWA）与推理 Infra 的颠覆"
    assert problem(Section(CH8, "阶段五", swa, part=table), text) is None
    assert problem(Section(HANDS_ON, "§4.2", "Mask 在 softmax 前施加"), text) is None


# Sections the labs exercise, each cited by at least one lab (issue 24's audit).
EXERCISED = {
    (PARTS.key, "§6.2"), (PARTS.key, "§6.3"), (PARTS.key, "§6.9"),
    (HANDS_ON.key, "§02"), (HANDS_ON.key, "§03"), (HANDS_ON.key, "§03.5"),
    (HANDS_ON.key, "§04"), (HANDS_ON.key, "§4.2"), (HANDS_ON.key, "§9.2"),
}  # fmt: skip


def test_the_sections_labs_exercise_are_cited():
    found = {(s.chapter.key, s.number) for lab in registry.discover() for s in lab.sections}
    assert EXERCISED - found == set()
