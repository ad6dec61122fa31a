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
from typing import Any

from rich.cells import cell_len
from rich.console import (
    Console,
    ConsoleDimensions,
    ConsoleOptions,
    Group,
    RenderableType,
    RenderResult,
)
from rich.markup import escape
from rich.measure import Measurement
from rich.padding import Padding
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from labctl.cli.plain import MAX_COLUMNS
from labctl.i18n import N_, Msg, _
from labctl.jsonsafe import dumps
from labctl.textsafe import json_text, shown
from labctl.wrapping import break_offsets, unbreakable


class _Console(Console):
    """A console whose text wraps as `Prose` does: what a command prints as a string or
    `Text` (a verdict line, a failure, a diagnosis, an error) is broken between words and
    beside Chinese characters at the terminal's width, its wrapped lines indented as far as
    the line they continue; never left for the terminal to wrap, splitting a word."""

    def print(self, *objects: Any, sep: str = " ", end: str = "\n", **options: Any) -> None:
        if (
            objects
            and end == "\n"
            and not options.get("no_wrap")
            and all(isinstance(o, (str, Text)) for o in objects)
        ):
            markup = options.pop("markup", None)
            texts = [
                o if isinstance(o, Text) else self.render_str(o, markup=markup, highlight=False)
                for o in objects
            ]
            options.pop("soft_wrap", None)
            objects = (Prose(Text(sep).join(texts)),)
        super().print(*objects, sep=sep, end=end, **options)

    @Console.size.getter
    def size(self) -> ConsoleDimensions:
        """rich's size, at most `MAX_COLUMNS` wide (COLUMNS is read by rich itself)."""
        size = Console.size.fget(self)
        return ConsoleDimensions(min(size.width, MAX_COLUMNS), size.height)


out = _Console(highlight=False, soft_wrap=False, emoji=False)
err = _Console(stderr=True, highlight=False, emoji=False)

PASS, FAIL, INFO = N_("pass"), N_("FAIL"), N_("info")
# One wording for a timing row, here and in the report: timing never decides a verdict.
REPORTED_ONLY = N_("reported only")
NOT_MEASURED = N_("not measured")
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


class Prose:
    """Text (rich markup or `Text`) that wraps to the width it is given (`labctl.wrapping`):
    between words and beside Chinese characters, never before `，` nor inside a word, never
    wider than that width. Lines it wraps into are indented by `hang` cells, by default as
    far as the line they continue."""

    def __init__(self, text: str | Text, hang: int | None = None):
        self.text = Text.from_markup(text) if isinstance(text, str) else text.copy()
        self.text.expand_tabs(8)  # a tab's width is where it stands: spaces, to be measured
        self.hang = hang
        self._widths: tuple[int, int] | None = None

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        # A table measures its cells at each layout and again to draw them; the text is fixed,
        # so its narrowest and widest widths are found once.
        if self._widths is None:
            plain = self.text.plain
            widest = max(cell_len(line) for line in plain.split("\n"))
            self._widths = (unbreakable(plain), widest)
        return Measurement(*self._widths).with_maximum(options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(options.max_width, 1)
        pieces = []
        for line in self.text.split("\n", allow_blank=True):
            plain = line.plain
            hang = len(plain) - len(plain.lstrip(" ")) if self.hang is None else self.hang
            hang = hang if hang < width // 2 else 0
            for index, piece in enumerate(line.divide(break_offsets(plain, width, width - hang))):
                piece.rstrip()
                pieces.append(Text.assemble(" " * hang, piece) if index else piece)
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

    Nothing is ever cut. Identifier and number cells keep their whole width; a header
    wraps between its words (or beside Chinese characters) where its column is narrower
    than it; a prose cell wraps, but keeps at least PROSE_MIN_WIDTH cells (narrower, a
    column of fragments reads worse than the rows stacked). Where even that does not fit,
    the rows are stacked, each a block: its first cell on a line of its own, then
    `header  value` lines, headers padded to a common width in cells.
    Cells are rich markup (escape text that is not).
    """
    limit = width or console.width
    table = Table(**table_options)
    natural, least = [], []
    for index, column in enumerate(columns):
        header = _(column.header)
        cells = [_plain(row[index]) for row in rows]
        widest = max((cell_len(line) for c in cells for line in c.split("\n")), default=0)
        if column.prose:
            needed = max([unbreakable(c) for c in cells] + [min(PROSE_MIN_WIDTH, widest)])
        else:
            needed = widest
        natural.append(max(widest, cell_len(header)))
        least.append(max(needed, unbreakable(header)))
        table.add_column(
            Prose(escape(header)),
            justify=column.justify,
            no_wrap=not column.prose,
            overflow="fold" if column.prose else "ignore",
        )
    for row in rows:
        table.add_row(
            *(
                Prose(cell) if column.prose else cell
                for column, cell in zip(columns, row, strict=True)
            )
        )
    measured = console.measure(table, options=console.options.update_width(10**4)).maximum
    overhead = measured - sum(natural)
    if sum(least) + overhead > limit:
        return stacked(columns, rows, title=title)
    if measured > limit:
        widths = _narrowed(natural, least, [c.prose for c in columns], measured - limit)
        for column, cells in zip(table.columns, widths, strict=True):
            column.width = cells
    # The title above the table, at the terminal's width: a table's own title wraps at the
    # table's width, a narrow one's into many short lines.
    return Group(Prose(f"[table.title]{title}[/table.title]"), table) if title else table


def _plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain


def _narrowed(natural: list[int], least: list[int], prose: list[bool], excess: int) -> list[int]:
    """Column widths `excess` cells narrower in all than `natural`, none below `least`: prose
    columns give up cells first, then columns whose header can wrap, a cell at a time from
    the one with the most to spare, so the headers that wrap wrap alike."""
    widths = list(natural)
    for _cell in range(excess):
        spare = [
            (p, w - m, i) for i, (w, m, p) in enumerate(zip(widths, least, prose, strict=True))
        ]
        widths[max(s for s in spare if s[1] > 0)[2]] -= 1
    return widths


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
