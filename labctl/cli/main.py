"""`labctl`: the entry point and the one error handler.

Every command raises `LabctlError` subclasses from the library; the handler
here prints one line on stderr and exits with the error's code (1 refused or
failed, 2 usage). Anything else is a bug: it gets one line too, and its
traceback only with LABCTL_DEBUG=1.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer
from typer.core import TyperGroup

import labctl
from labctl.cli import contract as contract_cli
from labctl.cli import evidence as evidence_cli
from labctl.cli import grade as grade_cli
from labctl.cli import run as run_cli
from labctl.cli import verify as verify_cli
from labctl.errors import EXIT_FAILED, LabctlError


class _HandledGroup(TyperGroup):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except LabctlError as exc:
            if os.environ.get("LABCTL_DEBUG") == "1":
                raise
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except Exception as exc:
            if os.environ.get("LABCTL_DEBUG") == "1":
                raise
            typer.echo(
                f"internal error: {type(exc).__name__}: {exc} (LABCTL_DEBUG=1 shows the traceback)",
                err=True,
            )
            raise typer.Exit(EXIT_FAILED) from None


app = typer.Typer(
    cls=_HandledGroup,
    help="Run the attention and Transformer-block labs, verify clean rooms, submit evidence.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(contract_cli.app, name="contract")
app.add_typer(evidence_cli.app, name="evidence")
app.add_typer(grade_cli.app, name="grade")
app.command("list")(run_cli.list_labs)
app.command("run")(run_cli.run)
app.add_typer(verify_cli.verify_app, name="verify")
app.add_typer(verify_cli.clean_room_app, name="clean-room")
app.command("faults")(verify_cli.faults)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"labctl {labctl.__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """labctl: prove each part of the Transformer block by experiment."""


def main() -> None:
    app()
