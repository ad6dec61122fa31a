"""`labctl grade --similarity`: clean rooms compared as MOSS compares programs, for a person.

Winnowing (Schleimer, Wilkerson and Aiken, 2003: the method of MOSS). Each
`.py` file of a room (found as the loader's static scan finds them) is lexed by
Pygments; comments, docstrings and layout are dropped and every identifier
becomes one token, so renaming hides nothing. Every K consecutive tokens are
hashed, and in every window of W hashes the smallest is kept: the room's
fingerprints, each with its file and lines. Every match of K + W - 1 tokens
is found.

Base code never counts: every K-gram of the base (labctl's own clean room,
the `clean-room init` stubs, and each `--base DIR` a grader gives) is removed
from every room's fingerprints first, so code that everyone starts from, or
that labctl ships, matches no one. A pair shares the fingerprints both rooms
hold beyond the base; it is listed when that is at least `threshold` of either
room's own fingerprints, ranked by how many it shares, and its matches are
given per file: the file names and the line ranges of each side. Each room's
`base_share` says how much of it is base code (a copy of labctl's own room is
all base). Lexing never runs the learner's code; nothing here changes a score.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from labctl.i18n import N_
from labctl.isolation.loader import shown_name, source_files, walk_room

# The base's names in similarity.json; the CLI shows them translated.
PROJECT = N_("(labctl's own clean room)")
STUBS = N_("(the clean-room init stubs)")
DEFAULT_THRESHOLD = 0.5
K = 12  # tokens per hashed K-gram: a line or two of code
W = 8  # window: every match of K + W - 1 tokens is found
# Lines apart that still join one region; the locations kept of a fingerprint that repeats.
GAP = 3
MAX_PLACES = 4


@dataclass(frozen=True)
class Place:
    file: int  # index into the room's files
    first: int  # first and last line of the K-gram
    last: int


@dataclass
class Room:
    """A room's files (shown names, lines) and its fingerprints beyond the base."""

    name: str
    files: list[str] = field(default_factory=list)
    lines: list[list[str]] = field(default_factory=list)
    prints: dict[int, list[Place]] = field(default_factory=dict)
    total: int = 0  # fingerprints before the base was removed
    # Entries not read, as "path (kind)": a `.py` file past the loader's size (too-large),
    # bytecode, a link... (`loader.walk_room`): what the room's verify refuses it for.
    refused: list[str] = field(default_factory=list)

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
class Pair:
    a: str
    b: str
    a_share: float
    b_share: float
    shared: int  # fingerprints both rooms hold beyond the base
    files: list[FileMatch] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "a_share": round(self.a_share, 4),
            "b_share": round(self.b_share, 4),
            "matching_fingerprints": self.shared,
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
            "method": {"k": K, "window": W},
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


def _tokens(text: str) -> list[tuple[str, int]]:
    """(normalised token, line) for each token that carries code: identifiers as one token,
    no comment, docstring or layout."""
    from pygments.lexers.python import PythonLexer
    from pygments.token import Comment, Name, String, Text

    found = []
    line = 1
    for _, kind, value in PythonLexer().get_tokens_unprocessed(text):
        here = line
        line += value.count("\n")
        if kind in Comment or kind in Text or kind in String.Doc or not value.strip():
            continue
        found.append(("V" if kind in Name else value.strip(), here))
    return found


def _grams(tokens: list[tuple[str, int]]) -> list[tuple[int, int, int]]:
    """(hash, first line, last line) of every K-gram; the hash is stable across runs."""
    grams = []
    for start in range(len(tokens) - K + 1):
        window = tokens[start : start + K]
        text = "\x1f".join(t for t, _ in window).encode("utf-8", "surrogatepass")
        digest = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")
        grams.append((digest, window[0][1], window[-1][1]))
    return grams


def _winnow(grams: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The rightmost smallest hash of every window of W, each position kept once."""
    if len(grams) <= W:
        return [min(grams, key=lambda g: g[0])] if grams else []
    chosen: dict[int, tuple[int, int, int]] = {}
    for start in range(len(grams) - W + 1):
        window = grams[start : start + W]
        low = min(g[0] for g in window)
        at = start + max(i for i, g in enumerate(window) if g[0] == low)
        chosen[at] = grams[at]
    return [chosen[at] for at in sorted(chosen)]


def _read(path: Path) -> str:
    return path.read_text("utf-8", errors="replace")


def base_grams(extra: list[Path]) -> tuple[set[int], list[str]]:
    """Every K-gram hash of the base code, and the base's names."""
    from labctl.faults.base import project_clean_room
    from labctl.verify.stubs import init_source, module_source

    texts = [init_source(), module_source()]
    texts += [_read(p) for p in source_files(project_clean_room())]
    for folder in extra:
        texts += [_read(p) for p in source_files(folder)]
    hashes = {g[0] for text in texts for g in _grams(_tokens(text))}
    return hashes, [PROJECT, STUBS, *(str(p) for p in extra)]


def fingerprint(name: str, folder: Path, base: set[int]) -> Room:
    room = Room(name)
    walked = walk_room(folder)
    room.refused = [f"{path} ({kind})" for path, kind in walked.refused]
    for path in walked.sources:
        text = _read(path)
        room.files.append(shown_name(path.relative_to(folder).as_posix()))
        room.lines.append(text.splitlines())
        index = len(room.files) - 1
        for digest, first, last in _winnow(_grams(_tokens(text))):
            room.total += 1
            if digest in base:
                continue
            places = room.prints.setdefault(digest, [])
            if len(places) < MAX_PLACES:
                places.append(Place(index, first, last))
    return room


def _regions(points: list[tuple[Place, Place]]) -> list[Region]:
    """Matched K-grams of one file pair joined into line ranges of each side."""
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
    return regions


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
    files.sort(key=lambda f: (-f.fingerprints, f.a_file, f.b_file))
    return Pair(
        a.name, b.name, len(shared) / len(a.prints), len(shared) / len(b.prints), len(shared), files
    )


def compare(
    rooms: dict[str, Path], threshold: float = DEFAULT_THRESHOLD, base: list[Path] | None = None
) -> Similarity:
    """The pairs of `rooms` that share at least `threshold` of either side beyond the base."""
    hashes, names = base_grams(list(base or []))
    found = {name: fingerprint(name, path, hashes) for name, path in sorted(rooms.items())}
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
            if max(pair.a_share, pair.b_share) >= threshold:
                pairs.append(pair)
    pairs.sort(key=lambda p: (-p.shared, -max(p.a_share, p.b_share), p.a, p.b))
    return Similarity(threshold, names, found, pairs)
