"""`labctl faults`: every check against every catalogued fault, and the matrix it makes.

Each fault of `labctl.faults.CATALOGUE` is materialized as a faulty copy of the
project's clean room and verified like a learner's, each in its own worker
process. The matrix says which checks catch which fault. It proves the checks
both ways: every fault must be caught by at least one check (else the
catalogue has a blind spot), and every check must catch at least one fault
(a check that can never fail is a defect), except a check whose docstring
justifies it (`JUSTIFIED`). The project's clean room runs first as the
baseline: it must pass every check, so a catch is never a false alarm. Each
faulty room must also fail at the fault's own function and be diagnosed there
by the fault's name. The matrix is kept as evidence.
"""

from __future__ import annotations

import csv
import io
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from labctl import contract, faults
from labctl.evidence.models import MetricRecord
from labctl.evidence.records import machine_record, write_artifact
from labctl.evidence.store import EvidenceStore, record_stem
from labctl.faults import Fault
from labctl.i18n import Msg
from labctl.isolation.levels import resolve_isolation
from labctl.isolation.sandbox import DEFAULT_MEMORY_MB
from labctl.jsonsafe import dumps
from labctl.verify import fixtures as fx
from labctl.verify.builders import SEED
from labctl.verify.checks import CHECK_NAMES, JUSTIFIED, CheckResult, evaluate
from labctl.verify.compare import TOLERANCE_VERSION
from labctl.verify.diagnosis import ROOMS, Diagnosis, diagnose
from labctl.verify.observe import observe

MODULE_ID = "fault-matrix"
DEFAULT_OUT = Path("evidence/faults")
DEFAULT_TIMEOUT_S = 2.0  # the hang fault is stopped after this; every other call takes ms
CAUGHT, PASSED, NOT_RUN = "caught", "pass", "not-run"


@dataclass
class FaultRow:
    fault: Fault | None
    cells: dict[str, str]
    failing_functions: list[str]
    diagnosis: list[Diagnosis]
    failures: list[str]
    wall_time_s: float

    @property
    def name(self) -> str:
        return self.fault.name if self.fault else "(none: the project's clean room)"

    @property
    def caught_by(self) -> list[str]:
        return [name for name in CHECK_NAMES if self.cells.get(name) == CAUGHT]

    @property
    def fails_at_function(self) -> bool:
        return self.fault is not None and self.fault.function in self.failing_functions

    @property
    def diagnosed_as(self) -> str | None:
        """The fault the diagnosis names at the fault's own function, if any."""
        if self.fault is None:
            return None
        for d in self.diagnosis:
            if d.function == self.fault.function and d.kind == "fault":
                return d.fault
        return None

    def to_json(self) -> dict:
        data = {
            "name": self.name,
            "cells": self.cells,
            "caught_by": self.caught_by,
            "failing_functions": self.failing_functions,
            "wall_time_s": round(self.wall_time_s, 3),
        }
        if self.fault is not None:
            data.update(
                function=self.fault.function,
                signal=self.fault.signal,
                description=self.fault.description,
                course=self.fault.course,
                fails_at_function=self.fails_at_function,
                diagnosed_as=self.diagnosed_as,
                diagnosis=[d.message for d in self.diagnosis if d.function == self.fault.function],
            )
        else:
            data["failures"] = self.failures
        return data


@dataclass
class FaultMatrix:
    baseline: FaultRow
    rows: list[FaultRow]
    timeout_s: float
    wall_time_s: float = 0.0
    records: list[Path] = field(default_factory=list)
    isolation: str | None = None
    seed: int = SEED
    memory_mb: int = DEFAULT_MEMORY_MB

    def uncaught(self) -> list[str]:
        return [r.name for r in self.rows if not r.caught_by]

    def unproven(self) -> list[str]:
        """Checks no fault makes fail, justified ones excepted."""
        return [
            name
            for name in CHECK_NAMES
            if name not in JUSTIFIED and not any(r.cells.get(name) == CAUGHT for r in self.rows)
        ]

    def misplaced(self) -> list[str]:
        return [r.name for r in self.rows if not r.fails_at_function]

    def undiagnosed(self) -> list[str]:
        return [r.name for r in self.rows if r.diagnosed_as != r.name]

    def signals_missed(self) -> list[str]:
        return [r.name for r in self.rows if r.cells.get(r.fault.signal) != CAUGHT]

    @property
    def passed(self) -> bool:
        return not (
            self.baseline.failures
            or self.uncaught()
            or self.unproven()
            or self.misplaced()
            or self.undiagnosed()
            or self.signals_missed()
        )

    def problems(self) -> list[str]:
        """What is wrong with the catalogue or the checks, in English (JSON, the record)."""
        return [str(p) for p in self.problems_shown()]

    def problems_shown(self) -> list[Msg]:
        """The same, as messages, translated where they are shown."""
        found = [Msg("baseline: {failure}", failure=f) for f in self.baseline.failures]
        found += [Msg("fault {name}: no check catches it", name=n) for n in self.uncaught()]
        found += [
            Msg("check {name}: catches no fault and is not justified", name=n)
            for n in self.unproven()
        ]
        found += [
            Msg("fault {name}: verify does not fail at its function", name=n)
            for n in self.misplaced()
        ]
        found += [
            Msg("fault {name}: not diagnosed by its name", name=n) for n in self.undiagnosed()
        ]
        found += [
            Msg("fault {name}: its signal check does not catch it", name=n)
            for n in self.signals_missed()
        ]
        return found

    def to_json(self, relative: Callable[[Path], str] = str) -> dict:
        return {
            "passed": self.passed,
            "checks": list(CHECK_NAMES),
            "justified": JUSTIFIED,
            "tolerances": TOLERANCE_VERSION,
            "fixtures": fx.FIXTURES_VERSION,
            "timeout_s": self.timeout_s,
            "memory_mb": self.memory_mb,
            "isolation": self.isolation,
            "baseline": self.baseline.to_json(),
            "faults": [r.to_json() for r in self.rows],
            "uncaught": self.uncaught(),
            "unproven": self.unproven(),
            "problems": self.problems(),
            "wall_time_s": round(self.wall_time_s, 3),
            "records": [relative(p) for p in self.records],
        }

    def csv_text(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["fault", "function", "signal", *CHECK_NAMES, "diagnosed_as"])
        for row in [self.baseline, *self.rows]:
            fault = row.fault
            writer.writerow(
                [
                    row.name,
                    fault.function if fault else "",
                    fault.signal if fault else "",
                    *(row.cells.get(name, "") for name in CHECK_NAMES),
                    row.diagnosed_as or "",
                ]
            )
        return buffer.getvalue()


def _cells(results: list[CheckResult]) -> dict[str, str]:
    cells = {}
    for name in CHECK_NAMES:
        mine = [r for r in results if r.name == name]
        if any(r.failed for r in mine):
            cells[name] = CAUGHT
        elif any(r.passed for r in mine):
            cells[name] = PASSED
        else:
            cells[name] = NOT_RUN
    return cells


def _row(
    fault: Fault | None,
    path: Path,
    timeout_s: float,
    memory_mb: int,
    isolation: str = "auto",
    seed: int = SEED,
) -> tuple:
    start = time.perf_counter()
    # labctl's own rooms: their replies kept for the diagnosis are not a learner's to count
    seen = observe(path, timeout_s, memory_mb, isolation=isolation, seed=seed, own=True)
    if fault is not None:
        ROOMS.remember(fault, timeout_s, memory_mb, seen)
    return seen, evaluate(seen), time.perf_counter() - start


def build_matrix(
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    out: Path | None = DEFAULT_OUT,
    progress: Callable[[str, int, int], None] | None = None,
    workers: int | None = None,
    isolation: str = "auto",
    seed: int = SEED,
) -> FaultMatrix:
    """Verify the project's clean room and every catalogued fault; diagnose; keep the matrix.

    `labctl faults` runs labctl's own faults at the published seed, so its matrix is the
    same every run; `seed` exists to show the checks catch every fault at other seeds too.
    """
    start = time.perf_counter()
    contract.verify_pin()
    fx.warm_reference(contract.function_names(), seed)
    catalogue = list(faults.CATALOGUE)
    paths = [ROOMS.path(f) for f in catalogue]
    seen, results, elapsed = _row(
        None, faults.project_clean_room(), timeout_s, memory_mb, isolation, seed
    )
    baseline = FaultRow(
        None,
        _cells(results),
        sorted({r.function for r in results if r.failed}),
        [],
        [f"{r.function} {r.name}: {r.message}" for r in results if not r.passed],
        elapsed,
    )
    done = 0

    def one(item: tuple[Fault, Path]):
        nonlocal done
        fault, path = item
        outcome = _row(fault, path, timeout_s, memory_mb, isolation, seed)
        done += 1
        if progress:
            progress(fault.name, done, len(catalogue))
        return outcome

    pool_size = workers or max(2, min(4, os.cpu_count() or 2))
    with ThreadPoolExecutor(max_workers=pool_size) as pool:
        observed = list(pool.map(one, zip(catalogue, paths, strict=True)))
    rows = []
    for fault, (seen, results, elapsed) in zip(catalogue, observed, strict=True):
        diagnosis = diagnose(seen, results, timeout_s, memory_mb)
        rows.append(
            FaultRow(
                fault,
                _cells(results),
                [
                    f
                    for f in contract.function_names()
                    if any(r.failed and r.function == f for r in results)
                ],
                diagnosis,
                [],
                elapsed,
            )
        )
    matrix = FaultMatrix(
        baseline,
        rows,
        timeout_s,
        isolation=resolve_isolation(isolation),
        seed=seed,
        memory_mb=memory_mb,
    )
    matrix.wall_time_s = time.perf_counter() - start
    if out is not None:
        write_evidence(matrix, out)
    return matrix


def write_evidence(matrix: FaultMatrix, out: Path) -> None:
    """The matrix as CSV and JSON artifacts, and a learn-llm.evidence.v1 record pointing at them."""
    store = EvidenceStore(out.parent)
    folder = Path(out.name)
    store.check_writable()
    stem = record_stem(matrix.seed)
    csv_path, csv_artifact = write_artifact(
        store, folder, f"{stem}-matrix.csv", matrix.csv_text().encode("utf-8")
    )
    document = dumps(matrix.to_json(lambda p: os.path.relpath(p, store.root)))
    json_path, json_artifact = write_artifact(
        store, folder, f"{stem}-matrix.json", (document + "\n").encode("utf-8")
    )

    def metric(name: str, expected: str, actual: int, ok: bool) -> MetricRecord:
        return MetricRecord(
            name=name, expected=expected, actual=float(actual), passed=ok, unit="count"
        )

    rows = matrix.rows
    metrics = [
        metric("faults_total", ">=12", len(rows), len(rows) >= 12),
        metric("faults_uncaught", "==0", len(matrix.uncaught()), not matrix.uncaught()),
        metric("checks_unproven", "==0", len(matrix.unproven()), not matrix.unproven()),
        metric("faults_undiagnosed", "==0", len(matrix.undiagnosed()), not matrix.undiagnosed()),
        metric(
            "baseline_failed_checks",
            "==0",
            len(matrix.baseline.failures),
            not matrix.baseline.failures,
        ),
    ]
    record = machine_record(
        module=MODULE_ID,
        seed=matrix.seed,
        # every setting the matrix depends on: the command repeats this run
        command=(
            f"labctl faults --timeout {matrix.timeout_s:g} --memory-mb {matrix.memory_mb} "
            f"--isolation {matrix.isolation}"
        ),
        metrics=metrics,
        artifacts=[csv_artifact, json_artifact],
        known_failures=matrix.problems(),
        tolerances=TOLERANCE_VERSION,
        impl="clean-room",
        passed=matrix.passed,
        wall_time_s=matrix.wall_time_s,
        isolation=matrix.isolation,
    )
    paths = store.write_record(folder, stem, record)
    matrix.records = [*paths, csv_path, json_path]
    store.point_manifest(
        MODULE_ID,
        {
            "record": store.relative(paths[1]),
            "verified_at": record.verified_at,
            "passed": matrix.passed,
        },
    )
