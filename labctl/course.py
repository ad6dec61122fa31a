"""The course labctl serves: its three chapters, and how a lab cites a section of one.

A citation names the chapter by its title and the section by its number and
heading, as a learner sees them in the course, never by a file name. Section
numbers collide across chapters (6.4 is the causal mask in one and Pre-Norm in
another), so a number means nothing without its chapter.

The chapters' own text does not ship with labctl. What reads it (the citation tests, a
command given `--course-dir`) takes its folder from one setting, the environment variable
`LABCTL_COURSE_DIR`, through `course_dir` and `chapter_files`, and finds each chapter in it
by its title on the file's first line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from labctl.errors import CourseTextError
from labctl.i18n import Msg

# The folder holding the chapters' .txt files.
COURSE_DIR_ENV = "LABCTL_COURSE_DIR"


@dataclass(frozen=True)
class Chapter:
    key: str
    title: str


PARTS = Chapter("parts", "Transformer 逐部件讲透")
CH8 = Chapter("ch8", "第8章 · Attention 与 Transformer Block")
HANDS_ON = Chapter("hands-on", "Transformer 手撕与注意力机制")
CHAPTERS = (PARTS, CH8, HANDS_ON)


@dataclass(frozen=True)
class Section:
    """One section: `Section(HANDS_ON, "§01.5", "位置编码再讲深一点：RoPE 的旋转矩阵推导")`.

    `number` is as the chapter prints it (`§6.13`, `阶段二`, `§01.5`); `heading` is
    the chapter's heading after the number, verbatim; `part`, when a lab uses one
    passage of a long section, is that passage's own words, verbatim (a sub-heading,
    a table's title). tests/test_citations.py finds both in the course text.
    """

    chapter: Chapter
    number: str
    heading: str
    part: str = ""

    def __str__(self) -> str:
        cited = f"{self.chapter.title} {self.number} {self.heading}".rstrip()
        return f"{cited} · {self.part}" if self.part else cited


def course_dir(folder: str | os.PathLike[str] | None = None) -> Path:
    """The folder of the course text: `folder` when a command was given one, else
    `$LABCTL_COURSE_DIR`. Raises CourseTextError, naming the setting, when neither is a folder."""
    if folder is not None:
        where = Path(folder).expanduser()
        said = str(where)
    else:
        value = os.environ.get(COURSE_DIR_ENV, "")
        if not value:
            raise CourseTextError(
                Msg(
                    "the course text is not set: set {env} to the folder holding the chapters' .txt files",
                    env=COURSE_DIR_ENV,
                )
            )
        where = Path(value).expanduser()
        said = f"{COURSE_DIR_ENV}={value}"
    if not where.is_dir():
        raise CourseTextError(
            Msg(
                "{said} is not a folder: {env} names the folder holding the chapters' .txt files",
                said=said,
                env=COURSE_DIR_ENV,
            )
        )
    return where


def chapter_files(folder: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """Each chapter's text file, by chapter key, in `course_dir(folder)`: the file whose first
    line holds the chapter's title (the files' names say nothing). Raises CourseTextError when
    a chapter is not there."""
    where = course_dir(folder)
    found: dict[str, Path] = {}
    for path in sorted(where.glob("*.txt")):
        try:
            with path.open(encoding="utf-8") as text:
                first = text.readline()
        except (OSError, UnicodeDecodeError):
            continue
        for chapter in CHAPTERS:
            if chapter.title in first:
                found[chapter.key] = path
    missing = [chapter.title for chapter in CHAPTERS if chapter.key not in found]
    if missing:
        raise CourseTextError(
            Msg(
                "{folder} holds no chapter titled {titles} ({env} names the folder holding the chapters' .txt files)",
                folder=str(where),
                titles=", ".join(f"《{title}》" for title in missing),
                env=COURSE_DIR_ENV,
            )
        )
    return found
