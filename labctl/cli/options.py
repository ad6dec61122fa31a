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


# The least a clean-room process is given: labctl's own clean room needs 384 MiB here to run
# the template's labs (the scale ablation's inputs), 160 MiB for the contract's fixtures. Below
# it, labctl's own inputs crashed the process, and the learner's room was blamed for it.
LEAST_MEMORY_MB = 512


def memory_limit(mb: int) -> None:
    if mb < 0 or 0 < mb < LEAST_MEMORY_MB:
        raise UsageError(
            Msg(
                "--memory-mb must be 0 (no limit) or at least {least}, got {mb}: below that "
                "the clean-room process cannot hold labctl's own inputs",
                least=LEAST_MEMORY_MB,
                mb=mb,
            )
        )
