"""A TA's choices for one run of `labctl grade`, beyond what changes a verdict.

- `only`: regrade just these learners (their earlier results are not reused);
  every other learner's row stays as its record has it, whatever changed since
  (a learner with no record yet is graded as usual: it has no row to keep);
- `force`: reuse no earlier result at all;
- `submitted`: when each learner handed in (`labctl.grade.late`), to charge
  late work by the rubric's `due:` and `late:`;
- `overrides`: the TA's point adjustments (`labctl.grade.overrides`).

The late penalty and the adjustments are applied to the rows on every run, after
grading, so changing them never regrades anyone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from labctl.errors import UsageError
from labctl.grade.late import lateness
from labctl.grade.layout import Learner
from labctl.grade.overrides import Overrides
from labctl.grade.pool import INTERNAL_ERROR
from labctl.grade.rubric import Rubric
from labctl.grade.score import Row
from labctl.i18n import Msg


@dataclass(frozen=True)
class Workflow:
    only: frozenset[str] = frozenset()
    force: bool = False
    submitted: dict[str, datetime] | None = None
    overrides: Overrides | None = None
    overrides_name: str = "overrides.yaml"

    def check(self, learners: Sequence[Learner]) -> None:
        """Refuse, before anyone is graded, a learner named here that the class does not hold."""
        ids = [learner.id for learner in learners]
        unknown = sorted(self.only - set(ids))
        if unknown:
            raise UsageError(
                Msg("--only: no learner {learners} in this class", learners=", ".join(unknown))
            )
        if self.overrides is not None:
            self.overrides.check_learners(ids, self.overrides_name)

    def reuse(self, learner: Learner, record: dict | None, key: str) -> bool:
        """Whether the learner's earlier record stands for this run."""
        if record is None or self.force or learner.id in self.only:
            return False
        if record.get("status") == INTERNAL_ERROR:
            return False  # labctl failed, not the learner: never a result to keep
        return bool(self.only) or record.get("key") == key

    def apply(self, rows: Sequence[Row], rubric: Rubric) -> list[Msg]:
        """Set each row's lateness and adjustments; returns the warnings for the grader."""
        warnings: list[Msg] = []
        due = rubric.due_at
        if due is not None and self.submitted is None:
            warnings.append(
                Msg(
                    "the rubric has a due date but no submission times were given: lateness not computed"
                )
            )
        for row in rows:
            if due is not None and self.submitted is not None:
                when = self.submitted.get(row.learner)
                if when is None:
                    warnings.append(
                        Msg(
                            "no submission time for {learner}: treated as on time",
                            learner=row.learner,
                        )
                    )
                row.late = lateness(when, due, rubric.late)
            if self.overrides is not None:
                row.adjustments = [o.to_json() for o in self.overrides.of(row.learner)]
        return warnings
