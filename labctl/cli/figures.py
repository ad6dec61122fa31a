"""Figures in the terminal: heatmaps (the learner's beside the reference's) and tables.

A lab emits one heatmap per implementation under one name; they are shown
together, side by side when the terminal is wide enough and one under the
other otherwise, and every cell of the clean room's matrix that differs from
the reference's is marked, so a learner sees their own numbers and where they
go wrong.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from rich.columns import Columns
from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from labctl.cli.render import Column, fit, number
from labctl.i18n import Msg, _
from labctl.lab import HeatmapFigure, TableFigure

SHADES = " ░▒▓█"
# A cell differs when it is further than this from the reference's: far above float64
# rounding (~1e-16), far below any weight a learner could read off the screen.
DIFFERS = 1e-9
MARK = "*"


def text(message: str | Msg) -> str:
    """A message in the chosen language."""
    return message.render(_) if isinstance(message, Msg) else _(message)


def differing(figure: HeatmapFigure, reference: HeatmapFigure | None) -> set[tuple[int, int]]:
    """Cells (i, j) of `figure` that differ from `reference`'s (all of them if shapes differ)."""
    if reference is None or reference is figure:
        return set()
    cells = {(i, j) for i, row in enumerate(figure.matrix) for j in range(len(row))}
    if [len(r) for r in reference.matrix] != [len(r) for r in figure.matrix]:
        return cells
    return {
        (i, j) for i, j in cells if not abs(figure.matrix[i][j] - reference.matrix[i][j]) <= DIFFERS
    }


def heatmap(figure: HeatmapFigure, marked: set[tuple[int, int]] = frozenset()) -> Table:
    """Each cell shows its weight and a shade, so the pattern reads with or without colour."""
    table = Table(title=escape(text(figure.title)), show_edge=False, pad_edge=False)
    table.add_column(f"{figure.row_label}\\{figure.col_label}", justify="right", style="dim")
    width = max((len(row) for row in figure.matrix), default=0)
    col_ticks = figure.col_ticks if len(figure.col_ticks) == width else range(width)
    for tick in col_ticks:
        table.add_column(escape(str(tick)), justify="right", no_wrap=True)
    row_ticks = figure.row_ticks if len(figure.row_ticks) == len(figure.matrix) else None
    for i, row in enumerate(figure.matrix):
        cells = []
        for j, value in enumerate(row):
            cells.append(_cell(value, (i, j) in marked))
        table.add_row(escape(str(row_ticks[i] if row_ticks else i)), *cells)
    if marked:
        table.caption = escape(
            _("{mark} differs from the reference by more than {tol:g} ({n} cells)").format(
                mark=MARK, tol=DIFFERS, n=len(marked)
            )
        )
    return table


def _cell(value: float, marked: bool) -> Text:
    if not math.isfinite(value):
        return Text(f"{value}", style="bold red")
    clipped = min(max(value, 0.0), 1.0)
    level = min(int(clipped * (len(SHADES) - 1) + 0.5), len(SHADES) - 1)
    style = f"on color({232 + min(int(clipped * 23), 23)})" if value > 0 else ""
    if marked:
        style = (style + " bold red").strip()
    return Text(f"{SHADES[level]}{value:.2f}{MARK if marked else ' '}", style=style)


def heatmap_group(figures: list[HeatmapFigure]) -> RenderableType:
    """One name's heatmaps: the clean room's marked where it differs from the reference's."""
    reference = next((f for f in figures if f.impl == "reference"), None)
    tables = [heatmap(f, differing(f, reference)) for f in figures]
    return Columns(tables, padding=(0, 3)) if len(tables) > 1 else tables[0]


def table(figure: TableFigure) -> RenderableType:
    """Numbers right-aligned, text left-aligned, markup in cells shown as written; stacked
    when too wide for the terminal."""
    numeric = [
        all(not isinstance(row[i], (str, Msg)) for row in figure.rows)
        for i in range(len(figure.columns))
    ]
    columns = [
        Column(text(c), identifier=True, justify="right" if n else "left")
        for c, n in zip(figure.columns, numeric, strict=True)
    ]
    rows = [
        [escape(text(v)) if isinstance(v, (str, Msg)) else number(v) for v in row]
        for row in figure.rows
    ]
    return fit(columns, rows, title=escape(text(figure.title)), show_edge=False)


def figures(items: Iterable[object]) -> list[RenderableType]:
    """The renderables for a lab's tables and heatmaps, heatmaps of one name grouped."""
    shown: list[RenderableType] = []
    groups: dict[str, list[HeatmapFigure]] = {}
    order: list[object] = []
    for item in items:
        if isinstance(item, HeatmapFigure):
            if item.name not in groups:
                groups[item.name] = []
                order.append(item.name)
            groups[item.name].append(item)
        elif isinstance(item, TableFigure):
            order.append(item)
    for entry in order:
        if isinstance(entry, str):
            shown.append(heatmap_group(groups[entry]))
        else:
            shown.append(table(entry))
    return shown
