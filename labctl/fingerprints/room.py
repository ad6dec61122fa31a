"""A clean room's code as fingerprinted units, and where each of its names is defined.

The room's `.py` files are found as the loader's static scan finds them and
read as text (nothing is imported or run). A contract function is found as
`import clean_room` would bind it, read statically: the package's
`__init__.py` binding of the name, followed through `from .module import
name [as other]`, `name = other` and `from .module import *` to the `def`
that the last binding names (a function defined twice is the definition that
wins). A function's code is that `def` and the room's own helpers it calls by
name, transitively, other contract functions excepted: a contract function
that only calls a copied helper is the helper's code.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from labctl.fingerprints.tokens import Parsed, parse_file
from labctl.fingerprints.winnow import Gram, grams, winnow
from labctl.isolation.loader import shown_name, source_files

_DEPTH = 16  # bindings followed from one name at most (`a = b`, `b = c`, ...)


@dataclass
class Code:
    """One unit of a room (a function, or a file's module code) and its fingerprints."""

    file: int  # index into the room's files
    name: str | None
    first: int
    last: int
    prints: list[Gram]  # winnowed: (hash, first line, last line)
    calls: frozenset[str]


@dataclass
class RoomCode:
    package: str = "clean_room"  # the room's folder name, which absolute imports may use
    files: list[str] = field(default_factory=list)  # shown names, relative to the room
    lines: list[list[str]] = field(default_factory=list)
    units: list[Code] = field(default_factory=list)
    parsed: list[Parsed] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)  # index of each file's first unit

    def _file(self, module: str, level: int, here: int) -> int | None:
        """The file a `from MODULE import` in file `here` names, inside the room."""
        parts = [p for p in module.split(".") if p]
        if level:
            base = self.files[here].split("/")[:-1]
            base = base[: len(base) - (level - 1)] if level > 1 else base
        else:
            base = []
            if not parts or parts[0] not in (self.package, "clean_room"):
                return None  # another package's name (`from numpy import exp`)
            parts = parts[1:]  # `from clean_room.x import f`: the package's own name
        stem = "/".join([*base, *parts])
        for name in (f"{stem}.py", f"{stem}/__init__.py" if stem else "__init__.py"):
            if name in self.files:
                return self.files.index(name)
        return None

    def _resolve(self, name: str, file: int, depth: int = 0) -> int | None:
        if depth > _DEPTH:
            return None
        parsed = self.parsed[file]
        bound = parsed.bindings.get(name)
        if bound is None:
            for module, level in reversed(parsed.star):
                target = self._file(module, level, file)
                found = None if target is None else self._resolve(name, target, depth + 1)
                if found is not None:
                    return found
            return None
        if bound[0] == "def":
            return self.offsets[file] + bound[1]
        if bound[0] == "name":
            return self._resolve(bound[1], file, depth + 1)
        _kind, module, original, level = bound
        target = self._file(module, level, file)
        if target is None and not module:
            # `from . import name`: a submodule, not a function
            return None
        return None if target is None else self._resolve(original, target, depth + 1)

    def function(self, name: str) -> int | None:
        """The unit of the contract function `name`, as the package binds it; else the last
        `def` of that name in the room."""
        if "__init__.py" in self.files:
            found = self._resolve(name, self.files.index("__init__.py"))
            if found is not None:
                return found
        named = [i for i, unit in enumerate(self.units) if unit.name == name]
        return named[-1] if named else None

    def closure(self, index: int, contract: frozenset[str]) -> list[int]:
        """Unit `index` and the room's functions it calls by name, transitively, other
        contract functions excepted."""
        seen = [index]
        todo = [index]
        while todo:
            unit = self.units[todo.pop()]
            for called in sorted(unit.calls - contract):
                found = self._resolve(called, unit.file)
                if found is None:
                    named = [i for i, u in enumerate(self.units) if u.name == called]
                    found = named[-1] if named else None
                if found is not None and found not in seen and self.units[found].name:
                    seen.append(found)
                    todo.append(found)
        return seen


def read_source(path: Path) -> str:
    return path.read_text("utf-8", errors="replace")


# A batch reads the same file text many times: labctl's own clean room as the base, the
# course's starting files a learner left as they were, every room again for the similarity
# listing. Each text is parsed and fingerprinted once per process; the cache holds at most
# `_CACHED_CHARS` of text (the oldest goes first), and what it hands out is never changed.
_CACHED_CHARS = 4 << 20
_cache: OrderedDict[str, tuple[Parsed, list[tuple]]] = OrderedDict()
_cached_chars = 0


def _fingerprinted(text: str) -> tuple[Parsed, list[tuple]]:
    """`text`'s bindings (a `Parsed` without its units' tokens) and each unit's (name, first,
    last, winnowed prints, calls)."""
    global _cached_chars
    found = _cache.get(text)
    if found is not None:
        _cache.move_to_end(text)
        return found
    parsed = parse_file(text)
    units = [(u.name, u.first, u.last, winnow(grams(u.tokens)), u.calls) for u in parsed.units]
    found = (Parsed(bindings=parsed.bindings, star=parsed.star), units)
    if len(text) <= _CACHED_CHARS:
        _cache[text] = found
        _cached_chars += len(text)
        while _cached_chars > _CACHED_CHARS:
            _cached_chars -= len(_cache.popitem(last=False)[0])
    return found


def read_room(folder: Path) -> RoomCode:
    """Every `.py` file of the room at `folder`, parsed and fingerprinted."""
    room = RoomCode(folder.name)
    for path in source_files(folder):
        text = read_source(path)
        room.files.append(shown_name(path.relative_to(folder).as_posix()))
        room.lines.append(text.splitlines())
        parsed, units = _fingerprinted(text)
        room.parsed.append(parsed)
        room.offsets.append(len(room.units))
        index = len(room.files) - 1
        room.units += [Code(index, *unit) for unit in units]
    return room


def all_grams(texts: list[str]) -> set[int]:
    """Every K-gram hash of every unit of `texts`: base code, matched whatever the window."""
    return {g[0] for text in texts for unit in parse_file(text).units for g in grams(unit.tokens)}
