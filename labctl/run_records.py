"""A lab run's evidence: one record per lab (YAML and JSON), its figures as CSV, and
their description as JSON Lines, which `labctl report` draws from; the manifest points
at the newest record of each lab."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shlex
from pathlib import Path

from labctl import registry
from labctl.evidence.models import CleanRoomInfo
from labctl.evidence.records import machine_record, metric_record, write_artifact
from labctl.evidence.store import EvidenceStore, record_stem
from labctl.i18n import Msg, message_data
from labctl.lab import HeatmapFigure, Lab, Note, TableFigure
from labctl.params import record_values
from labctl.results import LabResult

FIGURES_SUFFIX = "figures.jsonl"


def _artifact(figure: TableFigure | HeatmapFigure | Note) -> tuple[str, bytes] | None:
    """A figure as a CSV artifact (name, bytes): heatmaps as matrices, tables with a header."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if isinstance(figure, HeatmapFigure):
        writer.writerows([f"{v:.17g}" for v in row] for row in figure.matrix)
        name = f"{figure.name}-{figure.impl}" if figure.impl else figure.name
        return name, buffer.getvalue().encode()
    if isinstance(figure, TableFigure):
        writer.writerow([str(c) for c in figure.columns])
        writer.writerows(
            [str(v) if isinstance(v, (str, Msg)) else f"{v:.17g}" for v in row]
            for row in figure.rows
        )
        slug = re.sub(r"[^a-z0-9]+", "-", str(figure.title).lower()).strip("-")[:48] or "table"
        return slug, buffer.getvalue().encode()
    return None


def figure_data(figure: TableFigure | HeatmapFigure | Note, csv_name: str | None) -> dict:
    """What a report needs to draw a figure again: kind, title, labels, and its CSV's name."""
    if isinstance(figure, HeatmapFigure):
        return {
            "kind": "heatmap",
            "title": message_data(figure.title),
            "name": figure.name,
            "impl": figure.impl,
            "row_label": figure.row_label,
            "col_label": figure.col_label,
            "row_ticks": list(figure.row_ticks),
            "col_ticks": list(figure.col_ticks),
            "csv": csv_name,
        }
    if isinstance(figure, TableFigure):
        return {
            "kind": "table",
            "title": message_data(figure.title),
            "columns": [message_data(c) for c in figure.columns],
            "csv": csv_name,
        }
    return {"kind": "note", "text": message_data(figure.text), "flag": figure.flag}


def _command(
    lab: Lab, seed: int, impl: str, clean_room: str | None, changed: dict | None = None
) -> str:
    words = ["labctl", "run", lab.id, "--seed", str(seed), "--impl", impl]
    if clean_room and impl != "reference":
        words += ["--clean-room", clean_room]
    for name, value in (changed or {}).items():
        shown = ",".join(map(str, value)) if isinstance(value, tuple) else value
        words += ["--set", f"{name}={shown}"]
    return shlex.join(words)


def write_evidence(
    result: LabResult,
    store: EvidenceStore,
    folder: Path,
    seed: int,
    impl: str,
    room: CleanRoomInfo | None,
    isolation: str | None = None,
) -> None:
    """One record per lab (YAML and JSON) plus its figures as CSV and their description as
    JSON (what `labctl report` draws from); point the manifest at it."""
    store.check_writable()
    stem = record_stem(seed)
    target = folder / result.lab.id
    artifacts = []
    described = []
    for index, figure in enumerate(result.figures):
        found = _artifact(figure)
        csv_name = None
        if found is not None:
            name, data = found
            csv_name = f"{stem}-{index}-{name}.csv"
            path, artifact = write_artifact(store, target, csv_name, data)
            artifacts.append(artifact)
            result.records.append(path)
        described.append(figure_data(figure, csv_name))
    if described:
        # JSON Lines, one figure a line: not `*.json`, which names the records themselves
        data = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in described).encode()
        path, artifact = write_artifact(store, target, f"{stem}-{FIGURES_SUFFIX}", data)
        artifacts.append(artifact)
        result.records.append(path)
    params = result.params or result.lab.params()
    record = machine_record(
        module=result.lab.id,
        seed=seed,
        command=_command(
            result.lab, seed, impl, room.path if room else None, result.changed_params
        ),
        metrics=[metric_record(m) for m in result.metrics if math.isfinite(m.actual)],
        artifacts=artifacts,
        known_failures=result.failures(),
        tolerances=registry.TOLERANCE_TABLE_VERSION,
        impl=impl,
        passed=result.passed,
        wall_time_s=result.wall_time_s,
        lab=result.lab.id,
        clean_room=room if impl != "reference" else None,
        params=record_values(params),
        params_default=not result.changed_params,
        isolation=isolation,
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
            "params_default": not result.changed_params,
        },
    )
