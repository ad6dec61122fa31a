"""Base code: what labctl ships and what a course hands out, which no learner wrote.

The base is labctl's own clean room (`labctl.clean_room`, the project's answer),
the `clean-room init` stubs, and each `--base DIR` a grader gives (the course's
starting code). Its fingerprints are every K-gram of its normalised tokens
(`labctl.fingerprints.tokens`): the same for a renamed, re-laid-out,
parenthesised or padded copy.

A contract function of a room is base code when its code (the `def` the
package binds to its name, and the room's helpers it calls: `labctl.fingerprints.room`)
is mostly base: of its fingerprints that are not the stubs' (a signature every
learner starts from is evidence of nothing), at least `SHARE` are the base's,
and at least `MIN_PRINTS` of them (a function of a line or two, which an honest
learner may well write as labctl did, is never judged). A stub is never base
code: it fails its checks anyway. `grade` gives such a function no points;
`evidence submit` refuses a room whose functions are mostly labctl's own.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from labctl.fingerprints.room import RoomCode, all_grams, read_room, read_source
from labctl.i18n import N_
from labctl.isolation.loader import source_files

# The base's names (in records and similarity.json, English; translated where shown).
PROJECT = N_("(labctl's own clean room)")
STUBS = N_("(the clean-room init stubs)")
SHARE = 0.5
MIN_PRINTS = 3


@functools.lru_cache(maxsize=1)
def _project_grams() -> frozenset[int]:
    from labctl.faults.base import project_clean_room

    return frozenset(all_grams([read_source(p) for p in source_files(project_clean_room())]))


@functools.lru_cache(maxsize=1)
def _stub_grams() -> frozenset[int]:
    from labctl.verify.stubs import init_source, module_source

    return frozenset(all_grams([init_source(), module_source()]))


@dataclass
class Base:
    """The base's sources, each with every K-gram hash of its code."""

    sources: list[tuple[str, frozenset[int]]] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [name for name, _grams in self.sources]

    @functools.cached_property
    def hashes(self) -> frozenset[int]:
        return frozenset().union(*(grams for _name, grams in self.sources))

    @functools.cached_property
    def code(self) -> frozenset[int]:
        """The base that makes a function base code: every source but the stubs."""
        return frozenset().union(*(g for name, g in self.sources if name != STUBS))

    @functools.cached_property
    def stubs(self) -> frozenset[int]:
        return frozenset().union(*(g for name, g in self.sources if name == STUBS))

    @functools.cached_property
    def digest(self) -> str:
        """One sha256 over every source's name and K-grams: a key that changes with the base."""
        digest = hashlib.sha256()
        for name, grams in self.sources:
            digest.update(name.encode("utf-8", "surrogateescape") + b"\0")
            digest.update(b"".join(g.to_bytes(8, "big") for g in sorted(grams)))
        return digest.hexdigest()

    def source_of(self, hashes: list[int]) -> str:
        """The source (other than the stubs) holding the most of `hashes`."""
        counted = [
            (sum(h in grams for h in hashes), -index, name)
            for index, (name, grams) in enumerate(self.sources)
            if name != STUBS
        ]
        return max(counted)[2]


def load_base(extra: list[Path] | tuple[Path, ...] = ()) -> Base:
    """labctl's own room, the stubs, and each folder of `extra` (its `.py` files)."""
    sources = [(PROJECT, _project_grams()), (STUBS, _stub_grams())]
    for folder in extra:
        sources.append(
            (str(folder), frozenset(all_grams([read_source(p) for p in source_files(folder)])))
        )
    return Base(sources)


@dataclass(frozen=True)
class BaseFunction:
    """A contract function of a room that is base code: where it is, and whose code it is."""

    function: str
    source: str  # PROJECT or a --base folder
    share: float  # of its code's fingerprints, the base's
    file: str
    lines: tuple[int, int]

    def to_json(self) -> dict:
        return {
            "function": self.function,
            "source": self.source,
            "share": round(self.share, 4),
            "file": self.file,
            "lines": list(self.lines),
        }


@dataclass
class Verdict:
    """The base code of one room: its contract functions that are base code, and how many
    it defines with enough code of their own to judge (a stub, or two lines, is not judged)."""

    functions: list[BaseFunction] = field(default_factory=list)
    judged: int = 0

    @property
    def whole(self) -> bool:
        """Every function judged is base code: the room is base code as a whole."""
        return bool(self.functions) and len(self.functions) == self.judged

    def to_json(self) -> dict:
        return {
            "functions": [f.to_json() for f in self.functions],
            "judged": self.judged,
            "whole": self.whole,
        }


def judge(code: RoomCode, functions: list[str], base: Base) -> Verdict:
    """Which of `functions` (contract names) `code` defines as base code."""
    contract = frozenset(functions)
    verdict = Verdict()
    for name in functions:
        index = code.function(name)
        if index is None:
            continue
        stubs = base.stubs
        hashes = [
            g[0]
            for unit in code.closure(index, contract)
            for g in code.units[unit].prints
            if g[0] not in stubs
        ]
        if len(hashes) < MIN_PRINTS:
            continue
        verdict.judged += 1
        based = [h for h in hashes if h in base.code]
        share = len(based) / len(hashes)
        if share >= SHARE and len(based) >= MIN_PRINTS:
            unit = code.units[index]
            verdict.functions.append(
                BaseFunction(name, base.source_of(based), share, code.files[unit.file],
                             (unit.first, unit.last))
            )  # fmt: skip
    return verdict


def base_functions(room: Path, functions: list[str], base: Base) -> Verdict:
    """`judge` of the room at `room` (its files read, nothing run)."""
    return judge(read_room(room), functions, base)
