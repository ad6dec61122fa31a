"""Isolation levels: `sandbox` (bubblewrap, a boundary) or `process` (a separate process, not one)."""

from __future__ import annotations

from labctl.errors import UsageError
from labctl.i18n import N_, Msg, _
from labctl.isolation.bwrap import INSTALL_HINT, sandbox_status

ISOLATION_LEVELS = ("auto", "sandbox", "process")
EFFECTIVE_LEVELS = ("sandbox", "process")
PROCESS_NOTE = N_("not a security boundary")


def resolve_isolation(requested: str) -> str:
    """The level a run gets: `auto` takes the sandbox where it works, else the process."""
    if requested not in ISOLATION_LEVELS:
        raise UsageError(
            Msg(
                "--isolation must be one of {choices}, got {value!r}",
                choices=", ".join(ISOLATION_LEVELS),
                value=requested,
            )
        )
    if requested == "process":
        return "process"
    status = sandbox_status()
    if status.works:
        return "sandbox"
    if requested == "sandbox":
        raise UsageError(
            Msg("--isolation sandbox: no working sandbox: {reason}", reason=status.reason)
        )
    return "process"


def require_every_layer() -> None:
    """`--isolation sandbox` as a person asks for it: every layer, or a UsageError naming the
    missing ones (`auto` runs without them, and says so)."""
    status = sandbox_status()
    if status.works and status.missing:
        reasons = "; ".join(f"{x.name}: {x.reason}" for x in status.layers if not x.works)
        raise UsageError(
            Msg("--isolation sandbox: the sandbox lacks a layer here: {reasons}", reasons=reasons)
        )


def missing_layers(level: str | None) -> list[str] | None:
    """The sandbox layers a run at `level` went without (none: []); None for the process
    level, which is no boundary at all, and for no run."""
    return sandbox_status().missing if level == "sandbox" else None


def describe(level: str) -> str:
    """How a level is shown to a person: the fallback says plainly what it is not."""
    if level == "process":
        return _("process ({note})").format(note=_(PROCESS_NOTE))
    return _("sandbox (bubblewrap)")


__all__ = [
    "EFFECTIVE_LEVELS",
    "INSTALL_HINT",
    "ISOLATION_LEVELS",
    "describe",
    "missing_layers",
    "resolve_isolation",
    "sandbox_status",
]
