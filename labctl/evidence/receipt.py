"""Keep an accepted submission: its bytes, its receipt, and the manifest entry.

The submission is stored byte for byte as
`<root>/submissions/<module>/<digest>.yaml|.json`, named by the digest of the
record's content (its fields and values, canonical JSON), beside
`<digest>.receipt.json`: what was re-measured, how it came out, and under which
isolation, labctl version and tolerance table. Files are only ever created,
never overwritten; the manifest is updated under the store's lock.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import labctl
from labctl import registry
from labctl.errors import StoreError
from labctl.evidence.environment import now_iso
from labctl.evidence.findings import Report
from labctl.evidence.models import EvidenceRecord
from labctl.evidence.records import shown_path
from labctl.evidence.store import EvidenceStore, write_new
from labctl.i18n import Msg
from labctl.runner import default_clean_room

RECEIPT_SCHEMA = "labctl.submission-receipt.v1"
DIGEST_CHARS = 24


@dataclass
class Reproduction:
    """One claim against labctl's own measurement; `reproduced` is None when not re-measured."""

    field: str
    name: str
    impl: str
    claimed: float
    measured: float | None = None
    reproduced: bool | None = None
    note: str = ""

    def to_json(self) -> dict:
        return {
            "field": self.field,
            "name": self.name,
            "impl": self.impl,
            "claimed": self.claimed,
            "measured": self.measured,
            "reproduced": self.reproduced,
            **({"note": self.note} if self.note else {}),
        }


@dataclass
class Submission:
    report: Report
    reproductions: list[Reproduction] = field(default_factory=list)
    stored: Path | None = None
    already: Path | None = None
    seed: int | None = None
    isolation: str | None = None  # how the clean room ran when claims were re-measured

    @property
    def accepted(self) -> bool:
        return self.report.valid


def digest(record: EvidenceRecord) -> str:
    """The content digest of a record: the same fields and values give the same digest."""
    text = json.dumps(record.dump(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _room_shown(outcome: Submission, room: Path | None) -> str | None:
    if not any(r.impl != "reference" for r in outcome.reproductions):
        return None
    return shown_path(room or default_clean_room())


def _room_sha256(record: EvidenceRecord) -> str | None:
    """The digest of the room re-measured: the one the submission names, checked unchanged."""
    room = record.labctl.clean_room if record.labctl else None
    return getattr(room, "sha256", None)


def stored(folder: Path, name: str) -> Path | None:
    for suffix in (".yaml", ".json"):
        path = folder / f"{name}{suffix}"
        if path.is_file():
            return path
    return None


def keep(
    outcome: Submission, store: EvidenceStore, record: EvidenceRecord, room: Path | None
) -> None:
    """Write the accepted submission and its receipt (new files only), then point the
    manifest at it. A copy stored meanwhile, by another submit, is `outcome.already`."""
    report = outcome.report
    full = digest(record)
    name = full[:DIGEST_CHARS]
    folder = store.root / "submissions" / record.module
    suffix = ".json" if report.path.suffix.lower() == ".json" else ".yaml"
    target = folder / f"{name}{suffix}"
    store.read_manifest()  # an unreadable manifest refuses before anything is written
    try:
        write_new(target, report.raw)
    except StoreError:
        outcome.already = stored(folder, name) or target
        return
    except OSError as exc:
        raise StoreError(
            Msg("cannot write {path}: {error}", path=str(target), error=exc.strerror or str(exc))
        ) from None
    accepted_at = now_iso()
    receipt = {
        "schema": RECEIPT_SCHEMA,
        "submission": target.name,
        "record_sha256": full,
        "file_sha256": hashlib.sha256(report.raw).hexdigest(),
        "module": record.module,
        "seed": record.seed,
        "accepted_at": accepted_at,
        "labctl_version": labctl.__version__,
        "tolerances": registry.TOLERANCE_TABLE_VERSION,
        "clean_room": _room_shown(outcome, room),
        "clean_room_sha256": _room_sha256(record),
        "isolation": outcome.isolation,
        "params_default": record.labctl.params_default if record.labctl else None,
        "reproduced": [r.to_json() for r in outcome.reproductions],
        "warnings": [w.to_json() for w in report.warnings],
    }
    text = json.dumps(receipt, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    write_new(folder / f"{name}.receipt.json", text.encode("utf-8"))
    outcome.stored = target
    store.point_manifest(
        record.module,
        {
            "record": store.relative(target),
            "verified_at": record.verified_at,
            "accepted_at": accepted_at,
            "kind": "submission",
            "passed": True,
            "seed": record.seed,
            "sha256": full,
        },
    )
