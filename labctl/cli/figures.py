"""Figures in the terminal: heatmaps (the learner's beside the reference's) and tables.

A lab emits one heatmap per implementation under one name; they are shown
together, side by side when the terminal is wide enough and one under the
other otherwise, and every cell of the clean room's matrix that differs from
the reference's is marked, so a learner sees their own numbers and where they
go wrong. A heatmap too wide for the terminal is never cut: it drops its shade
bars and borders (compact), and if that is still too wide its columns are shown
in slices, one under the other, each with the row labels.
"""

import math
from collections.abc import Iterable, Sequence

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from labctl.cli.render import Column, Prose, fit, number
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


def heatmap(
    figure: HeatmapFigure,
    marked: set[tuple[int, int]] = frozenset(),
    *,
    compact: bool = False,
    columns: Sequence[int] | None = None,
    mark_room: bool = True,
) -> Table:
    """Each cell shows its weight and a shade, so the pattern reads with or without colour.

    Compact: the weight alone (its shade is the cell's background where there is colour),
    no borders. `columns` picks the columns shown (a slice of a wide matrix); `mark_room`
    keeps a cell's width for the mark though no cell of this slice is marked, so slices align.
    """
    table = Table(
        title=escape(text(figure.title)),
        show_edge=False,
        pad_edge=False,
        box=box.SIMPLE_HEAD if compact else box.HEAVY_HEAD,
        # compact: the box's blank column divider is the only space between cells
        padding=(0, 0) if compact else (0, 1),
    )
    table.add_column(f"{figure.row_label}\\{figure.col_label}", justify="right", style="dim")
    width = max((len(row) for row in figure.matrix), default=0)
    col_ticks = _col_ticks(figure, width)
    shown = list(range(width)) if columns is None else list(columns)
    for j in shown:
        table.add_column(escape(str(col_ticks[j])), justify="right", no_wrap=True)
    row_ticks = figure.row_ticks if len(figure.row_ticks) == len(figure.matrix) else None
    for i, row in enumerate(figure.matrix):
        cells = [_cell(row[j], (i, j) in marked, compact, mark_room) for j in shown if j < len(row)]
        table.add_row(escape(str(row_ticks[i] if row_ticks else i)), *cells)
    if marked:
        table.caption = escape(
            _("{mark} differs from the reference by more than {tol:g} ({n} cells)").format(
                mark=MARK, tol=DIFFERS, n=len(marked)
            )
        )
    return table


def _col_ticks(figure: HeatmapFigure, width: int) -> list:
    """The columns' labels: the figure's ticks, or the column numbers where they do not fit."""
    return list(figure.col_ticks) if len(figure.col_ticks) == width else list(range(width))


def _cell(value: float, marked: bool, compact: bool = False, mark_room: bool = True) -> Text:
    if not math.isfinite(value):
        return Text(f"{value}", style="bold red")
    clipped = min(max(value, 0.0), 1.0)
    level = min(int(clipped * (len(SHADES) - 1) + 0.5), len(SHADES) - 1)
    style = f"on color({232 + min(int(clipped * 23), 23)})" if value > 0 else ""
    if marked:
        style = (style + " bold red").strip()
    bar = "" if compact else SHADES[level]
    mark = MARK if marked else (" " if mark_room else "")
    return Text(f"{bar}{value:.2f}{mark}", style=style)


class HeatmapGroup:
    """One name's heatmaps, laid out at render time for the width there is: side by side,
    one under the other, compact, or compact in column slices; never cut."""

    def __init__(self, figures: list[HeatmapFigure]):
        reference = next((f for f in figures if f.impl == "reference"), None)
        self.figures = [(f, differing(f, reference)) for f in figures]

    def layouts(self, width: int, measure) -> list[RenderableType]:
        full = [heatmap(f, m) for f, m in self.figures]
        widths = [measure(t) for t in full]
        if len(full) > 1 and sum(widths) + 3 * (len(full) - 1) <= width:
            grid = Table.grid(padding=(0, 3))
            # each column as wide as its table, just measured: a column without a width has
            # the grid measure its table again (every cell of it) before drawing it
            for table_width in widths:
                grid.add_column(width=table_width)
            grid.add_row(*full)
            return [grid]
        if max(widths) <= width:
            return _titled_above(full)
        room = any(m for _f, m in self.figures)
        compact = [heatmap(f, m, compact=True, mark_room=room) for f, m in self.figures]
        if max(measure(t) for t in compact) <= width:
            return _titled_above(compact)
        shown: list[Table] = []
        for figure, marked in self.figures:
            shown += _slices(figure, marked, room, width, measure)
        return _titled_above(shown)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        wide = options.update_width(10**4)

        def measure(renderable: RenderableType) -> int:
            return console.measure(renderable, options=wide).maximum

        yield from self.layouts(options.max_width, measure)


def _titled_above(tables: list[Table]) -> list[RenderableType]:
    """Tables one under the other, each title above its table at the terminal's width (a
    table's own title wraps at the table's width, a narrow one's into many lines)."""
    shown: list[RenderableType] = []
    for table in tables:
        if table.title:
            shown.append(Prose(Text.from_markup(str(table.title), style="table.title")))
            table.title = None
        shown.append(table)
    return shown


def _slices(figure: HeatmapFigure, marked, room: bool, width: int, measure) -> list[Table]:
    """The compact heatmap in slices of as many columns as fit `width` (at least one each)."""
    count = max((len(row) for row in figure.matrix), default=0)

    def part(start: int, end: int) -> Table:
        return heatmap(figure, marked, compact=True, columns=range(start, end), mark_room=room)

    # Each column's natural width, as the compact table lays it out (no padding, a divider of
    # one cell between columns): a slice's end guessed from them is then checked by measuring,
    # a measure or two a slice where growing it a column at a time measured every prefix.
    ticks = _col_ticks(figure, count)
    widths = [
        max(
            [cell_len(str(ticks[j]))]
            + [cell_len(_cell(row[j], (i, j) in marked, True, room).plain)
               for i, row in enumerate(figure.matrix) if j < len(row)]
        )
        for j in range(count)
    ]  # fmt: skip
    tables = []
    start = 0
    while start < count:
        end, used = start + 1, widths[start]
        while end < count and used + 1 + widths[end] <= width:
            used += 1 + widths[end]
            end += 1
        while end > start + 1 and measure(part(start, end)) > width:
            end -= 1
        while end < count and measure(part(start, end + 1)) <= width:
            end += 1
        table = part(start, end)
        if start:
            table.title = None
        if end < count:
            table.caption = None
        tables.append(table)
        start = end
    return tables


def heatmap_group(figures: list[HeatmapFigure]) -> RenderableType:
    """One name's heatmaps: the clean room's marked where it differs from the reference's."""
    return HeatmapGroup(figures)


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
