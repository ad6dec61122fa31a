"""Text wrapped to a terminal's width in cells, Chinese as well as English.

A terminal cell is the unit: a Chinese character (East Asian Wide or Fullwidth)
takes two, a Latin letter one (`rich.cells`, which the tables measure with too).
A line may start

- after a space (the space stays at the end of the line before, and is dropped);
- beside a Chinese character, with or without a space (Chinese has none to break at),

but never before closing punctuation (`，。、；：！？）」》…` and their ASCII kin) nor
after opening punctuation (`（「《“`): the rule of kinsoku, so no line starts with
`，` and no `（` is left at the end of one. A run of Latin letters, digits and code
punctuation (a word, an identifier, a path, a number) is never broken, unless it
alone is wider than the line: then it is folded at the line's width, as a terminal
would, and nothing is lost. Each line takes as much as fits (greedy), so Chinese
text fills its lines instead of breaking at its first ASCII space.

Every command's text goes through here (`labctl.cli.render`), and so do the stubs'
docstrings: one rule, one place.
"""

from __future__ import annotations

import re
from itertools import accumulate, pairwise

from rich.cells import get_character_cell_size

# Punctuation that may not start a line (closing), and that may not end one (opening).
CLOSING = "，。、；：！？）」』】》〉”’…·%,.;:!?)]}"
OPENING = "（「『【《〈“‘([{"
_WORD = re.compile(r"\S*")
SIGNS = frozenset(("=", "==", "!=", "<", ">", "<=", ">=", "≤", "≥", "≈", "×", "+", "-", "→", "->"))


def wide(char: str) -> bool:
    return get_character_cell_size(char) == 2


def may_break(text: str, i: int) -> bool:
    """Whether a line may start at `text[i]` (0 < i < len(text)). A space beside a lone sign
    is a break of last resort (`_may_break_at_a_sign`), taken before a word is folded."""
    before, here = text[i - 1], text[i]
    if here.isspace() or here in CLOSING or before in OPENING:
        return False
    if before.isspace():
        # a lone sign keeps its operands: `Hkv = 4`, `d ≤ 64` are read as one
        end = _WORD.match(text, i).end()
        stop = len(text[:i].rstrip())
        previous = text[max(text.rfind(" ", 0, stop), 0) : stop].strip()
        return text[i:end] not in SIGNS and previous not in SIGNS
    return wide(before) or wide(here)


def _may_break_at_a_sign(text: str, i: int) -> bool:
    """A space beside a lone sign: kept whole where the line has room (`Hkv = 4`), broken
    rather than fold a word of a long formula (`2 × n_layers × … × sizeof(dtype)`)."""
    before, here = text[i - 1], text[i]
    return before.isspace() and not here.isspace() and here not in CLOSING


def break_offsets(text: str, width: int, rest: int | None = None) -> list[int]:
    """Where to break one line of `text` (no newline in it): the first piece at most `width`
    cells, each later one at most `rest` (default `width`), trailing spaces not counted.

    Each break is the last place a line may start that fits; inside a word only when the word
    alone is wider than its line, and then at that line's width."""
    rest = width if rest is None else rest
    cells = [0, *accumulate(get_character_cell_size(c) for c in text)]
    starts = [i for i in range(1, len(text)) if may_break(text, i)]
    signs = [i for i in range(1, len(text)) if _may_break_at_a_sign(text, i)]

    def shown(a: int, b: int) -> int:
        """Cells of text[a:b] without its trailing spaces."""
        while b > a and text[b - 1].isspace():
            b -= 1
        return cells[b] - cells[a]

    offsets: list[int] = []
    start, limit, k = 0, max(width, 1), 0
    while shown(start, len(text)) > limit:
        while k < len(starts) and starts[k] <= start:
            k += 1
        cut = None
        j = k
        while j < len(starts) and shown(start, starts[j]) <= limit:
            cut = starts[j]
            j += 1
        if cut is None:  # beside a sign, rather than inside a word
            fitting = [i for i in signs if i > start and shown(start, i) <= limit]
            cut = fitting[-1] if fitting else None
        if cut is None:  # a word wider than the line: folded at the line's width
            cut = start + 1
            while cut < len(text) and cells[cut + 1] - cells[start] <= limit:
                cut += 1
        offsets.append(cut)
        start, limit = cut, max(rest, 1)
    return offsets


def unbreakable(text: str) -> int:
    """The widest piece of `text` that no line break may split, in cells: the narrowest
    width it wraps to without folding a word."""
    widest = 0
    for line in text.split("\n"):
        edges = [0, *(i for i in range(1, len(line)) if _may_break_at_a_sign(line, i)
                      or may_break(line, i)), len(line)]  # fmt: skip
        for a, b in pairwise(edges):
            widest = max(widest, _cells(line[a:b].rstrip()))
    return widest


def _cells(text: str) -> int:
    return sum(get_character_cell_size(c) for c in text)


def wrap(text: str, width: int, hang: int | None = None) -> list[str]:
    """`text` as lines of at most `width` cells (a word wider than that aside, folded).

    Each line of `text` wraps on its own; the lines it wraps into are indented by `hang`
    spaces, by default as far as the line itself is (a bullet's text stays under it)."""
    shown: list[str] = []
    for line in text.split("\n"):
        indent = len(line) - len(line.lstrip(" ")) if hang is None else hang
        indent = indent if indent < width // 2 else 0
        start = 0
        for cut in [*break_offsets(line, width, width - indent), len(line)]:
            piece = line[start:cut].rstrip()
            shown.append(piece if start == 0 else " " * indent + piece)
            start = cut
    return shown


def fill(text: str, width: int, hang: int | None = None) -> str:
    """`wrap`'s lines joined with newlines."""
    return "\n".join(wrap(text, width, hang))
