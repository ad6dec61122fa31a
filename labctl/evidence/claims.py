"""The checks of an evidence record's metric claims against the tolerance table: each claim
named in the table, on an implementation the table measures, with the table's expected,
unit and timing, claimed once, with a finite actual that satisfies its expected and a
`passed` flag that says so; every metric the module requires is claimed."""

from __future__ import annotations

import math

from labctl import registry
from labctl.evidence.findings import Report, claim_impl, is_number
from labctl.i18n import N_, Msg
from labctl.lab import Metric, parse_expected, satisfies, tolerance_key


def _same_tolerance(a: str, b: str) -> bool:
    try:
        return tolerance_key(a) == tolerance_key(b)
    except ValueError:
        return False


def judged_under(data: dict) -> str:
    """The tolerance table a record names (`labctl.tolerances`), else the live one."""
    info = data.get("labctl")
    named = info.get("tolerances") if isinstance(info, dict) else None
    return named if named in registry.TOLERANCE_VERSIONS else registry.TOLERANCE_TABLE_VERSION


def check_metrics(data: dict, report: Report) -> None:
    rows = data.get("metrics")
    if not isinstance(rows, list):
        return
    version = judged_under(data)
    table = registry.metric_table_of(version)
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
                Msg(
                    "{name!r} is not in the tolerance table {version}; no lab measures it, "
                    "so it cannot be re-measured",
                    name=name,
                    version=version,
                ),
            )
            key = (name, impl if isinstance(impl, str) else "")
        else:
            key = (name, claim_impl(metric, impl))
            claims = sum(isinstance(r, dict) and r.get("name") == name for r in rows)
            _metric_against_table(row, here, metric, report, claims > 1, version)
        if key in seen:
            shown = f"{name!r}" + (f" ({key[1]})" if key[1] else "")
            report.refuse(
                f"{here}.name",
                Msg(
                    "{claim} is claimed twice (first at metrics[{first}])",
                    claim=shown,
                    first=seen[key],
                ),
            )
        else:
            seen[key] = index
        _actual(row, here, metric, report)
    module = report.module
    if module is not None and not any(p.field == "metrics" for p in report.problems):
        for required in module.required:
            if required not in names:
                report.refuse(
                    "metrics",
                    Msg(
                        "required metric {metric!r} missing (module {module})",
                        metric=required,
                        module=module.id,
                    ),
                )


def _metric_against_table(
    row: dict, here: str, metric: Metric, report: Report, other_rows: bool, version: str
) -> None:
    """Check one claim against the table; `other_rows`: the record claims the metric elsewhere too."""
    impl = row.get("impl")
    if isinstance(impl, str) and not report.flagged(f"{here}.impl") and impl not in metric.impls:
        report.refuse(
            f"{here}.impl",
            Msg(
                "{metric} is measured on {impls}, not {impl}",
                metric=metric.name,
                impls=", ".join(metric.impls),
                impl=impl,
            ),
        )
    elif impl == "reference" and "clean-room" in metric.impls and not other_rows:
        module = report.module
        if module is not None and metric.name in module.required:
            # the module asks it of the learner's room: a reference row is no evidence of that
            report.refuse(
                f"{here}.impl",
                Msg(
                    "is 'reference' only: module {module} requires {metric} of your clean "
                    "room; claim it with impl 'clean-room'",
                    module=module.id,
                    metric=metric.name,
                ),
            )
        else:
            report.warn(
                f"{here}.impl",
                Msg("is 'reference' only: it says nothing about a clean room"),
            )
    expected = row.get("expected")
    if (
        isinstance(expected, str)
        and not report.flagged(f"{here}.expected")
        and not _same_tolerance(expected, metric.expected)
    ):
        report.refuse(
            f"{here}.expected",
            Msg(
                "{expected!r} is not the {version} tolerance of {metric} ({table!r})",
                version=version,
                expected=expected,
                metric=metric.name,
                table=metric.expected,
            ),
        )
    timing = row.get("timing")
    if isinstance(timing, bool) and timing != metric.timing:
        report.refuse(
            f"{here}.timing",
            Msg("{metric} is a timing metric", metric=metric.name)
            if metric.timing
            else Msg("{metric} is not a timing metric", metric=metric.name),
        )
    unit = row.get("unit")
    if isinstance(unit, str) and unit != metric.unit:
        report.refuse(
            f"{here}.unit",
            Msg(
                "{metric} is measured in {unit!r}, not {given!r}",
                metric=metric.name,
                unit=metric.unit,
                given=unit,
            ),
        )


def _actual(row: dict, here: str, metric: Metric | None, report: Report) -> None:
    actual = row.get("actual")
    if not is_number(actual) or report.flagged(f"{here}.actual"):
        return
    if not math.isfinite(actual):
        report.refuse(f"{here}.actual", N_("must be a finite number"))
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
                Msg(
                    "{actual!r} does not satisfy {expected} (timing: informative only)",
                    actual=actual,
                    expected=expected,
                ),
            )
        else:
            report.refuse(
                f"{here}.actual",
                Msg("{actual!r} does not satisfy {expected}", actual=actual, expected=expected),
            )
    claimed = row.get("passed")
    if isinstance(claimed, bool) and claimed != passed and not (metric and metric.timing):
        report.refuse(
            f"{here}.passed",
            Msg(
                "says {claimed}, but {actual!r} satisfies {expected}",
                claimed=claimed,
                actual=actual,
                expected=expected,
            )
            if passed
            else Msg(
                "says {claimed}, but {actual!r} does not satisfy {expected}",
                claimed=claimed,
                actual=actual,
                expected=expected,
            ),
        )
