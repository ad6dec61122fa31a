"""`labctl show` and `labctl list`: the course cited by chapter, section and heading, parameters
with their bounds, metrics with tolerances and why; and layouts that read at 80 columns."""

from __future__ import annotations

import io
import json

import pytest
from pydantic import Field
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.testing import CliRunner

from labctl import registry
from labctl.cli.main import app
from labctl.cli.render import Column, fit
from labctl.cli.show import param_bounds
from labctl.course import CHAPTERS
from labctl.lab import LabParams

runner = CliRunner()
ENV = {"LABCTL_LANG": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": "C.UTF-8", "COLUMNS": "80"}
LAB_IDS = [lab.id for lab in registry.discover()]


def invoke(*args: str, width: int = 80):
    return runner.invoke(app, list(args), env={**ENV, "COLUMNS": str(width)})


def layout_problems(output: str, identifiers: list[str], width: int = 80) -> list[str]:
    """Lines wider than `width` cells, and identifiers that no line shows whole."""
    lines = output.splitlines()
    wide = [f"{cell_len(line)} cells: {line!r}" for line in lines if cell_len(line) > width]
    broken = [f"broken: {name}" for name in identifiers if not any(name in line for line in lines)]
    return wide + broken


def test_show_json_has_the_question_citations_parameters_and_tolerances():
    result = invoke("show", "causal-attention", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    lab = registry.get("causal-attention")
    assert shown["question"] == lab.question
    assert [s["chapter"] for s in shown["sections"]] == [s.chapter.title for s in lab.sections]
    assert shown["sections"][0]["number"] == "§6.13"
    # the heading is the course's own; the passage the lab uses is a part of its own
    assert shown["sections"][0]["heading"] == "动手：用断言验证注意力，而不是只看热力图"
    assert shown["sections"][0]["part"] == "实验 03｜Causal Attention"
    params = {p["name"]: p for p in shown["params"]}
    assert set(params) == set(lab.params.model_fields)
    # T needs one past and one future position; the model says so and show repeats it.
    assert params["T"]["default"] == 8 and params["T"]["bounds"] == {"ge": 2, "le": 512}
    table = registry.tolerance_table()["metrics"]
    for metric in shown["metrics"]:
        assert metric["expected"] == table[metric["name"]]["expected"]
        assert metric["why"] == table[metric["name"]]["why"]


def test_param_bounds_reads_every_constraint_pydantic_keeps():
    class Params(LabParams):
        n: int = Field(3, ge=1, le=9, multiple_of=3)
        x: float = Field(0.5, gt=0, lt=1)
        sizes: tuple[int, ...] = Field((1, 2), min_length=1, max_length=4)
        free: int = 2

    fields = Params.model_fields
    assert param_bounds(fields["n"]) == {"ge": 1, "le": 9, "multiple_of": 3}
    assert param_bounds(fields["x"]) == {"gt": 0, "lt": 1}
    assert param_bounds(fields["sizes"]) == {"min_length": 1, "max_length": 4}
    assert param_bounds(fields["free"]) == {}


def test_an_unknown_lab_is_a_usage_error_naming_the_known_ones():
    result = invoke("show", "no-such-lab")
    assert result.exit_code == 2
    assert "unknown lab 'no-such-lab'" in result.output and "causal-attention" in result.output


def test_every_citation_names_a_chapter_by_its_title_never_a_file():
    result = invoke("list", "--json")
    assert result.exit_code == 0
    titles = {c.title for c in CHAPTERS}
    for lab in json.loads(result.output)["labs"]:
        assert lab["sections"], lab["id"]
        for section in lab["sections"]:
            assert section["chapter"] in titles
            assert section["text"].startswith(section["chapter"])
            assert ".txt" not in section["text"] and "seeds" not in section["text"]


@pytest.mark.parametrize("lab_id", LAB_IDS)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_show_reads_at_80_columns(lab_id, lang):
    result = invoke("--lang", lang, "show", lab_id)
    assert result.exit_code == 0, result.output
    names = [m.name for m in registry.get(lab_id).metrics]
    assert not layout_problems(result.output, names)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_list_and_contract_show_read_at_80_columns(lang):
    listed = invoke("--lang", lang, "list")
    assert listed.exit_code == 0
    every_metric = [name for lab in registry.discover() for name in (m.name for m in lab.metrics)]
    assert not layout_problems(listed.output, every_metric)
    contract = invoke("--lang", lang, "contract", "show")
    assert contract.exit_code == 0
    assert not layout_problems(
        contract.output, ["scaled_dot_product_attention(q, k, v, mask=None, scale=None)"]
    )


def test_the_layout_check_catches_a_folded_table_and_fit_does_not_fold():
    names = [m.name for m in registry.get("scale-ablation").metrics]
    rows = [
        (escape(n), "in [0.9, 1.1]", "variance of the score the implementation computes")
        for n in names
    ]
    console = Console(width=40, record=True, file=io.StringIO())
    folded = Table()
    for header in ("metric", "expected", "meaning"):
        folded.add_column(header, overflow="fold")
    for row in rows:
        folded.add_row(*row)
    console.print(folded)
    assert layout_problems(console.export_text(), names, width=40)  # the fault the check exists for
    columns = (Column("metric", identifier=True), Column("expected"), Column("meaning", prose=True))
    console.print(fit(columns, rows, console=console))
    assert not layout_problems(console.export_text(), names, width=40)


def test_fit_keeps_a_table_when_it_fits_and_pads_chinese_headers_by_cells():
    console = Console(width=80, record=True, file=io.StringIO())
    rows = [("B", "2", "批大小"), ("Hkv", "4", "K/V 头数；必须整除 H")]
    console.print(
        fit(
            (Column("参数", identifier=True), Column("默认值"), Column("含义", prose=True)),
            rows,
            console=console,
        )
    )
    table = console.export_text()
    assert "┃" in table or "│" in table
    narrow = Console(width=12, record=True, file=io.StringIO())
    narrow.print(
        fit(
            (Column("参数", identifier=True), Column("默认值"), Column("含义", prose=True)),
            rows,
            console=narrow,
        )
    )
    stacked = narrow.export_text().splitlines()
    # "默认值" is 6 cells and "含义" 4: both values start at the same cell.
    starts = {
        cell_len(line[: line.index(value)])
        for line in stacked
        for value in ("2", "批")
        if value in line and "  " in line
    }
    assert len(starts) == 1, stacked


@pytest.mark.slow
def test_run_reads_at_80_columns(tmp_path):
    result = runner.invoke(app, ["run", "causal-attention", "--out", str(tmp_path)], env=ENV)
    assert result.exit_code == 0, result.output
    names = [m.name for m in registry.get("causal-attention").metrics]
    assert not layout_problems(result.output, names)
