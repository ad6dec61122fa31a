"""Find the labs: every module in the `labctl.labs` package that defines `LAB`.

Built by a function, not by import side effects: adding a lab means adding one
module. Lab modules keep torch out of their top level, so this stays cheap.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Iterable
from dataclasses import replace
from functools import cache
from importlib import resources

from labctl.errors import UsageError
from labctl.i18n import N_, Msg
from labctl.lab import Lab, Metric

# Each version is the one before with the metrics of the labs added since; a tolerance
# that changes, or a metric that is retired, is listed in tests/test_tolerances.py with the
# reason. A record is judged under the version it names (`metric_table_of`).
TOLERANCE_TABLE_VERSION = "v4"
TOLERANCE_VERSIONS = ("v1", "v2", "v3", "v4")


@cache
def discover() -> tuple[Lab, ...]:
    """All labs, in the order their modules declare (`ORDER`), then by id."""
    from labctl import labs

    found: list[Lab] = []
    for info in pkgutil.iter_modules(labs.__path__):
        module = importlib.import_module(f"labctl.labs.{info.name}")
        lab = getattr(module, "LAB", None)
        if isinstance(lab, Lab):
            found.append(lab)
    ids = [lab.id for lab in found]
    duplicates = {i for i in ids if ids.count(i) > 1}
    if duplicates:
        raise RuntimeError(f"two lab modules declare the same id: {sorted(duplicates)}")
    order = getattr(labs, "ORDER", ())
    return tuple(sorted(found, key=lambda lab: (_rank(order, lab.id), lab.id)))


def _rank(order: tuple[str, ...], lab_id: str) -> int:
    return order.index(lab_id) if lab_id in order else len(order)


def get(lab_id: str, or_all: bool = False) -> Lab:
    """The lab `lab_id`; the refusal offers `all` only where the command takes it (`run`)."""
    for lab in discover():
        if lab.id == lab_id:
            return lab
    known = ", ".join(lab.id for lab in discover())
    if or_all:
        raise UsageError(
            Msg("unknown lab {lab!r}; known labs: {known}, or all", lab=lab_id, known=known)
        )
    raise UsageError(Msg("unknown lab {lab!r}; known labs: {known}", lab=lab_id, known=known))


def resolve(ids: list[str]) -> list[Lab]:
    """Labs for command-line ids: `all`, or ids in the order given, duplicates dropped."""
    if not ids:
        raise UsageError(N_("name at least one lab, or all"))
    if "all" in ids:
        for lab_id in ids:
            if lab_id != "all":
                get(lab_id, or_all=True)  # a typo beside `all` is refused, not passed over
        return list(discover())
    chosen: list[Lab] = []
    for lab_id in ids:
        lab = get(lab_id, or_all=True)
        if lab not in chosen:
            chosen.append(lab)
    return chosen


def metric_table() -> dict[str, tuple[Lab, Metric]]:
    """Tolerance table v1: every metric name, with the lab that measures it."""
    table: dict[str, tuple[Lab, Metric]] = {}
    for lab in discover():
        for metric in lab.metrics:
            if metric.name in table:
                other = table[metric.name][0].id
                raise RuntimeError(f"metric {metric.name} is declared by both {other} and {lab.id}")
            table[metric.name] = (lab, metric)
    return table


def measuring(names: Iterable[str]) -> dict[str, tuple[Lab, Metric]]:
    """The lab and metric of each of `names` that a lab measures, as `metric_table` has them,
    importing only the labs the current frozen table names for them: the template's five
    metrics need four of the 25 lab modules (a tenth of a second at every verify). A name the
    frozen table does not place, or a lab that no longer declares it there, is looked up in
    the whole table."""
    found: dict[str, tuple[Lab, Metric]] = {}
    frozen = frozen_table(TOLERANCE_TABLE_VERSION)
    for name in names:
        lab_id = frozen.get(name, {}).get("lab")
        lab = _lab_module(lab_id) if isinstance(lab_id, str) else None
        metric = next((m for m in lab.metrics if m.name == name), None) if lab else None
        if metric is None:
            table = metric_table()
            return {n: table[n] for n in names if n in table}
        found[name] = (lab, metric)
    return found


def _lab_module(lab_id: str) -> Lab | None:
    """The lab `lab_id` from the module named after it (`scale-ablation`: `scale_ablation`)."""
    name = lab_id.replace("-", "_")
    if not name.isidentifier():
        return None
    try:
        module = importlib.import_module(f"labctl.labs.{name}")
    except ModuleNotFoundError:
        return None
    lab = getattr(module, "LAB", None)
    return lab if isinstance(lab, Lab) and lab.id == lab_id else None


@cache
def frozen_table(version: str) -> dict[str, dict]:
    """Each metric's entry in the frozen table `version` (labctl/data/tolerances-*.json)."""
    path = resources.files("labctl").joinpath(f"data/tolerances-{version}.json")
    return json.loads(path.read_text("utf-8"))["metrics"]


def frozen_tolerances(version: str) -> dict[str, str]:
    """Each metric's expected in the frozen table `version`."""
    return {name: entry["expected"] for name, entry in frozen_table(version).items()}


def retired(version: str) -> dict[str, str]:
    """The metrics of the frozen table `version` that no lab measures now, each with its lab."""
    live = metric_table()
    return {n: e["lab"] for n, e in frozen_table(version).items() if n not in live}


def metric_table_of(version: object) -> dict[str, tuple[Lab, Metric]]:
    """The metric table as the frozen table `version` judged it: a record made under v2 keeps
    v2's bounds after a later version tightens one, and its claims of a metric retired since
    (v4 replaced sdpa_max_error) are judged as that table declared them, though no lab
    measures them now. An unknown version gets the live table."""
    live = metric_table()
    if version == TOLERANCE_TABLE_VERSION or version not in TOLERANCE_VERSIONS:
        return live
    then = frozen_table(version)
    table = {
        name: (lab, replace(metric, expected=then[name]["expected"]) if name in then else metric)
        for name, (lab, metric) in live.items()
    }
    labs = {lab.id: lab for lab in discover()}
    for name, lab_id in retired(version).items():
        if lab_id not in labs:
            continue
        entry = then[name]
        table[name] = (
            labs[lab_id],
            Metric(
                name,
                entry["unit"],
                entry["expected"],
                "",
                impls=tuple(entry["impls"]),
                why=entry["why"],
                reproduce_abs=entry["reproduce_abs"],
                reproduce_rel=entry["reproduce_rel"],
                timing=entry["timing"],
            ),
        )
    return table


def tolerance_table() -> dict:
    """The live tolerance table as data: what `labctl/data/tolerances-v4.json` freezes.

    Regenerate the frozen file after adding a lab: `python -m labctl.registry > labctl/data/tolerances-v4.json`.
    """
    return {
        "version": TOLERANCE_TABLE_VERSION,
        "metrics": {
            name: {
                "lab": lab.id,
                "unit": metric.unit,
                "expected": metric.expected,
                "impls": list(metric.impls),
                "timing": metric.timing,
                "reproduce_abs": metric.reproduce_abs,
                "reproduce_rel": metric.reproduce_rel,
                "why": str(metric.why),
            }
            for name, (lab, metric) in sorted(metric_table().items())
        },
    }


if __name__ == "__main__":
    import json

    print(json.dumps(tolerance_table(), indent=2, ensure_ascii=False))
