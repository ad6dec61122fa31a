"""What one verify run found: `VerifyReport` (and the template's metrics in it), as the
terminal, `--json` and the evidence records (`labctl.verify.record`) read it.

Below both the verification (`labctl.verify.verify`), which makes it, and the record, which
keeps it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from labctl import contract
from labctl.evidence.models import CleanRoomInfo
from labctl.evidence.room import room_json
from labctl.i18n import Msg
from labctl.verify.builders import FIXTURES_VERSION, SEED
from labctl.verify.checks import CHECK_NAMES, CheckResult
from labctl.verify.compare import TOLERANCE_VERSION
from labctl.verify.diagnosis import Diagnosis


@dataclass
class TemplateMetric:
    """One of the course template's metrics, measured on the clean room (or why not)."""

    name: str
    expected: str | None = None
    actual: float | None = None
    impl: str | None = None
    passed: bool | None = None
    unit: str | None = None
    lab: str | None = None
    note: str = ""  # English, for --json and the records; given as a Msg or a str
    # What the terminal shows, translated there with `_()`: the Msg (or text) given as note.
    shown_note: str | Msg = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.shown_note = self.note
        self.note = str(self.note)

    def to_json(self) -> dict:
        data = {"name": self.name, "expected": self.expected, "actual": self.actual}
        for key in ("impl", "passed", "unit", "lab"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.note:
            data["note"] = self.note
        return data


@dataclass
class VerifyReport:
    path: str
    status: str
    message: str  # English, for --json and the records; given as a Msg or a str
    checks: list[CheckResult]
    diagnosis: list[Diagnosis]
    timeout_s: float
    memory_mb: int
    seed: int = SEED
    isolation: str = ""
    wall_time_s: float = 0.0
    metrics: list[TemplateMetric] = field(default_factory=list)
    records: list[Path] = field(default_factory=list)
    history: Path | None = None
    verified_at: str = ""
    clean_room: CleanRoomInfo | None = None
    budget_s: float | None = None
    over_budget: list[str] = field(default_factory=list)  # functions whose calls were not run
    contract: int = 1  # the version checked
    declared: int = 1  # the version the room declares
    output_bytes: int = 0  # what the room printed in all; `output`: its first 64 KiB
    output: str = ""
    # What the terminal shows, translated there with `_()`: the Msg (or text) given as message.
    shown: str | Msg = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.shown = self.message
        self.message = str(self.message)

    @property
    def passed(self) -> bool:
        return self.status == "loaded" and all(c.passed for c in self.checks)

    def failing_functions(self) -> list[str]:
        seen: list[str] = []
        for c in self.checks:
            if c.failed and c.function not in seen:
                seen.append(c.function)
        return seen

    def failures(self) -> list[str]:
        return [f"{c.function} {c.name}: {c.message}" for c in self.checks if c.failed]

    def functions_passed(self) -> tuple[int, int]:
        names = contract.function_names(self.contract)
        bad = {c.function for c in self.checks if not c.passed}
        return sum(1 for n in names if n not in bad), len(names)

    def to_json(self, relative: Callable[[Path], str] = str) -> dict:
        return {
            "passed": self.passed,
            "path": self.path,
            "status": self.status,
            "message": self.message,
            "contract": {
                "id": contract.contract_id(self.contract),
                "sha256": contract.PINS[self.contract],
            },
            # The contract the room declares (undeclared: v1); "contract" is the one checked.
            "declared": contract.contract_id(self.declared),
            "tolerances": TOLERANCE_VERSION,
            "fixtures": FIXTURES_VERSION,
            "seed": self.seed,
            "timeout_s": self.timeout_s,
            "memory_mb": self.memory_mb,
            "isolation": self.isolation,
            "clean_room": room_json(self.clean_room),
            "budget_s": self.budget_s,
            "not_run": list(self.over_budget),
            "check_names": list(CHECK_NAMES),
            "checks": [c.to_json() for c in self.checks],
            "diagnosis": [d.to_json() for d in self.diagnosis],
            "metrics": [m.to_json() for m in self.metrics],
            "wall_time_s": round(self.wall_time_s, 3),
            "verified_at": self.verified_at,
            "records": [relative(p) for p in self.records],
            "history": relative(self.history) if self.history else None,
        }
