"""The report as one self-contained HTML document: CSS inline, figures as data: SVGs that
carry their own glyphs, the subset of a CJK font its text needs embedded (`glyphs`), a
Content-Security-Policy that forbids every fetch, so it opens offline, reads on a machine
with no CJK font, and leaks nothing."""

from __future__ import annotations

import base64
import html
import math
from collections.abc import Callable

import labctl
from labctl import registry
from labctl.i18n import _, implementation, language
from labctl.lab import shown_expected
from labctl.report import glyphs, plots
from labctl.report.collect import Evidence, Figure, LabRun, margin, message
from labctl.report.drawing import Entry, draw_all, plan
from labctl.results import REFERENCE_OFF_DEFAULTS, reference_failures

CSP = "default-src 'none'; img-src data:; font-src data:; style-src 'unsafe-inline'"

CSS = """
body { font-family: "EMBEDDED", system-ui, "Noto Sans CJK SC", sans-serif; margin: 2rem auto;
  max-width: 72rem; padding: 0 1rem; color: #222; }
h1 { font-size: 1.6rem; } h2 { border-bottom: 1px solid #ccc; margin-top: 2.5rem; }
table { border-collapse: collapse; margin: 0.6rem 0; font-size: 0.85rem; }
th, td { border: 1px solid #ddd; padding: 0.2rem 0.5rem; text-align: right; }
th { background: #f4f4f4; } td.text, th.text { text-align: left; }
.pass { color: #176b2c; font-weight: bold; } .fail { color: #b00020; font-weight: bold; }
.info { color: #666; } .flag { background: #fff4ce; padding: 0.3rem 0.6rem; }
.changed { background: #fff4ce; border-left: 4px solid #e0a800; padding: 0.3rem 0.6rem; }
figure { margin: 1rem 0; } figcaption { font-size: 0.9rem; color: #444; }
img { max-width: 100%; } details { margin: 0.3rem 0 1rem; } .dim { color: #777; }
""".replace("EMBEDDED", glyphs.EMBEDDED)


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _verdict(passed: bool | None) -> str:
    if passed is None:
        return f'<span class="info">{_e(_("info"))}</span>'
    return (
        f'<span class="pass">{_e(_("pass"))}</span>'
        if passed
        else f'<span class="fail">{_e(_("FAIL"))}</span>'
    )


def _num(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.6g}" if 1e-3 <= abs(value) < 1e6 else f"{value:.3e}"


def _cell(text: str) -> str:
    """A table cell as kept (CSV numbers carry 17 digits), shown as the terminal shows it."""
    try:
        value = float(text)
    except ValueError:
        return text
    return _num(value) if len(text) > 10 else text


def _img(svg: bytes, alt: str) -> str:
    data = base64.b64encode(svg).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/svg+xml;base64,{data}">'


def _table(columns: list[str], rows: list[list[str]], numeric: list[bool] | None = None) -> str:
    numeric = numeric or [False] * len(columns)
    head = "".join(
        f'<th class="{"" if n else "text"}">{_e(c)}</th>'
        for c, n in zip(columns, numeric, strict=False)
    )
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{"" if n else "text"}">{c}</td>'
            for c, n in zip(row, numeric + [False] * len(row), strict=False)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _metrics(run: LabRun) -> str:
    columns = [_("metric"), _("impl"), _("actual"), _("expected"), _("margin"), _("verdict")]
    rows = []
    for m in run.record.metrics:
        inside = margin(m.actual, m.expected)
        timing = f' <span class="dim">({_e(_("timing"))})</span>' if m.timing else ""
        verdict = (
            f'<span class="dim">{_e(_("reported only"))}</span>' if m.timing else _verdict(m.passed)
        )
        rows.append(
            [
                f"<code>{_e(m.name)}</code>{timing}",
                _e(_(implementation(m.impl)) if m.impl else ""),
                _e(_num(m.actual)),
                f"<code>{_e(_(shown_expected(m.expected)))}</code>",
                _e(_num(inside)),
                verdict,
            ]
        )
    table = _table(columns, rows, [False, False, True, False, True, False])
    errors = [m for m in run.record.metrics if m.name.endswith("max_error") and not m.timing]
    worst = max(errors, key=lambda m: m.actual, default=None)
    line = ""
    if worst is not None:
        line = (
            "<p>"
            + _e(
                _("largest error: {value} ({name}, {impl}), tolerance {expected}").format(
                    value=_num(worst.actual),
                    name=worst.name,
                    impl=_(implementation(worst.impl)) if worst.impl else "",
                    expected=_(shown_expected(worst.expected)),
                )
            )
            + "</p>"
        )
    note = (
        "<p class='dim'>"
        + _e(_("margin: how far the value lies inside its tolerance (negative: outside)."))
        + "</p>"
    )
    return table + line + note


def _heatmap_values(figure: Figure) -> str:
    cols = (
        figure.col_ticks
        if len(figure.col_ticks) == len(figure.matrix[0] if figure.matrix else [])
        else [str(j) for j in range(len(figure.matrix[0]) if figure.matrix else 0)]
    )
    rows = [
        [_e(figure.row_ticks[i] if len(figure.row_ticks) == len(figure.matrix) else i)]
        + [_e(f"{v:.4f}") for v in row]
        for i, row in enumerate(figure.matrix)
    ]
    table = _table(
        [f"{figure.row_label}\\{figure.col_label}", *cols], rows, [True] * (len(cols) + 1)
    )
    summary = _("values ({impl})").format(impl=figure.impl or figure.name)
    return (
        f'<details data-heatmap="{_e(figure.name)}" data-impl="{_e(figure.impl)}">'
        f"<summary>{_e(summary)}</summary>{table}</details>"
    )


def _figures(run: LabRun, drawn: list[tuple[Entry, bytes | None]]) -> str:
    parts = []
    for entry, svg in drawn:
        if entry.kind == "heatmaps":
            group = entry.figures
            caption = " | ".join(f.title for f in group)
            parts.append(
                f"<figure>{_img(svg, caption)}"
                f"<figcaption>{_e(caption)}</figcaption></figure>"
                + "".join(_heatmap_values(f) for f in group)
            )
        else:
            table_figure = entry.figures[0]
            numeric = [
                all(plots.number(r[j]) is not None for r in table_figure.rows if j < len(r))
                for j in range(len(table_figure.columns))
            ]
            table = _table(
                table_figure.columns,
                [[_e(_cell(c)) for c in r] for r in table_figure.rows],
                numeric,
            )
            shown = _img(svg, table_figure.title) if svg is not None else ""
            parts.append(
                f"<figure>{shown}<figcaption>{_e(table_figure.title)}</figcaption>{table}</figure>"
            )
    notes = [f for f in run.figures if f.kind == "note"]
    if notes:
        parts.append(
            "<ul>"
            + "".join(f'<li class="{"flag" if n.flag else ""}">{_e(n.title)}</li>' for n in notes)
            + "</ul>"
        )
    return "".join(parts)


def _lab(run: LabRun, drawn: list[tuple[Entry, bytes | None]]) -> str:
    known = {lab.id: lab for lab in registry.discover()}
    lab = known.get(run.lab_id)
    info = run.record.labctl
    title = _(lab.title) if lab else run.lab_id
    parts = [
        f'<section class="lab" id="lab-{_e(run.lab_id)}" data-lab="{_e(run.lab_id)}">',
        f"<h2>{_e(run.lab_id)}: {_e(title)} {_verdict(run.passed)}</h2>",
    ]
    if lab:
        parts.append(f"<p>{_e(_(lab.question))}</p>")
        parts.append(
            f'<p class="dim">{_e(_("course"))}: '
            + _e("; ".join(str(s) for s in lab.sections))
            + "</p>"
        )
    parts.append(
        f'<p class="dim">{_e(_("seed"))} {run.record.seed} · {_e(_("impl"))} '
        f"{_e(info.impl if info else '')} · {_e(run.record.verified_at)} · "
        f"<code>{_e(' ; '.join(run.record.commands))}</code></p>"
    )
    if run.changed_params and info and info.params is not None:
        default = lab.params().model_dump() if lab else {}
        changed = ", ".join(
            f"{k}={v}" for k, v in info.params.items() if k in default and _differs(default[k], v)
        )
        parts.append(
            '<p class="changed">'
            + _e(_("non-default parameters: {values}").format(values=changed or "?"))
            + "</p>"
        )
        blamed = reference_failures(run.record.metrics)
        if blamed:
            said = _(REFERENCE_OFF_DEFAULTS).format(metrics=", ".join(blamed))
            parts.append(f'<p class="changed">{_e(said)}</p>')
    if run.record.known_failures:
        parts.append(
            "<ul>"
            + "".join(f'<li class="fail">{_e(k)}</li>' for k in run.record.known_failures)
            + "</ul>"
        )
    for problem in run.problems:
        parts.append(f'<p class="fail">{_e(_(problem))}</p>')
    parts.append(_metrics(run))
    parts.append(_figures(run, drawn))
    parts.append("</section>")
    return "\n".join(parts)


def _differs(default: object, value: object) -> bool:
    if isinstance(default, tuple):
        default = ",".join(map(str, default))
    return default != value


def _environment(evidence: Evidence) -> str:
    rows = []
    seen = set()
    for run in evidence.runs:
        env = run.record.environment
        info = run.record.labctl
        key = (str(env), run.record.commit, info.version if info else "")
        if key in seen:
            continue
        seen.add(key)
        if isinstance(env, str):
            cells = [env, "", "", "", ""]
        else:
            cells = [env.python, env.numpy, env.torch, env.platform, env.device]
        rows.append(
            [_e(c) for c in cells]
            + [
                _e(info.version if info else ""),
                _e(info.tolerances if info else ""),
                _e(run.record.commit[:12]),
            ]
        )
    columns = [
        "python",
        "numpy",
        "torch",
        _("platform"),
        _("device"),
        "labctl",
        _("tolerances"),
        "commit",
    ]
    return f"<h2>{_e(_('Environment and versions'))}</h2>" + _table(columns, rows)


def _diagnosis(entry: dict) -> list[str]:
    """A verify run's diagnosis in the report's language, from the messages the history
    keeps beside the English sentences (a history written before it kept them: English)."""
    english = [str(s) for s in entry.get("diagnosis") or []]
    messages = entry.get("diagnosis_messages")
    if not isinstance(messages, list) or len(messages) != len(english):
        return english
    return [
        message(m) if isinstance(m, (dict, str)) else e
        for m, e in zip(messages, english, strict=True)
    ]


def _history(evidence: Evidence) -> str:
    if not evidence.verify_history:
        return (
            f"<h2>{_e(_('verify clean-room history'))}</h2><p class='dim'>"
            + _e(_("no verify runs recorded"))
            + "</p>"
        )
    rows = []
    previous = None
    for entry in evidence.verify_history:
        passed = entry.get("passed")
        fixed = previous is False and passed is True
        mark = " ← " + _("fixed") if fixed else ""
        rows.append(
            [
                _e(entry.get("verified_at", "")),
                _e(entry.get("path", "")),
                _verdict(passed if isinstance(passed, bool) else None) + _e(mark),
                _e(", ".join(entry.get("failing_functions") or [])),
                _e(_("; ").join(_diagnosis(entry))),
            ]
        )
        previous = passed
    columns = [_("when"), _("clean room"), _("verdict"), _("failing functions"), _("diagnosis")]
    return f"<h2>{_e(_('verify clean-room history'))}</h2>" + _table(columns, rows)


def _drawn(runs: list[LabRun]) -> list[list[tuple[Entry, bytes | None]]]:
    """Each run's figures with their SVGs, all drawn at once (in parallel where it can be)."""
    plans = [plan(run) for run in runs]
    svgs = iter(draw_all([entry for entries in plans for entry in entries]))
    return [[(entry, next(svgs)) for entry in entries] for entries in plans]


def document(evidence: Evidence, now: Callable[[], str]) -> str:
    """The whole report."""
    known = [lab.id for lab in registry.discover()]
    runs = sorted(
        evidence.runs,
        key=lambda r: (known.index(r.lab_id) if r.lab_id in known else len(known), r.lab_id),
    )
    passed = sum(1 for r in runs if r.passed)
    changed = [r.lab_id for r in runs if r.changed_params]
    summary_rows = [
        [
            f'<a href="#lab-{_e(r.lab_id)}">{_e(r.lab_id)}</a>',
            _verdict(r.passed),
            _e(_("non-default") if r.changed_params else ""),
            _e(r.record.verified_at),
        ]
        for r in runs
    ]
    summary = _table([_("lab"), _("verdict"), _("parameters"), _("when")], summary_rows)
    warning = ""
    if changed:
        warning = (
            '<p class="changed">'
            + _e(_("made with non-default parameters: {labs}").format(labs=", ".join(changed)))
            + "</p>"
        )
    unread = "".join(
        '<p class="fail">'
        + _e(_("{path}: not read: {why}").format(path=str(u.path), why=_(u.why)))
        + "</p>"
        for u in evidence.unread
        if not u.on_run
    )
    title = _("labctl report")
    body = f"""<h1>{_e(title)}</h1>
<p class="dim">{_e(_("built {when} by labctl {version} from the evidence records on disk").format(when=now(), version=labctl.__version__))}</p>
<p>{_e(_("{passed}/{total} labs passed").format(passed=passed, total=len(runs)))}</p>
{warning}
{unread}
{summary}
{"".join(_lab(r, drawn) for r, drawn in zip(runs, _drawn(runs), strict=True))}
{_environment(evidence)}
{_history(evidence)}"""
    return f"""<!DOCTYPE html>
<html lang="{_e(language())}">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_e(CSP)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
<style>{glyphs.font_face(title + body)}{CSS}</style>
</head>
<body>
{body}
</body>
</html>
"""
