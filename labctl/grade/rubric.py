"""The grading rubric: what earns points, and who may see each item.

A rubric is a YAML file validated by `Rubric` (unknown keys refused). Each
item scores one thing labctl measures:

- `function`: one contract function passes every check in `checks` (default:
  every check but the ones a `check` item of the rubric scores on its own, so a
  hidden check never shows through a visible item's message);
- `check`: one verify check passes for every contract function;
- `package`: the clean room loads and keeps the import policy;
- `metric`: one of the course template's metrics (第8章 学习者提交模板), measured on
  the learner's clean room through the lab that declares it, meets its tolerance;
- `submission`: the learner's evidence submission is valid and every claim in it
  is re-measured by labctl and reproduced.

`contract` (1 or 2, default 1) is the contract version every learner's room is
verified against (`labctl/data/rubric-default-v2.yaml` targets v2); a
`function` item's target must be one of that version's functions.

`visibility` is Gradescope's: `visible`; `after_due_date` (after the rubric's
`due`, an ISO 8601 time with its time zone); `after_published` (once the grades
are published, `labctl grade publish`); `hidden` (never shown to the learner).
An item not yet shown is absent from what the learner sees, not even counted
(`labctl.grade.visibility`).

`scoring` (`cascade`, the default, or `independent`) says how a function built on a
failing function is charged (`labctl.grade.score`); `due` and `late` are the due date
and the late rules (`labctl.grade.late`).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from labctl.errors import LabctlError, UsageError
from labctl.evidence.models import Strict
from labctl.grade.late import LatePolicy, parse_time
from labctl.i18n import N_, Msg, _, joined
from labctl.i18n.validation import explained

RUBRIC_SCHEMA = "labctl.rubric.v1"
KINDS = ("function", "check", "package", "metric", "submission")
VISIBILITIES = ("visible", "after_due_date", "hidden", "after_published")


class RubricError(LabctlError):
    """A rubric file that is not valid YAML or does not match the rubric model."""


def to_the_cent(value: float) -> float:
    """`value`, refused unless it is whole cents: every score is kept to the cent, so an item
    of 33.333333 made a full score of 100 out of a maximum of 99.999999, and an item of 0.125
    a score of 0.12 beside its 0.125 in the gradebook."""
    if abs(value * 100 - round(value * 100)) > 1e-6:
        raise ValueError(
            Msg(
                "{points} is finer than a cent: scores are kept to the cent (give at most two "
                "decimals)",
                points=repr(value),
            )
        )
    return round(value, 2)


class Item(Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,79}$")
    kind: Literal["function", "check", "package", "metric", "submission"]
    target: str | None = None
    points: float = Field(gt=0, le=1000, allow_inf_nan=False)
    visibility: Literal["visible", "after_due_date", "hidden", "after_published"] = "visible"
    checks: list[str] | None = None
    description: str = ""

    @field_validator("points")
    @classmethod
    def _cents(cls, value: float) -> float:
        return to_the_cent(value)

    @property
    def hidden(self) -> bool:
        """Not shown to the learner when the batch is graded (later, or never)."""
        return self.visibility != "visible"

    @model_validator(mode="after")
    def _target_exists(self) -> Item:
        from labctl import contract
        from labctl.evidence.modules import DEFAULT_MODULE, MODULES
        from labctl.verify.checks import CHECK_NAMES

        known = {
            # Any version's: the rubric checks its items against its own `contract`.
            "function": contract.function_names(contract.LATEST),
            "check": CHECK_NAMES,
            "metric": next(m for m in MODULES if m.id == DEFAULT_MODULE).required,
        }
        if self.kind in known:
            if self.target not in known[self.kind]:
                needs = Msg(
                    "{kind} item {id} needs a target among: {known}",
                    kind=self.kind,
                    id=repr(self.id),
                    known=", ".join(known[self.kind]),
                )
                raise ValueError(needs)
        elif self.target is not None:
            raise ValueError(Msg("a {kind} item takes no target", kind=self.kind))
        if self.checks is not None:
            if self.kind != "function":
                raise ValueError(Msg("only a function item lists checks"))
            unknown = [c for c in self.checks if c not in CHECK_NAMES]
            if unknown:
                raise ValueError(
                    Msg(
                        "unknown checks {unknown}; known: {known}",
                        unknown=str(unknown),
                        known=", ".join(CHECK_NAMES),
                    )
                )
        return self


# The names of the rubrics labctl ships: shown in the chosen language; a TA's own name is
# shown as written (tests/test_grade_i18n.py checks these are the shipped files' names).
SHIPPED_NAMES = (
    N_(
        "labctl default rubric (contract v1, the learner template of "
        "第8章 · Attention 与 Transformer Block)"
    ),
    N_(
        "labctl default rubric (contract v2, the learner template of "
        "第8章 · Attention 与 Transformer Block)"
    ),
)


class Rubric(Strict):
    schema_: Literal["labctl.rubric.v1"] = Field(alias="schema")
    name: str
    contract: Literal[1, 2] = 1
    items: list[Item] = Field(min_length=1)
    # How a failing function is charged (`labctl.grade.score`): `cascade` charges every
    # function that fails; `independent` does not charge one whose failure verify localises
    # to a failing function it is built on.
    scoring: Literal["cascade", "independent"] = "cascade"
    # ISO 8601 with a timezone: the late rules count from it (`labctl.grade.late`), and
    # `after_due_date` items are shown from then on (`labctl.grade.visibility`).
    due: str | None = None
    late: LatePolicy | None = None
    # How far past `max_score` a TA's overrides may take a score (`labctl.grade.overrides`).
    bonus_points: float = Field(default=0, ge=0, le=1000, allow_inf_nan=False)

    @field_validator("bonus_points")
    @classmethod
    def _bonus_cents(cls, value: float) -> float:
        return to_the_cent(value)

    @field_validator("due", mode="before")
    @classmethod
    def _due_time(cls, value: object) -> object:
        if value is None:
            return None
        when = parse_time(value)
        if when is None:
            raise ValueError(
                Msg("due must be an ISO 8601 time with its timezone (2026-03-01T23:59:00+08:00)")
            )
        return when.isoformat()

    @property
    def due_at(self) -> datetime | None:
        return parse_time(self.due)

    @model_validator(mode="after")
    def _unique_ids(self) -> Rubric:
        from labctl import contract

        seen: set[str] = set()
        names = contract.function_names(self.contract)
        for item in self.items:
            if item.id in seen:
                raise ValueError(Msg("item id {id} appears twice", id=repr(item.id)))
            seen.add(item.id)
            if item.kind == "function" and item.target not in names:
                raise ValueError(
                    Msg(
                        "function item {id}: {target} is not a function of contract v{version}",
                        id=repr(item.id),
                        target=item.target,
                        version=self.contract,
                    )
                )
        if self.late is not None and self.due is None:
            raise ValueError(Msg("late rules need a due date (due:)"))
        return self

    @property
    def shown_name(self) -> str:
        """The name a person reads: a shipped rubric's in the chosen language."""
        return _(self.name) if self.name in SHIPPED_NAMES else self.name

    @property
    def max_score(self) -> float:
        return sum(i.points for i in self.items)

    @property
    def needs_metrics(self) -> bool:
        return any(i.kind == "metric" for i in self.items)

    @property
    def metric_targets(self) -> list[str]:
        """The template metrics its metric items score, each once, in the rubric's order."""
        return list(dict.fromkeys(i.target for i in self.items if i.kind == "metric"))

    @property
    def needs_submission(self) -> bool:
        return any(i.kind == "submission" for i in self.items)

    def function_checks(self, item: Item) -> tuple[str, ...]:
        """The checks a function item scores: its own list, else all but those scored apart."""
        from labctl.verify.checks import CHECK_NAMES

        if item.checks is not None:
            return tuple(item.checks)
        apart = {i.target for i in self.items if i.kind == "check"}
        return tuple(c for c in CHECK_NAMES if c not in apart)

    def dump(self) -> dict:
        data = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        if self.contract == 1:
            # A v1 rubric dumps (and so digests) as it did before rubrics named a contract.
            data.pop("contract")
        if not self.bonus_points:
            data.pop("bonus_points")  # likewise before rubrics allowed bonus points
        return data

    def sha256(self) -> str:
        """The digest of the rubric's content (not its file's layout): part of the resume key."""
        text = json.dumps(self.dump(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


class _RepeatedKey(yaml.constructor.ConstructorError):
    """YAML's error for a repeated key, with labctl's message kept to show it translated."""

    def __init__(self, message: Msg, mark) -> None:
        super().__init__(None, None, str(message), mark)
        self.message = message


class _UniqueKeyLoader(yaml.SafeLoader):
    """Refuses a mapping that repeats a key (YAML would keep the last one silently)."""

    def construct_mapping(self, node, deep=False):
        seen = []
        for key_node, _value in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:  # at its second place: where the TA looks
                raise _RepeatedKey(
                    Msg("key {key} appears twice", key=repr(key)), key_node.start_mark
                )
            seen.append(key)
        return super().construct_mapping(node, deep=deep)


def yaml_problem(exc: yaml.YAMLError) -> str | Msg:
    """PyYAML's error on one line, where it is and what: its own text spans three or four lines
    (a snippet of the file under a caret), which a one-line error cannot hold."""
    if isinstance(exc, _RepeatedKey):
        what: str | Msg = exc.message
    elif isinstance(exc, yaml.MarkedYAMLError):
        what = " ".join(", ".join(p for p in (exc.context, exc.problem) if p).split())
    else:
        return " ".join(str(exc).split())
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is None:
        return what or " ".join(str(exc).split())
    return Msg(
        "line {line}, column {column}: {what}",
        line=mark.line + 1,
        column=mark.column + 1,
        what=what,
    )


def parse_rubric(text: str, where: str | Msg = "rubric") -> Rubric:
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader that refuses repeated keys
    except RecursionError:
        raise RubricError(
            Msg("{where} is not valid YAML: {why}", where=where, why=Msg("nested too deeply"))
        ) from None
    except yaml.YAMLError as exc:
        why = yaml_problem(exc)
        raise RubricError(Msg("{where} is not valid YAML: {why}", where=where, why=why)) from None
    try:
        return Rubric.model_validate(data)
    except ValidationError as exc:
        problems = invalid(exc)
        raise RubricError(
            Msg("{where} is not a valid rubric: {problems}", where=where, problems=problems)
        ) from None


def invalid(exc: ValidationError) -> str | Msg:
    """Every problem pydantic found in one of grading's YAML files (a rubric, overrides), by
    where it stands, in the catalog's words."""
    return joined(
        [
            Msg(
                "{where}: {detail}",
                where=".".join(str(p) for p in e["loc"]) or Msg("(document)"),
                detail=_problem(e),
            )
            for e in exc.errors()
        ]
    )


def _problem(error: dict) -> str | Msg:
    """A labctl validator's message, else the error worded from its kind and values (pydantic's
    own sentence is English only)."""
    raised = error.get("ctx", {}).get("error")
    if isinstance(raised, ValueError) and raised.args and isinstance(raised.args[0], Msg):
        return raised.args[0]
    if error.get("type") == "extra_forbidden":
        return Msg("is not a field here")
    return explained(error)


def default_rubric_text(version: int = 1) -> str:
    name = "data/rubric-default.yaml" if version == 1 else f"data/rubric-default-v{version}.yaml"
    return resources.files("labctl").joinpath(name).read_text("utf-8")


def load_rubric(path: Path | None = None, version: int = 1) -> Rubric:
    """The rubric at `path`, or the default one that ships with labctl for contract `version`."""
    if path is None:
        return parse_rubric(default_rubric_text(version), Msg("the default rubric"))
    if not path.is_file():
        raise UsageError(Msg("rubric {path} is not a file", path=str(path)))
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RubricError(
            Msg("cannot read rubric {path}: {why}", path=str(path), why=str(exc))
        ) from None
    return parse_rubric(text, str(path.name))
