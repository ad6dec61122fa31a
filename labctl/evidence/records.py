"""Machine records: what every record labctl writes shares, built in one place.

`labctl run`, `labctl verify clean-room` and `labctl faults` each write a
`learn-llm.evidence.v1` record; the commit, time, sanitized environment, cost,
licences and labctl block are the same for all three and come from here, as
do artifacts (written atomically, named repo-relative, with their sha256).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import labctl
from labctl import contract
from labctl.evidence.environment import environment, head_commit, now_iso
from labctl.evidence.models import (
    Artifact,
    CleanRoomInfo,
    EvidenceRecord,
    LabctlInfo,
    License,
    MetricRecord,
)
from labctl.evidence.store import EvidenceStore
from labctl.isolation.levels import missing_layers
from labctl.textsafe import valid

LICENSES = (
    License(
        source="labctl",
        version=labctl.__version__,
        license="MIT",
        attribution="labctl developers",
        redistribution="allowed with the license notice",
    ),
)


def shown_path(path: Path) -> str:
    """A path as it may appear in output and evidence: relative to the working directory,
    else its name; never an absolute path."""
    try:
        shown = str(path.resolve().relative_to(Path.cwd().resolve()))
    # RuntimeError, OSError: a loop of links, a name too long; their refusal is said elsewhere
    except (ValueError, RuntimeError, OSError):
        shown = path.name or path.anchor  # the root has no name: `/`, not nothing
    # A name that is not UTF-8 stays text every record can hold: its bytes escaped.
    return valid(shown)


def write_artifact(
    store: EvidenceStore, folder: Path, name: str, data: bytes
) -> tuple[Path, Artifact]:
    """Write `data` as a new artifact; return where it is and how a record names it."""
    path = store.write_artifact(folder, name, data)
    artifact = Artifact(
        path=os.path.relpath(path.resolve(), store.project),
        sha256=hashlib.sha256(data).hexdigest(),
    )
    return path, artifact


def metric_record(metric) -> MetricRecord:
    """A record row from anything with name, expected, actual, impl, passed, unit (and timing)."""
    return MetricRecord(
        name=metric.name,
        expected=metric.expected,
        actual=metric.actual,
        impl=metric.impl,
        passed=metric.passed,
        unit=metric.unit,
        timing=getattr(metric, "timing", None),
    )


def machine_record(
    *,
    module: str,
    seed: int,
    command: str,
    metrics: list[MetricRecord],
    artifacts: list[Artifact],
    known_failures: list[str],
    tolerances: str,
    impl: str,
    passed: bool,
    wall_time_s: float,
    verified_at: str | None = None,
    lab: str | None = None,
    clean_room: CleanRoomInfo | None = None,
    params: dict | None = None,
    params_default: bool | None = None,
    isolation: str | None = None,
) -> EvidenceRecord:
    """A record of this machine's run at the current commit."""
    commit = head_commit()
    return EvidenceRecord(
        schema="learn-llm.evidence.v1",
        module=module,
        commit=commit.sha,
        commit_dirty=commit.dirty,
        verified_at=verified_at or now_iso(),
        environment=environment(),
        seed=seed,
        commands=[command],
        metrics=metrics,
        artifacts=list(artifacts),
        cost={"gross_usd": 0.0, "credit_usd": 0.0},
        licenses=list(LICENSES),
        known_failures=known_failures,
        labctl=LabctlInfo(
            version=labctl.__version__,
            contract_id=contract.CONTRACT_ID,
            contract_sha256=contract.CONTRACT_V1_SHA256,
            tolerances=tolerances,
            impl=impl,
            lab=lab,
            clean_room=clean_room,
            isolation=isolation,
            isolation_missing=missing_layers(isolation),
            params=params,
            params_default=params_default,
            passed=passed,
            wall_time_s=round(wall_time_s, 3),
        ),
    )
