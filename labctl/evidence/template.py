"""The learner template of a course module, blank or filled from machine records.

The blank template is the one at the end of 第8章 · Attention 与 Transformer Block (学习者提交模板), with the
metrics' versioned tolerances written in and `labctl run` as the commands.
Every answer a learner gives stays a `<...>` placeholder, which validation
refuses, so the template can never pass for results.

`fill` takes the newest record of each lab the module needs from the evidence
store (the manifest points at it), all on one seed (the newest record's; an
older record of another lab on that seed is found under `runs/<lab>/`), and
fills commit, environment, seed, commands, metric actuals and artifacts. A
`<...>` is left only where no record answers (a lab never run, a commit that
was unknown), with a warning that says what to run.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

import labctl
from labctl import registry
from labctl.errors import UsageError
from labctl.evidence import modules
from labctl.evidence.findings import FIELD_ORDER, claim_impl, course_module
from labctl.evidence.models import SCHEMA_ID, CleanRoomInfo, EvidenceRecord, LabctlInfo
from labctl.evidence.parse import load
from labctl.evidence.store import EvidenceStore, yaml_text
from labctl.evidence.times import parse_time
from labctl.i18n import Msg, _
from labctl.lab import Lab
from labctl.wrapping import wrap

DEFAULT_SEED = 5
PLACEHOLDERS = {
    "commit": "<learner-commit-sha>",
    "verified_at": "<iso-date>",
    "environment": "<sanitized-python-device>",
    "expected": "<versioned-tolerance>",
    "actual": "<recorded-value>",
    "artifact": "<learner-repo-relative-artifact-path>",
    "failure": "<sanitized-failure-or-none>",
}
LICENSE_PLACEHOLDER = {
    "source": "<source>",
    "version": "<version>",
    "license": "<license>",
    "attribution": "<attribution>",
    "redistribution": "<redistribution>",
}


@dataclass
class Template:
    module: modules.Module
    data: dict
    filled: bool = False
    sources: list[str] = field(default_factory=list)
    warnings: list[str | Msg] = field(default_factory=list)

    def yaml_text(self) -> str:
        if self.filled:
            header = [
                _(
                    Msg(
                        "{schema} submission for module {module}, filled by labctl {version} "
                        "from machine records:",
                        schema=SCHEMA_ID,
                        module=self.module.id,
                        version=labctl.__version__,
                    )
                ),
                *(f"  {source}" for source in self.sources),
                _(Msg("Review it, answer any <...> left, then: labctl evidence submit FILE")),
            ]
        else:
            header = [
                _(
                    Msg(
                        "{schema} submission template for module {module}",
                        schema=SCHEMA_ID,
                        module=self.module.id,
                    )
                ),
                f"({self.module.section}; 待填写，不是当前机器证据).",
                # One message, split where the file's comment lines break.
                *_(
                    Msg(
                        "Every <...> is unfilled: replace each with your real result. A "
                        "placeholder\nnever passes: labctl evidence validate and submit refuse "
                        "it.\nOr fill it from your own run: run the commands below, then\n"
                        "labctl evidence template --fill"
                    )
                ).splitlines(),
            ]
        # read on an 80-column terminal before it is saved: comments wrapped to fit, and YAML
        # folds a long text before its last word could pass the edge
        comments = [f"# {piece}" for line in header for piece in wrap(line, 78)]
        return "".join(f"{line}\n" for line in comments) + yaml_text(self.data, width=70)


def module_or_usage(module_id: str) -> modules.Module:
    module = course_module(module_id)
    if module is None:
        known = ", ".join(m.id for m in modules.MODULES)
        raise UsageError(
            Msg(
                "unknown module {module}; known modules: {known}",
                module=repr(module_id),
                known=known,
            )
        )
    return module


def _labs(module: modules.Module) -> tuple[list[Lab], list[str]]:
    """The labs measuring the module's metrics (registry order), and the metrics no lab measures."""
    table = registry.metric_table()
    labs = {table[name][0].id for name in module.required if name in table}
    missing = [name for name in module.required if name not in table]
    return [lab for lab in registry.discover() if lab.id in labs], missing


def _run_command(labs: list[Lab], seed: int) -> str:
    ids = " ".join(lab.id for lab in labs) or "all"
    return f"labctl run {ids} --seed {seed} --impl both"


def blank(module: modules.Module) -> Template:
    table = registry.metric_table()
    labs, missing = _labs(module)
    metrics = [
        {
            "name": name,
            "expected": table[name][1].expected if name in table else PLACEHOLDERS["expected"],
            "actual": PLACEHOLDERS["actual"],
        }
        for name in module.required
    ]
    data = {
        "schema": SCHEMA_ID,
        "module": module.id,
        "commit": PLACEHOLDERS["commit"],
        "verified_at": PLACEHOLDERS["verified_at"],
        "environment": PLACEHOLDERS["environment"],
        "seed": DEFAULT_SEED,
        "commands": [_run_command(labs, DEFAULT_SEED)],
        "metrics": metrics,
        "artifacts": [PLACEHOLDERS["artifact"]],
        "cost": {"gross_usd": 0, "credit_usd": 0},
        "licenses": [dict(LICENSE_PLACEHOLDER)],
        "known_failures": [PLACEHOLDERS["failure"]],
    }
    warnings: list[str | Msg] = [
        Msg("no lab measures {metric} yet: its tolerance is left blank", metric=name)
        for name in missing
    ]
    return Template(module, data, warnings=warnings)


# -- filling from the store ------------------------------------------------------


@dataclass(frozen=True)
class _Found:
    record: EvidenceRecord
    path: Path


def _read_record(path: Path, root: Path) -> EvidenceRecord | None:
    try:
        if not path.resolve().is_relative_to(root.resolve()) or not path.is_file():
            return None
        loaded = load(path)
        if loaded.problem or not isinstance(loaded.data, dict):
            return None
        return EvidenceRecord.model_validate(loaded.data, by_alias=True, by_name=False)
    except (OSError, ValidationError, UsageError):
        return None


def runs_store(store: EvidenceStore) -> EvidenceStore:
    """Where `labctl run` wrote: `ROOT/runs` of an evidence root, or ROOT itself when it is a
    runs folder (`labctl run --out DIR` keeps records in DIR/<lab>/ and its manifest in DIR)."""
    runs = store.root / "runs"
    return EvidenceStore(runs) if runs.is_dir() else store


def _newest(store: EvidenceStore, lab: Lab, warnings: list[str | Msg]) -> _Found | None:
    runs = runs_store(store)
    entry = runs.read_manifest()["modules"].get(lab.id)
    if not isinstance(entry, dict):
        # records of an older labctl: one manifest at the evidence root
        runs = store
        entry = store.read_manifest()["modules"].get(lab.id)
    if not isinstance(entry, dict) or not isinstance(entry.get("record"), str):
        return None
    path = runs.root / entry["record"]
    record = _read_record(path, runs.root)
    if record is None:
        warnings.append(
            Msg(
                "the manifest points {lab} at {record}, which is not a record",
                lab=lab.id,
                record=entry["record"],
            )
        )
        return None
    return _Found(record, path)


def _newest_on_seed(store: EvidenceStore, lab: Lab, seed: int) -> _Found | None:
    folder = runs_store(store).root / lab.id
    if not folder.is_dir():
        return None
    best: _Found | None = None
    for path in sorted(folder.glob("*.json")):
        record = _read_record(path, store.root)
        if record is None or record.module != lab.id or record.seed != seed:
            continue
        if best is None or _when(record) >= _when(best.record):
            best = _Found(record, path)
    return best


def _when(record: EvidenceRecord) -> str:
    moment = parse_time(record.verified_at)
    return moment.isoformat() if moment else ""


def _shown(path: Path) -> str:
    try:
        return os.path.relpath(path.resolve(), Path.cwd().resolve())
    except ValueError:
        return str(path)


def _unique(items: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _row(record: EvidenceRecord, name: str, impl: str):
    for row in record.metrics:
        if row.name == name and row.impl == impl:
            return row
    return None


def fill(module: modules.Module, store: EvidenceStore) -> Template:
    """The module's template with every answer the newest machine records give."""
    template = blank(module)
    template.filled = True
    warnings = template.warnings
    labs, _ = _labs(module)
    newest = {lab.id: found for lab in labs if (found := _newest(store, lab, warnings))}
    if not newest:
        warnings.append(
            Msg(
                "no machine records under {root} for {module}; run `{command}` first",
                root=_shown(store.root),
                module=module.id,
                command=_run_command(labs, DEFAULT_SEED),
            )
        )
        return template
    seed = max(newest.values(), key=lambda f: _when(f.record)).record.seed
    chosen: dict[str, _Found] = {}
    for lab in labs:
        found = newest.get(lab.id)
        if found is None or found.record.seed != seed:
            found = _newest_on_seed(store, lab, seed)
        if found is None:
            warnings.append(
                Msg(
                    "no record of {lab} on seed {seed}: run `labctl run {lab} --seed {seed}`",
                    lab=lab.id,
                    seed=seed,
                )
            )
            continue
        chosen[lab.id] = found
    _fill_metrics(template, chosen, seed)
    if chosen:
        _fill_fields(template, list(chosen.values()), seed)
    return template


def _fill_metrics(template: Template, chosen: dict[str, _Found], seed: int) -> None:
    table = registry.metric_table()
    for row in template.data["metrics"]:
        name = row["name"]
        if name not in table:
            continue
        lab, metric = table[name]
        found = chosen.get(lab.id)
        if found is None:
            continue
        preferred = claim_impl(metric, None)
        candidates = [preferred, *(i for i in metric.impls if i != preferred)]
        measured = next(
            (r for impl in candidates if (r := _row(found.record, name, impl)) is not None), None
        )
        if measured is None:
            template.warnings.append(
                Msg(
                    "{path} has no {name} row: run `labctl run {lab} --seed {seed} --impl both`",
                    path=_shown(found.path),
                    name=name,
                    lab=lab.id,
                    seed=seed,
                )
            )
            continue
        row["actual"] = measured.actual
        row["impl"] = measured.impl
        if measured.passed is False:
            template.warnings.append(
                Msg(
                    "{name} ({impl}) = {actual!r} failed {expected} in {path}: submit will "
                    "refuse it",
                    name=name,
                    impl=measured.impl,
                    actual=measured.actual,
                    expected=metric.expected,
                    path=_shown(found.path),
                )
            )


def _fill_fields(template: Template, found: list[_Found], seed: int) -> None:
    records = sorted((f.record for f in found), key=_when)
    newest = records[-1]
    data = template.data
    template.sources = [_shown(f.path) for f in found]
    commits = _unique([r.commit for r in reversed(records) if r.commit != "unknown"])
    if commits:
        data["commit"] = commits[0]
        if len(commits) > 1:
            template.warnings.append(
                Msg(
                    "the records were made at {n} commits; the newest, {commit}, is named",
                    n=len(commits),
                    commit=commits[0],
                )
            )
        dirty = [r.commit_dirty for r in records]
        if any(d is True for d in dirty):
            data["commit_dirty"] = True
        elif all(d is False for d in dirty):
            data["commit_dirty"] = False
    else:
        template.warnings.append(Msg("the records do not know their commit (no git repository)"))
    data["verified_at"] = newest.verified_at
    env = newest.environment
    data["environment"] = env if isinstance(env, str) else env.model_dump()
    data["seed"] = seed
    data["commands"] = _unique([c for r in records for c in r.commands])
    artifacts = _unique(
        [
            a if isinstance(a, str) else a.model_dump(exclude_none=True)
            for r in records
            for a in r.artifacts
        ]
    )
    # Records of a run outside the repository name artifacts with '..': a submission may name
    # only files inside the repository, so those are left out, with a word about them.
    outside = [a for a in artifacts if _outside(a if isinstance(a, str) else a["path"])]
    if outside:
        template.warnings.append(
            Msg(
                "{n} artifacts lie outside the repository and are not listed; copy them into "
                "the repository and list them to submit them",
                n=len(outside),
            )
        )
    data["artifacts"] = [a for a in artifacts if a not in outside]
    data["cost"] = {
        "gross_usd": sum(r.cost.gross_usd for r in records),
        "credit_usd": sum(r.cost.credit_usd for r in records),
    }
    licenses = _unique([lic.model_dump() for r in records for lic in r.licenses])
    if licenses:
        data["licenses"] = licenses
    data["known_failures"] = _unique([k for r in records for k in r.known_failures])
    infos = [r.labctl for r in records if r.labctl is not None]
    if infos:
        info = infos[-1]
        block: dict[str, Any] = {
            "version": info.version,
            "contract_id": info.contract_id,
            "contract_sha256": info.contract_sha256,
            "tolerances": info.tolerances,
        }
        impls = {i.impl for i in infos}
        if len(impls) == 1 and None not in impls:
            block["impl"] = impls.pop()
        room = _room(template, [i for i in infos if i.impl != "reference"])
        if room is not None:
            block["clean_room"] = room.model_dump()
        if any(i.params_default is False for i in infos):
            block["params_default"] = False
            template.warnings.append(
                Msg(
                    "some records were made with non-default lab parameters: the submission says so"
                )
            )
        data["labctl"] = block
    order = list(FIELD_ORDER)
    template.data = dict(sorted(data.items(), key=lambda kv: order.index(kv[0])))


def _room(template: Template, infos: list[LabctlInfo]) -> CleanRoomInfo | None:
    """The one clean room the records were made with, which `submit` re-measures; a warning
    (and no room, which submit refuses) when they name none, several, or labctl's own."""
    rooms = [i.clean_room for i in infos]
    if not rooms:
        return None
    if not all(isinstance(r, CleanRoomInfo) for r in rooms):
        template.warnings.append(
            Msg(
                "some records name their clean room by path only (an older labctl): run the "
                "labs again with --clean-room my_room"
            )
        )
        return None
    if len({(r.path, r.sha256) for r in rooms}) > 1:
        named = ", ".join(sorted({f"{r.path} ({r.sha256[:12]})" for r in rooms}))
        template.warnings.append(
            Msg(
                "the records were made with different clean rooms ({rooms}): run every lab "
                "again on one room",
                rooms=named,
            )
        )
        return None
    room = rooms[-1]
    if room.own:
        template.warnings.append(
            Msg(
                "the records were made with labctl's own clean room ({path}), not yours: "
                "submit will refuse them; run the labs with --clean-room my_room",
                path=room.path,
            )
        )
    return room


def _outside(path: str) -> bool:
    return Path(path).is_absolute() or ".." in re.split(r"[\\/]", path)


def template(module_id: str, store: EvidenceStore | None = None) -> Template:
    """The blank template of `module_id`, or filled from `store` when one is given."""
    module = module_or_usage(module_id)
    return fill(module, store) if store is not None else blank(module)
