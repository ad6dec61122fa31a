"""Checks of the options several commands share, so each refuses a bad value alike."""

import math

from labctl.errors import UsageError
from labctl.i18n import Msg

# The longest time limit taken: a day. Far longer ones overflowed the system's clock type in
# the waits they bound (1e10 s ended in an internal error).
MOST_SECONDS = 86_400


def positive_seconds(value: float, option: str) -> None:
    """A time limit: above 0 and finite (no limit at all would let a hanging room hang), and at
    most a day."""
    if not (value > 0 and math.isfinite(value)):
        raise UsageError(
            Msg(
                "{option} must be a positive number of seconds, got {value:g}",
                option=option,
                value=value,
            )
        )
    if value > MOST_SECONDS:
        raise UsageError(
            Msg(
                "{option} must be at most {most} seconds (a day), got {value:g}",
                option=option,
                most=MOST_SECONDS,
                value=value,
            )
        )


# The least a clean-room process is given: labctl's own clean room needs 384 MiB here to run
# the template's labs (the scale ablation's inputs), 160 MiB for the contract's fixtures. Below
# it, labctl's own inputs crashed the process, and the learner's room was blamed for it.
LEAST_MEMORY_MB = 512


# The most a clean-room process may be given, 1 TiB (0 is no limit at all): the kernel's limit
# is counted in bytes, and 2**43 MiB or more overflowed it inside the room.
MOST_MEMORY_MB = 1 << 20


def memory_limit(mb: int) -> None:
    if mb > MOST_MEMORY_MB:
        raise UsageError(
            Msg(
                "--memory-mb must be at most {most} (1 TiB), or 0 for no limit, got {mb}",
                most=MOST_MEMORY_MB,
                mb=mb,
            )
        )
    if mb < 0 or 0 < mb < LEAST_MEMORY_MB:
        raise UsageError(
            Msg(
                "--memory-mb must be 0 (no limit) or at least {least}, got {mb}: below that "
                "the clean-room process cannot hold labctl's own inputs",
                least=LEAST_MEMORY_MB,
                mb=mb,
            )
        )
