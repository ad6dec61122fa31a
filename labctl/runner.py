"""`labctl run`: drive labs on the reference and a clean room, judge, keep evidence.

The runner opens the implementations once (the clean room in a worker
process), runs each lab's pure `run`, compares each measurement with its
metric's v1 tolerance, and writes one evidence record per lab. A clean room
that raises, hangs or crashes fails the lab that called it, by name; the
other labs still run.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import re
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import util
from pathlib import Path

from labctl import registry
from labctl.errors import CallError, LabctlError
from labctl.evidence.records import machine_record, metric_record, shown_path, write_artifact
from labctl.evidence.store import EvidenceStore, record_stem
from labctl.i18n import Msg
from labctl.isolation.sandbox import DEFAULT_TIMEOUT_S, CleanRoom
from labctl.lab import (
    IMPLS,
    HeatmapFigure,
    Implementation,
    Lab,
    LabContext,
    LabOutput,
    LabParams,
    Note,
    TableFigure,
    satisfies,
)

DEFAULT_SEED = 5
IMPL_CHOICES = ("reference", "clean-room", "both")


@dataclass(frozen=True)
class MetricResult:
    name: str
    impl: str
    actual: float
    expected: str
    passed: bool
    unit: str
    timing: bool
    note: str = ""

    @property
    def decides(self) -> bool:
        return not self.timing

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "impl": self.impl,
            "actual": self.actual,
            "expected": self.expected,
            "passed": self.passed,
            "unit": self.unit,
            "timing": self.timing,
            **({"note": self.note} if self.note else {}),
        }


@dataclass
class LabResult:
    lab: Lab
    metrics: list[MetricResult] = field(default_factory=list)
    figures: list[TableFigure | HeatmapFigure | Note] = field(default_factory=list)
    error: str | None = None
    wall_time_s: float = 0.0
    records: list[Path] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.error is None and all(m.passed for m in self.metrics if m.decides)

    def failures(self) -> list[str]:
        failed = [
            f"{m.name} ({m.impl}): {m.actual:.6g} does not satisfy {m.expected}"
            + (f" ({m.note})" if m.note else "")
            for m in self.metrics
            if m.decides and not m.passed
        ]
        return ([self.error] if self.error else []) + failed

    def to_json(self, relative: Callable[[Path], str]) -> dict:
        return {
            "id": self.lab.id,
            "title": self.lab.title,
            "sections": [str(s) for s in self.lab.sections],
            "passed": self.passed,
            "error": self.error,
            "wall_time_s": round(self.wall_time_s, 3),
            "metrics": [m.to_json() for m in self.metrics],
            "notes": [
                {"text": str(f.text), "flag": f.flag} for f in self.figures if isinstance(f, Note)
            ],
            "tables": [
                {
                    "title": str(f.title),
                    "columns": [str(c) for c in f.columns],
                    "rows": [[_cell(v) for v in row] for row in f.rows],
                }
                for f in self.figures
                if isinstance(f, TableFigure)
            ],
            "records": [relative(p) for p in self.records],
        }


@dataclass
class RunReport:
    labs: list[LabResult]
    seed: int
    impl: str
    clean_room: str | None
    wall_time_s: float

    @property
    def passed(self) -> bool:
        return all(lab.passed for lab in self.labs)

    def to_json(self, relative: Callable[[Path], str]) -> dict:
        return {
            "passed": self.passed,
            "seed": self.seed,
            "impl": self.impl,
            "clean_room": self.clean_room,
            "tolerances": registry.TOLERANCE_TABLE_VERSION,
            "wall_time_s": round(self.wall_time_s, 3),
            "labs": [lab.to_json(relative) for lab in self.labs],
        }


def default_clean_room() -> Path:
    """`clean_room/` in the current directory when it is a package, else the project's own."""
    local = Path("clean_room")
    if (local / "__init__.py").is_file():
        return local
    return Path(util.find_spec("labctl.clean_room").origin).parent


@contextlib.contextmanager
def implementations(
    impl: str,
    clean_room: Path | None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    isolation: str = "auto",
) -> Iterator[dict[str, Implementation]]:
    """The implementations `impl` asks for; the clean room lives in a worker until the block ends."""
    if impl not in IMPL_CHOICES:
        raise LabctlError(f"--impl must be one of {', '.join(IMPL_CHOICES)}")
    chosen: dict[str, Implementation] = {}
    with contextlib.ExitStack() as stack:
        if impl in ("reference", "both"):
            import torch

            from labctl import reference
            from labctl.reference.memory import peak_bytes

            # One thread, like the clean-room worker: float64 reductions then sum in one
            # order on every machine, and small ops do not pay for a thread pool.
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            stack.callback(torch.set_num_threads, threads)
            chosen["reference"] = Implementation("reference", reference, meter=peak_bytes)
        if impl in ("clean-room", "both"):
            room = stack.enter_context(
                CleanRoom(clean_room or default_clean_room(), timeout_s, isolation=isolation)
            )
            chosen["clean-room"] = Implementation("clean-room", room)
        yield chosen


def judge(lab: Lab, output: LabOutput, rows: set[str]) -> list[MetricResult]:
    """Attach each measurement's tolerance and verdict; a declared metric left unmeasured fails."""
    results = []
    for m in output.measurements:
        try:
            spec = lab.metric(m.name)
        except KeyError:
            raise LabctlError(
                f"lab {lab.id} reported a metric it does not declare: {m.name}"
            ) from None
        results.append(
            MetricResult(
                name=m.name,
                impl=m.impl,
                actual=m.actual,
                expected=spec.expected,
                passed=satisfies(m.actual, spec.expected),
                unit=spec.unit,
                timing=spec.timing,
                note=m.note,
            )
        )
    measured = {(m.name, m.impl) for m in output.measurements}
    for spec in lab.metrics:
        for row in spec.impls:
            if row in rows and (spec.name, row) not in measured:
                results.append(
                    MetricResult(
                        spec.name,
                        row,
                        math.nan,
                        spec.expected,
                        False,
                        spec.unit,
                        spec.timing,
                        "not measured",
                    )
                )
    return results


def run_lab(
    lab: Lab, seed: int, impls: dict[str, Implementation], params: LabParams | None = None
) -> LabResult:
    """Run one lab (with its default parameters unless given) and judge it; writes nothing."""
    rows = set(impls) | ({"both"} if all(name in impls for name in IMPLS) else set())
    result = LabResult(lab)
    start = time.perf_counter()
    try:
        output = lab.run(LabContext(params=params or lab.params(), seed=seed, impls=impls))
        result.metrics = judge(lab, output, rows)
        result.figures = output.figures
    except CallError as exc:
        result.error = f"clean room failed: {exc}"
    except LabctlError as exc:
        result.error = str(exc)
    except Exception as exc:
        if os.environ.get("LABCTL_DEBUG") == "1":
            raise
        result.error = f"lab crashed: {type(exc).__name__}: {exc}"
    result.wall_time_s = time.perf_counter() - start
    return result


def _artifact(figure: TableFigure | HeatmapFigure | Note) -> tuple[str, bytes] | None:
    """A figure as a CSV artifact (name, bytes): heatmaps as matrices, tables with a header."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if isinstance(figure, HeatmapFigure):
        writer.writerows([f"{v:.17g}" for v in row] for row in figure.matrix)
        return figure.name, buffer.getvalue().encode()
    if isinstance(figure, TableFigure):
        writer.writerow([str(c) for c in figure.columns])
        writer.writerows(
            [_cell(v) if isinstance(v, (str, Msg)) else f"{v:.17g}" for v in row]
            for row in figure.rows
        )
        slug = re.sub(r"[^a-z0-9]+", "-", str(figure.title).lower()).strip("-")[:48] or "table"
        return slug, buffer.getvalue().encode()
    return None


def _command(lab: Lab, seed: int, impl: str, clean_room: str | None) -> str:
    words = ["labctl", "run", lab.id, "--seed", str(seed), "--impl", impl]
    if clean_room and impl != "reference":
        words += ["--clean-room", clean_room]
    return shlex.join(words)


def write_evidence(
    result: LabResult, store: EvidenceStore, folder: Path, seed: int, impl: str, room: str | None
) -> None:
    """One record per lab (YAML and JSON) plus its figures as CSV; point the manifest at it."""
    stem = record_stem(seed)
    target = folder / result.lab.id
    artifacts = []
    for index, figure in enumerate(result.figures):
        found = _artifact(figure)
        if found is not None:
            name, data = found
            path, artifact = write_artifact(store, target, f"{stem}-{index}-{name}.csv", data)
            artifacts.append(artifact)
            result.records.append(path)
    record = machine_record(
        module=result.lab.id,
        seed=seed,
        command=_command(result.lab, seed, impl, room),
        metrics=[metric_record(m) for m in result.metrics if math.isfinite(m.actual)],
        artifacts=artifacts,
        known_failures=result.failures(),
        tolerances=registry.TOLERANCE_TABLE_VERSION,
        impl=impl,
        passed=result.passed,
        wall_time_s=result.wall_time_s,
        lab=result.lab.id,
        clean_room=room if impl != "reference" else None,
    )
    paths = store.write_record(target, stem, record)
    result.records[:0] = paths
    store.point_manifest(
        result.lab.id,
        {
            "record": store.relative(paths[1]),
            "verified_at": record.verified_at,
            "passed": result.passed,
            "seed": seed,
            "impl": impl,
        },
    )


def run_labs(
    ids: list[str],
    seed: int = DEFAULT_SEED,
    impl: str = "both",
    clean_room: Path | None = None,
    out: Path = Path("evidence/runs"),
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Callable[[Lab, int, int], None] | None = None,
    isolation: str = "auto",
) -> RunReport:
    """Run the labs named by `ids` (or `all`), write their evidence under `out`, and report."""
    labs = registry.resolve(ids)
    start = time.perf_counter()
    room_path = clean_room or (default_clean_room() if impl != "reference" else None)
    room = shown_path(room_path) if room_path else None
    store = EvidenceStore(out.parent)
    results = []
    with implementations(impl, room_path, timeout_s, isolation) as impls:
        for index, lab in enumerate(labs):
            if progress:
                progress(lab, index, len(labs))
            result = run_lab(lab, seed, impls)
            write_evidence(result, store, Path(out.name), seed, impl, room)
            results.append(result)
    return RunReport(results, seed, impl, room, time.perf_counter() - start)


def _cell(value):
    """A table cell as data: text (a `Msg` rendered in English) or the number as it is."""
    return str(value) if isinstance(value, Msg) else value
