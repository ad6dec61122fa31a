"""`labctl`: the entry point and the one error handler.

Every command raises `LabctlError` subclasses from the library; the handler
here prints one line on stderr and exits with the error's code (1 refused or
failed, 2 usage, 130 interrupted). Anything else is a bug: it gets one line
too, and its traceback only with LABCTL_DEBUG=1. With `--json` every one of
these also prints one JSON document on stdout, `{"passed": false, "error":
{...}}`, so a script reading stdout always gets a document.
"""

import contextlib
import importlib
import inspect
import io
import os
import sys
import traceback
from collections.abc import Iterator, Mapping
from typing import Annotated

import typer
from typer.core import TyperGroup

import labctl
from labctl import textsafe
from labctl.cli import plain
from labctl.cli.commands import BY_NAME, LANG_HELP, ROOT_HELP, VERSION_HELP
from labctl.cli.lang import Language, click_message, localized, translate_help
from labctl.cli.render import err, print_json
from labctl.errors import EXIT_FAILED, EXIT_USAGE, LabctlError, UsageError
from labctl.i18n import N_, Msg, _, declared

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


class _Escaped(str):
    """A learner's text with its controls escaped; shown with `!r` (`unknown lab {lab!r}`) it
    is the original's repr, which escapes them itself, once: not `'\\x1b'`, the escape's own
    backslash escaped again."""

    def __new__(cls, raw: str) -> "_Escaped":
        escaped = super().__new__(cls, textsafe.shown(raw))
        escaped.raw = raw
        return escaped

    def __repr__(self) -> str:
        return repr(self.raw)


def _one_line(message: str | Msg) -> str | Msg:
    """`message` with every text it carries on one line: a learner's (an exception's message,
    what a room printed, a folder's name) would otherwise print its newlines as lines of
    labctl's own, a traceback forged. The template's own words are labctl's, kept as written."""
    if isinstance(message, Msg):
        return declared(message.template, **{k: _one_line(v) for k, v in message.args.items()})
    return _Escaped(message) if isinstance(message, str) else message


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
            raise self._fail(
                kind, _(_one_line(exc.message)), exc.exit_code, exc.english()
            ) from None
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
        plain.clamp_columns()
        if not self.json_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        # --help and --version print text and exit: with --json, that text is the document's.
        asked = next((w for w in ("--help", "--version") if w in words), None)
        printed = io.StringIO()
        # Parse errors (an unknown option, a bad value) must become JSON too.
        try:
            with contextlib.redirect_stdout(printed) if asked else contextlib.nullcontext():
                code = super().main(words, prog_name, complete_var, standalone_mode=False, **extra)
            if asked:
                print_json({asked.removeprefix("--"): printed.getvalue()})
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


def load(name: str):
    """The click command `name` of `labctl.cli.commands`, built from its module (imported
    now), with the table's help: a function's docstring adds what follows that line."""
    spec = BY_NAME[name]
    made = getattr(importlib.import_module(spec.module), spec.attribute)
    if isinstance(made, typer.Typer):
        command = typer.main.get_group(made)
        command.name, command.help = name, spec.help
        return command
    more = inspect.getdoc(made)
    holder = typer.Typer(add_completion=False)
    holder.command(name, help=f"{spec.help}\n\n{more}" if more else spec.help)(made)
    return typer.main.get_command(holder)


class _Commands(Mapping):
    """The root's commands by name, each built when first asked for (not when listed)."""

    def __init__(self) -> None:
        self.built: dict = {}
        self.translating = False  # inside an invocation: help is translated as it is built

    def __getitem__(self, name: str):
        if name not in self.built:
            if name not in BY_NAME:
                raise KeyError(name)
            self.built[name] = command = load(name)
            if self.translating:
                translate_help(command)
        return self.built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(BY_NAME)

    def __len__(self) -> int:
        return len(BY_NAME)


class _LazyGroup(_HandledGroup):
    """The root command: it knows each command from `labctl.cli.commands` and imports a
    command's module only when that command runs or shows its help. Its own help is drawn
    without typer (`labctl.cli.overview`), the same as the console script's fast path."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.commands = _Commands()

    def add_command(self, cmd, name=None) -> None:
        raise TypeError("labctl's commands are listed in labctl.cli.commands")

    def get_command(self, ctx, cmd_name):
        return self.commands.get(cmd_name)

    def list_commands(self, ctx) -> list[str]:
        return list(self.commands)

    def get_help(self, ctx) -> str:
        return plain.root_help(ctx.command_path)

    def parse_args(self, ctx, args):
        if not args and self.no_args_is_help:
            typer.echo(self.get_help(ctx))  # as click does, with its exit code: 2
            ctx.exit(EXIT_USAGE)
        return super().parse_args(ctx, args)

    def main(self, *args, **kwargs):
        self.commands.translating = True
        return super().main(*args, **kwargs)


app = typer.Typer(
    cls=localized(_LazyGroup),
    help=ROOT_HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"labctl {labctl.__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help=VERSION_HELP),
    ] = False,
    lang: Annotated[
        Language | None,
        typer.Option("--lang", help=LANG_HELP, case_sensitive=False, show_default=False),
    ] = None,
) -> None:
    """labctl: prove each part of the Transformer block by experiment."""


def main() -> None:
    """The console script: the command, then stdout flushed here, not at interpreter exit.

    With stdout buffered (no PYTHONUNBUFFERED, as in a user's shell), a command writing into
    a closed pipe (`labctl grade --json | head -c 0`) only fails when the buffer is flushed;
    at exit Python reports "Exception ignored ... BrokenPipeError" and exits 120. Flushed
    here, it ends as an unbuffered write does: quietly, exit 1."""
    try:
        app()
    except SystemExit as stop:
        code = stop.code
    else:
        code = 0
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_gone().exit_code
    sys.exit(code)
