"""The report's figures, drawn with matplotlib (Agg) into SVG bytes for inlining.

Text is drawn as paths (`svg.fonttype: path`) from fonts that ship with labctl's
dependencies (`labctl.report.glyphs`): a figure's Chinese reads on a machine with no CJK
font, and no font of the machine's or font cache decides how it looks. Only `labctl report` imports this module, so matplotlib stays out of every other
command. A heatmap group is drawn side by side (the clean room's cells that
differ from the reference's outlined); a table is drawn as a line plot when its
first column and at least one other are numeric (one line per numeric column, one
per text value when a text column names an implementation); anything else is
shown only as the HTML table beside it.
"""

from __future__ import annotations

import io
import math
import re
import unicodedata
import warnings

from labctl.i18n import _
from labctl.report import glyphs, measure
from labctl.report.collect import Figure

DIFFERS = 1e-9  # as the terminal: far above float64 rounding, far below what the eye sees
MAX_ANNOTATED = 12  # cells get their value written in them up to this many per side
# Columns of 9-point text along a line plot's y axis (3.8 in) and a bar plot's x axis (6.4 in,
# less the legend), with a margin: a quantity's label wraps past them.
Y_ROOM, X_ROOM = 40, 64


COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]  # fmt: skip
LINESTYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "x"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measure.install()
    families = glyphs.matplotlib_families()
    plt.rcParams.update(
        {
            "font.size": 9,
            # a list of families, not the generic `sans-serif`: matplotlib falls back from one
            # to the next for each glyph only through the list
            "font.family": families,
            # without the CJK font, text stays text for the browser's fonts to draw
            "svg.fonttype": "path" if len(families) > 1 else "none",
            # ids inside the SVG derive from this salt, not from a random one: same input,
            # same bytes
            "svg.hashsalt": "labctl",
        }
    )
    return plt


def _svg(fig) -> bytes:
    import matplotlib.pyplot as plt
    from matplotlib.backends.backend_svg import FigureCanvasSVG

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        # only without the CJK font (text left to the browser): a warning per glyph says nothing
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font")
        engine = fig.get_layout_engine()
        if engine is not None:
            # Laid out once here, measured by the SVG renderer as savefig's own layout pass
            # does, then saved with no engine: savefig draws a laid-out figure once, not a
            # second time (with drawing disabled) to lay it out: a fifth of the report's time.
            FigureCanvasSVG(fig)
            dpi = fig.dpi  # the SVG renderer measures at 72 dpi and leaves the figure so
            engine.execute(fig)
            fig.dpi = dpi
            with plt.rc_context(
                {"figure.autolayout": False, "figure.constrained_layout.use": False}
            ):
                fig.set_layout_engine(None)
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()


def style(index: int) -> dict:
    """The look of the `index`-th line: no two lines of a plot share colour, dash and marker."""
    return {
        "color": COLOURS[index % len(COLOURS)],
        "linestyle": LINESTYLES[(index // len(COLOURS)) % len(LINESTYLES)],
        "marker": MARKERS[index % len(MARKERS)],
    }


def _legend_outside(ax, count: int) -> None:
    """The legend right of the axes, never over the lines."""
    if count > 1:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)


def heatmaps(group: list[Figure]) -> bytes:
    """One name's heatmaps side by side, on one colour scale, with token/position ticks."""
    import numpy as np

    plt = _pyplot()
    reference = next((f for f in group if f.impl == "reference"), None)
    fig, axes = plt.subplots(
        1, len(group), figsize=(4.4 * len(group), 4.0), squeeze=False, layout="constrained"
    )
    values = [np.asarray(f.matrix, dtype=float) for f in group]
    finite = [v[np.isfinite(v)] for v in values]
    low = min((float(v.min()) for v in finite if v.size), default=0.0)
    high = max((float(v.max()) for v in finite if v.size), default=1.0)
    image = None
    for ax, figure, matrix in zip(axes[0], group, values, strict=True):
        image = ax.imshow(matrix, cmap="viridis", vmin=min(low, 0.0), vmax=max(high, 1e-12))
        rows, cols = matrix.shape if matrix.ndim == 2 else (0, 0)
        ax.set_title(figure.impl or figure.name)
        ax.set_xlabel(figure.col_label)
        ax.set_ylabel(figure.row_label)
        ax.set_xticks(range(cols), figure.col_ticks if len(figure.col_ticks) == cols else None)
        ax.set_yticks(range(rows), figure.row_ticks if len(figure.row_ticks) == rows else None)
        differ = _differing(matrix, reference, figure)
        for i in range(rows):
            for j in range(cols):
                if rows <= MAX_ANNOTATED and cols <= MAX_ANNOTATED:
                    shade = "black" if matrix[i, j] > (low + high) / 2 else "white"
                    ax.text(
                        j,
                        i,
                        f"{matrix[i, j]:.2f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color=shade,
                    )
                if (i, j) in differ:
                    ax.add_patch(
                        plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", lw=1.5)
                    )
    if image is not None:
        fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8)
    if any(_differing(v, reference, f) for v, f in zip(values, group, strict=True)):
        fig.text(
            0.01,
            0.0,
            _("red: differs from the reference by more than {tol:g}").format(tol=DIFFERS),
            fontsize=8,
            color="red",
        )
    return _svg(fig)


def _differing(matrix, reference: Figure | None, figure: Figure) -> set[tuple[int, int]]:
    import numpy as np

    if reference is None or reference is figure:
        return set()
    other = np.asarray(reference.matrix, dtype=float)
    if other.shape != matrix.shape:
        return {(i, j) for i in range(matrix.shape[0]) for j in range(matrix.shape[1])}
    return {tuple(ij) for ij in np.argwhere(~(np.abs(matrix - other) <= DIFFERS))}


def number(text: str) -> float | None:
    """A table cell as a number (`1,234`, `0.25`, `32x`), or None; `—` and blanks are None."""
    cleaned = text.strip().replace(",", "").removesuffix("x").removesuffix(" B").strip()
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def plottable(figure: Figure) -> bool:
    """A table with a numeric first column and at least one other numeric column."""
    return bool(_series(figure))


def _series(figure: Figure) -> list[tuple[str, list[float], list[float]]]:
    """(label, x, y) lines: each numeric column, split by the values of a text column if any."""
    rows = [r for r in figure.rows if len(r) == len(figure.columns)]
    if len(rows) < 2 or number(rows[0][0]) is None:
        return []
    if any(number(r[0]) is None for r in rows):
        return []
    numeric, text = [], []
    for j in range(1, len(figure.columns)):
        cells = [r[j] for r in rows]
        parsed = [number(c) for c in cells]
        blanks = [c.strip() in ("", "—", "-") for c in cells]
        if all(p is not None or b for p, b in zip(parsed, blanks, strict=True)) and any(
            p is not None for p in parsed
        ):
            numeric.append(j)
        else:
            text.append(j)
    if not numeric:
        return []
    names = _distinct(figure.columns)
    group_by = text[0] if text and len({r[text[0]] for r in rows}) <= 6 else None
    groups = sorted({r[group_by] for r in rows}) if group_by is not None else [None]
    lines = []
    for j in numeric:
        for group in groups:
            chosen = [r for r in rows if group is None or r[group_by] == group]
            points = [(number(r[0]), number(r[j])) for r in chosen]
            points = [(x, y) for x, y in points if y is not None]
            if points:
                label = names[j] + (f" — {group}" if group is not None else "")
                lines.append((label, [p[0] for p in points], [p[1] for p in points]))
    return lines


def _distinct(columns: list[str]) -> list[str]:
    """Column names as legend labels: a header used twice ("course" beside each quantity it
    gives the course's value of) is named with the column before it, so no two lines share a
    label."""
    names = []
    for j, column in enumerate(columns):
        if columns.count(column) > 1:
            before = next((c for c in reversed(columns[:j]) if c != column), "")
            column = f"{column} — {before.split(' (')[0]}" if before else column
        names.append(column)
    return names


def bars(figure: Figure) -> list[tuple[str, list[str], list[float]]]:
    """(column, labels, values) for a table of named rows (a text first column, at most
    24 rows) with numeric columns: what a parameter breakdown or a per-token table is."""
    rows = [r for r in figure.rows if len(r) == len(figure.columns)]
    if not 1 <= len(rows) <= 24 or all(number(r[0]) is not None for r in rows):
        return []
    found = []
    for j in range(1, len(figure.columns)):
        values = [number(r[j]) for r in rows]
        if all(v is not None for v in values):
            found.append((figure.columns[j], [r[0] for r in rows], values))
    return found


def bar_plot(figure: Figure) -> bytes:
    """Each numeric column as a group of horizontal bars, one per named row."""
    import numpy as np

    plt = _pyplot()
    series = bars(figure)
    labels = series[0][1]
    fig, ax = plt.subplots(
        figsize=(6.4, 0.6 + 0.32 * len(labels) * len(series)), layout="constrained"
    )
    height = 0.8 / len(series)
    rows = np.arange(len(labels))
    for k, (column, _labels, values) in enumerate(series):
        ax.barh(rows + k * height, values, height=height, label=column, color=style(k)["color"])
    ax.set_yticks(rows + height * (len(series) - 1) / 2, labels, fontsize=7)
    ax.invert_yaxis()
    magnitudes = [abs(v) for v in series[0][2] if v]
    if magnitudes and _wide(magnitudes):
        log_scale(ax, "x", 10)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_ylabel(figure.columns[0])
    ax.set_xlabel(_quantities([column for column, _labels, _values in series], X_ROOM))
    _legend_outside(ax, len(series))
    return _svg(fig)


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def log_scale(ax, which: str, base: int) -> None:
    """A log axis whose ticks read `10⁻³`: text with superscript digits, which looks as
    matplotlib's own `$10^{-3}$` does at a fraction of its cost (a mathtext label is parsed
    again at every layout pass: a third of the report's drawing time)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    (ax.set_xscale if which == "x" else ax.set_yscale)("log", base=base)
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(FuncFormatter(lambda value, _position: power(value, base)))
    # As matplotlib's own: an axis this wide (100x or more) labels no minor tick.
    axis.set_minor_formatter(NullFormatter())


def power(value: float, base: int) -> str:
    """A tick of a log axis as `base` to a power (`2⁵`, `10⁻³`); a tick that is no whole power
    as its value."""
    if value <= 0:
        return ""
    exponent = round(math.log(value, base))
    if not math.isclose(value, float(base) ** exponent, rel_tol=1e-9):
        return f"{value:g}"
    return f"{base}{str(exponent).translate(_SUPERSCRIPT)}"


def _wide(values: list[float]) -> bool:
    positive = [v for v in values if v > 0]
    return len(positive) == len(values) and max(positive) / min(positive) >= 100


def _quantities(labels: list[str], room: int) -> str:
    """What the values are: the distinct quantities plotted, each without its variant
    ("(impl)", ", no √", " — group"), joined by " / " in lines of at most `room` columns (a
    Chinese character takes two): a long list wraps along its axis, where in one line it ran
    past the figure's edge and was cut (by up to 140 px)."""
    lines: list[str] = []
    for stem in dict.fromkeys(re.split(r" — | \(|, ", label)[0] for label in labels):
        if lines and _columns(f"{lines[-1]} / {stem}") <= room:
            lines[-1] = f"{lines[-1]} / {stem}"
        elif lines:
            lines[-1] += " /"
            lines.append(stem)
        else:
            lines.append(stem)
    return "\n".join(lines)


def _columns(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def line_plot(figure: Figure) -> bytes:
    """Every numeric column against the first; log axes where the values span 100x or more."""
    plt = _pyplot()
    lines = _series(figure)
    fig, ax = plt.subplots(figsize=(7.6, 3.8), layout="constrained")
    for index, (label, x, y) in enumerate(lines):
        ax.plot(x, y, markersize=3, label=label, **style(index))
    xs = [v for _, x, _ in lines for v in x]
    ys = [v for _, _, y in lines for v in y]
    if xs and _wide(xs):
        log_scale(ax, "x", 2)
    if ys and _wide(ys):
        log_scale(ax, "y", 10)
    ax.set_xlabel(figure.columns[0])
    ax.set_ylabel(_quantities([label for label, _x, _y in lines], Y_ROOM))
    ax.grid(True, alpha=0.3)
    _legend_outside(ax, len(lines))
    return _svg(fig)
