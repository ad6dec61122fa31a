"""`labctl`: the entry point and the one error handler.

Every command raises `LabctlError` subclasses from the library; the handler
here prints one line on stderr and exits with the error's code (1 refused or
failed, 2 usage, 130 interrupted). Anything else is a bug: it gets one line
too, and its traceback only with LABCTL_DEBUG=1. With `--json` every one of
these also prints one JSON document on stdout, `{"passed": false, "error":
{...}}`, so a script reading stdout always gets a document.
"""

import contextlib
import os
import sys
import traceback
from typing import Annotated

import typer
from typer.core import TyperGroup

import labctl
from labctl import textsafe
from labctl.cli import contract as contract_cli
from labctl.cli import doctor as doctor_cli
from labctl.cli import evidence as evidence_cli
from labctl.cli import grade as grade_cli
from labctl.cli import quiz as quiz_cli
from labctl.cli import report as report_cli
from labctl.cli import run as run_cli
from labctl.cli import show as show_cli
from labctl.cli import verify as verify_cli
from labctl.cli.lang import LANG_HELP, Language, click_message, localized
from labctl.cli.render import err, print_json
from labctl.errors import EXIT_FAILED, EXIT_USAGE, LabctlError, UsageError
from labctl.i18n import N_, Msg, _

EXIT_INTERRUPTED = 130
INTERRUPTED, ABORTED = N_("interrupted"), N_("aborted")


def _debug() -> bool:
    return os.environ.get("LABCTL_DEBUG") == "1"


def _reader_gone() -> typer.Exit:
    """stdout's reader went away (`labctl list | head -1`): nothing more is said, quietly, with
    click's own exit code for it (1). Python flushes stdout again at exit and would report the
    same error there: stdout goes to /dev/null first."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return typer.Exit(EXIT_FAILED)


class _HandledGroup(TyperGroup):
    json_mode = False

    def _fail(self, kind: str, message: str, code: int, english: str | None = None) -> typer.Exit:
        """Report an error on stderr (and stdout as JSON with --json); the Exit to raise.

        `message` is shown in the chosen language; the JSON document keeps `english`."""
        # An error can quote a learner (an exception, a file name): no escape reaches the terminal.
        line = textsafe.shown(message, lines=True)
        said = _(Msg("error: {message}", message=line)) if kind != "internal" else line
        err.print(said, markup=False)
        if self.json_mode:
            shown = message if english is None else english
            try:
                print_json(
                    {"passed": False, "error": {"kind": kind, "message": shown, "exit_code": code}}
                )
            except BrokenPipeError:
                _reader_gone()
        return typer.Exit(code)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except LabctlError as exc:
            if _debug() and not self.json_mode:
                raise
            if _debug():
                traceback.print_exc(file=sys.stderr)
            kind = "usage" if isinstance(exc, UsageError) else "refused"
            raise self._fail(kind, str(exc), exc.exit_code, exc.english()) from None
        except KeyboardInterrupt:
            raise self._fail("interrupted", _(INTERRUPTED), EXIT_INTERRUPTED, INTERRUPTED) from None
        except BrokenPipeError:
            raise _reader_gone() from None
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except Exception as exc:
            if _debug() and not self.json_mode:
                raise
            if _debug():
                traceback.print_exc(file=sys.stderr)
            message = Msg(
                "internal error: {kind}: {error} (LABCTL_DEBUG=1 shows the traceback)",
                kind=type(exc).__name__,
                error=str(exc),
            )
            raise self._fail("internal", _(message), EXIT_FAILED, str(message)) from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        words = list(sys.argv[1:] if args is None else args)
        self.json_mode = "--json" in words
        if not self.json_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        # Parse errors (an unknown option, a bad value) must become JSON too.
        try:
            code = super().main(words, prog_name, complete_var, standalone_mode=False, **extra)
        except BrokenPipeError:
            code = _reader_gone().exit_code
        except typer.Abort:
            self._fail("interrupted", _(ABORTED), EXIT_FAILED, ABORTED)
            code = EXIT_FAILED
        except Exception as exc:  # click's UsageError and its kin, from parsing
            english = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            message = _(click_message(exc)) if hasattr(exc, "format_message") else english
            code = getattr(exc, "exit_code", EXIT_USAGE)
            self._fail("usage" if code == EXIT_USAGE else "refused", message, code, english)
        sys.exit(code or 0)


app = typer.Typer(
    cls=localized(_HandledGroup),
    help="Run the attention and Transformer-block labs, verify clean rooms, submit evidence.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(contract_cli.app, name="contract")
app.add_typer(evidence_cli.app, name="evidence")
app.add_typer(grade_cli.app, name="grade")
app.command("list")(show_cli.list_labs)
app.command("run")(run_cli.run)
app.command("show")(show_cli.show)
app.add_typer(verify_cli.verify_app, name="verify")
app.add_typer(verify_cli.clean_room_app, name="clean-room")
app.command("faults")(verify_cli.faults)
app.command("doctor")(doctor_cli.doctor)
app.command("report")(report_cli.report)
app.command("quiz")(quiz_cli.quiz)


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
    lang: Annotated[
        Language | None,
        typer.Option("--lang", help=LANG_HELP, case_sensitive=False, show_default=False),
    ] = None,
) -> None:
    """labctl: prove each part of the Transformer block by experiment."""


def main() -> None:
    app()
