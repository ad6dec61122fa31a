"""The similarity report in `--out`: `similarity.json` and `similarity.html`, or neither.

`similarity.html` shows each listed pair, longest match first: the functions it
shares (name, file and lines of both sides), then every matching region side by
side, longest first, in the style of labctl's report (its CSS, its Content-Security-Policy
that forbids every script and fetch). Everything in it that a learner wrote
(code, file names, ids) is escaped: learner code is text here, never markup.
A run without `--similarity` removes both files, so no report from an earlier
run stands beside today's gradebook.
"""

from __future__ import annotations

from pathlib import Path

from labctl.evidence.store import replace_atomically
from labctl.grade.outputs import json_bytes
from labctl.grade.page import escaped as _e
from labctl.grade.page import page
from labctl.grade.similarity import PROJECT, STUBS, Pair, Room, Similarity
from labctl.i18n import _

FILES = ("similarity.json", "similarity.html")
# Lines of context shown around each matching region.
CONTEXT = 2
_STYLE = """
td.code { text-align: left; vertical-align: top; width: 50%; }
td.code pre { margin: 0; font-size: 0.8rem; white-space: pre-wrap; }
.match { background: #fff4ce; } .ln { color: #777; user-select: none; }
"""


def _name(name: str) -> str:
    return _(name) if name in (PROJECT, STUBS) else name


def _lines(room: Room, file: str, span: tuple[int, int]) -> str:
    lines = room.lines[room.files.index(file)]
    first, last = max(1, span[0] - CONTEXT), min(len(lines), span[1] + CONTEXT)
    shown_lines = []
    for number in range(first, last + 1):
        text = lines[number - 1] if number <= len(lines) else ""
        cls = "match" if span[0] <= number <= span[1] else ""
        shown_lines.append(
            f'<span class="{cls}"><span class="ln">{number:>4} </span>{_e(text)}</span>'
        )
    return "<pre>" + "\n".join(shown_lines) + "</pre>"


def headline(pair: Pair) -> str:
    """A pair in words, the same for both sides: who copied is not for labctl to say."""
    return _(
        "{a} ~ {b}: {a_lines} lines of {a} and {b_lines} lines of {b} match beyond the base"
    ).format(a=pair.a, b=pair.b, a_lines=pair.a_matched, b_lines=pair.b_matched)


def _span(lines: tuple[int, int]) -> str:
    return f"{lines[0]}-{lines[1]}"


def _functions(pair: Pair) -> str:
    shared = pair.shared_functions
    if not shared:
        return ""
    head = (
        f'<tr><th class="text">{_e(pair.a)}</th><th class="text">{_e(pair.b)}</th>'
        f"<th>{_e(_('fingerprints'))}</th></tr>"
    )
    rows = "".join(
        f'<tr><td class="text">{_e(m.a_function)} ({_e(m.a_file)} {_span(m.a_lines)})</td>'
        f'<td class="text">{_e(m.b_function)} ({_e(m.b_file)} {_span(m.b_lines)})</td>'
        f"<td>{m.fingerprints} / {m.a_prints} ~ {m.b_prints}</td></tr>"
        for m in shared
    )
    return f"<h3>{_e(_('shared functions'))}</h3><table>{head}{rows}</table>"


def _pair(index: int, pair: Pair, rooms: dict[str, Room]) -> str:
    a, b = rooms[pair.a], rooms[pair.b]
    parts = [f'<h2 id="pair-{index}">{index}. {_e(headline(pair))}</h2>', _functions(pair)]
    for match in pair.files:
        parts.append(
            "<table><tr>"
            f'<th class="text">{_e(pair.a)}: {_e(match.a_file)}</th>'
            f'<th class="text">{_e(pair.b)}: {_e(match.b_file)}</th></tr>'
        )
        for region in match.regions:
            parts.append(
                f'<tr><td class="code">{_lines(a, match.a_file, region.a_lines)}</td>'
                f'<td class="code">{_lines(b, match.b_file, region.b_lines)}</td></tr>'
            )
        parts.append("</table>")
    return "\n".join(parts)


def document(result: Similarity) -> str:
    base = ", ".join(_name(n) for n in result.base)
    intro = _(
        "Pairs of clean rooms that match beyond the base code ({base}), longest match first. "
        "A pair is listed when it shares a whole function, whatever its share of either room, "
        "or when its matches add up to {threshold:.0%} of either room's code. Both sides' "
        "matching lines are counted alike: which learner wrote the code first is not for "
        "labctl to say. For a person to judge: it changes no score."
    ).format(base=base, threshold=result.threshold)
    index = "".join(
        f'<li><a href="#pair-{i}">{_e(headline(p))}</a>'
        + (
            f" ({_e(', '.join(sorted({m.a_function for m in p.shared_functions})))})"
            if p.shared_functions
            else ""
        )
        + "</li>"
        for i, p in enumerate(result.pairs, 1)
    )
    pairs = "\n".join(_pair(i, p, result.rooms) for i, p in enumerate(result.pairs, 1))
    empty = "" if result.pairs else f"<p>{_e(_('no pair of clean rooms above the threshold'))}</p>"
    unread = "".join(
        "<li>"
        + _e(_("{room}: not read: {entries}").format(room=name, entries="; ".join(room.refused)))
        + "</li>"
        for name, room in result.rooms.items()
        if room.refused
    )
    if unread:
        unread = f"<ul>{unread}</ul>"
    title = _("labctl grade: similar clean rooms")
    return page(title, _STYLE, f"<p>{_e(intro)}</p>\n<ol>{index}</ol>\n{unread}\n{empty}\n{pairs}")


def write_report(result: Similarity, out: Path) -> list[Path]:
    """`similarity.json` and `similarity.html` under `out`, each written atomically."""
    json_path, html_path = (out / name for name in FILES)
    replace_atomically(json_path, json_bytes(result.to_json()))
    replace_atomically(html_path, document(result).encode("utf-8"))
    return [json_path, html_path]


def remove_stale(out: Path) -> list[Path]:
    """The similarity report of an earlier run removed; returns what was removed."""
    removed = []
    for name in FILES:
        path = out / name
        if path.is_symlink() or path.is_file():
            path.unlink()
            removed.append(path)
    return removed
