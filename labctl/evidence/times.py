"""`verified_at` values as moments: compared as times, never as strings.

As strings, `2026-01-01T05:30:00-05:00` (10:30 UTC) sorts before `2026-01-01T10:20:00Z`.
"""

from __future__ import annotations

from datetime import date, datetime, timezone


def parse_time(value: object) -> datetime | None:
    """`verified_at` as an aware datetime (naive means UTC), or None when it is not ISO 8601."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, date):
        moment = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def not_older(new: object, current: object) -> bool:
    """True when `new` is at least as recent as `current`; an unreadable time is the oldest."""
    new_at, current_at = parse_time(new), parse_time(current)
    if current_at is None:
        return True
    return new_at is not None and new_at >= current_at
