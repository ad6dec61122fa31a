"""Output helpers shared by the commands: consoles, JSON, verdict words.

Tables and verdicts go to stdout; progress and diagnostics to stderr. `--json`
prints exactly one JSON document on stdout. Rich honours NO_COLOR by itself.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from labctl.jsonsafe import dumps

out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)


def print_json(document: Any) -> None:
    """One JSON document on stdout, nothing else; NaN and inf become null."""
    print(dumps(document))


def verdict(passed: bool | None) -> str:
    if passed is None:
        return "[dim]info[/dim]"
    return "[green]pass[/green]" if passed else "[bold red]FAIL[/bold red]"


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
