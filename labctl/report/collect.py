"""What a report shows, read from the evidence on disk: the newest run of each lab, its
figures (CSV and JSON Lines artifacts beside the record, checked against the record's
sha256), and the history of `verify clean-room`.

Nothing here draws or prints. An evidence root is `evidence/` (runs under `runs/`,
verify records under `verify/`) or a runs folder written by `labctl run --out DIR`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from labctl.errors import EvidenceError, UsageError
from labctl.evidence.findings import field_path
from labctl.evidence.models import EvidenceRecord
from labctl.evidence.parse import lone_surrogate
from labctl.evidence.times import parse_time
from labctl.evidence.validate import field_reason
from labctl.i18n import N_, Msg, _, declared
from labctl.inputfile import read_regular
from labctl.lab import parse_expected, satisfies

FIGURES_SUFFIX = "-figures.jsonl"
VERIFY = "verify"  # an evidence root's folder of verify records and their history
# A run record is a few kilobytes; one past this is no record labctl wrote.
MAX_RECORD_BYTES = 16 << 20


@dataclass
class Figure:
    """A figure as kept: its description (kind, title, labels) and its values from the CSV."""

    kind: str
    title: str
    name: str = ""
    impl: str = ""
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    matrix: list[list[float]] = field(default_factory=list)
    row_label: str = ""
    col_label: str = ""
    row_ticks: list[str] = field(default_factory=list)
    col_ticks: list[str] = field(default_factory=list)
    flag: bool = False


@dataclass
class LabRun:
    lab_id: str
    record: EvidenceRecord
    path: Path
    figures: list[Figure] = field(default_factory=list)
    # shown translated (`_()`), kept in English in --json
    problems: list[str | Msg] = field(default_factory=list)

    @property
    def passed(self) -> bool | None:
        return self.record.labctl.passed if self.record.labctl else None

    @property
    def changed_params(self) -> bool:
        info = self.record.labctl
        return bool(info and info.params_default is False)


@dataclass
class Unread:
    """A run record the report could not read, and why: named, never passed over in silence
    (an older record of its lab would be shown as if it were the newest)."""

    path: Path
    why: str | Msg  # shown translated, kept in English in --json
    # named on the run of its lab that the report shows (its lab's folder)
    on_run: bool = False


@dataclass
class Evidence:
    root: Path
    runs: list[LabRun]
    verify_history: list[dict]
    unread: list[Unread] = field(default_factory=list)


def message(data: object) -> str:
    """A kept message in the chosen language: plain text, or `{"msg": ..., "args": {...}}`."""
    if isinstance(data, dict) and isinstance(data.get("msg"), str):
        args = data.get("args") if isinstance(data.get("args"), dict) else {}
        values = {k: message(v) if isinstance(v, dict) else v for k, v in args.items()}
        try:
            # a Msg, so its values are shown as a message shows them (`impl`: 参考实现)
            return _(declared(data["msg"], **{str(k): v for k, v in values.items()}))
        except (KeyError, ValueError, IndexError, TypeError, AttributeError):
            return data["msg"]
    return _(str(data)) if data is not None else ""


def margin(actual: float, expected: str) -> float | None:
    """How far `actual` lies inside its tolerance (negative: outside); None for `==`."""
    text = expected.replace(" ", "")
    try:
        parse_expected(expected)
    except ValueError:
        return None
    if text.startswith("in["):
        lo, hi = (float(v) for v in text[3:-1].split(","))
        return min(actual - lo, hi - actual)
    for op in ("<=", ">=", "<", ">"):
        if text.startswith(op):
            bound = float(text[len(op) :])
            return bound - actual if op.startswith("<") else actual - bound
    return None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _figures(run: LabRun) -> None:
    """Read the figures beside `run`'s record; a missing or changed artifact is a problem."""
    folder = run.path.parent
    stem = run.path.name.removesuffix(".json")
    kept = {Path(a.path).name: a.sha256 for a in run.record.artifacts if not isinstance(a, str)}

    def read(name: str) -> str | None:
        path = folder / name
        if name not in kept or not path.is_file():
            run.problems.append(Msg("artifact {name} is missing", name=name))
            return None
        if kept[name] and _sha256(path) != kept[name]:
            run.problems.append(
                Msg("artifact {name} changed since the run (sha256 differs)", name=name)
            )
            return None
        try:
            return path.read_text("utf-8")
        except UnicodeDecodeError:
            run.problems.append(Msg("artifact {name} is not UTF-8 text", name=name))
            return None

    listing = f"{stem}{FIGURES_SUFFIX}"
    if listing not in kept:
        return  # a record of a labctl that did not keep its figures' descriptions
    text = read(listing)
    if text is None:
        return
    for number, line in enumerate(text.splitlines(), 1):
        try:
            data = json.loads(line)
        except ValueError:
            run.problems.append(Msg("artifact {name} is not JSON Lines", name=listing))
            return
        # A listing edited by hand (its sha256 stamped again) stopped the whole report with an
        # internal error; now the figure it spoils is named and the others are drawn.
        drawable = isinstance(data, dict) and lone_surrogate(data) is None
        figure = _figure(data, read) if drawable else _NOT_A_FIGURE
        if isinstance(figure, Figure):
            run.figures.append(figure)
        elif figure is _NOT_A_FIGURE:
            run.problems.append(
                Msg("artifact {name}, line {line}: not a figure labctl can draw", name=listing,
                    line=number)
            )  # fmt: skip


_NOT_A_FIGURE = object()


def _texts(value: object, shown=str) -> list[str] | None:
    return [shown(v) for v in value] if isinstance(value, list) else None


def _figure(data: dict, read) -> Figure | object | None:
    """The figure `data` describes; None for none to draw (a kind this labctl does not know,
    or a CSV `read` refused and named); _NOT_A_FIGURE for one that cannot be drawn."""
    kind = data.get("kind")
    if kind == "note":
        return Figure("note", message(data.get("text")), flag=bool(data.get("flag")))
    if kind not in ("heatmap", "table") or not isinstance(data.get("csv"), str):
        return None
    text = read(data["csv"])
    if text is None:
        return None
    cells = list(csv.reader(io.StringIO(text)))
    title = message(data.get("title"))
    if kind == "table":
        columns = _texts(data.get("columns", []), message)
        if columns is None:
            return _NOT_A_FIGURE
        return Figure("table", title, columns=columns, rows=cells[1:])
    try:
        matrix = [[float(v) for v in row] for row in cells]
    except ValueError:
        return _NOT_A_FIGURE
    row_ticks, col_ticks = _texts(data.get("row_ticks", [])), _texts(data.get("col_ticks", []))
    # matplotlib draws only a rectangle of numbers: ragged or empty ones were internal errors
    rectangle = bool(matrix and matrix[0]) and len({len(row) for row in matrix}) == 1
    if not rectangle or row_ticks is None or col_ticks is None:
        return _NOT_A_FIGURE
    return Figure(
        "heatmap",
        title,
        name=str(data.get("name", "")),
        impl=str(data.get("impl", "")),
        matrix=matrix,
        row_label=str(data.get("row_label", "")),
        col_label=str(data.get("col_label", "")),
        row_ticks=row_ticks,
        col_ticks=col_ticks,
    )


def _load(path: Path) -> EvidenceRecord | Unread:
    """The record at `path`, or why it cannot be read: a FIFO or a device named `*.json` is
    refused, not waited on or read without end."""
    try:
        raw = read_regular(path, MAX_RECORD_BYTES)
    except UsageError as exc:
        return Unread(path, exc.message)
    except OSError as exc:
        return Unread(path, Msg("cannot be read: {error}", error=exc.strerror or str(exc)))
    if raw is None:
        return Unread(path, Msg("larger than {size} MiB", size=MAX_RECORD_BYTES >> 20))
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        return Unread(path, Msg("not JSON"))
    surrogate = lone_surrogate(data)  # JSON's "\ud800": the page could not be written
    if surrogate is not None:
        return Unread(path, surrogate)
    try:
        return EvidenceRecord.model_validate(data, by_alias=True, by_name=False)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        loc = tuple(errors[0]["loc"])
        reason = field_reason(errors[0], loc)
        # a labctl validator's message is a declared text: translated where it is shown
        reason = declared(reason) if isinstance(reason, str) else reason
        first = Msg("{field}: {reason}", field=field_path(loc), reason=reason)
        if len(errors) == 1:
            return Unread(path, first)
        return Unread(path, Msg("{first}; {n} more problems", first=first, n=len(errors) - 1))


def _contradictions(run: LabRun) -> None:
    """A metric whose recorded verdict its own value and tolerance contradict: labctl never
    writes one, a hand edit does (`actual: 1e308`, `passed: true`), and the report showed
    "pass" beside it."""
    for metric in run.record.metrics:
        if isinstance(metric, str) or metric.passed is None or metric.timing:
            continue
        if satisfies(metric.actual, metric.expected) == metric.passed:
            continue
        said = (
            N_("metric {name} ({impl}) is recorded as passed, but {actual} is not {expected}: "
               "the record was edited")
            if metric.passed
            else N_("metric {name} ({impl}) is recorded as failed, but {actual} is {expected}: "
                    "the record was edited")
        )  # fmt: skip
        run.problems.append(
            declared(said, name=metric.name, impl=metric.impl or "", actual=repr(metric.actual),
                     expected=metric.expected)
        )  # fmt: skip


def _when(record: EvidenceRecord) -> float:
    moment = parse_time(record.verified_at)
    return moment.timestamp() if moment else -math.inf


def newest_runs(
    runs_folder: Path, others: frozenset[str] = frozenset()
) -> tuple[list[LabRun], list[Unread]]:
    """The newest run record of each lab under `runs_folder/<lab>/`, by lab id, and the
    records that could not be read; an unread record is also named on its lab's run.
    `others`: folders of `runs_folder` that hold no lab's runs (verify's)."""
    newest: dict[str, LabRun] = {}
    unread: list[Unread] = []
    for path in sorted(runs_folder.glob("*/*.json")):
        if path.parent.name in others:
            continue
        record = _load(path)
        if isinstance(record, Unread):
            unread.append(record)
            continue
        if record.labctl is None or record.labctl.lab is None:
            continue
        lab_id = record.labctl.lab
        current = newest.get(lab_id)
        if current is None or _when(record) >= _when(current.record):
            newest[lab_id] = LabRun(lab_id, record, path)
    runs = [newest[k] for k in sorted(newest)]
    for run in runs:
        _contradictions(run)
        for skipped in unread:
            if skipped.path.parent == run.path.parent:
                skipped.on_run = True
                run.problems.append(
                    Msg(
                        "record {name} was not read ({why}): the run shown may not be this "
                        "lab's newest",
                        name=skipped.path.name,
                        why=skipped.why,
                    )
                )
        _figures(run)
    return runs, unread


def collect(root: Path) -> Evidence:
    """The evidence under `root` (an evidence root, or a runs folder)."""
    if not root.is_dir():
        raise UsageError(Msg("--root {root}: no such directory", root=str(root)))
    runs_folder = root / "runs" if (root / "runs").is_dir() else root
    history_path = root / VERIFY / "history.jsonl"
    history = []
    if history_path.is_file():
        for line in history_path.read_text("utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and lone_surrogate(entry) is None:
                history.append(entry)
    # verify's records and reports lie in root/verify, beside the labs' folders when the
    # root is itself a runs folder: they are no lab's runs, not records the report failed
    runs, unread = newest_runs(
        runs_folder, frozenset({VERIFY}) if runs_folder == root else frozenset()
    )
    if not runs and not history and unread:
        first = unread[0]
        raise EvidenceError(
            Msg(
                "no readable evidence under {root}: {n} run records not read, the first "
                "{path}: {why}",
                root=str(root),
                n=len(unread),
                path=str(first.path),
                why=first.why,
            )
        )
    if not runs and not history:
        raise UsageError(
            Msg("no evidence under {root}: run `labctl run all` first", root=str(root))
        )
    return Evidence(root, runs, history, unread)
