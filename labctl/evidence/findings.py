"""What a validation found: the `Report` of problems and warnings, each named by the field
it is about and, inside `metrics[i]`, by the claim (metric, implementation) it belongs to;
and the small helpers validate, template and submit share."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labctl import registry
from labctl.evidence import modules
from labctl.evidence.models import EvidenceRecord
from labctl.evidence.parse import Problem
from labctl.i18n import Msg
from labctl.lab import Metric

_CLAIM_FIELD = re.compile(r"^metrics\[(\d+)\]")
# Problems are listed in the record's own field order.
FIELD_ORDER = (
    "file",
    "(document)",
    *(field.alias or name for name, field in EvidenceRecord.model_fields.items()),
)


@dataclass
class Report:
    """What `validate_file` found. `record` is the parsed record when the schema held."""

    path: Path
    raw: bytes = b""
    data: Any = None
    record: EvidenceRecord | None = None
    module: modules.Module | None = None
    problems: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    _flagged: set[str] = field(default_factory=set, repr=False)

    @property
    def valid(self) -> bool:
        return not self.problems

    def refuse(self, name: str, reason: str | Msg) -> None:
        self.problems.append(Problem(name, reason, *self._claim(name)))
        self._flagged.update(ancestors(name))

    def warn(self, name: str, reason: str | Msg) -> None:
        self.warnings.append(Problem(name, reason, *self._claim(name)))

    def _claim(self, name: str) -> tuple[str | None, str | None]:
        """(metric, implementation) of the claim a `metrics[i]...` field belongs to."""
        found = _CLAIM_FIELD.match(name)
        rows = self.data.get("metrics") if isinstance(self.data, dict) else None
        if not found or not isinstance(rows, list) or int(found[1]) >= len(rows):
            return None, None
        row = rows[int(found[1])]
        metric_name = row.get("name") if isinstance(row, dict) else None
        if not isinstance(metric_name, str):
            return None, None
        impl = row.get("impl")
        if isinstance(impl, str):
            return metric_name, impl
        entry = registry.metric_table().get(metric_name)
        return metric_name, claim_impl(entry[1], impl) if entry else None

    def flagged(self, name: str) -> bool:
        """True when a problem already names `name` (or a field inside it)."""
        return name in self._flagged

    def tidy(self) -> None:
        self.problems = _ordered(self.problems)
        self.warnings = _ordered(self.warnings)


def course_module(module_id: str) -> modules.Module | None:
    for module in modules.MODULES:
        if module.id == module_id:
            return module
    return None


def claim_impl(metric: Metric, impl: object) -> str:
    """The row a claim speaks for: its `impl`, else the clean room (or the comparison)."""
    if isinstance(impl, str) and impl in metric.impls:
        return impl
    if "clean-room" in metric.impls:
        return "clean-room"
    return metric.impls[0]


def ancestors(name: str) -> list[str]:
    """`metrics[2].actual` -> `metrics`, `metrics[2]`, `metrics[2].actual`."""
    cuts = [i for i, c in enumerate(name) if c in ".[" and i > 0]
    return [name[:i] for i in cuts] + [name]


def field_path(loc: tuple) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(document)"


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _ordered(problems: list[Problem]) -> list[Problem]:
    def key(problem: Problem) -> tuple[int, int]:
        top = re.split(r"[.\[]", problem.field, maxsplit=1)[0]
        rank = FIELD_ORDER.index(top) if top in FIELD_ORDER else len(FIELD_ORDER)
        index = re.match(r"^[^\[]*\[(\d+)\]", problem.field)
        return rank, int(index.group(1)) if index else -1

    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=key)
