"""Source is parsed one tree at a time: CPython 3.11 before 3.11.8 shares the AST
constructor's recursion counter between threads (gh-106905), and verify's diagnosis
parses from a thread pool. A CI run failed with "AST constructor recursion depth
mismatch" before every parse went through `labctl.pysource.parse`."""

from __future__ import annotations

import ast
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from labctl import pysource

LABCTL = Path(__file__).resolve().parents[1] / "labctl"


def test_parses_from_many_threads_never_overlap(monkeypatch):
    inside = 0
    most = 0
    count = threading.Lock()
    real = ast.parse

    def slow_parse(source, filename="<unknown>", *args, **kwargs):
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
        time.sleep(0.002)  # long enough that an unlocked parse would meet another
        try:
            return real(source, filename, *args, **kwargs)
        finally:
            with count:
                inside -= 1

    monkeypatch.setattr(ast, "parse", slow_parse)
    with ThreadPoolExecutor(8) as pool:
        trees = list(pool.map(lambda i: pysource.parse(f"x = {i}\n"), range(64)))
    assert [tree.body[0].value.value for tree in trees] == list(range(64))
    assert most == 1, f"{most} parses ran at once"


def test_labctl_parses_source_only_through_pysource():
    """A new `ast.parse(...)` elsewhere in labctl would bring the race back."""
    offenders = []
    for path in sorted(LABCTL.rglob("*.py")):
        if path.name == "pysource.py":
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "parse"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "ast"
            ):
                offenders.append(f"{path.relative_to(LABCTL.parent)}:{node.lineno}")
    assert offenders == []
