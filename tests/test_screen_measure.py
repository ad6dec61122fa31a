"""The terminal's tables measure what they hold once where once is enough: a heatmap laid out
side by side is not measured again by the grid that holds it, nor a prose cell's text at
every measure of its table. What is shown is unchanged (tests/test_columns.py,
tests/test_screen.py)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from labctl.cli import render
from labctl.cli.figures import heatmap_group
from labctl.cli.render import Column, fit
from labctl.lab import HeatmapFigure

MATRIX = tuple(tuple(0.1 * i + 0.01 * j for j in range(5)) for i in range(5))


def test_heatmaps_side_by_side_are_each_measured_once(monkeypatch):
    group = heatmap_group([HeatmapFigure("w", "w", MATRIX, impl=impl)
                           for impl in ("reference", "clean-room")])  # fmt: skip
    measured: list[Table] = []
    real = Table.__rich_measure__

    def counted(self, console, options):
        if self.title:  # a heatmap, not the grid holding them
            measured.append(self)
        return real(self, console, options)

    monkeypatch.setattr(Table, "__rich_measure__", counted)
    console = Console(width=200, record=True, no_color=True)
    console.print(group)
    shown = console.export_text().splitlines()
    assert sum("0.44" in line for line in shown) == 1  # side by side: one line holds both
    assert len(measured) == 2 and len(set(map(id, measured))) == 2


def test_a_prose_cell_finds_its_widths_once(monkeypatch):
    cell = "a sentence of prose that wraps between its words"
    found: list[str] = []
    real = render.unbreakable

    def counted(text: str) -> int:
        found.append(text)
        return real(text)

    monkeypatch.setattr(render, "unbreakable", counted)
    # wide enough for the table as it is: its columns keep no width of fit's, and are measured
    console = Console(width=100, record=True, no_color=True)
    table = fit([Column("id", identifier=True), Column("why", prose=True)],
                [["x", cell]], console=console)  # fmt: skip
    assert any("sentence" in text for text in found)  # fit measured the cell: found once
    found.clear()
    console.print(table)  # measured again, to be drawn
    assert not [text for text in found if "sentence" in text]
