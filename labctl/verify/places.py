"""Where in a clean room's source: `dir/file.py:LINE` -> the contract function it sits in,
and what was found there (`Located`)."""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, replace
from pathlib import Path

from labctl import contract, pysource
from labctl.i18n import Msg
from labctl.isolation.loader import MAX_SOURCE_BYTES

PACKAGE = "(package)"

_WHERE = re.compile(r"^(?P<file>.+?\.py):(?P<line>\d+)$")


def _file_of(root: Path, where: str) -> tuple[Path, int] | None:
    match = _WHERE.match(where)
    if not match:
        return None
    shown, line = match["file"], int(match["line"])
    # `where` is "<package dir name>/<path inside it>.py": a worker's claim, so only a source
    # file of the room's own, of a size the loader reads, is opened and parsed here.
    relative = shown.split("/", 1)[1] if "/" in shown else shown
    path = root / relative
    try:
        inside = path.resolve().is_relative_to(root.resolve())
        small = path.is_file() and path.stat().st_size <= MAX_SOURCE_BYTES
    except (OSError, ValueError):
        return None
    return (path, line) if inside and small else None


def function_at(root: Path, where: str) -> str:
    """The contract function whose body holds `where` (dir/file.py:LINE), else PACKAGE."""
    found = _file_of(root, where)
    if found is None:
        return PACKAGE
    path, line = found
    text = path.read_text("utf-8", errors="replace")
    spans = _spans(text)
    if spans is None:
        # No tree to read: the nearest `def` above the line, at the left margin.
        for source_line in reversed(text.splitlines()[:line]):
            match = re.match(r"def\s+(\w+)\s*\(", source_line)
            if match:
                return match[1] if match[1] in _names() else PACKAGE
        return PACKAGE
    # The innermost: spans are sorted from the shortest.
    return next((name for name, first, last in spans if first <= line <= last), PACKAGE)


def _names() -> frozenset[str]:
    return frozenset(contract.function_names(contract.LATEST))


# Keyed by the file's text: a room that crashes is located once per call, and each of its
# about 70 crashing calls would parse the same file again.
@functools.lru_cache(maxsize=8)
def _spans(text: str) -> tuple[tuple[str, int, int], ...] | None:
    """The contract functions defined in `text`, as (name, first line, last line), shortest
    first; None where the text does not parse."""
    try:
        tree = pysource.parse(text)
    except pysource.UNPARSABLE:
        return None
    names = _names()
    found = [
        (node.name, node.lineno, getattr(node, "end_lineno", node.lineno))
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names
    ]
    return tuple(sorted(found, key=lambda span: span[2] - span[1]))


@dataclass(frozen=True)
class Located:
    """An import-policy violation or a load error, with the function it sits in (if any)."""

    where: str
    what: str
    function: str = PACKAGE
    own_module: bool = False  # the refused import names a module of the room itself

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"

    def shown(self) -> str | Msg:
        """What a person reads: an import the policy refuses in the chosen language."""
        match = _IMPORTS.fullmatch(self.what)
        if match is None:
            return str(self)
        if self.own_module:
            return Msg(
                "{where}: imports {module}, one of this clean room's own modules, by its bare "
                "name: import it as `from . import {top}`",
                where=self.where,
                module=match[2],
                top=match[2].split(".")[0],
            )
        if match[1]:
            return Msg("{where}: imports from {module}", where=self.where, module=match[2])
        return Msg("{where}: imports {module}", where=self.where, module=match[2])

    def placed(self, function: str) -> Located:
        return replace(self, function=function)


def located(root: Path, where: str, what: str) -> Located:
    """A violation at `where` in the room at `root`, placed in its function, and marked when
    the module it imports is one of the room's own files (`import helpers` for helpers.py)."""
    match = _IMPORTS.fullmatch(what)
    top = match[2].split(".")[0] if match else ""
    own = bool(top) and ((root / f"{top}.py").is_file() or (root / top / "__init__.py").is_file())
    return Located(where, what, function_at(root, where), own)


# The guard's words for an import it refuses (`labctl.isolation.guard`).
_IMPORTS = re.compile(r"imports (from )?([\w.]+)")
