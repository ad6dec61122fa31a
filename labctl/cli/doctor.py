"""`labctl doctor`: what this machine offers labctl, and how to fix what it lacks."""

import platform
import sys
from importlib import metadata
from typing import Annotated

import typer
from rich.cells import cell_len
from rich.markup import escape

from labctl.cli.render import out, print_json, text, verdict
from labctl.i18n import N_, _

# The sandbox's layers as a person reads them (JSON keeps the English names).
LAYER_NAMES = {
    "namespaces": N_("namespaces"),
    "uid drop": N_("uid drop"),
    "seccomp": N_("seccomp filter"),
    "user namespaces disabled": N_("user namespaces disabled"),
}
# The row names of the report (python, numpy and torch are names, the same in every language).
ROWS = {"sandbox": N_("sandbox"), "isolation": N_("isolation"), "figures": N_("figures")}
LAYER_LINE = N_("{layer}: {verdict}  {reason}")
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]


def _version(package: str) -> str | None:
    """A package's installed version, read from its metadata: torch is never imported here."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _figures() -> dict:
    """What `labctl report` draws with: matplotlib. Its figures are SVG whose text the
    browser draws, so no font labctl could find matters."""
    return {"matplotlib": _version("matplotlib")}


def facts() -> dict:
    from labctl.isolation import describe, resolve_isolation, sandbox_status

    status = sandbox_status()
    level = resolve_isolation("auto")
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
        "isolation": {"auto": level, "shown": describe(level)},
        "figures": _figures(),
    }


def _figures_line(figures: dict) -> str:
    if figures["matplotlib"] is None:
        return _("labctl report needs matplotlib: pip install 'labctl[report]'")
    return _(
        "report figures are SVG drawn with matplotlib {version}; the browser draws their "
        "text, Chinese included, with its own fonts"
    ).format(version=figures["matplotlib"])


def _row(name: str) -> str:
    """A row's name padded to one column in terminal cells (a Chinese character takes two)."""
    return name + " " * max(1, 10 - cell_len(name))


def doctor(json_: JsonFlag = False) -> None:
    from labctl.isolation import sandbox_status

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
        out.print(
            f"{_row(_(ROWS['sandbox']))}{verdict(ready)}  {text(status.reason)}", soft_wrap=True
        )
        for layer in status.layers:
            line = _(LAYER_LINE).format(
                layer=escape(_(LAYER_NAMES[layer.name])),
                verdict=verdict(layer.works),
                reason=text(layer.reason),
            )
            out.print(f"  {line}", soft_wrap=True)
        level = _("--isolation auto runs learner code as: {level}").format(
            level=escape(found["isolation"]["shown"])
        )
        out.print(f"{_row(_(ROWS['isolation']))}{level}", soft_wrap=True)
        figures = escape(_figures_line(found["figures"]))
        out.print(f"{_row(_(ROWS['figures']))}{figures}", soft_wrap=True)
    if not ready:
        raise typer.Exit(1)
