"""The course labctl serves: its three chapters, and how a lab cites a section of one.

A citation names the chapter by its title and the section by its number and
heading, as a learner sees them in the course, never by a file name. Section
numbers collide across chapters (6.4 is the causal mask in one and Pre-Norm in
another), so a number means nothing without its chapter.
"""

from __future__ import annotations

from dataclasses import dataclass


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
