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

Extensions: a learner's own due date replaces the rubric's for that learner (its
lateness, and when its `after_due_date` items are shown). In class mode it is a third
column of the times CSV (`learner,submitted_at,due_at`, blank: the rubric's) or a line of
`--extensions FILE` (`learner,due_at`: an ISO 8601 time with its timezone, or an ISO
8601 duration added to the rubric's due date, `P2D`, `PT36H`); on Gradescope, the
learner's own `users[].assignment.due_date` of `submission_metadata.json` (the latest
of a group's), else the assignment's `assignment.due_date`, rules over the rubric's.
Learner ids in every file are NFC-normalised, as the class folder's names are.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import Field

from labctl.errors import LabctlError, UsageError
from labctl.evidence.models import Strict
from labctl.i18n import Msg
from labctl.inputfile import read_regular

_UNIT_S = {"day": 86400.0, "hour": 3600.0}
# A class of 100,000 learners' times and dates is about 6 MB.
MAX_INPUT_BYTES = 16 << 20


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
    due_at: str | None = None  # the due date this learner's lateness counts from
    extended: bool = False  # that date is the learner's own (an extension), not the rubric's

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
            "due_at": self.due_at,
            "extended": self.extended,
        }

    @classmethod
    def from_json(cls, data: dict) -> Lateness:
        """The lateness a record kept (`to_json`)."""
        return cls(
            data["submitted_at"],
            data["late_s"],
            data["units"],
            data["penalty_percent"],
            data["unit"],
            data.get("due_at"),
            data.get("extended", False),
        )


def lateness(
    submitted: datetime | None,
    due: datetime,
    policy: LatePolicy | None,
    extended: bool = False,
) -> Lateness:
    """The lateness of work handed in at `submitted` (None: unknown) against `due` (the
    rubric's, or the learner's own when `extended`)."""
    unit = policy.unit if policy else "day"
    said = {"due_at": due.isoformat(), "extended": extended}
    if submitted is None:
        return Lateness(None, unit_word=unit, **said)
    stamp = submitted.isoformat()
    late_s = (submitted - due).total_seconds()
    grace_s = policy.grace_minutes * 60 if policy else 0.0
    if late_s <= grace_s:
        return Lateness(stamp, unit_word=unit, **said)
    units = math.ceil(late_s / _UNIT_S[unit])
    percent = min(policy.cap_percent, units * policy.penalty_percent) if policy else 0.0
    return Lateness(stamp, late_s, units, round(percent, 6), unit, **said)


def learner_key(text: str) -> str:
    """A learner id as a file names it: stripped and NFC-normalised, as folder names are."""
    return unicodedata.normalize("NFC", text.strip())


@dataclass
class SubmissionTimes:
    """`--submitted-at FILE`: when each learner handed in, and each learner's own due date
    where the file gives one (an extension)."""

    submitted: dict[str, datetime] = field(default_factory=dict)
    due: dict[str, datetime] = field(default_factory=dict)


def _text(path: Path, flag: str, encoding: str) -> str:
    """A grader's file, whole: a regular file of at most MAX_INPUT_BYTES (a FIFO named here
    once waited for a writer forever)."""
    try:
        raw = read_regular(path, MAX_INPUT_BYTES)
        if raw is None:
            raise LateError(
                Msg(
                    "{flag} {path}: larger than {most:,} bytes",
                    flag=flag,
                    path=str(path),
                    most=MAX_INPUT_BYTES,
                )
            )
        return raw.decode(encoding)
    except FileNotFoundError:
        raise UsageError(Msg("{flag} {path}: no such file", flag=flag, path=str(path))) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LateError(Msg("cannot read {path}: {why}", path=str(path), why=str(exc))) from None


def _rows(path: Path, flag: str) -> list[tuple[int, list[str]]]:
    """The CSV's non-blank rows with their line numbers."""
    text = _text(path, flag, "utf-8-sig")
    return [
        (number, row)
        for number, row in enumerate(csv.reader(io.StringIO(text)), start=1)
        if row and "".join(row).strip()
    ]


def _once(found: dict, learner: str, path: Path) -> None:
    if learner in found:
        raise LateError(
            Msg("{path}: learner {learner} appears twice", path=path.name, learner=learner)
        )


def read_submitted_csv(path: Path, due: datetime | None = None) -> SubmissionTimes:
    """`--submitted-at FILE`: a CSV of `learner,submitted_at` rows (that header is optional),
    with an optional third column `due_at`: the learner's own due date (blank: the rubric's),
    written as in `--extensions` (a time, or a duration added to the rubric's date `due`)."""
    found = SubmissionTimes()
    for number, row in _rows(path, "--submitted-at"):
        header = [c.strip().lower() for c in row]
        if number == 1 and header in (["learner", "submitted_at"], [*_HEADER, "due_at"]):
            continue
        when = parse_time(row[1]) if len(row) in (2, 3) else None
        if when is None:
            raise LateError(
                Msg(
                    "{path} line {line}: expected learner,time with an ISO 8601 time and its "
                    "timezone (2026-03-01T23:59:00+08:00)",
                    path=path.name,
                    line=number,
                )
            )
        learner = learner_key(row[0])
        _once(found.submitted, learner, path)
        found.submitted[learner] = when
        if len(row) == 3 and row[2].strip():
            found.due[learner] = _own_due(row[2], due, path, number)
    return found


_HEADER = ["learner", "submitted_at"]
# An ISO 8601 duration of weeks, days, hours and minutes: P2D, PT36H, P1DT12H, P1W.
_DURATION = re.compile(
    r"^P(?:(?P<W>\d+(?:\.\d+)?)W)?(?:(?P<D>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<H>\d+(?:\.\d+)?)H)?(?:(?P<M>\d+(?:\.\d+)?)M)?)?$"
)


def _duration(text: str) -> timedelta | None:
    match = _DURATION.match(text.strip().upper())
    if match is None or not any(match.groupdict().values()):
        return None
    parts = {k: float(v) for k, v in match.groupdict().items() if v}
    return timedelta(
        weeks=parts.get("W", 0),
        days=parts.get("D", 0),
        hours=parts.get("H", 0),
        minutes=parts.get("M", 0),
    )


def read_extensions(path: Path, due: datetime | None) -> dict[str, datetime]:
    """`--extensions FILE`: a CSV of `learner,due_at` rows (that header is optional), each the
    learner's own due date: an ISO 8601 time with its timezone, or an ISO 8601 duration
    (`P2D`, `PT36H`, `P1DT12H`) added to the rubric's due date `due`."""
    found: dict[str, datetime] = {}
    for number, row in _rows(path, "--extensions"):
        if number == 1 and [c.strip().lower() for c in row] == ["learner", "due_at"]:
            continue
        if len(row) != 2:
            raise _due_expected(path, number)
        learner = learner_key(row[0])
        _once(found, learner, path)
        found[learner] = _own_due(row[1], due, path, number)
    return found


def _due_expected(path: Path, number: int) -> LateError:
    return LateError(
        Msg(
            "{path} line {line}: expected learner,due_at with an ISO 8601 time and its "
            "timezone (2026-03-03T23:59:00+08:00) or a duration added to the rubric's "
            "due date (P2D, PT36H)",
            path=path.name,
            line=number,
        )
    )


def _own_due(text: str, due: datetime | None, path: Path, number: int) -> datetime:
    """A learner's own due date as a cell gives it: a time, or a duration after `due`."""
    when = parse_time(text)
    if when is not None:
        return when
    try:
        longer = _duration(text)
        if longer is None:
            raise _due_expected(path, number)
        if due is None:
            raise LateError(
                Msg(
                    "{path} line {line}: an extension by a duration needs the rubric's due "
                    "date (due:); give the learner's due date instead",
                    path=path.name,
                    line=number,
                )
            )
        return due + longer
    except OverflowError:
        raise LateError(
            Msg(
                "{path} line {line}: the extension {text} ends past the last date a "
                "calendar holds (9999-12-31)",
                path=path.name,
                line=number,
                text=text.strip(),
            )
        ) from None


@dataclass(frozen=True)
class GradescopeSubmission:
    """What `submission_metadata.json` says of one submission: when it was handed in, the
    assignment's due date and the learner's own (None where the file gives none)."""

    created_at: datetime
    assignment_due: datetime | None = None
    own_due: datetime | None = None

    @property
    def extension(self) -> datetime | None:
        """The learner's own due date where it is not the assignment's: an extension."""
        return self.own_due if self.own_due != self.assignment_due else None


def _due(text: object, path: Path) -> datetime | None:
    if text is None:
        return None
    when = parse_time(text)
    if when is None:
        raise LateError(
            Msg(
                "{path} holds a due_date that is not an ISO 8601 time with its timezone",
                path=path.name,
            )
        )
    return when


def read_gradescope_metadata(path: Path) -> GradescopeSubmission:
    """Gradescope's `submission_metadata.json`: `created_at` (when the learner uploaded), the
    assignment's `assignment.due_date`, and the learner's own `users[].assignment.due_date`
    (Gradescope's per-user dates, an extension in; the latest of a group's: one member's
    extension is the group's)."""
    text = _text(path, "--submission-metadata", "utf-8")
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise LateError(
            Msg("cannot read {path}: {why}", path=str(path), why=Msg("nested too deeply"))
        ) from None
    except _RepeatedKey as exc:
        raise LateError(Msg("cannot read {path}: {why}", path=str(path), why=exc.args[0])) from None
    except ValueError as exc:
        raise LateError(Msg("cannot read {path}: {why}", path=str(path), why=str(exc))) from None
    when = parse_time(data.get("created_at")) if isinstance(data, dict) else None
    if when is None:
        raise LateError(
            Msg("{path} has no created_at time with a timezone (ISO 8601)", path=path.name)
        )
    # Gradescope writes these shapes; another shape is a file that is not its metadata, and
    # the rubric's due date quietly taking over would grade the learner by the wrong date.
    assignment = _shaped(data.get("assignment"), dict, "assignment", path) or {}
    users = _shaped(data.get("users"), list, "users", path) or []
    own = []
    for user in users:
        _shaped(user, dict, "users[]", path)
        mine = _shaped(user.get("assignment"), dict, "users[].assignment", path) or {}
        own.append(_due(mine.get("due_date"), path))
    own = [d for d in own if d is not None]
    return GradescopeSubmission(
        when, _due(assignment.get("due_date"), path), max(own) if own else None
    )


class _RepeatedKey(ValueError):
    """A JSON object that repeats a key (json keeps the last one silently)."""


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    found: dict = {}
    for key, value in pairs:
        if key in found:
            raise _RepeatedKey(Msg("key {key} appears twice", key=repr(key)))
        found[key] = value
    return found


def _shaped(value: object, kind: type, field: str, path: Path):
    """`value` where it is absent (None) or of `kind`; otherwise the file is refused."""
    if value is None or isinstance(value, kind):
        return value
    raise LateError(
        Msg(
            "{path}: {field} is {got}, not {wanted} as Gradescope writes it",
            path=path.name,
            field=field,
            got=type(value).__name__,
            wanted=Msg("an object") if kind is dict else Msg("a list"),
        )
    )
