"""What a run of labs gives: each metric row's result, each lab's, and the run's report.

Below the runner, which makes them, and the records (`labctl.run_records`), which keep
them: both sides read them from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from labctl import registry
from labctl.evidence.models import CleanRoomInfo
from labctl.evidence.room import room_json
from labctl.i18n import N_, Msg
from labctl.lab import HeatmapFigure, Lab, LabParams, Note, TableFigure
from labctl.params import non_default, record_values

# The note of a declared metric row the lab never measured (its value is NaN).
NOT_MEASURED = "not measured"


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

    @property
    def measured(self) -> bool:
        """False for a row the lab never reached (or could not measure: its note says why); a
        measured NaN (a garbage room's) is measured."""
        return not self.note.startswith(NOT_MEASURED)

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


# What a run with non-default parameters says of `reference_failures` (terminal and report).
REFERENCE_OFF_DEFAULTS = N_(
    "the reference itself fails {metrics} with these parameters: the tolerances are set for "
    "the lab's defaults, so these FAILs say what the parameters changed, not that an "
    "implementation is wrong"
)


def reference_failures(metrics) -> list[str]:
    """The names of the deciding metrics (a run's or a record's) the reference row fails."""
    return [m.name for m in metrics if m.impl == "reference" and not m.timing and m.passed is False]


@dataclass
class LabResult:
    lab: Lab
    metrics: list[MetricResult] = field(default_factory=list)
    figures: list[TableFigure | HeatmapFigure | Note] = field(default_factory=list)
    error: str | None = None  # English, for --json and the evidence records
    wall_time_s: float = 0.0
    records: list[Path] = field(default_factory=list)
    params: LabParams | None = None
    # What the terminal shows, translated there with `_()`: the Msg (or text) `error` renders.
    shown_error: str | Msg | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.shown_error = self.error

    def fail(self, message: str | Msg) -> None:
        """The lab failed: `message` is shown translated; `error` keeps it in English."""
        self.shown_error = message
        self.error = str(message)

    @property
    def passed(self) -> bool:
        return self.error is None and all(m.passed for m in self.metrics if m.decides)

    @property
    def changed_params(self) -> dict:
        """The parameters this run changed from the lab's defaults (empty for a default run)."""
        return non_default(self.lab, self.params) if self.params is not None else {}

    @property
    def reference_fails_off_defaults(self) -> list[str]:
        """The metrics the reference fails with parameters changed from the defaults the
        tolerances were set for: the parameters' doing, not an implementation's."""
        return reference_failures(self.metrics) if self.changed_params else []

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
            "params": record_values(self.params) if self.params is not None else None,
            "params_default": not self.changed_params,
            "params_changed": sorted(self.changed_params),
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
    clean_room: CleanRoomInfo | None
    wall_time_s: float
    isolation: str | None = None

    @property
    def passed(self) -> bool:
        return all(lab.passed for lab in self.labs)

    def to_json(self, relative: Callable[[Path], str]) -> dict:
        return {
            "passed": self.passed,
            "seed": self.seed,
            "impl": self.impl,
            "clean_room": room_json(self.clean_room),
            "isolation": self.isolation,
            "tolerances": registry.TOLERANCE_TABLE_VERSION,
            "wall_time_s": round(self.wall_time_s, 3),
            "labs": [lab.to_json(relative) for lab in self.labs],
        }


def _cell(value):
    """A table cell as data: text (a `Msg` rendered in English) or the number as it is."""
    return str(value) if isinstance(value, Msg) else value
