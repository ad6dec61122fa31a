"""Where in a clean room's source: `dir/file.py:LINE` -> the contract function it sits in."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from labctl import contract

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
        tree = ast.parse(text)
    except SyntaxError:
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
