"""`labctl grade --similarity`: clean rooms compared as MOSS compares programs, for a person.

Each room's `.py` files are fingerprinted by `labctl.fingerprints`: normalised
tokens (every identifier one token; parentheses, layout, comments, docstrings
and unused code gone), K-grams hashed within each function, winnowed. Renaming,
wrapping names in parentheses, re-indenting and padding with unused code
change no fingerprint.

Base code never counts: every K-gram of the base (labctl's own clean room, the
`clean-room init` stubs, and each `--base DIR` a grader gives) is removed from
every room's fingerprints first, so code that everyone starts from, or that
labctl ships, matches no one.

Matches are reported per function, as MOSS reports matched passages: a
function of one room whose fingerprints beyond the base are found, at least
`WHOLE` of them (and at least `MIN_FUNCTION_PRINTS`), in the other room is a
shared function, listed with its name, its file and lines on both sides,
however little of either room it is. A pair that shares a function is always
listed; a pair that shares none is listed when its scattered matches reach
`threshold` of either room's code beyond the base. Pairs are ranked by their
longest match, then by how much they share; each side's matched lines are
counted, the same way for both, and nothing says who copied from whom.
Lexing never runs the learner's code; nothing here changes a score (the
base-code rule that does is `labctl.fingerprints.base`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from labctl.fingerprints.base import PROJECT, STUBS, Base, load_base
from labctl.fingerprints.room import RoomCode, read_room
from labctl.fingerprints.winnow import K, W
from labctl.isolation.loader import walk_room

__all__ = ["PROJECT", "STUBS", "compare"]

DEFAULT_THRESHOLD = 0.5
# A function counts as shared when this share of its fingerprints beyond the base (and at
# least MIN_FUNCTION_PRINTS of them: a few lines) is in the other room.
WHOLE = 0.8
MIN_FUNCTION_PRINTS = 4
# Lines apart that still join one region; the locations kept of a fingerprint that repeats.
GAP = 3
MAX_PLACES = 4


@dataclass(frozen=True)
class Place:
    file: int  # index into the room's files
    unit: int  # index into the room's units
    first: int  # first and last line of the K-gram
    last: int


@dataclass
class Room:
    """A room's code and its fingerprints beyond the base."""

    name: str
    code: RoomCode = field(default_factory=RoomCode)
    prints: dict[int, list[Place]] = field(default_factory=dict)
    total: int = 0  # fingerprints before the base was removed
    unit_prints: dict[int, set[int]] = field(default_factory=dict)  # beyond the base
    # Entries not read, as "path (kind)": a `.py` file past the loader's size (too-large),
    # bytecode, a link... (`loader.walk_room`): what the room's verify refuses it for.
    refused: list[str] = field(default_factory=list)

    @property
    def files(self) -> list[str]:
        return self.code.files

    @property
    def lines(self) -> list[list[str]]:
        return self.code.lines

    @property
    def base_share(self) -> float:
        return 0.0 if not self.total else 1 - len(self.prints) / self.total


@dataclass
class Region:
    a_lines: tuple[int, int]
    b_lines: tuple[int, int]
    fingerprints: int

    def to_json(self) -> dict:
        return {
            "a_lines": list(self.a_lines),
            "b_lines": list(self.b_lines),
            "fingerprints": self.fingerprints,
        }


@dataclass
class FileMatch:
    a_file: str
    b_file: str
    fingerprints: int
    regions: list[Region]

    def to_json(self) -> dict:
        return {
            "a_file": self.a_file,
            "b_file": self.b_file,
            "fingerprints": self.fingerprints,
            "regions": [r.to_json() for r in self.regions],
        }


@dataclass
class FunctionMatch:
    """A function of one room found in a function of the other: names, files and lines of
    both, and how many of each one's fingerprints beyond the base the other holds."""

    a_function: str
    a_file: str
    a_lines: tuple[int, int]
    b_function: str
    b_file: str
    b_lines: tuple[int, int]
    fingerprints: int  # shared by the two functions
    a_prints: int  # each function's fingerprints beyond the base
    b_prints: int

    @property
    def whole(self) -> bool:
        return any(
            own >= MIN_FUNCTION_PRINTS and self.fingerprints >= WHOLE * own
            for own in (self.a_prints, self.b_prints)
        )

    def to_json(self) -> dict:
        return {
            "a_function": self.a_function,
            "a_file": self.a_file,
            "a_lines": list(self.a_lines),
            "b_function": self.b_function,
            "b_file": self.b_file,
            "b_lines": list(self.b_lines),
            "fingerprints": self.fingerprints,
            "a_fingerprints": self.a_prints,
            "b_fingerprints": self.b_prints,
            "whole": self.whole,
        }


@dataclass
class Pair:
    a: str
    b: str
    a_share: float
    b_share: float
    shared: int  # fingerprints both rooms hold beyond the base
    files: list[FileMatch] = field(default_factory=list)
    functions: list[FunctionMatch] = field(default_factory=list)
    a_matched: int = 0  # lines of each room inside a matching region
    b_matched: int = 0

    @property
    def shared_functions(self) -> list[FunctionMatch]:
        return [f for f in self.functions if f.whole]

    @property
    def longest(self) -> int:
        """The fingerprints of the pair's longest matching region."""
        return max((r.fingerprints for f in self.files for r in f.regions), default=0)

    def to_json(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "a_share": round(self.a_share, 4),
            "b_share": round(self.b_share, 4),
            "a_lines_matched": self.a_matched,
            "b_lines_matched": self.b_matched,
            "matching_fingerprints": self.shared,
            "longest_match": self.longest,
            "shared_functions": [f.to_json() for f in self.shared_functions],
            "functions": [f.to_json() for f in self.functions],
            "files": [f.to_json() for f in self.files],
        }


@dataclass
class Similarity:
    threshold: float
    base: list[str]
    rooms: dict[str, Room]
    pairs: list[Pair]

    def to_json(self) -> dict:
        return {
            "threshold": self.threshold,
            "method": {
                "k": K,
                "window": W,
                "whole_function": WHOLE,
                "min_function_fingerprints": MIN_FUNCTION_PRINTS,
            },
            "base": self.base,
            "rooms": {
                name: {
                    "fingerprints": len(room.prints),
                    "base_share": round(room.base_share, 4),
                    **({"refused": room.refused} if room.refused else {}),
                }
                for name, room in self.rooms.items()
            },
            "pairs": [p.to_json() for p in self.pairs],
        }


def fingerprint(name: str, folder: Path, base: Base) -> Room:
    room = Room(name, read_room(folder))
    room.refused = [f"{path} ({kind})" for path, kind in walk_room(folder).refused]
    hashes = base.hashes
    for index, unit in enumerate(room.code.units):
        mine = room.unit_prints.setdefault(index, set())
        for digest, first, last in unit.prints:
            room.total += 1
            if digest in hashes:
                continue
            mine.add(digest)
            places = room.prints.setdefault(digest, [])
            if len(places) < MAX_PLACES:
                places.append(Place(unit.file, index, first, last))
    return room


def _regions(points: list[tuple[Place, Place]]) -> list[Region]:
    """Matched K-grams of one file pair joined into line ranges of each side, longest first."""
    regions: list[Region] = []
    for a, b in sorted(points, key=lambda p: (p[0].first, p[1].first)):
        last = regions[-1] if regions else None
        if (
            last is not None
            and a.first <= last.a_lines[1] + GAP
            and last.b_lines[0] - GAP <= b.first <= last.b_lines[1] + GAP
        ):
            last.a_lines = (last.a_lines[0], max(last.a_lines[1], a.last))
            last.b_lines = (min(last.b_lines[0], b.first), max(last.b_lines[1], b.last))
            last.fingerprints += 1
        else:
            regions.append(Region((a.first, a.last), (b.first, b.last), 1))
    regions.sort(key=lambda r: (-r.fingerprints, r.a_lines, r.b_lines))
    return regions


def _function_matches(a: Room, b: Room, shared: set[int]) -> list[FunctionMatch]:
    """Each function of either room that holds shared fingerprints, with the function of the
    other room that holds most of them."""
    found: dict[tuple[int, int], FunctionMatch] = {}
    for mine, other, flip in ((a, b, False), (b, a, True)):
        for index, prints in mine.unit_prints.items():
            unit = mine.code.units[index]
            common = prints & shared
            if unit.name is None or not common:
                continue
            votes: dict[int, int] = {}
            for digest in common:
                for place in other.prints[digest]:
                    votes[place.unit] = votes.get(place.unit, 0) + 1
            partner = max(votes, key=lambda u: (votes[u], -u))
            there = other.code.units[partner]
            if there.name is None:
                continue
            key = (partner, index) if flip else (index, partner)
            if key in found:
                continue
            ua, ub = (there, unit) if flip else (unit, there)
            pa, pb = (partner, index) if flip else (index, partner)
            a_set, b_set = a.unit_prints[pa], b.unit_prints[pb]
            found[key] = FunctionMatch(
                ua.name,
                a.files[ua.file],
                (ua.first, ua.last),
                ub.name,
                b.files[ub.file],
                (ub.first, ub.last),
                len(a_set & b_set & shared),
                len(a_set),
                len(b_set),
            )
    matches = [m for m in found.values() if m.fingerprints]
    matches.sort(key=lambda m: (not m.whole, -m.fingerprints, m.a_file, m.a_lines, m.b_lines))
    return matches


def _lines(regions: list[tuple[str, tuple[int, int]]]) -> int:
    covered = {(file, n) for file, (first, last) in regions for n in range(first, last + 1)}
    return len(covered)


def _pair(a: Room, b: Room, shared: set[int]) -> Pair:
    by_files: dict[tuple[int, int], list[tuple[Place, Place]]] = {}
    counted: dict[tuple[int, int], set[int]] = {}
    for digest in shared:
        for pa in a.prints[digest]:
            for pb in b.prints[digest]:
                by_files.setdefault((pa.file, pb.file), []).append((pa, pb))
                counted.setdefault((pa.file, pb.file), set()).add(digest)
    files = [
        FileMatch(a.files[fa], b.files[fb], len(counted[(fa, fb)]), _regions(points))
        for (fa, fb), points in by_files.items()
    ]
    files.sort(key=lambda f: (-max(r.fingerprints for r in f.regions), -f.fingerprints,
                              f.a_file, f.b_file))  # fmt: skip
    pair = Pair(
        a.name, b.name, len(shared) / len(a.prints), len(shared) / len(b.prints), len(shared),
        files, _function_matches(a, b, shared),
    )  # fmt: skip
    pair.a_matched = _lines([(f.a_file, r.a_lines) for f in files for r in f.regions])
    pair.b_matched = _lines([(f.b_file, r.b_lines) for f in files for r in f.regions])
    return pair


def compare(
    rooms: dict[str, Path], threshold: float = DEFAULT_THRESHOLD, base: list[Path] | None = None
) -> Similarity:
    """The pairs of `rooms` that share a function, or at least `threshold` of either side,
    beyond the base (see the module docstring)."""
    loaded = load_base(list(base or []))
    found = {name: fingerprint(name, path, loaded) for name, path in sorted(rooms.items())}
    listed = list(found.values())
    pairs = []
    for i, a in enumerate(listed):
        for b in listed[i + 1 :]:
            if not a.prints or not b.prints:
                continue
            shared = a.prints.keys() & b.prints.keys()
            if not shared:
                continue
            pair = _pair(a, b, shared)
            if pair.shared_functions or max(pair.a_share, pair.b_share) >= threshold:
                pairs.append(pair)
    pairs.sort(key=lambda p: (-p.longest, -p.shared, p.a, p.b))
    return Similarity(threshold, loaded.names, found, pairs)
