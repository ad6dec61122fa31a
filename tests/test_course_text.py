"""The labs' prose cites the course as the course is written (issue 40).

tests/test_citations.py checks each lab's declared sections. This checks what the labs
say in running text (module docstrings, metric descriptions and whys, note templates):

- every `手撕 §N` and `逐部件讲透 §N` names a section the chapter has (the gqa lab named
  §07.4, §05.3 and §05.5.2 after they had become §7.4, §5.3 and §5.5.2);
- every `第8章 阶段X` is a stage the lab cites among its sections, which that test holds
  verbatim with the passage used (mask-ablation's metrics cited 阶段六 for the fault table
  its sections put, rightly, under 阶段五), and a passage quoted in brackets after it is in
  that stage's text;
- no text says Llama itself pairs RoPE's columns half-split (HuggingFace's port does; Meta's
  llama/model.py pairs them interleaved, the contract's layout);
- 第8章 阶段六's three properties are measured by labs that cite it.

The chapters are read from LABCTL_COURSE_DIR: skipped without it, failed under CI=true.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_citations import chapter_lines, regions

from labctl import registry
from labctl.course import CH8, HANDS_ON, PARTS

LABS = Path(__file__).resolve().parents[1] / "labs"
STAGE_CITED = re.compile(
    r"第8章(?: · Attention 与 Transformer Block)?\s*(阶段[一二三四五六七八九十]+)"
    r"(?:(?:'s [A-Za-z ]+?)?\s*[（(]([^()（）]*)[)）])?"
)
SECTION_CITED = re.compile(
    r"(手撕与注意力机制|手撕|逐部件讲透)\s*((?:§\d+(?:\.\d+)*)(?:(?:,\s*|/|\s+(?:and|to|or)\s+)"
    r"§\d+(?:\.\d+)*)*)"
)
CHAPTER_OF = {"手撕": HANDS_ON, "手撕与注意力机制": HANDS_ON, "逐部件讲透": PARTS}
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def course() -> dict[str, list[str]]:
    """Each chapter's lines, keyed by chapter (skips, or fails under CI=true, without them)."""
    return chapter_lines()


def lab_texts() -> dict[str, str]:
    """Each lab's source text by lab id: its module, and the modules named after it
    (worked_examples_rows.py belongs to worked_examples.py)."""
    texts: dict[str, str] = {}
    for lab in registry.discover():
        module = lab.run.__module__.rsplit(".", 1)[1]
        texts[lab.id] = "\n".join(
            path.read_text("utf-8")
            for path in sorted(LABS.glob("*.py"))
            if path.stem == module or path.stem.startswith(module + "_")
        )
    return texts


def declared_stages(lab) -> set[str]:
    from labctl.labs.worked_examples_figures import FIGURE_ROWS
    from labctl.labs.worked_examples_rows import ROWS

    sections = list(lab.sections)
    if lab.id == "worked-examples":
        sections += [row.section for row in ROWS + FIGURE_ROWS]
    return {s.number for s in sections if s.chapter == CH8}


def section_problems(text: str, course: dict[str, list[str]]) -> list[str]:
    problems = []
    for match in SECTION_CITED.finditer(text):
        chapter = CHAPTER_OF[match.group(1)]
        for number in re.findall(r"§\d+(?:\.\d+)*", match.group(2)):
            if not regions(course[chapter.key], chapter.key, number):
                problems.append(f"{match.group(0)!r}: {chapter.title} has no {number}")
    return problems


def stage_problems(text: str, declared: set[str], course: dict[str, list[str]]) -> list[str]:
    problems = []
    for match in STAGE_CITED.finditer(text):
        stage, passage = match.group(1), match.group(2)
        if stage not in declared:
            problems.append(f"{match.group(0)!r}: {stage} is not among the lab's sections")
        if passage and CJK.search(passage):
            bodies = ["\n".join(body) for _, body in regions(course[CH8.key], CH8.key, stage)]
            if not any(passage in body for body in bodies):
                problems.append(f"{match.group(0)!r}: {passage!r} is not in {stage}")
    return problems


def test_every_section_the_labs_prose_cites_is_in_the_course(course):
    problems = [
        f"{lab_id}: {why}"
        for lab_id, text in lab_texts().items()
        for why in section_problems(text, course)
    ]
    assert problems == []


def test_every_stage_the_labs_prose_cites_is_one_they_cite_with_its_passage(course):
    labs = {lab.id: lab for lab in registry.discover()}
    problems = [
        f"{lab_id}: {why}"
        for lab_id, text in lab_texts().items()
        for why in stage_problems(text, declared_stages(labs[lab_id]), course)
    ]
    assert problems == []


def test_the_checks_refuse_a_moved_section_and_a_table_under_the_wrong_stage(course):
    """What the old text said: the gqa lab's §07.4 and mask-ablation's 阶段六."""
    assert section_problems("(手撕 §7.4)", course) == []
    assert section_problems("(手撕 §05.3, §05.5.2)", course) == [
        "'手撕 §05.3, §05.5.2': Transformer 手撕与注意力机制 has no §05.3",
        "'手撕 §05.3, §05.5.2': Transformer 手撕与注意力机制 has no §05.5.2",
    ]
    old = "the first mask bug of 第8章 · Attention 与 Transformer Block 阶段六 shown leaking"
    assert stage_problems(old, {"阶段五"}, course) == [
        "'第8章 · Attention 与 Transformer Block 阶段六': 阶段六 is not among the lab's sections"
    ]
    quoted = "第8章 阶段六's fault table (故障注入与预期信号)"
    assert stage_problems(quoted, {"阶段六"}, course) == [
        f"{quoted!r}: '故障注入与预期信号' is not in 阶段六"
    ]
    assert stage_problems(quoted.replace("六", "五"), {"阶段五"}, course) == []


LLAMA_HALF_SPLIT = re.compile(r"Llama[^.;:\n\"]{0,80}half-split|half-split[^.;:\n\"]{0,80}Llama")


def test_no_lab_says_llama_itself_pairs_rope_half_split():
    """HuggingFace's port of Llama pairs (i, i + D/2); Meta's llama/model.py pairs (2i, 2i+1),
    the contract's layout (tests/test_lab_positions.py computes both)."""
    claims = [
        (lab_id, match.group(0))
        for lab_id, text in lab_texts().items()
        for flat in [re.sub(r'"\s*\n\s*"', "", text)]  # a message split over lines, whole
        for match in LLAMA_HALF_SPLIT.finditer(flat)
        if "HuggingFace" not in flat[max(0, match.start() - 40) : match.end()]
    ]
    assert claims == []
    assert LLAMA_HALF_SPLIT.search("and Llama's RoPE pairs half-split columns")


# 阶段六 (动手实验): rows sum to 1 and the future does not move the prefix (causal-attention),
# split and merged heads keep shape and meaning (multi-head), and the fixture's ablation values:
# no mask, no scale, no residual (mask-, scale- and residual-ablation).
MEASURE_STAGE_SIX = {
    "causal-attention",
    "multi-head",
    "mask-ablation",
    "scale-ablation",
    "residual-ablation",
}


def test_the_labs_that_measure_stage_six_cite_it():
    citing = {
        lab.id
        for lab in registry.discover()
        if any(s.chapter == CH8 and s.number == "阶段六" for s in lab.sections)
    }
    assert citing >= MEASURE_STAGE_SIX


def test_every_section_the_worked_examples_cite_for_formulas_and_configurations_is_verbatim(
    course,
):
    """The formula inventory, the rows recomputed from published configurations and the
    formulas other labs check cite sections tests/test_citations.py does not read."""
    from test_citations import problem

    from labctl.labs.worked_examples_configs import CONFIG_ROWS
    from labctl.labs.worked_examples_formulas import ELSEWHERE, FORMULAS

    cited = [(f.key, f.section) for f in FORMULAS]
    cited += [(row.what, row.section) for row in CONFIG_ROWS]
    cited += [(printed, section) for section, printed, _, _ in ELSEWHERE]
    problems = [f"{where}: {why}" for where, s in cited if (why := problem(s, course))]
    assert problems == []
