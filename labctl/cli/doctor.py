"""`labctl doctor`: what this machine offers labctl, and how to fix what it lacks."""

import codecs
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from typing import Annotated

import typer
from rich.cells import cell_len
from rich.markup import escape

from labctl.cli.render import Prose, out, print_json, text, verdict
from labctl.i18n import N_, Msg, _, declared, joined, speaking

# The sandbox's layers as a person reads them (JSON keeps the English names).
LAYER_NAMES = {
    "namespaces": N_("namespaces"),
    "uid drop": N_("uid drop"),
    "seccomp": N_("seccomp filter"),
    "user namespaces disabled": N_("user namespaces disabled"),
}
# The row names of the report (python, numpy and torch are names, the same in every language).
ROWS = {
    "sandbox": N_("sandbox"),
    "isolation": N_("isolation"),
    "figures": N_("figures"),
    "terminal": N_("terminal"),
}
LAYER_LINE = N_("{layer}: {verdict}  {reason}")
# Where a row's value starts, in cells; its wrapped lines start there too.
ROW = 10
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


def _version(package: str) -> str | None:
    """A package's installed version, read from its metadata: torch is never imported here."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _figures() -> dict:
    """What `labctl report` draws with: matplotlib, and the font whose Chinese glyphs the
    report carries (`labctl.report.glyphs`: the figures' text as paths, the page's subset
    embedded), so that no font of the machine's matters."""
    from labctl.report.glyphs import font_path

    font = font_path()
    return {"matplotlib": _version("matplotlib"), "cjk_font": None if font is None else str(font)}


def _cjk_fonts() -> int | None:
    """How many fonts with Chinese glyphs fontconfig knows here (None: no fontconfig)."""
    listing = shutil.which("fc-list")
    if listing is None:
        return None
    try:
        done = subprocess.run(
            [listing, ":lang=zh", "family"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return len([line for line in done.stdout.splitlines() if line.strip()])


def _terminal() -> dict:
    """What `--lang zh` needs of the terminal: an encoding that holds Chinese, and a font with
    its glyphs (the terminal's own, which labctl cannot see; fontconfig's count hints at it)."""
    encoding = getattr(sys.stdout, "encoding", None) or ""
    try:
        utf8 = codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        utf8 = False
    return {
        "encoding": encoding,
        "utf8": utf8,
        "columns": shutil.get_terminal_size().columns,
        "cjk_fonts": _cjk_fonts(),
    }


def facts() -> dict:
    from labctl.isolation import describe, resolve_isolation, sandbox_status

    status = sandbox_status()
    level = resolve_isolation("auto")
    with speaking("en"):  # the facts are for --json: English whatever the screen's language
        shown = describe(level)
    return {
        "python": platform.python_version(),
        "platform": sys.platform,
        "numpy": _version("numpy"),
        "torch": _version("torch"),
        "sandbox": {
            "works": status.works,
            "reason": str(status.reason),
            "layers": [
                {"name": x.name, "works": x.works, "reason": str(x.reason)} for x in status.layers
            ],
            "missing": status.missing,
        },
        "isolation": {"auto": level, "shown": shown},
        "figures": _figures(),
        "terminal": _terminal(),
    }


def _figures_line(figures: dict) -> str:
    if figures["matplotlib"] is None:
        return _("labctl report needs matplotlib: pip install 'labctl[report]'")
    if figures.get("cjk_font") is None:
        return _(
            "report figures are SVG drawn with matplotlib {version}, but the Chinese font they "
            "draw with is missing (pip install pylopdf-fonts-zh-cn): the browser then draws "
            "Chinese with its own fonts, and boxes where it has none"
        ).format(version=figures["matplotlib"])
    return _(
        "report figures are SVG drawn with matplotlib {version}; their Chinese and the page's "
        "come with labctl (Noto Sans SC, embedded in the report): no CJK font needed"
    ).format(version=figures["matplotlib"])


def _terminal_line(terminal: dict) -> str:
    said: list[Msg] = [
        Msg("{encoding}, {columns} columns", encoding=terminal["encoding"] or "?",
            columns=terminal["columns"])
    ]  # fmt: skip
    if not terminal["utf8"]:
        said.append(declared(N_("--lang zh needs a UTF-8 locale here (export LANG=C.UTF-8)")))
    if terminal["cjk_fonts"] == 0:
        said.append(
            declared(
                N_(
                    "no font with Chinese glyphs on this machine: a terminal here shows --lang zh "
                    "as boxes (install one, e.g. apt-get install fonts-noto-cjk); the report "
                    "carries its own"
                )
            )
        )
    elif terminal["cjk_fonts"] is not None:
        said.append(
            Msg("{count} fonts with Chinese glyphs on this machine", count=terminal["cjk_fonts"])
        )
    return _(joined(said))


def _row(name: str) -> str:
    """A row's name padded to one column in terminal cells (a Chinese character takes two)."""
    return name + " " * max(1, ROW - cell_len(name))


def doctor(json_: JsonFlag = False) -> None:
    from labctl.isolation import describe, sandbox_status

    found = facts()
    ready = found["sandbox"]["works"] and not found["sandbox"]["missing"]
    if json_:
        print_json({"passed": ready, **found})
    else:
        # the reasons as messages (the facts keep them in English, for --json)
        status = sandbox_status()
        for name in ("python", "numpy", "torch"):
            value = found[name] or _("not installed")
            out.print(f"{_row(name)}{escape(value)}")
        out.print(Prose(f"{_row(_(ROWS['sandbox']))}{verdict(ready)}  {text(status.reason)}", ROW))
        for layer in status.layers:
            line = _(LAYER_LINE).format(
                layer=escape(_(LAYER_NAMES[layer.name])),
                verdict=verdict(layer.works),
                reason=text(layer.reason),
            )
            out.print(Prose(f"  {line}", hang=4))
        level = _("--isolation auto runs learner code as: {level}").format(
            level=escape(describe(found["isolation"]["auto"]))
        )
        out.print(Prose(f"{_row(_(ROWS['isolation']))}{level}", ROW))
        figures = escape(_figures_line(found["figures"]))
        out.print(Prose(f"{_row(_(ROWS['figures']))}{figures}", ROW))
        terminal = escape(_terminal_line(found["terminal"]))
        out.print(Prose(f"{_row(_(ROWS['terminal']))}{terminal}", ROW))
    if not ready:
        raise typer.Exit(1)
