"""Check an evidence file and report every problem at once, each as `field: reason`.

The checks, in the order a reader meets the fields:

- the file: size limit, text, well-formed YAML or JSON, one mapping (`parse`);
- no `<...>` placeholder left anywhere, in a value or a field name (the 002
  template marks every unfilled answer that way);
- the schema `learn-llm.evidence.v1` (pydantic, strict): unknown fields and
  unknown schema versions refused, no value coerced;
- the module is known; its required metrics are all there, none twice;
- the commit exists in the repository; a dirty working tree is a warning
  (`labctl.evidence.repository`);
- verified_at is ISO 8601 and not in the future; the seed is not negative;
- each metric's actual is a finite number that satisfies its expected, and its
  expected is the v1 tolerance of that metric;
- each artifact is a repository-relative path that stays inside the repository
  (no absolute path, no `..`, no symlink leading out), is a file, and matches
  its sha256 when the record gives one (`labctl.evidence.repository`).

The repository is `project_root()`: the git top level of the working directory.
Nothing here writes anything or runs anything a record names.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from labctl import contract, registry
from labctl.evidence import modules
from labctl.evidence.environment import project_root
from labctl.evidence.models import SCHEMA_ID, EvidenceRecord
from labctl.evidence.parse import Problem, load, one_line
from labctl.evidence.repository import check_artifacts, check_commit
from labctl.evidence.times import parse_time
from labctl.lab import Metric, parse_expected, satisfies, tolerance_key

# `<learner-commit-sha>`, `<recorded-value>`, `<...>`; not `<=1e-12` nor `a < b > c`.
_CLAIM_FIELD = re.compile(r"^metrics\[(\d+)\]")
PLACEHOLDER = re.compile(r"<[^<>\s=][^<>\n]*>")
NONE = {"none", "无", "n/a", "-"}
# Problems are listed in the record's own field order.
FIELD_ORDER = (
    "file",
    "(document)",
    *(field.alias or name for name, field in EvidenceRecord.model_fields.items()),
)
# Union members pydantic names in an error location, and the input each one reads.
_UNION_FIELDS = {"environment": ("Environment", "str"), "artifacts": ("Artifact", "str")}
_UNION_INPUT = {"Environment": dict, "Artifact": dict, "str": str}


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

    def refuse(self, name: str, reason: str) -> None:
        self.problems.append(Problem(name, reason, *self._claim(name)))
        self._flagged.update(ancestors(name))

    def warn(self, name: str, reason: str) -> None:
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


# -- helpers shared with template and submit ---------------------------------


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


def _same_tolerance(a: str, b: str) -> bool:
    try:
        return tolerance_key(a) == tolerance_key(b)
    except ValueError:
        return False


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return {
        str: "a string",
        int: "an integer",
        float: "a number",
        list: "a list",
        dict: "a mapping",
        bytes: "binary data",
        set: "a set",
    }.get(type(value), type(value).__name__)


def _ordered(problems: list[Problem]) -> list[Problem]:
    def key(problem: Problem) -> tuple[int, int]:
        top = re.split(r"[.\[]", problem.field, maxsplit=1)[0]
        rank = FIELD_ORDER.index(top) if top in FIELD_ORDER else len(FIELD_ORDER)
        index = re.match(r"^[^\[]*\[(\d+)\]", problem.field)
        return rank, int(index.group(1)) if index else -1

    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=key)


def _at(data: Any, loc: tuple) -> Any:
    for part in loc:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


# -- the checks ---------------------------------------------------------------


def _placeholders(value: Any, loc: tuple, report: Report) -> None:
    """Every `<...>` left in a value or a field name, and every field name that is not text."""
    if isinstance(value, str):
        found = PLACEHOLDER.search(value)
        if found:
            shown = found.group(0) if len(found.group(0)) <= 60 else found.group(0)[:57] + "...>"
            report.refuse(field_path(loc), f"placeholder {shown} left")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                report.refuse(field_path(loc), f"field name {key!r} is {_kind(key)}, not text")
                continue
            found = PLACEHOLDER.search(key)
            if found:
                report.refuse(
                    field_path((*loc, key)), f"placeholder {found.group(0)} left in a field name"
                )
            _placeholders(item, (*loc, key), report)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _placeholders(item, (*loc, index), report)


def _schema(data: dict, report: Report) -> None:
    """Strict pydantic validation; errors become `field: reason`, one line each."""
    try:
        report.record = EvidenceRecord.model_validate(data, by_alias=True, by_name=False)
        return
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    placeheld = {p.field for p in report.problems}  # placeholders, field names not text
    neither: set[tuple] = set()
    for error in errors:
        loc = tuple(error["loc"])
        loc = _strip_union(data, loc, neither)
        if loc is None:
            continue
        name = field_path(loc)
        if any(part in placeheld for part in ancestors(name)):
            continue  # a placeholder there is the problem already named
        report.refuse(name, _reason(error, loc))
    for loc in sorted(neither, key=str):
        value = _at(data, loc)
        report.refuse(field_path(loc), f"must be a mapping or a string, not {_kind(value)}")


def _strip_union(data: dict, loc: tuple, neither: set[tuple]) -> tuple | None:
    """Drop the union member from `loc`; None when the error belongs to the member not given."""
    if not loc or loc[0] not in _UNION_FIELDS:
        return loc
    depth = 1 if loc[0] == "environment" else 2
    if len(loc) <= depth or loc[depth] not in _UNION_FIELDS[loc[0]]:
        return loc
    value = _at(data, loc[:depth])
    if not isinstance(value, (dict, str)):
        neither.add(loc[:depth])
        return None
    if not isinstance(value, _UNION_INPUT[loc[depth]]):
        return None
    return loc[:depth] + loc[depth + 1 :]


def _reason(error: dict, loc: tuple) -> str:
    kind, message, given = error["type"], error["msg"], error.get("input")
    if kind == "extra_forbidden":
        return f"unknown field; {SCHEMA_ID} has no field {loc[-1]!r}"
    if kind == "missing":
        return f"missing; {SCHEMA_ID} requires it"
    if loc == ("schema",) and kind == "literal_error":
        shown = given if isinstance(given, str) else _kind(given)
        return f"unknown schema version {shown!r}; labctl reads {SCHEMA_ID} only"
    if kind == "value_error":
        return one_line(message.removeprefix("Value error, "))
    if kind.endswith("_type") or kind in ("literal_error", "int_from_float"):
        return one_line(f"{message} (got {_kind(given)})")
    return one_line(message)


def _module(data: dict, report: Report) -> None:
    module_id = data.get("module")
    if not isinstance(module_id, str) or report.flagged("module"):
        return
    report.module = course_module(module_id)
    if report.module is not None:
        return
    if module_id in {lab.id for lab in registry.discover()}:
        report.warn(
            "module",
            f"{module_id!r} is a lab: this is a run record; a submission is for a course module "
            f"({', '.join(m.id for m in modules.MODULES)})",
        )
        return
    known = ", ".join(m.id for m in modules.MODULES)
    report.refuse("module", f"unknown module {module_id!r}; known modules: {known}")


def _verified_at(data: dict, now: datetime, report: Report) -> None:
    if "verified_at" not in data or report.flagged("verified_at"):
        return
    moment = parse_time(data["verified_at"])
    if moment is None:
        report.refuse("verified_at", "must be an ISO 8601 date-time")
    elif moment > now:
        shown = now.isoformat(timespec="seconds").replace("+00:00", "Z")
        report.refuse("verified_at", f"{data['verified_at']} is in the future (now {shown})")


def _seed(data: dict, report: Report) -> None:
    seed = data.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and seed < 0:
        report.refuse("seed", f"{seed} is negative; seeds are non-negative integers")


def _metrics(data: dict, report: Report) -> None:
    rows = data.get("metrics")
    if not isinstance(rows, list):
        return
    table = registry.metric_table()
    seen: dict[tuple[str, str], int] = {}
    names: set[str] = set()
    for index, row in enumerate(rows):
        here = f"metrics[{index}]"
        if not isinstance(row, dict):
            continue
        name = row.get("name")
        if not isinstance(name, str) or report.flagged(f"{here}.name"):
            continue
        names.add(name)
        entry = table.get(name)
        metric = entry[1] if entry else None
        impl = row.get("impl")
        if metric is None:
            report.warn(
                f"{here}.name",
                f"{name!r} is not in the v1 tolerance table; no lab measures it, so it cannot be re-measured",
            )
            key = (name, impl if isinstance(impl, str) else "")
        else:
            key = (name, claim_impl(metric, impl))
            claims = sum(isinstance(r, dict) and r.get("name") == name for r in rows)
            _metric_against_table(row, here, metric, report, claims > 1)
        if key in seen:
            shown = f"{name!r}" + (f" ({key[1]})" if key[1] else "")
            report.refuse(
                f"{here}.name", f"{shown} is claimed twice (first at metrics[{seen[key]}])"
            )
        else:
            seen[key] = index
        _actual(row, here, metric, report)
    module = report.module
    if module is not None and not any(p.field == "metrics" for p in report.problems):
        for required in module.required:
            if required not in names:
                report.refuse(
                    "metrics", f"required metric {required!r} missing (module {module.id})"
                )


def _metric_against_table(
    row: dict, here: str, metric: Metric, report: Report, other_rows: bool
) -> None:
    """Check one claim against the table; `other_rows`: the record claims the metric elsewhere too."""
    impl = row.get("impl")
    if isinstance(impl, str) and not report.flagged(f"{here}.impl") and impl not in metric.impls:
        report.refuse(
            f"{here}.impl",
            f"{metric.name} is measured on {', '.join(metric.impls)}, not {impl}",
        )
    elif impl == "reference" and "clean-room" in metric.impls and not other_rows:
        report.warn(
            f"{here}.impl",
            f"{metric.name} is claimed on the reference only: it says nothing about a clean room",
        )
    expected = row.get("expected")
    if (
        isinstance(expected, str)
        and not report.flagged(f"{here}.expected")
        and not _same_tolerance(expected, metric.expected)
    ):
        report.refuse(
            f"{here}.expected",
            f"{expected!r} is not the v1 tolerance of {metric.name} ({metric.expected!r})",
        )
    timing = row.get("timing")
    if isinstance(timing, bool) and timing != metric.timing:
        report.refuse(
            f"{here}.timing", f"{metric.name} is {'' if metric.timing else 'not '}a timing metric"
        )
    unit = row.get("unit")
    if isinstance(unit, str) and unit != metric.unit:
        report.refuse(f"{here}.unit", f"{metric.name} is measured in {metric.unit!r}, not {unit!r}")


def _actual(row: dict, here: str, metric: Metric | None, report: Report) -> None:
    actual = row.get("actual")
    if not is_number(actual) or report.flagged(f"{here}.actual"):
        return
    if not math.isfinite(actual):
        report.refuse(f"{here}.actual", "must be a finite number")
        return
    expected = metric.expected if metric else row.get("expected")
    try:
        parse_expected(expected)
    except (ValueError, TypeError):
        return  # the expected field carries that problem
    passed = satisfies(float(actual), expected)
    if not passed:
        if metric is not None and metric.timing:
            report.warn(
                f"{here}.actual",
                f"{actual!r} does not satisfy {expected} (timing: informative only)",
            )
        else:
            report.refuse(f"{here}.actual", f"{actual!r} does not satisfy {expected}")
    claimed = row.get("passed")
    if isinstance(claimed, bool) and claimed != passed and not (metric and metric.timing):
        report.refuse(
            f"{here}.passed",
            f"says {claimed}, but {actual!r} {'satisfies' if passed else 'does not satisfy'} {expected}",
        )


def _labctl(data: dict, report: Report) -> None:
    info = data.get("labctl")
    if not isinstance(info, dict):
        return
    if isinstance(info.get("contract_id"), str) and info["contract_id"] != contract.CONTRACT_ID:
        report.refuse(
            "labctl.contract_id", f"{info['contract_id']!r} is not {contract.CONTRACT_ID}"
        )
    sha = info.get("contract_sha256")
    if isinstance(sha, str) and sha != contract.CONTRACT_V1_SHA256:
        report.refuse(
            "labctl.contract_sha256", f"not the digest of {contract.CONTRACT_ID} as labctl pins it"
        )


def _known_failures(data: dict, report: Report) -> None:
    failures = data.get("known_failures")
    if not isinstance(failures, list) or report.flagged("known_failures"):
        return
    # The template's answer may be "none" (<sanitized-failure-or-none>).
    listed = [f for f in failures if not (isinstance(f, str) and f.strip().lower() in NONE)]
    if listed:
        report.warn("known_failures", f"the record lists {len(listed)} known failure(s)")


def validate_data(
    data: Any, report: Report, root: Path | None = None, now: datetime | None = None
) -> Report:
    """Run every check on parsed `data`, adding to `report`."""
    report.data = data
    if not isinstance(data, dict):
        report.refuse("(document)", f"must be a mapping of fields, not {_kind(data)}")
        return report
    root = (root or project_root()).resolve()
    now = now or datetime.now(timezone.utc)
    _placeholders(data, (), report)
    _schema(data, report)
    _module(data, report)
    check_commit(data, root, report)
    _verified_at(data, now, report)
    _seed(data, report)
    _metrics(data, report)
    check_artifacts(data, root, report)
    _labctl(data, report)
    _known_failures(data, report)
    report.tidy()
    return report


def validate_file(path: Path, root: Path | None = None, now: datetime | None = None) -> Report:
    """Read `path` (YAML or JSON) and check it; raises UsageError only for a missing file."""
    loaded = load(Path(path))
    report = Report(path=Path(path), raw=loaded.raw)
    if loaded.problem:
        report.refuse(loaded.problem.field, loaded.problem.reason)
        return report
    return validate_data(loaded.data, report, root, now)
