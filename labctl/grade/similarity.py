"""`labctl grade --similarity`: clean rooms compared pairwise, for a person to judge.

The comparison is copydetect's (winnowing over Pygments tokens, the method of
MOSS; optional extra `labctl[grade]`): identifiers are replaced by their kind
before fingerprinting, so renaming variables does not hide a copy. Each clean
room is compared as one text (every `.py` file the loader could import, in
name order). The `clean-room init` stubs (`labctl.verify.stubs`) are
boilerplate: text every learner starts from matches no one. The project's own clean room ships with labctl, so it is
always one of the compared sources, under the name `(labctl's own clean room)`.

A pair is listed when either side's share of matching tokens reaches the
threshold, with the matching regions as line ranges of each side. It never
changes a score.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass, field
from pathlib import Path

from labctl.errors import UsageError
from labctl.i18n import N_
from labctl.isolation.loader import shown_name, source_files

# Its name in similarity.json; the CLI shows it translated (a learner id holds no parentheses).
PROJECT = N_("(labctl's own clean room)")
DEFAULT_THRESHOLD = 0.5
# copydetect's defaults: matches shorter than 25 filtered characters are noise; winnowing
# guarantees every match of 30 is found.
NOISE_T = 25
GUARANTEE_T = 30
_FILE = "clean_room.py"  # the language is read from this name


@dataclass
class Region:
    a_lines: tuple[int, int]
    b_lines: tuple[int, int]

    def to_json(self) -> dict:
        return {"a_lines": list(self.a_lines), "b_lines": list(self.b_lines)}


@dataclass
class Pair:
    a: str
    b: str
    a_share: float
    b_share: float
    tokens: int
    regions: list[Region] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "a_share": round(self.a_share, 4),
            "b_share": round(self.b_share, 4),
            "matching_tokens": self.tokens,
            "regions": [r.to_json() for r in self.regions],
        }


def _header(name: str) -> str:
    return f"# ---- {name}\n"


def room_text(room: Path) -> str:
    """Every `.py` file the loader could import, found as the static scan finds them (no link
    followed, the walk bounded), in name order."""
    parts = []
    for path in source_files(room):
        parts.append(_header(shown_name(path.relative_to(room).as_posix())))
        parts.append(path.read_text("utf-8", errors="replace"))
        parts.append("\n")
    return "".join(parts)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, max(0, offset)) + 1


def _regions(text_a: str, text_b: str, slices) -> list[Region]:
    starts_a, ends_a = slices[0]
    starts_b, ends_b = slices[1]
    regions = []
    for sa, ea, sb, eb in zip(starts_a, ends_a, starts_b, ends_b, strict=False):
        regions.append(
            Region(
                (_line(text_a, int(sa)), _line(text_a, int(ea) - 1)),
                (_line(text_b, int(sb)), _line(text_b, int(eb) - 1)),
            )
        )
    return regions


def compare(rooms: dict[str, Path], threshold: float = DEFAULT_THRESHOLD) -> list[Pair]:
    """The pairs of `rooms` (and labctl's own clean room) at or above `threshold`."""
    try:
        from copydetect import CodeFingerprint, compare_files
    except ImportError:
        raise UsageError(N_("--similarity needs copydetect: pip install 'labctl[grade]'")) from None
    from labctl.faults.base import project_clean_room
    from labctl.verify.stubs import init_source, module_source

    logging.getLogger("copydetect").setLevel(logging.ERROR)
    win = GUARANTEE_T - NOISE_T + 1
    # The stubs as `clean-room init` lays them out, and each file alone.
    stubs = {"__init__.py": init_source(), "transformer_block.py": module_source()}
    laid_out = "".join(f"{_header(name)}{text}\n" for name, text in stubs.items())
    boiler: set[int] = set()
    for text in (laid_out, *stubs.values()):
        boiler.update(CodeFingerprint(_FILE, NOISE_T, 1, fp=io.StringIO(text)).hashes)
    texts = {PROJECT: room_text(project_clean_room())}
    texts.update({name: room_text(path) for name, path in sorted(rooms.items())})
    prints = {
        name: CodeFingerprint(_FILE, NOISE_T, win, sorted(boiler), fp=io.StringIO(text))
        for name, text in texts.items()
    }
    names = list(prints)
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            tokens, (share_a, share_b), slices = compare_files(prints[a], prints[b])
            if tokens == 0 or max(share_a, share_b) < threshold:
                continue
            pairs.append(
                Pair(
                    a,
                    b,
                    float(share_a),
                    float(share_b),
                    int(tokens),
                    _regions(texts[a], texts[b], slices),
                )
            )
    pairs.sort(key=lambda p: (-max(p.a_share, p.b_share), p.a, p.b))
    return pairs
