"""Output helpers shared by the commands: consoles, JSON, verdict words, tables that fit.

Tables and verdicts go to stdout; progress and diagnostics to stderr. `--json`
prints exactly one JSON document on stdout. Rich honours NO_COLOR by itself.

Identifiers (lab ids, metric names, functions) are never broken: their columns
do not wrap, and a table too wide for the console is shown stacked instead,
one record per block (`fit`). Widths are terminal cells (`rich.cells.cell_len`):
a Chinese character takes two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from labctl.i18n import N_, Msg, _
from labctl.jsonsafe import dumps
from labctl.textsafe import json_text, shown

out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)

PASS, FAIL, INFO = N_("pass"), N_("FAIL"), N_("info")
PROSE_MIN_WIDTH = 24


def print_json(document: Any) -> None:
    """One JSON document on stdout, nothing else; NaN and inf become null; a name that is not
    UTF-8 keeps its exact text as JSON escapes."""
    print(json_text(dumps(document)))


def learner_text(message: str | Msg, lines: bool = False) -> str:
    """A message that holds a learner's text, for a terminal: in the chosen language, its
    control, escape and bidi characters shown escaped, rich markup shown as written."""
    return escape(shown(_(message), lines=lines))


def text(message: str | Msg) -> str:
    """A message in the chosen language, with rich markup in it shown as written."""
    return escape(_(message))


def verdict(passed: bool | None) -> str:
    if passed is None:
        return f"[dim]{_(INFO)}[/dim]"
    return f"[green]{_(PASS)}[/green]" if passed else f"[bold red]{_(FAIL)}[/bold red]"


def number(value: float | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if 1e-3 <= abs(value) < 1e6:
        return f"{value:.6g}"
    return f"{value:.3e}"


@dataclass(frozen=True)
class Column:
    """A column of `fit`: its header (a message), and whether its cells are identifiers.

    Identifier and number cells never wrap; prose cells wrap between words.
    """

    header: str | Msg
    identifier: bool = False
    justify: str = "left"
    prose: bool = False


def fit(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str | Text]],
    *,
    title: str = "",
    width: int | None = None,
    console: Console = out,
    **table_options: Any,
) -> RenderableType:
    """A table when it fits the console's width, else the same rows stacked.

    It fits when identifier and number columns fit whole and every prose column
    keeps at least PROSE_MIN_WIDTH cells to wrap in. Cells are rich markup
    (escape text that is not). Stacked, each row is a block:
    its first cell on a line of its own, then `header  value` lines, headers
    padded to a common width in cells.
    """
    limit = width or console.width
    table = Table(title=title or None, **table_options)
    for index, column in enumerate(columns):
        longest = max((cell_len(Text.from_markup(str(r[index])).plain) for r in rows), default=0)
        table.add_column(
            _(column.header),
            justify=column.justify,
            no_wrap=not column.prose,
            overflow="fold" if column.prose else "ignore",
            # Identifiers and numbers keep their whole width; prose narrower than
            # PROSE_MIN_WIDTH reads as a column of fragments: stack instead.
            min_width=min(PROSE_MIN_WIDTH, longest) if column.prose else longest,
        )
    for row in rows:
        table.add_row(*row)
    if console.measure(table, options=console.options.update_width(10**4)).minimum <= limit:
        return table
    return stacked(columns, rows, title=title)


def stacked(
    columns: Sequence[Column], rows: Sequence[Sequence[str | Text]], *, title: str = ""
) -> RenderableType:
    headers = [_(c.header) for c in columns[1:]]
    pad = max((cell_len(h) for h in headers), default=0)
    blocks: list[RenderableType] = [Text.from_markup(f"[bold]{title}[/bold]")] if title else []
    for row in rows:
        first = row[0] if isinstance(row[0], Text) else Text.from_markup(row[0])
        first.no_wrap = True
        first.overflow = "ignore"
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, style="dim")
        grid.add_column(overflow="fold")
        for header, cell in zip(headers, row[1:], strict=True):
            if cell == "" or (isinstance(cell, Text) and not cell.plain):
                continue
            grid.add_row(header + " " * (pad - cell_len(header)), cell)
        blocks += [Text.assemble(first, style="bold"), Padding(grid, (0, 0, 1, 2))]
    return Group(*blocks)
