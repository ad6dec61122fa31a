"""A TA's choices for one run of `labctl grade`, beyond what changes a verdict.

- `only`: regrade just these learners (their earlier results are not reused);
  every other learner's row stays as its record has it, whatever changed since
  (a learner with no record yet is graded as usual: it has no row to keep);
  with `only`, `force` too reaches those learners alone;
- `force`: reuse no earlier result at all;
- `submitted`: when each learner handed in (`labctl.grade.late`), to charge
  late work by the rubric's `due:` and `late:`;
- `due_date`: the assignment's due date where the platform gives one (Gradescope's), over
  the rubric's `due:`;
- `due`: each learner's own due date where it is not the assignment's (an extension);
- `overrides`: the TA's point adjustments (`labctl.grade.overrides`).

The late penalty and the adjustments are applied to the rows on every run, after
grading, from this run's files, so changing them never regrades anyone; the records
keep them, so `labctl grade publish` shows the same scores. A score an override takes
past the rubric's maximum (plus its `bonus_points`), or below 0, is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from labctl.errors import UsageError
from labctl.grade.late import LateError, lateness
from labctl.grade.layout import Learner
from labctl.grade.overrides import Overrides, OverridesError
from labctl.grade.pool import INTERNAL_ERROR
from labctl.grade.rubric import Rubric
from labctl.grade.score import Row, points_text
from labctl.i18n import Msg


@dataclass(frozen=True)
class Workflow:
    only: frozenset[str] = frozenset()
    force: bool = False
    submitted: dict[str, datetime] | None = None
    due_date: datetime | None = None
    due: dict[str, datetime] | None = None
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
        unknown = sorted(set(self.due or ()) - set(ids))
        if unknown:
            raise LateError(
                Msg(
                    "extensions: no learner {learners} in this class",
                    learners=", ".join(unknown),
                )
            )

    def reuse(self, learner: Learner, record: dict | None, key: str) -> bool:
        """Whether the learner's earlier record stands for this run: with `only`, every
        learner it does not name keeps its record, `force` or not."""
        if record is None:
            return False
        if record.get("status") == INTERNAL_ERROR:
            return False  # labctl failed, not the learner: never a result to keep
        if self.only:
            return learner.id not in self.only
        return not self.force and record.get("key") == key

    def apply(self, rows: Sequence[Row], rubric: Rubric) -> list[Msg]:
        """Set each row's due date, lateness and adjustments; returns the warnings for the
        grader. Refuses (OverridesError) an adjusted score outside 0 to the maximum plus the
        rubric's bonus points."""
        warnings: list[Msg] = []
        own = self.due or {}
        base = self.due_date or rubric.due_at
        if (base is not None or own) and self.submitted is None:
            warnings.append(
                Msg(
                    "the rubric has a due date but no submission times were given: lateness not computed"
                )
            )
        for row in rows:
            due = own.get(row.learner, base)
            row.due_at = due.isoformat() if due is not None else None
            row.late = None
            if due is not None and self.submitted is not None:
                when = self.submitted.get(row.learner)
                if when is None:
                    warnings.append(
                        Msg(
                            "no submission time for {learner}: treated as on time",
                            learner=row.learner,
                        )
                    )
                row.late = lateness(when, due, rubric.late, extended=row.learner in own)
            row.adjustments = (
                [o.to_json() for o in self.overrides.of(row.learner)] if self.overrides else []
            )
        if self.submitted is not None:
            # A typo (ANN for ann) would otherwise cancel a late penalty without a word.
            unknown = sorted(set(self.submitted) - {row.learner for row in rows})
            if unknown:
                warnings.append(
                    Msg(
                        "submission times for learners not in this class, not used: {learners}",
                        learners=", ".join(unknown),
                    )
                )
        self._within_range(rows, rubric)
        return warnings

    def _within_range(self, rows: Sequence[Row], rubric: Rubric) -> None:
        top = rubric.max_score + rubric.bonus_points
        wrong = [
            f"{row.learner} ({points_text(row.score)})"
            for row in rows
            if row.adjustments and not 0 <= row.score <= top
        ]
        if wrong:
            raise OverridesError(
                Msg(
                    "{where}: the adjustments take {learners} outside 0 to {top} points (the "
                    "rubric's maximum {max} plus its bonus_points {bonus}); no gradebook or export "
                    "written, and grade publish refuses the folder until a run finishes",
                    where=self.overrides_name,
                    learners=", ".join(wrong),
                    top=points_text(top),
                    max=points_text(rubric.max_score),
                    bonus=points_text(rubric.bonus_points),
                )
            )
