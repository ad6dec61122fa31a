"""`--isolation auto|sandbox|process`, shared by every command that runs learner code."""

from typing import Annotated

import typer

from labctl.cli.render import err
from labctl.i18n import _

IsolationOption = Annotated[
    str,
    typer.Option(
        "--isolation",
        help="How learner code runs: sandbox (bubblewrap, a security boundary), process "
        "(a separate process, not a security boundary), or auto (the sandbox where it works).",
        case_sensitive=False,
    ),
]


def probe_early(requested: str) -> None:
    """Start the sandbox probe now, so it runs while the command imports what it needs."""
    if requested.lower() != "process":
        from labctl.isolation.bwrap import probe_soon

        probe_soon()


def effective(requested: str) -> str:
    """Resolve the level before anything runs; say so on stderr when it is not a boundary.

    `--isolation sandbox` without a working sandbox is a UsageError (exit 2).
    """
    from labctl.isolation import describe, missing_layers, resolve_isolation
    from labctl.isolation.levels import require_every_layer

    level = resolve_isolation(requested.lower())
    if requested.lower() == "sandbox":
        require_every_layer()
    if level == "process":
        err.print(_("isolation: {level}").format(level=describe(level)), markup=False)
    elif missing := missing_layers(level):
        err.print(
            _("isolation: sandbox without {layers} (labctl doctor says why)").format(
                layers=", ".join(missing)
            ),
            markup=False,
        )
    return level
