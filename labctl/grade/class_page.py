"""`OUT/class.html`: the class at a glance, for the TA, written by `labctl grade class`.

One self-contained page (inline CSS and SVG, the report's Content-Security-Policy:
no script, no request), in the batch's language:

- the score distribution (a histogram of every learner's score, the late
  penalty and adjustments included: the gradebook's `score`), and the statuses;
- each rubric item's pass rate among the learners graded;
- the catalogued faults the class made, most made first, each with the learners
  whose diagnosis named it (`facts.verify.diagnosis` of each record, kind
  `fault`: the fault verify's diagnosis matched their failing function to);
- the similarity pairs as a graph (a node per learner in a pair, an edge per
  pair, its width the lines matched) with the functions each pair shares, when
  the run compared the rooms (`--similarity`);
- late work, adjustments, base code and learners not graded, a row each.

Everything a learner wrote or named (ids, messages, file and function names) is
text here, never markup: control and bidi characters shown escaped, then HTML-escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from labctl.evidence.store import replace_atomically
from labctl.grade.basecode import flag
from labctl.grade.page import escaped as _e
from labctl.grade.page import page
from labctl.grade.rubric import Rubric
from labctl.grade.score import GRADED, Row
from labctl.i18n import N_, Msg, _

FILE = "class.html"
BINS = 10
LISTED = 6  # shared functions named per pair; similarity.html has them all
_STYLE = """
svg { max-width: 100%; height: auto; } svg text { font-family: system-ui, sans-serif; }
.bar { fill: #4a78b5; } .bar-zero { fill: #b00020; } .axis { stroke: #444; }
.edge { stroke: #b5554a; stroke-opacity: 0.7; } .node { fill: #4a78b5; }
.meter { display: inline-block; height: 0.7rem; background: #4a78b5; vertical-align: middle; }
.meter-back { display: inline-block; width: 8rem; background: #eee; margin-right: 0.4rem; }
td.learners { max-width: 40rem; }
"""


def _points(value: float) -> str:
    return f"{value:g}"


# ---- the score distribution ---------------------------------------------------------------


def _bin(value: float, top: float) -> int:
    # a bin's low edge belongs to it (8.2 of 82 is the second of 10): not lost to rounding
    at = 0 if top <= 0 else int(min(max(value, 0.0), top) * BINS / top + 1e-9)
    return min(at, BINS - 1)


def histogram(scores: Sequence[float], top: float, names: Sequence[str] = ()) -> str:
    """An SVG histogram of `scores` in BINS bins from 0 to `top` (the last holds `top`);
    each bar's tooltip names its learners (`names`, in the order of `scores`)."""
    counts = [0] * BINS
    who: list[list[str]] = [[] for _ in range(BINS)]
    for index, value in enumerate(scores):
        counts[_bin(value, top)] += 1
        if index < len(names):
            who[_bin(value, top)].append(names[index])
    width, height, left, bottom = 560, 220, 36, 40
    plot_w, plot_h = width - left - 10, height - bottom - 20
    tallest = max(counts) or 1
    bar = plot_w / BINS
    parts = [
        f'<svg viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" data-figure="scores">',
        f"<title>{_e(_('score distribution'))}</title>",
        f'<line class="axis" x1="{left}" y1="{20 + plot_h}" x2="{left + plot_w}" '
        f'y2="{20 + plot_h}"/>',
    ]
    for index, count in enumerate(counts):
        h = plot_h * count / tallest
        x = left + index * bar
        low, high = top * index / BINS, top * (index + 1) / BINS
        digits = 0 if top >= 2 * BINS else 1
        label = f"{_points(round(low, digits))}–{_points(round(high, digits))}"
        cls = "bar-zero" if index == 0 else "bar"
        parts.append(
            f'<rect class="{cls}" data-bin="{index}" data-count="{count}" x="{x + 2:.1f}" '
            f'y="{20 + plot_h - h:.1f}" width="{bar - 4:.1f}" height="{h:.1f}">'
            f"<title>{label}: {count}"
            + (f" ({_e(', '.join(who[index]))})" if who[index] else "")
            + "</title></rect>"
        )
        if count:
            parts.append(
                f'<text x="{x + bar / 2:.1f}" y="{20 + plot_h - h - 4:.1f}" font-size="12" '
                f'text-anchor="middle">{count}</text>'
            )
        parts.append(
            f'<text x="{x + bar / 2:.1f}" y="{20 + plot_h + 16}" font-size="10" '
            f'text-anchor="middle">{label}</text>'
        )
    parts.append(
        f'<text x="{left + plot_w / 2:.1f}" y="{height - 4}" font-size="12" '
        f'text-anchor="middle">{_e(_(Msg("score (of {top})", top=_points(top))))}</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def _scores(rows: Sequence[Row], rubric: Rubric) -> str:
    scores = [r.score for r in rows]
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row.status] = statuses.get(row.status, 0) + 1
    counted = ", ".join(f"{count} {_e(status)}" for status, count in sorted(statuses.items()))
    line = (
        Msg(
            "{learners} learners ({statuses}); mean {mean}, median {median} of {top}",
            learners=len(rows),
            statuses=counted,
            mean=_points(round(sum(scores) / len(scores), 2)),
            median=_points(round(_median(scores), 2)),
            top=_points(rubric.max_score),
        )
        if rows
        else Msg("no learner")
    )
    return (
        f'<section id="scores"><h2>{_e(_("Scores"))}</h2><p>{_(line)}</p>'
        f"<figure>{histogram(scores, rubric.max_score, [r.learner for r in rows])}<figcaption>"
        f"{_e(_('Every learner’s score, late penalty and adjustments included (the gradebook’s score); a learner not graded scores 0.'))}"
        f"</figcaption></figure></section>"
    )


# ---- each item's pass rate ----------------------------------------------------------------


def _items(rows: Sequence[Row], rubric: Rubric) -> str:
    graded = [r for r in rows if r.status == GRADED]
    body = []
    for item in rubric.items:
        passed = sum(1 for r in graded for i in r.items if i.id == item.id and i.passed)
        rate = passed / len(graded) if graded else 0.0
        body.append(
            f'<tr data-item="{_e(item.id)}" data-passed="{passed}" data-graded="{len(graded)}">'
            f'<td class="text">{_e(item.id)}</td><td class="text">{_e(item.kind)}</td>'
            f"<td>{_points(item.points)}</td><td class='text'>{_e(item.visibility)}</td>"
            f'<td class="text"><span class="meter-back"><span class="meter" '
            f'style="width:{rate * 100:.0f}%"></span></span>{passed} / {len(graded)} '
            f"({rate:.0%})</td></tr>"
        )
    head = "".join(
        f'<th class="text">{_e(_(h))}</th>'
        for h in (
            N_("item"),
            N_("kind"),
            N_("points"),
            N_("visibility"),
            N_("passed (of the learners graded)"),
        )
    )
    return (
        f'<section id="items"><h2>{_e(_("Rubric items"))}</h2>'
        f"<table><tr>{head}</tr>{''.join(body)}</table></section>"
    )


# ---- the faults the class made ------------------------------------------------------------


def class_faults(diagnoses: dict[str, list[dict]]) -> list[tuple[str, str, list[str]]]:
    """(fault, function, learners) for every catalogued fault a learner's diagnosis named,
    the most made first; `diagnoses` maps a learner to its diagnosis entries."""
    found: dict[tuple[str, str], list[str]] = {}
    for learner, entries in diagnoses.items():
        for entry in entries:
            if entry.get("kind") == "fault" and entry.get("fault"):
                key = (str(entry["fault"]), str(entry.get("function", "")))
                if learner not in found.setdefault(key, []):
                    found[key].append(learner)
    ranked = sorted(found.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [(fault, function, learners) for (fault, function), learners in ranked]


def _described(name: str) -> tuple[str, str]:
    """A catalogued fault's description and course section, translated ('' if unknown)."""
    from labctl import faults

    for fault in faults.for_contract(2):
        if fault.name == name:
            return _(fault.description), _(fault.course)
    return "", ""


def _faults(made: list[tuple[str, str, list[str]]]) -> str:
    title = f'<section id="faults"><h2>{_e(_("Faults the class made"))}</h2>'
    if not made:
        return (
            title + f"<p>{_e(_('no learner’s failure matched a catalogued fault'))}</p></section>"
        )
    head = "".join(
        f'<th class="text">{_e(_(h))}</th>'
        for h in (N_("fault"), N_("function"), N_("what is wrong"), N_("learners"), N_("who"))
    )
    body = []
    for fault, function, learners in made:
        description, course = _described(fault)
        said = _e(description) + (f'<br><span class="dim">{_e(course)}</span>' if course else "")
        body.append(
            f'<tr data-fault="{_e(fault)}" data-learners="{len(learners)}">'
            f'<td class="text">{_e(fault)}</td><td class="text">{_e(function)}</td>'
            f'<td class="text">{said}</td><td>{len(learners)}</td>'
            f'<td class="text learners">{", ".join(_e(n) for n in learners)}</td></tr>'
        )
    intro = _e(
        _(
            "The catalogued faults verify's diagnosis matched the class's failing functions to, "
            "the most made first, with the learners who made each."
        )
    )
    return title + f"<p>{intro}</p><table><tr>{head}</tr>{''.join(body)}</table></section>"


# ---- similarity as a graph ----------------------------------------------------------------


def graph(pairs: Sequence) -> str:
    """The pairs as an SVG graph: a node per learner on a circle, an edge per pair."""
    names = sorted({n for p in pairs for n in (p.a, p.b)})
    size, radius = 520, 180
    centre = size / 2
    place = {
        name: (
            centre + radius * math.cos(2 * math.pi * i / len(names) - math.pi / 2),
            centre + radius * math.sin(2 * math.pi * i / len(names) - math.pi / 2),
        )
        for i, name in enumerate(names)
    }
    heaviest = max((max(p.a_matched, p.b_matched) for p in pairs), default=1) or 1
    parts = [
        f'<svg viewBox="0 0 {size} {size}" width="{size}" '
        f'height="{size}" role="img" data-figure="similarity">',
        f"<title>{_e(_('similar clean rooms'))}</title>",
    ]
    for pair in pairs:
        (x1, y1), (x2, y2) = place[pair.a], place[pair.b]
        weight = 1.5 + 6 * max(pair.a_matched, pair.b_matched) / heaviest
        shared = ", ".join(sorted({m.a_function for m in pair.shared_functions}))
        tip = f"{pair.a} ~ {pair.b}" + (f": {shared}" if shared else "")
        parts.append(
            f'<line class="edge" data-a="{_e(pair.a)}" data-b="{_e(pair.b)}" x1="{x1:.1f}" '
            f'y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke-width="{weight:.1f}">'
            f"<title>{_e(tip)}</title></line>"
        )
    for name, (x, y) in place.items():
        anchor = "start" if x >= centre else "end"
        dx = 9 if x >= centre else -9
        parts.append(
            f'<circle class="node" data-learner="{_e(name)}" cx="{x:.1f}" cy="{y:.1f}" r="6">'
            f"<title>{_e(name)}</title></circle>"
            f'<text x="{x + dx:.1f}" y="{y + 4:.1f}" font-size="12" '
            f'text-anchor="{anchor}">{_e(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _similarity(found) -> str:
    title = f'<section id="similarity"><h2>{_e(_("Similar clean rooms"))}</h2>'
    if found is None:
        return title + (
            f"<p>{_e(_('not compared in this run: grade with --similarity to see the pairs'))}"
            "</p></section>"
        )
    if not found.pairs:
        return title + f"<p>{_e(_('no pair of clean rooms above the threshold'))}</p></section>"
    from labctl.grade.similarity_report import headline

    rows = []
    for pair in found.pairs:
        shared = "; ".join(
            f"{_e(m.a_function)} ({_e(m.a_file)} {m.a_lines[0]}-{m.a_lines[1]} ~ "
            f"{_e(m.b_file)} {m.b_lines[0]}-{m.b_lines[1]})"
            for m in pair.shared_functions[:LISTED]
        )
        more = len(pair.shared_functions) - LISTED
        if more > 0:
            shared += " " + _e(_(Msg("(and {n} more in similarity.html)", n=more)))
        rows.append(
            f'<tr data-pair="{_e(pair.a)} ~ {_e(pair.b)}"><td class="text">{_e(headline(pair))}'
            f'</td><td class="text">{shared or _e(_("no whole function"))}</td></tr>'
        )
    head = f'<tr><th class="text">{_e(_("pair"))}</th><th class="text">{_e(_("shared functions"))}</th></tr>'
    note = _e(
        _(
            "An edge joins two learners whose clean rooms match beyond the base code; the wider, "
            "the more lines. similarity.html shows each match side by side."
        )
    )
    return (
        title
        + f"<figure>{graph(found.pairs)}<figcaption>{note}</figcaption></figure>"
        + f"<table>{head}{''.join(rows)}</table></section>"
    )


# ---- late work, adjustments, base code, learners not graded --------------------------------


def _glance(rows: Sequence[Row]) -> str:
    title = f'<section id="glance"><h2>{_e(_("Late work, adjustments and flags"))}</h2>'
    body = []
    for row in rows:
        late = row.late
        late_cell = "" if late is None or late.label() == "on-time" else late.label()
        adjusted = sum(a["points"] for a in row.adjustments)
        reasons = " | ".join(a["reason"] for a in row.adjustments)
        based = flag(row.base_code)
        if not (late_cell or row.adjustments or based or row.status != GRADED):
            continue
        body.append(
            f'<tr data-learner="{_e(row.learner)}"><td class="text">{_e(row.learner)}</td>'
            f'<td class="text">{_e(row.status)}</td><td>{_points(row.score)}</td>'
            f'<td class="text">{_e(late_cell)}</td>'
            f"<td>{_points(row.late_penalty) if late_cell else ''}</td>"
            f"<td>{f'{adjusted:+g}' if row.adjustments else ''}</td>"
            f'<td class="text">{_e(reasons)}</td><td class="text">{_e(based)}</td>'
            f'<td class="text">{_e(row.diagnosis) if row.status != GRADED else ""}</td></tr>'
        )
    if not body:
        return title + f"<p>{_e(_('no late work, adjustment or flag'))}</p></section>"
    head = "".join(
        f'<th class="text">{_e(_(h))}</th>'
        for h in (
            N_("learner"),
            N_("status"),
            N_("score"),
            N_("late"),
            N_("late penalty"),
            N_("adjustment"),
            N_("reasons"),
            N_("base code (no points)"),
            N_("why not graded"),
        )
    )
    return title + f"<table><tr>{head}</tr>{''.join(body)}</table></section>"


def document(
    rows: Sequence[Row], rubric: Rubric, diagnoses: dict[str, list[dict]], found=None
) -> str:
    title = _("labctl grade: the class")
    sections = [
        _scores(rows, rubric),
        _items(rows, rubric),
        _faults(class_faults(diagnoses)),
        _similarity(found),
        _glance(rows),
    ]
    rubric_line = _e(_(Msg("rubric {rubric}", rubric=rubric.name)))
    return page(title, _STYLE, f"<p>{rubric_line}</p>\n{''.join(sections)}")


def _diagnoses(out: Path, rows: Sequence[Row], stems: Sequence[str]) -> dict[str, list[dict]]:
    """Each learner's diagnosis entries, from its record (the facts verify gave)."""
    from labctl.grade.records import read_record

    found: dict[str, list[dict]] = {}
    for row, stem in zip(rows, stems, strict=True):
        record = read_record(out, stem) or {}
        facts = record.get("facts") or {}
        entries = (facts.get("verify") or {}).get("diagnosis") or []
        found[row.learner] = [e for e in entries if isinstance(e, dict)]
    return found


def write_class_page(batch, rubric: Rubric, found, out: Path) -> Path:
    """`OUT/class.html` for the batch (its rows, its records' diagnoses, the similarity
    found or None), written atomically."""
    stems = [learner.stem for learner in batch.learners]
    page = document(batch.rows, rubric, _diagnoses(out, batch.rows, stems), found)
    path = out / FILE
    replace_atomically(path, page.encode("utf-8"))
    return path
