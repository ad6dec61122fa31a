"""Where in a clean room's source: `dir/file.py:LINE` -> the contract function it sits in,
and what was found there (`Located`)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from labctl import contract, pysource
from labctl.i18n import Msg

PACKAGE = "(package)"

_WHERE = re.compile(r"^(?P<file>.+?\.py):(?P<line>\d+)$")


def _file_of(root: Path, where: str) -> tuple[Path, int] | None:
    match = _WHERE.match(where)
    if not match:
        return None
    shown, line = match["file"], int(match["line"])
    # `where` is "<package dir name>/<path inside it>.py".
    relative = shown.split("/", 1)[1] if "/" in shown else shown
    path = root / relative
    return (path, line) if path.is_file() else None


def function_at(root: Path, where: str) -> str:
    """The contract function whose body holds `where` (dir/file.py:LINE), else PACKAGE."""
    found = _file_of(root, where)
    if found is None:
        return PACKAGE
    path, line = found
    names = set(contract.function_names(contract.LATEST))
    text = path.read_text("utf-8", errors="replace")
    try:
        tree = pysource.parse(text)
    except pysource.UNPARSABLE:
        # No tree to read: the nearest `def` above the line, at the left margin.
        for source_line in reversed(text.splitlines()[:line]):
            match = re.match(r"def\s+(\w+)\s*\(", source_line)
            if match:
                return match[1] if match[1] in names else PACKAGE
        return PACKAGE
    best = PACKAGE
    best_span = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            end = getattr(node, "end_lineno", node.lineno)
            if node.lineno <= line <= end:
                span = end - node.lineno
                if best_span is None or span < best_span:
                    best, best_span = node.name, span
    return best


@dataclass(frozen=True)
class Located:
    """An import-policy violation or a load error, with the function it sits in (if any)."""

    where: str
    what: str
    function: str = PACKAGE

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"

    def shown(self) -> str | Msg:
        """What a person reads: an import the policy refuses in the chosen language."""
        match = _IMPORTS.fullmatch(self.what)
        if match is None:
            return str(self)
        if match[1]:
            return Msg("{where}: imports from {module}", where=self.where, module=match[2])
        return Msg("{where}: imports {module}", where=self.where, module=match[2])


# The guard's words for an import it refuses (`labctl.isolation.guard`).
_IMPORTS = re.compile(r"imports (from )?([\w.]+)")
