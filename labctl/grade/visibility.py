"""Who may see a rubric item, and when: Gradescope's four values, applied to `feedback/`.

- `visible`: always shown;
- `after_due_date`: shown once the rubric's `due` has passed (with no `due`,
  once the grades are published);
- `after_published`: shown once the grades are published (`labctl grade publish`);
- `hidden`: never shown to the learner, not even its name or how many there are.

Gradescope applies the same rules to `results.json` itself, so each test there
carries its item's value unchanged. Publication is a fact of the output folder
(`published.json`, written by `labctl grade publish`): a batch graded again
after it keeps the published feedback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

PUBLISHED = "published.json"
PUBLISHED_SCHEMA = "labctl.grade-published.v1"


@dataclass(frozen=True)
class Audience:
    """What the learner may see now: has the due date passed, are the grades published."""

    due_passed: bool = False
    published: bool = False

    def sees(self, visibility: str) -> bool:
        if visibility == "visible":
            return True
        if visibility == "after_due_date":
            return self.due_passed
        if visibility == "after_published":
            return self.published
        return False


def audience(due: datetime | None, published: bool, now: datetime | None = None) -> Audience:
    """The audience at `now` (default: the clock) for a rubric whose due date is `due`."""
    now = now or datetime.now(UTC)
    passed = published if due is None else now >= due
    return Audience(due_passed=passed, published=published)


def published_at(out: Path) -> str | None:
    """When the grades in `out` were published, or None if they were not."""
    try:
        document = json.loads((out / PUBLISHED).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or document.get("schema") != PUBLISHED_SCHEMA:
        return None
    when = document.get("published_at")
    return when if isinstance(when, str) else None
