"""Checks of the options several commands share, so each refuses a bad value alike."""

import math

from labctl.errors import UsageError
from labctl.i18n import Msg


def positive_seconds(value: float, option: str) -> None:
    """A time limit: above 0 and finite (no limit at all would let a hanging room hang)."""
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(
            Msg(
                "{option} must be a positive number of seconds, got {value:g}",
                option=option,
                value=value,
            )
        )


def memory_limit(mb: int) -> None:
    if mb < 0:
        raise UsageError(Msg("--memory-mb must be >= 0 (0: no limit), got {mb}", mb=mb))
