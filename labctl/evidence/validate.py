"""Check an evidence file and report every problem at once, each as `field: reason`.

The checks, in the order a reader meets the fields:

- the file: size limit, text, well-formed YAML or JSON, one mapping (`parse`);
- no `<...>` placeholder left anywhere, in a value or a field name (the course's
  template marks every unfilled answer that way);
- the schema `learn-llm.evidence.v1` (pydantic, strict): unknown fields and
  unknown schema versions refused, no value coerced;
- the module is known; its required metrics are all there, none twice;
- the commit exists in the repository; a dirty working tree is a warning
  (`labctl.evidence.repository`);
- verified_at is ISO 8601 and not in the future; the seed is not negative;
- each metric's actual is a finite number that satisfies its expected, and its
  expected is the v1 tolerance of that metric (`labctl.evidence.claims`);
- each artifact is a repository-relative path that stays inside the repository
  (no absolute path, no `..`, no symlink leading out), is a file, and matches
  its sha256 when the record gives one (`labctl.evidence.repository`).

The repository is `project_root()`: the git top level of the working directory.
Nothing here writes anything or runs anything a record names.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from labctl import contract, registry
from labctl.evidence import modules
from labctl.evidence.claims import check_metrics
from labctl.evidence.environment import project_root
from labctl.evidence.findings import Report, ancestors, course_module, field_path
from labctl.evidence.models import SCHEMA_ID, EvidenceRecord
from labctl.evidence.parse import load, one_line
from labctl.evidence.repository import check_artifacts, check_commit
from labctl.evidence.times import parse_time
from labctl.i18n import N_, Msg, declared
from labctl.i18n.validation import explained
from labctl.verify.builders import MAX_SEED

# `<learner-commit-sha>`, `<recorded-value>`, `<...>`; not `<=1e-12` nor `a < b > c`.
PLACEHOLDER = re.compile(r"<[^<>\s=][^<>\n]*>")
NONE = {"none", "无", "n/a", "-"}
# Union members pydantic names in an error location, and the input each one reads.
_UNION_FIELDS = {"environment": ("Environment", "str"), "artifacts": ("Artifact", "str")}
_UNION_INPUT = {"Environment": dict, "Artifact": dict, "str": str}


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return N_("a boolean")
    return {
        str: N_("a string"),
        int: N_("an integer"),
        float: N_("a number"),
        list: N_("a list"),
        dict: N_("a mapping"),
        bytes: N_("binary data"),
        set: N_("a set"),
    }.get(type(value), type(value).__name__)


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
            report.refuse(field_path(loc), Msg("placeholder {placeholder} left", placeholder=shown))
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                report.refuse(
                    field_path(loc),
                    Msg(
                        "field name {key!r} is {kind}, not text",
                        key=key,
                        kind=declared(_kind(key)),
                    ),
                )
                continue
            found = PLACEHOLDER.search(key)
            if found:
                report.refuse(
                    field_path((*loc, key)),
                    Msg(
                        "placeholder {placeholder} left in a field name", placeholder=found.group(0)
                    ),
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
        report.refuse(name, field_reason(error, loc))
    for loc in sorted(neither, key=str):
        value = _at(data, loc)
        report.refuse(
            field_path(loc),
            Msg("must be a mapping or a string, not {kind}", kind=declared(_kind(value))),
        )


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


def field_reason(error: dict, loc: tuple) -> str | Msg:
    """Why pydantic refused a field, by the error's type (`labctl.i18n.validation`); a labctl
    validator's message (`models.py`, marked there) is translated where it is shown."""
    kind, message, given = error["type"], error["msg"], error.get("input")
    if kind == "extra_forbidden":
        return Msg("unknown field; {schema} has no field {name!r}", schema=SCHEMA_ID, name=loc[-1])
    if kind == "missing":
        return Msg("missing; {schema} requires it", schema=SCHEMA_ID)
    if loc == ("schema",) and kind == "literal_error":
        shown = given if isinstance(given, str) else declared(_kind(given))
        return Msg(
            "unknown schema version {version!r}; labctl reads {schema} only",
            version=shown,
            schema=SCHEMA_ID,
        )
    if kind == "value_error":
        return one_line(message.removeprefix("Value error, "))
    # pydantic's own sentence is English only: the refusal is worded from its type and values
    if kind == "literal_error" and isinstance(given, str):
        # a text, but not one of the choices: which text, not what kind of value
        return Msg("{message} (got {value!r})", message=explained(error), value=one_line(given))
    if kind.endswith("_type") or kind in ("literal_error", "int_from_float"):
        return Msg("{message} (got {kind})", message=explained(error), kind=declared(_kind(given)))
    return explained(error)


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
            Msg(
                "{module!r} is a lab: this is a run record; a submission is for a course module "
                "({known})",
                module=module_id,
                known=", ".join(m.id for m in modules.MODULES),
            ),
        )
        return
    known = ", ".join(m.id for m in modules.MODULES)
    report.refuse(
        "module",
        Msg("unknown module {module!r}; known modules: {known}", module=module_id, known=known),
    )


def _verified_at(data: dict, now: datetime, report: Report) -> None:
    if "verified_at" not in data or report.flagged("verified_at"):
        return
    moment = parse_time(data["verified_at"])
    if moment is None:
        report.refuse("verified_at", N_("must be an ISO 8601 date-time"))
    elif moment > now:
        shown = now.isoformat(timespec="seconds").replace("+00:00", "Z")
        report.refuse(
            "verified_at",
            Msg("{moment} is in the future (now {now})", moment=data["verified_at"], now=shown),
        )


def _seed(data: dict, report: Report) -> None:
    seed = data.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        return
    if seed < 0:
        report.refuse("seed", Msg("{seed} is negative; seeds are non-negative integers", seed=seed))
    elif seed > MAX_SEED:
        # no run of labctl's has one (numpy's and torch's seeds are unsigned 32-bit)
        report.refuse(
            "seed",
            Msg("{seed} is above {top}, the largest seed labctl runs", seed=seed, top=MAX_SEED),
        )


def _labctl(data: dict, report: Report) -> None:
    info = data.get("labctl")
    if not isinstance(info, dict):
        return
    if isinstance(info.get("contract_id"), str) and info["contract_id"] != contract.CONTRACT_ID:
        report.refuse(
            "labctl.contract_id",
            Msg(
                "{given!r} is not {contract}",
                given=info["contract_id"],
                contract=contract.CONTRACT_ID,
            ),
        )
    sha = info.get("contract_sha256")
    if isinstance(sha, str) and sha not in (
        contract.CONTRACT_V1_SHA256,
        *contract.CONTRACT_V1_EARLIER_SHA256,
    ):
        report.refuse(
            "labctl.contract_sha256",
            Msg("not the digest of {contract} as labctl pins it", contract=contract.CONTRACT_ID),
        )


def _known_failures(data: dict, report: Report) -> None:
    failures = data.get("known_failures")
    if not isinstance(failures, list) or report.flagged("known_failures"):
        return
    # The template's answer may be "none" (<sanitized-failure-or-none>).
    listed = [f for f in failures if not (isinstance(f, str) and f.strip().lower() in NONE)]
    if listed:
        report.warn(
            "known_failures", Msg("the record lists {count} known failure(s)", count=len(listed))
        )


def validate_data(
    data: Any, report: Report, root: Path | None = None, now: datetime | None = None
) -> Report:
    """Run every check on parsed `data`, adding to `report`."""
    report.data = data
    if not isinstance(data, dict):
        report.refuse(
            "(document)", Msg("must be a mapping of fields, not {kind}", kind=declared(_kind(data)))
        )
        return report
    root = (root or project_root()).resolve()
    now = now or datetime.now(timezone.utc)
    _placeholders(data, (), report)
    _schema(data, report)
    _module(data, report)
    check_commit(data, root, report)
    _verified_at(data, now, report)
    _seed(data, report)
    check_metrics(data, report)
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
        report.refuse(loaded.problem.field, loaded.problem.shown)
        return report
    return validate_data(loaded.data, report, root, now)
