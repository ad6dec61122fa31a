"""The report's figures, planned and drawn before its page is written: in parallel on Linux.

Drawing is most of `labctl report`'s time (about 65 figures, 0.1 s to 0.5 s each on one
core). Each figure is drawn alone from its record's values (`labctl.report.plots`), so the
figures can be drawn in any order, by any process, into the same bytes. On Linux they are
shared out among children forked from this process (matplotlib already imported: nothing is
loaded again), one per core the process may use, at most `MAX_CHILDREN`; each sends its
SVGs back through a pipe and exits. A child that fails, for whatever reason, has its figures
drawn here, one by one, as they are where no child is forked: what it would have raised is
raised here, where it can be reported.

A fork copies only the thread that calls it: a lock another thread held then (the terminal's
spinner writing to stderr) stays held in the child. So a child touches nothing of the parent's
but matplotlib and the figures: its stdout and stderr are new files on /dev/null, warnings
are off, and it ends with `os._exit` (no `atexit`, no buffer of the parent's flushed twice).
"""

from __future__ import annotations

import contextlib
import marshal
import os
import signal
import sys
import warnings
from dataclasses import dataclass, field

from labctl.report import plots
from labctl.report.collect import Figure, LabRun

MAX_CHILDREN = 8
# Relative drawing times (one core, this machine): a heatmap group takes about three times
# a line plot, which takes a little more than a bar plot. Shares are balanced by these.
_WEIGHT = {"heatmaps": 3.0, "line": 1.2, "bar": 1.0}


@dataclass
class Entry:
    """One figure of a lab's section: a heatmap group, or a table drawn as `how` (None: the
    table alone)."""

    kind: str  # heatmaps | table
    figures: list[Figure] = field(default_factory=list)
    how: str | None = None  # line | bar | None, for a table

    @property
    def drawn(self) -> bool:
        return self.kind == "heatmaps" or self.how is not None


def plan(run: LabRun) -> list[Entry]:
    """`run`'s figures in the order the report shows them: a heatmap group where its first
    heatmap is, each table where it is."""
    entries: list[Entry] = []
    groups: dict[str, Entry] = {}
    for figure in run.figures:
        if figure.kind == "heatmap":
            if figure.name not in groups:
                groups[figure.name] = Entry("heatmaps")
                entries.append(groups[figure.name])
            groups[figure.name].figures.append(figure)
        elif figure.kind == "table":
            how = "line" if plots.plottable(figure) else "bar" if plots.bars(figure) else None
            entries.append(Entry("table", [figure], how))
    return entries


def draw(entry: Entry) -> bytes | None:
    """The entry's SVG; None for a table that is shown as a table only."""
    if entry.kind == "heatmaps":
        return plots.heatmaps(entry.figures)
    if entry.how == "line":
        return plots.line_plot(entry.figures[0])
    if entry.how == "bar":
        return plots.bar_plot(entry.figures[0])
    return None


def draw_all(entries: list[Entry], children: int | None = None) -> list[bytes | None]:
    """Every entry's SVG, in `entries`' order; `children`: how many processes to fork
    besides this one (default: one per usable core less this one, at most MAX_CHILDREN)."""
    results: list[bytes | None] = [None] * len(entries)
    todo = [i for i, entry in enumerate(entries) if entry.drawn]
    if children is None:
        children = _cores() - 1
    children = max(0, min(children, MAX_CHILDREN, len(todo) - 1))
    if not hasattr(os, "fork") or sys.platform != "linux":
        children = 0
    shares = _shares(todo, entries, children + 1)
    forked: list[tuple[int, int, list[int]]] = []
    try:
        for share in shares[1:]:
            forked.append(_fork(share, entries))
        for i in shares[0]:
            results[i] = draw(entries[i])
        while forked:
            pid, reader, share = forked.pop(0)
            pairs = _received(pid, reader, share)
            if pairs is None:  # the child failed: its share drawn here, its error raised here
                pairs = [(i, draw(entries[i])) for i in share]
            for i, svg in pairs:
                results[i] = svg
    finally:
        # what an exception here left running: stopped, and reaped (its pid is not reused
        # before that, so the signal reaches no other process)
        for pid, reader, _share in forked:
            with contextlib.suppress(OSError):
                os.close(reader)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    return results


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _shares(todo: list[int], entries: list[Entry], count: int) -> list[list[int]]:
    """`todo` in `count` shares of about equal drawing time: heaviest first, each to the
    lightest share so far; each share keeps the report's order."""
    shares: list[list[int]] = [[] for _ in range(count)]
    loads = [0.0] * count
    weight = {i: _WEIGHT[entries[i].how or entries[i].kind] for i in todo}
    for i in sorted(todo, key=lambda i: -weight[i]):
        lightest = loads.index(min(loads))
        shares[lightest].append(i)
        loads[lightest] += weight[i]
    return [sorted(share) for share in shares]


def _fork(share: list[int], entries: list[Entry]) -> tuple[int, int, list[int]]:
    reader, writer = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns of a fork in a process with threads; the child is made not to
        # need what another thread may hold (see the module's docstring).
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: draw, send, end
        code = 1
        try:
            os.close(reader)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115
            warnings.simplefilter("ignore")
            drawn = marshal.dumps([(i, draw(entries[i])) for i in share])
            with os.fdopen(writer, "wb") as pipe:
                pipe.write(drawn)
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    return pid, reader, share


def _received(pid: int, reader: int, share: list[int]) -> list | None:
    """The child's (index, svg) pairs once it has ended (its pipe closed, its pid reaped);
    None when it did not send them whole."""
    chunks = []
    try:
        with os.fdopen(reader, "rb") as pipe:
            while chunk := pipe.read(1 << 20):
                chunks.append(chunk)
    finally:
        _pid, status = os.waitpid(pid, 0)
    if status != 0:
        return None
    try:
        pairs = marshal.loads(b"".join(chunks))
    except (ValueError, EOFError, TypeError):
        return None
    return pairs if sorted(i for i, _svg in pairs) == share else None
