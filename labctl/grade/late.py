"""Late work: the rubric's due date and late rules, and when each learner handed in.

The rubric says when the work is due (`due:`, ISO 8601 with a timezone) and
how late work is charged (`late:`): a penalty in percent of the learner's score
per started `day` or `hour` past the due date, up to `cap_percent`. Work handed
in within `grace_minutes` of the due date is on time; past the grace, lateness
counts from the due date itself (the grace forgives, it does not move the date).
1.5 days late at 10 % per day is 2 started days: 20 %.

The time a learner handed in comes from the course's platform, never from the
learner's own files (a commit date is whatever the learner's clock said):
Gradescope's `submission_metadata.json` (`created_at`) or a CSV the TA gives
(`learner,submitted_at`). A learner the CSV does not list is treated as on time,
and named in a warning and in the gradebook (`late` = `unknown`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import Field

from labctl.errors import LabctlError, UsageError
from labctl.evidence.models import Strict
from labctl.i18n import Msg

_UNIT_S = {"day": 86400.0, "hour": 3600.0}


class LateError(LabctlError):
    """A submission-time file that cannot be read or holds a time that is not ISO 8601."""


class LatePolicy(Strict):
    unit: Literal["day", "hour"]
    penalty_percent: float = Field(gt=0, le=100)
    cap_percent: float = Field(default=100, gt=0, le=100)
    grace_minutes: float = Field(default=0, ge=0, le=10080)


def parse_time(text: object) -> datetime | None:
    """An ISO 8601 time with its timezone (`Z` taken as UTC); None when it is not one."""
    if isinstance(text, datetime):
        found = text
    elif isinstance(text, str):
        try:
            found = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    return found if found.tzinfo is not None and found.utcoffset() is not None else None


@dataclass(frozen=True)
class Lateness:
    """How late one learner handed in, and what it costs (a share of the score)."""

    submitted_at: str | None  # None: the time is not known (treated as on time)
    late_s: float = 0.0  # seconds past the due date; 0 when on time or within the grace
    units: int = 0  # started days or hours past the due date
    penalty_percent: float = 0.0
    unit_word: str = "day"

    @property
    def known(self) -> bool:
        return self.submitted_at is not None

    def label(self) -> str:
        """The gradebook's `late` cell: on-time, unknown, or e.g. `2 day(s)`."""
        if not self.known:
            return "unknown"
        if not self.units:
            return "on-time"
        return f"{self.units} {self.unit_word}"

    def to_json(self) -> dict:
        return {
            "submitted_at": self.submitted_at,
            "late_s": round(self.late_s, 3),
            "units": self.units,
            "unit": self.unit_word,
            "penalty_percent": self.penalty_percent,
        }


def lateness(submitted: datetime | None, due: datetime, policy: LatePolicy | None) -> Lateness:
    """The lateness of work handed in at `submitted` (None: unknown) against `due`."""
    unit = policy.unit if policy else "day"
    if submitted is None:
        return Lateness(None, unit_word=unit)
    stamp = submitted.isoformat()
    late_s = (submitted - due).total_seconds()
    grace_s = policy.grace_minutes * 60 if policy else 0.0
    if late_s <= grace_s:
        return Lateness(stamp, unit_word=unit)
    units = math.ceil(late_s / _UNIT_S[unit])
    percent = min(policy.cap_percent, units * policy.penalty_percent) if policy else 0.0
    return Lateness(stamp, late_s, units, round(percent, 6), unit)


def read_submitted_csv(path: Path) -> dict[str, datetime]:
    """`--submitted-at FILE`: a CSV of `learner,submitted_at` rows (that header is optional)."""
    try:
        text = path.read_text("utf-8-sig")
    except FileNotFoundError:
        raise UsageError(Msg("--submitted-at {path}: no such file", path=str(path))) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LateError(Msg("cannot read {path}: {why}", path=str(path), why=str(exc))) from None
    found: dict[str, datetime] = {}
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or not "".join(row).strip():
            continue
        if number == 1 and [c.strip().lower() for c in row] == ["learner", "submitted_at"]:
            continue
        when = parse_time(row[1]) if len(row) == 2 else None
        if when is None:
            raise LateError(
                Msg(
                    "{path} line {line}: expected learner,time with an ISO 8601 time and its "
                    "timezone (2026-03-01T23:59:00+08:00)",
                    path=path.name,
                    line=number,
                )
            )
        learner = row[0].strip()
        if learner in found:
            raise LateError(
                Msg("{path}: learner {learner} appears twice", path=path.name, learner=learner)
            )
        found[learner] = when
    return found


def read_gradescope_metadata(path: Path) -> datetime:
    """`created_at` of Gradescope's `submission_metadata.json`: when the learner uploaded."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise UsageError(
            Msg("--submission-metadata {path}: no such file", path=str(path))
        ) from None
    except (OSError, ValueError) as exc:
        raise LateError(Msg("cannot read {path}: {why}", path=str(path), why=str(exc))) from None
    when = parse_time(data.get("created_at")) if isinstance(data, dict) else None
    if when is None:
        raise LateError(
            Msg("{path} has no created_at time with a timezone (ISO 8601)", path=path.name)
        )
    return when
