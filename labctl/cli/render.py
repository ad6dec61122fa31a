"""Output helpers shared by the commands: consoles, JSON, verdict words, tables that fit.

Tables and verdicts go to stdout; progress and diagnostics to stderr. `--json`
prints exactly one JSON document on stdout. Rich honours NO_COLOR by itself.

Identifiers (lab ids, metric names, functions) are never broken: their columns
do not wrap, and a table too wide for the console is shown stacked instead,
one record per block (`fit`). Prose wraps between words and beside Chinese
characters (`Prose`), never cut. Widths are terminal cells (`rich.cells.cell_len`):
a Chinese character takes two.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from rich.cells import cell_len, get_character_cell_size
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markup import escape
from rich.measure import Measurement
from rich.padding import Padding
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from labctl.i18n import N_, Msg, _
from labctl.jsonsafe import dumps
from labctl.textsafe import json_text, shown

out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)

PASS, FAIL, INFO = N_("pass"), N_("FAIL"), N_("info")
# One wording for a timing row, here and in the report: timing never decides a verdict.
REPORTED_ONLY = N_("reported only")
NOT_MEASURED = N_("not measured")
PROSE_MIN_WIDTH = 24
# Chinese punctuation that may not start a line, and that may not end one.
_CLOSING = "，。、；：！？）」』】》〉”’,.;:!?)]}%"
_OPENING = "（「『【《〈“‘([{"


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


def row_verdict(results: Sequence[Any]) -> str:
    """The verdict of one metric row, from its sides (runner `MetricResult`s).

    A row is judged on the sides it has a value for: a side never measured (the clean room
    failed first; that failure is its lab's own line) neither passes nor fails the row. A
    timing row is reported only, whatever its value.
    """
    if any(r.timing for r in results):
        return f"[dim]{_(REPORTED_ONLY)}[/dim]"
    measured = [r for r in results if r.measured]
    if not measured:
        return f"[dim]{_(NOT_MEASURED)}[/dim]"
    return verdict(all(r.passed for r in measured))


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


def _may_break(text: str, i: int) -> bool:
    """Whether a line may start at `text[i]`: after a space, or beside a Chinese character
    (not before closing punctuation, not after opening punctuation)."""
    before, here = text[i - 1], text[i]
    if here.isspace():
        return False
    if before.isspace():
        return True
    if here in _CLOSING or before in _OPENING:
        return False
    return get_character_cell_size(before) == 2 or get_character_cell_size(here) == 2


def break_offsets(text: str, width: int) -> list[int]:
    """Where to break one line of `text` so no piece is wider than `width` cells (trailing
    spaces aside): at the last place a line may start that fits; inside a word only when the
    word alone is wider than `width`."""
    starts = [i for i in range(1, len(text)) if _may_break(text, i)]
    offsets: list[int] = []
    start = 0
    while cell_len(text[start:].rstrip()) > width:
        fitting = [i for i in starts if i > start and cell_len(text[start:i].rstrip()) <= width]
        if fitting:
            cut = fitting[-1]
        else:
            cut = start + 1
            while cell_len(text[start : cut + 1]) <= width:
                cut += 1
        offsets.append(cut)
        start = cut
    return offsets


class Prose:
    """Text (rich markup or `Text`) that wraps to the width it is given: between words and
    beside Chinese characters, never cut, never wider than that width."""

    def __init__(self, text: str | Text):
        self.text = Text.from_markup(text) if isinstance(text, str) else text

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        lines = self.text.plain.split("\n")
        widest = max(cell_len(line) for line in lines)
        unbreakable = 0
        for line in lines:
            edges = [0, *(i for i in range(1, len(line)) if _may_break(line, i)), len(line)]
            for a, b in pairwise(edges):
                unbreakable = max(unbreakable, cell_len(line[a:b].rstrip()))
        return Measurement(unbreakable, widest).with_maximum(options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(options.max_width, 1)
        pieces = []
        for line in self.text.split("\n", allow_blank=True):
            for piece in line.divide(break_offsets(line.plain, width)):
                piece.rstrip()
                pieces.append(piece)
        shown = Text("\n").join(pieces)
        shown.no_wrap, shown.overflow = True, "ignore"
        yield shown


class _Heading:
    def __init__(self, name: str, title: str):
        self.name, self.title = name, title

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        whole = f"[bold]{escape(self.name)}[/bold]: {escape(self.title)}"
        # a rule cuts a title it cannot fit: the title then goes under it, wrapped
        if cell_len(f"{self.name}: {self.title}") + 6 <= options.max_width:
            yield Rule(whole)
        else:
            yield Rule(f"[bold]{escape(self.name)}[/bold]")
            yield Prose(Text(self.title, style="bold"))


def heading(name: str, title: str) -> RenderableType:
    """A rule naming `name: title` (a lab's id and title, as plain text), whole at any width."""
    return _Heading(name, title)


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
        table.add_row(
            *(
                Prose(cell) if column.prose else cell
                for column, cell in zip(columns, row, strict=True)
            )
        )
    if console.measure(table, options=console.options.update_width(10**4)).minimum <= limit:
        return table
    return stacked(columns, rows, title=title)


def stacked(
    columns: Sequence[Column], rows: Sequence[Sequence[str | Text]], *, title: str = ""
) -> RenderableType:
    headers = [_(c.header) for c in columns[1:]]
    pad = max((cell_len(h) for h in headers), default=0)
    blocks: list[RenderableType] = [Prose(f"[bold]{title}[/bold]")] if title else []
    for row in rows:
        first = row[0] if isinstance(row[0], Text) else Text.from_markup(row[0])
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, style="dim")
        grid.add_column()
        for header, cell in zip(headers, row[1:], strict=True):
            if cell == "" or (isinstance(cell, Text) and not cell.plain):
                continue
            grid.add_row(header + " " * (pad - cell_len(header)), Prose(cell))
        blocks += [Prose(Text.assemble(first, style="bold")), Padding(grid, (0, 0, 1, 2))]
    return Group(*blocks)
