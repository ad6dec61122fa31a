"""`overrides.yaml`: a TA's point adjustments, each for one learner and with its reason.

    schema: labctl.grade-overrides.v1
    overrides:
      - learner: alice
        points: 2            # added to the score (negative: taken away)
        reason: "bad-input check regraded by hand: the ValueError is raised, one call later"

The file is validated strictly (unknown keys, an empty reason, a learner the
class does not hold: refused, exit 1); learner ids are NFC-normalised, as folder names are. An adjustment is added after the late
penalty (the TA's word is the last one), and the score is not clamped to the
rubric's range. Each is recorded in the gradebook and shown, with its reason, in
the learner's feedback.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator

from labctl.errors import LabctlError, UsageError
from labctl.evidence.models import Strict
from labctl.grade.rubric import to_the_cent
from labctl.i18n import Msg

OVERRIDES_SCHEMA = "labctl.grade-overrides.v1"


class OverridesError(LabctlError):
    """An overrides file that is not valid YAML, not an overrides document, or names no learner."""


class Override(Strict):
    learner: str = Field(min_length=1, max_length=200)
    points: float = Field(ge=-1000, le=1000, allow_inf_nan=False)
    reason: str = Field(min_length=1, max_length=2000)

    @field_validator("learner")
    @classmethod
    def _normalised(cls, value: str) -> str:
        from labctl.grade.late import learner_key

        return learner_key(value)  # NFC, as the class folder's names are

    @field_validator("points")
    @classmethod
    def _not_zero(cls, value: float) -> float:
        if not math.isfinite(value) or value == 0:
            raise ValueError(Msg("points must be a finite number other than 0"))
        return to_the_cent(value)

    @field_validator("reason")
    @classmethod
    def _said(cls, value: str) -> str:
        if not value.strip():
            raise ValueError(Msg("a reason must say something"))
        return value

    def to_json(self) -> dict:
        return {"points": self.points, "reason": self.reason}


class Overrides(Strict):
    schema_: Literal["labctl.grade-overrides.v1"] = Field(alias="schema")
    overrides: list[Override] = Field(default_factory=list)

    def of(self, learner: str) -> list[Override]:
        return [o for o in self.overrides if o.learner == learner]

    def check_learners(self, learners: Iterable[str], where: str) -> None:
        known = set(learners)
        unknown = sorted({o.learner for o in self.overrides} - known)
        if unknown:
            raise OverridesError(
                Msg(
                    "{where}: no learner {learners} in this class",
                    where=where,
                    learners=", ".join(unknown),
                )
            )


def load_overrides(path: Path) -> Overrides:
    from labctl.grade.rubric import _UniqueKeyLoader, invalid, yaml_problem

    if not path.is_file():
        raise UsageError(Msg("--overrides {path} is not a file", path=str(path)))
    try:
        data = yaml.load(path.read_text("utf-8"), Loader=_UniqueKeyLoader)
    except RecursionError:
        raise OverridesError(
            Msg("{where} is not valid YAML: {why}", where=path.name, why=Msg("nested too deeply"))
        ) from None
    except yaml.YAMLError as exc:
        raise OverridesError(
            Msg("{where} is not valid YAML: {why}", where=path.name, why=yaml_problem(exc))
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise OverridesError(
            Msg("{where} is not valid YAML: {why}", where=path.name, why=str(exc))
        ) from None
    try:
        return Overrides.model_validate(data)
    except ValidationError as exc:
        problems = invalid(exc)
        raise OverridesError(
            Msg(
                "{where} is not a valid overrides file: {problems}",
                where=path.name,
                problems=problems,
            )
        ) from None
