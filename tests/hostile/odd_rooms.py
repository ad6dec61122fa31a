"""Rooms and folders no source tree holds: bytecode, a planted cache, nesting past recursion."""

from __future__ import annotations

import os
import py_compile
import sys
from pathlib import Path

from gradetools import ROOM, copy_room


def nest(base: Path, depth: int) -> None:
    """`base/d/d/.../d` `depth` folders deep (each a short name: the path stays within PATH_MAX);
    one level at a time, as os.makedirs recurses once per level."""
    base.mkdir()
    for level in range(1, depth + 1):
        os.mkdir(base / Path(*["d"] * level))


def unnest(base: Path, depth: int) -> None:
    """Remove what `nest` made, deepest first (rmtree recurses once per level)."""
    for level in range(depth, 0, -1):
        os.rmdir(base / Path(*["d"] * level))


def cached_beside_stub(room: Path) -> None:
    """The correct `primitives` as unchecked bytecode in `__pycache__/`, a stub softmax in the .py."""
    copy_room(room)
    cache = room / "__pycache__"
    cache.mkdir()
    py_compile.compile(
        str(ROOM / "primitives.py"),
        cfile=str(cache / f"primitives.{sys.implementation.cache_tag}.pyc"),
        dfile=str(room / "primitives.py"),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    with (room / "primitives.py").open("a", encoding="utf-8") as handle:
        handle.write("\n\ndef softmax(x, axis=-1):\n    raise NotImplementedError\n")


def bytecode_only(room: Path) -> None:
    copy_room(room)
    for source in room.glob("*.py"):
        if source.name != "__init__.py":
            py_compile.compile(str(source), cfile=str(source.with_suffix(".pyc")))
            source.unlink()
