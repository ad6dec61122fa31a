"""verify's evidence: a record per run and a line of history, pass or fail.

`labctl verify clean-room` keeps a learn-llm.evidence.v1 record (YAML and JSON)
with the report as its artifact, and appends a line to the history of verify
runs, so the course's failure-before / fix-after record keeps itself.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import tempfile
from pathlib import Path

from labctl import contract
from labctl.errors import UsageError
from labctl.evidence.models import MetricRecord
from labctl.evidence.records import machine_record, metric_record, write_artifact
from labctl.evidence.store import EvidenceStore, record_stem
from labctl.i18n import Msg, message_data
from labctl.isolation.sandbox import DEFAULT_TIMEOUT_S
from labctl.jsonsafe import dumps
from labctl.outpaths import check_recordable, named_by
from labctl.textsafe import json_text
from labctl.verify.compare import TOLERANCE_VERSION
from labctl.verify.observe import PACKAGE
from labctl.verify.report import VerifyReport

MODULE_ID = "verify-clean-room"
DEFAULT_OUT = Path("evidence/verify")
HISTORY_NAME = "history.jsonl"


def _command(report: VerifyReport) -> str:
    words = ["labctl", "verify", "clean-room", "--path", report.path]
    if report.timeout_s != DEFAULT_TIMEOUT_S:
        words += ["--timeout", f"{report.timeout_s:g}"]
    words += ["--isolation", report.isolation, "--seed", str(report.seed)]
    return shlex.join(words)


def check_out_dir(out: Path) -> None:
    """Refuse, before anything runs, an `--out` that is a file, cannot be written, or is
    named by bytes no record can hold, and an evidence root whose manifest or history could
    not take this run."""
    check_recordable(out)
    with named_by("--out", out):
        _check_out_dir(out)


def _check_out_dir(out: Path) -> None:
    existing = next((p for p in (out, *out.parents) if p.exists()), None)
    if out.exists() and not out.is_dir():
        raise UsageError(Msg("--out {out}: not a directory (nothing was written)", out=str(out)))
    if existing is not None and existing != out and not existing.is_dir():
        raise UsageError(
            Msg(
                "--out {out}: {existing} is not a directory (nothing was written)",
                out=str(out),
                existing=str(existing),
            )
        )
    if existing is not None and not _writable(existing):
        raise UsageError(
            Msg(
                "--out {out}: {existing} is not writable (nothing was written)",
                out=str(out),
                existing=str(existing),
            )
        )
    # a broken manifest or history refuses now, not after the run has written its record
    EvidenceStore(out.parent).check_writable(Path(out.name) / HISTORY_NAME)


def _writable(folder: Path) -> bool:
    """os.access says yes to root everywhere (even /proc); a nameless file asks the filesystem."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def write_evidence(report: VerifyReport, out: Path) -> None:
    """A learn-llm.evidence.v1 record (YAML and JSON), the report as an artifact, a history line."""
    store = EvidenceStore(out.parent)
    folder = Path(out.name)
    store.check_writable(folder / HISTORY_NAME)
    stem = record_stem(report.seed)
    # json_text: a room whose folder name is not UTF-8 still has a record (its name escaped).
    document = json_text(dumps(report.to_json(lambda p: os.path.relpath(p, store.root))))
    artifact_path, artifact = write_artifact(
        store, folder, f"{stem}-report.json", (document + "\n").encode("utf-8")
    )
    failed_checks = sum(1 for c in report.checks if c.failed)
    metric_records = [
        metric_record(m)
        for m in report.metrics
        if m.actual is not None and m.expected is not None and math.isfinite(m.actual)
    ]
    metric_records.append(
        MetricRecord(
            name="verify_failed_checks",
            expected="==0",
            actual=float(failed_checks),
            impl="clean-room",
            passed=failed_checks == 0,
            unit="count",
        )
    )
    known = report.failures() + [d.message for d in report.diagnosis]
    if report.over_budget:
        known.insert(0, report.message)
    known += [f"{m.name}: {m.note}" for m in report.metrics if m.actual is None and m.note]
    record = machine_record(
        module=MODULE_ID,
        seed=report.seed,
        command=_command(report),
        metrics=metric_records,
        artifacts=[artifact],
        known_failures=known,
        tolerances=TOLERANCE_VERSION,
        impl="clean-room",
        passed=report.passed,
        wall_time_s=report.wall_time_s,
        verified_at=report.verified_at,
        clean_room=report.clean_room,
        isolation=report.isolation or None,
    )
    paths = store.write_record(folder, stem, record)
    report.records = [*paths, artifact_path]
    store.point_manifest(
        MODULE_ID,
        {
            "record": store.relative(paths[1]),
            "verified_at": report.verified_at,
            "passed": report.passed,
            "clean_room": report.path,
        },
    )
    failing = [f for f in report.failing_functions() if f != PACKAGE]
    report.history = store.append_line(
        folder / HISTORY_NAME,
        {
            "verified_at": report.verified_at,
            "path": report.path,
            "passed": report.passed,
            "status": report.status,
            "failing_functions": failing,
            "failed_checks": [f"{c.function}:{c.name}" for c in report.checks if c.failed],
            "diagnosis": [d.message for d in report.diagnosis],
            # the same sentences as messages: the report shows them in its own language
            "diagnosis_messages": [message_data(d.shown) for d in report.diagnosis],
            "record": store.relative(paths[1]),
            "commit": record.commit,
            "commit_dirty": record.commit_dirty,
            "contract_sha256": contract.PINS[report.contract],
            "contract": contract.contract_id(report.contract),
            "tolerances": TOLERANCE_VERSION,
            "isolation": report.isolation,
            "seed": report.seed,
            "wall_time_s": round(report.wall_time_s, 3),
        },
    )


def read_history(out: Path = DEFAULT_OUT) -> list[dict]:
    """The verify runs recorded under `out`, oldest first (empty when there are none)."""
    path = out / HISTORY_NAME
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
