"""Base code: what labctl ships and what a course hands out, which no learner wrote.

The base is labctl's own clean room (`labctl.clean_room`, the project's answer),
the `clean-room init` stubs, and each `--base DIR` a grader gives (the course's
starting code). Its fingerprints are every K-gram of its normalised tokens
(`labctl.fingerprints.tokens`): the same for a renamed, re-laid-out,
parenthesised or padded copy.

A contract function of a room is base code when its code (the `def` the
package binds to its name, and the room's helpers it calls: `labctl.fingerprints.room`)
is mostly base: of its fingerprints that are not the stubs' (a signature every
learner starts from is evidence of nothing), at least `SHARE` are the base's, and
of them at least `MIN_PRINTS` the course's starting code's (which every learner
holds) or at least `MIN_SHARED` in all (short code a formula dictates, which
honest learners write as labctl did, is not labctl's). A function of fewer than
`MIN_PRINTS` is not judged at all. It is base code too when the room holds, under
any name and bound however (a `globals()[name] = ...` no static reading follows),
a copy of the base's own function of that name (a unit whose code is base code
by the same rule and holds at least `SHARE` of that function's fingerprints),
unless the `def` the name is bound to holds `MIN_SHARED` fingerprints of the
learner's own. A stub is never base code: it fails its checks anyway. `grade` gives
such a function no points; `evidence submit` refuses a room whose functions are mostly
labctl's own.
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
# How much a function must share with the base before its share says anything: as much as
# labctl's smallest contract function holds, with the helpers it calls (merge_heads, 16).
# Short code that a formula dictates is written alike by honest learners: a six-line softmax
# written to the contract shared 8 of its 14 with labctl's (0.57), the textbook
# sinusoidal_positions (pos / 10000 ** (i / d), sin on the even columns, cos on the odd) 13
# of its 18 (0.72), a three-line sliding_window_mask in the contract's own order all of its.
MIN_SHARED = 16


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
    # Each source but the stubs, read as a room: where its own contract functions are.
    rooms: list[tuple[str, RoomCode]] = field(default_factory=list)
    _functions: dict[tuple[str, frozenset[str]], frozenset[int]] = field(
        default_factory=dict, repr=False, compare=False
    )

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
    def course(self) -> frozenset[int]:
        """The course's starting code (the `--base` folders): neither labctl's nor the stubs."""
        return frozenset().union(*(g for name, g in self.sources if name not in (PROJECT, STUBS)))

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

    def function_prints(self, name: str, contract: frozenset[str]) -> frozenset[int]:
        """The fingerprints of the base's own function `name` (its def and the helpers it
        calls) in every source that defines it; none where no source does. Read once per
        batch, not once per learner."""
        key = (name, contract)
        if key not in self._functions:
            found: set[int] = set()
            for _source, code in self.rooms:
                index = code.function(name)
                if index is not None:
                    found.update(_prints(code, index, contract, self.stubs))
            self._functions[key] = frozenset(found)
        return self._functions[key]

    def source_of(self, hashes: list[int]) -> str:
        """The source (other than the stubs) holding the most of `hashes`."""
        counted = [
            (sum(h in grams for h in hashes), -index, name)
            for index, (name, grams) in enumerate(self.sources)
            if name != STUBS
        ]
        return max(counted)[2]


@functools.lru_cache(maxsize=1)
def _project_room() -> RoomCode:
    from labctl.faults.base import project_clean_room

    return read_room(project_clean_room())


def load_base(extra: list[Path] | tuple[Path, ...] = ()) -> Base:
    """labctl's own room, the stubs, and each folder of `extra` (its `.py` files)."""
    sources = [(PROJECT, _project_grams()), (STUBS, _stub_grams())]
    rooms = [(PROJECT, _project_room())]
    for folder in extra:
        sources.append(
            (str(folder), frozenset(all_grams([read_source(p) for p in source_files(folder)])))
        )
        rooms.append((str(folder), read_room(folder)))
    return Base(sources, rooms)


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


def _prints(
    code: RoomCode, index: int, contract: frozenset[str], stubs: frozenset[int]
) -> list[int]:
    """The fingerprints of unit `index` and the room's helpers it calls, less the stubs'."""
    return [
        g[0]
        for unit in code.closure(index, contract)
        for g in code.units[unit].prints
        if g[0] not in stubs
    ]


def _based(hashes: list[int], within: frozenset[int], base: Base) -> list[int] | None:
    """Of a function's fingerprints `hashes`, those in `within` (the base's), when they make it
    base code; else None. The course's starting code is in every learner's hands, so handing
    it in is base code however short it is (`MIN_PRINTS`); labctl's own, only from
    `MIN_SHARED` shared."""
    shared = [h for h in hashes if h in within]
    if len(shared) < SHARE * len(hashes):
        return None
    if len(shared) >= MIN_SHARED or sum(h in base.course for h in shared) >= MIN_PRINTS:
        return shared
    return None


def _copies(
    functions: list[str], prints_of: dict[int, list[int]], contract: frozenset[str], base: Base
) -> dict[str, tuple[int, list[int], float]]:
    """For each of `functions`, the room's unit (any name, bound or not; `prints_of` holds each
    named unit's fingerprints) that is base code and holds at least `SHARE` of the base's own
    function of that name (the unit holding most of it; of those, the smallest), with its
    fingerprints that are the base's and their share."""
    found: dict[str, tuple[tuple[int, int], int, list[int], float]] = {}
    theirs = {name: base.function_prints(name, contract) for name in functions}
    for index, prints in prints_of.items():
        based = _based(prints, base.code, base) if len(prints) >= MIN_PRINTS else None
        if based is None:
            continue
        held = set(prints)
        for name, original in theirs.items():
            covered = len(held & original)
            rank = (covered, -len(prints))
            covers = bool(original) and covered >= SHARE * len(original)
            if covers and (name not in found or rank > found[name][0]):
                found[name] = (rank, index, based, len(based) / len(prints))
    return {name: copy for name, (_rank, *copy) in found.items()}


def judge(code: RoomCode, functions: list[str], base: Base) -> Verdict:
    """Which of `functions` (contract names) `code` defines as base code."""
    contract = frozenset(functions)
    verdict = Verdict()
    prints_of = {
        index: _prints(code, index, contract, base.stubs)
        for index, unit in enumerate(code.units)
        if unit.name is not None
    }
    copies = _copies(functions, prints_of, contract, base)
    for name in functions:
        found: tuple[int, list[int], float] | None = None
        judged = False
        own = 0  # fingerprints of the bound function that are the learner's
        index = code.function(name)
        if index is not None:
            hashes = (
                prints_of[index]
                if index in prints_of
                else _prints(code, index, contract, base.stubs)
            )
            own = sum(h not in base.code for h in hashes)
            if len(hashes) >= MIN_PRINTS:
                judged = True
                based = _based(hashes, base.code, base)
                if based is not None:
                    found = (index, based, len(based) / len(hashes))
        # A copy elsewhere speaks for the function unless what the name is bound to is work of
        # the learner's own (a rewrite after an old def left in place, not a two-line wrapper).
        if found is None and name in copies and own < MIN_SHARED:
            judged = True
            found = copies[name]
        if judged:
            verdict.judged += 1
        if found is not None:
            unit = code.units[found[0]]
            verdict.functions.append(
                BaseFunction(name, base.source_of(found[1]), found[2], code.files[unit.file],
                             (unit.first, unit.last))
            )  # fmt: skip
    return verdict


def base_functions(room: Path, functions: list[str], base: Base) -> Verdict:
    """`judge` of the room at `room` (its files read, nothing run)."""
    return judge(read_room(room), functions, base)
