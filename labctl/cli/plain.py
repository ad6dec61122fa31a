"""What labctl prints without typer or rich: the root's help and the list of labs.

A learner waits for these two most, and they need neither a parser (the root's help has no
options to read) nor rich's layout: typer, rich, pydantic and numpy cost `labctl --help`
more than all else it does. The console script prints them from here before anything heavy
is imported (`labctl.cli.entry`), and the commands print the same text from here
(`labctl.cli.main`'s root help, `labctl list`), so a test run through typer sees what a
learner's terminal shows.

The terminal is read as rich reads it (COLUMNS, else the terminal's size, else 80 cells;
colour on a terminal unless NO_COLOR is set or TERM is dumb), and text wraps as all of
labctl's does (`labctl.wrapping`), so these look like the rest.
"""

import os
import sys

from rich.cells import cell_len

import labctl
from labctl.cli.commands import COMMANDS, LANG_HELP, ROOT_HELP, VERSION_HELP
from labctl.i18n import LANGUAGES, Msg, _
from labctl.wrapping import wrap

_STYLES = {"bold": "1", "dim": "2", "name": "1;36"}


# No terminal is wider; a COLUMNS past it (a script's "never wrap") would have a rule or a
# help panel drawn as long, gigabytes at COLUMNS=99999999999.
MAX_COLUMNS = 10_000


def width() -> int:
    """The terminal's width in cells, as rich's console takes it."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return min(int(columns), MAX_COLUMNS)
    for stream in (sys.__stdin__, sys.__stdout__, sys.__stderr__):
        try:
            return os.get_terminal_size(stream.fileno()).columns
        except (AttributeError, ValueError, OSError):
            continue
    return 80


def clamp_columns() -> None:
    """COLUMNS past `MAX_COLUMNS` set to it: typer draws its help and its errors with a console
    of its own, which reads COLUMNS itself."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > MAX_COLUMNS:
        os.environ["COLUMNS"] = str(MAX_COLUMNS)


def colour() -> bool:
    """Whether stdout takes colour: a terminal, NO_COLOR unset, not a dumb one."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM", "") in ("dumb", "unknown"):
        return False
    return bool(os.environ.get("FORCE_COLOR")) or sys.stdout.isatty()


def styled(text: str, style: str, on: bool) -> str:
    return f"\x1b[{_STYLES[style]}m{text}\x1b[0m" if on and text else text


def _panel(title: str, rows: list[tuple[str, str]], total: int, on: bool) -> list[str]:
    """A box like typer's help panels: `title` in its top border, a row per (name, text),
    the texts wrapped in their column."""
    inner = max(total - 4, 20)
    names = max(cell_len(name) for name, _text in rows) + 2
    head = f"─ {title} "
    lines = [styled(f"╭{head}{'─' * max(inner + 2 - cell_len(head), 0)}╮", "dim", on)]
    side = styled("│", "dim", on)
    for name, text in rows:
        for index, piece in enumerate(wrap(text, max(inner - names, 10))):
            left = name if index == 0 else ""
            cells = cell_len(left) + (names - cell_len(left)) + cell_len(piece)
            body = styled(left, "name", on) + " " * (names - cell_len(left)) + piece
            lines.append(f"{side} {body}{' ' * max(inner - cells, 0)} {side}")
    lines.append(styled(f"╰{'─' * (inner + 2)}╯", "dim", on))
    return lines


def root_help(prog: str = "labctl") -> str:
    """`labctl --help`, in the chosen language, at the terminal's width."""
    total, on = width(), colour()
    usage = _("Usage:")
    usage += "" if usage.endswith("：") else " "
    lines = ["", f" {styled(usage, 'bold', on)}{prog} [OPTIONS] COMMAND [ARGS]...", ""]
    lines += [f" {line}" for line in wrap(_(ROOT_HELP), max(total - 2, 20))]
    lines.append("")
    options = [
        ("--version", _(VERSION_HELP)),
        (f"--lang [{'|'.join(reversed(LANGUAGES))}]", _(LANG_HELP)),
        ("--help", _("Show this message and exit.")),
    ]
    lines += _panel(_("Options"), options, total, on)
    lines += _panel(_("Commands"), [(c.name, _(c.help)) for c in COMMANDS], total, on)
    return "\n".join(lines)


def version() -> str:
    return f"labctl {labctl.__version__}"


def list_labs(json_: bool = False) -> str:
    """`labctl list`: every lab's id and title, its course sections and metrics, from the
    labs' index (`labctl.listing`: no lab is imported); with `json_`, one JSON document."""
    from labctl import listing

    document = listing.index()
    if json_:  # for tools: the titles as the index holds them, in English
        from labctl.jsonsafe import dumps
        from labctl.textsafe import json_text

        return json_text(dumps(document))
    for lab in document["labs"]:
        lab["title"] = _(lab["title"])
    total, on = width(), colour()
    lines = [
        styled(
            _(Msg("labs (tolerance table {version})", version=document["tolerances"])), "bold", on
        ),
        "",
    ]
    for lab in document["labs"]:
        head = wrap(f"{lab['id']}  {lab['title']}", total)
        lines.append(styled(lab["id"], "bold", on) + head[0][len(lab["id"]) :])
        lines += head[1:]
        for section in lab["sections"]:
            course = _(Msg("course: {section}", section=section["text"]))
            lines += [f"  {styled(piece, 'dim', on)}" for piece in wrap(course, total - 2)]
        names = ", ".join(m["name"] for m in lab["metrics"])
        lines += [
            f"  {piece}" for piece in wrap(_(Msg("metrics: {names}", names=names)), total - 2)
        ]
        lines.append("")
    return "\n".join(lines)
