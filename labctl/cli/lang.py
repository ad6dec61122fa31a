"""The language of one invocation, chosen before typer parses or prints anything.

`--lang` is a global option, but help is printed while options are parsed
(`labctl --help` never reaches a callback), so the language is read from the
raw arguments and the environment when the root command starts, and the help
texts of the freshly built command tree are translated in place then.

typer has words of its own ("Usage:", "Show this message and exit.",
"Missing argument", "[default: 5]"): its panel words are module globals, and
its click writes the rest in place. For the length of one invocation both are
pointed at labctl's catalog (`speaking`), so they speak the chosen language too.
"""

import contextlib
import re
from collections.abc import Iterator, Sequence
from enum import Enum

from rich.markup import escape
from rich.text import Text

from labctl import textsafe
from labctl.cli.commands import LANG_HELP as LANG_HELP  # report's --lang says it too
from labctl.cli.render import Prose
from labctl.i18n import N_, Msg, _, choose, declared, joined, set_language
from labctl.i18n.validation import explained
from labctl.wrapping import fill

# typer's help panels read these module globals when they draw; they are set for the
# length of one invocation and put back after it.
PANEL_TITLES = {
    "ARGUMENTS_PANEL_TITLE": N_("Arguments"),
    "OPTIONS_PANEL_TITLE": N_("Options"),
    "COMMANDS_PANEL_TITLE": N_("Commands"),
    "ERRORS_PANEL_TITLE": N_("Error"),
    "DEFAULT_STRING": N_("[default: {}]"),
    "REQUIRED_LONG_STRING": N_("[required]"),
    "ENVVAR_STRING": N_("[env var: {}]"),
    "ABORTED_TEXT": N_("Aborted."),
    "RICH_HELP": N_("Try [blue]'{command_path} {help_option}'[/] for help."),
}

# typer's own click speaks in f-strings, not through gettext: its words are replaced where
# they are made (the help option, the usage line) and its errors are worded again, by kind,
# from what the exception holds (`click_message`).
SHOW_HELP = N_("Show this message and exit.")
USAGE = N_("Usage:")
MISSING = {
    "argument": N_("Missing argument {name}."),
    "option": N_("Missing option {name}."),
    "parameter": N_("Missing parameter {name}."),
}
NO_SUCH_OPTION = N_("No such option: {name}")
POSSIBLE = N_("{message} (possible options: {options})")
INVALID = N_("Invalid value for {name}: {problem}")
INVALID_VALUE = N_("Invalid value: {problem}")
# ctx.fail's fixed sentences, and the shapes of those with a value in them.
FAILS = {
    "Missing command.": N_("Missing command."),
}
FAIL_SHAPES = (
    (re.compile(r"No such command '(?P<name>.*)'\.\Z", re.S), N_("No such command {name!r}.")),
    (
        re.compile(r"Got unexpected extra argument\(s\) \((?P<args>.*)\)\Z", re.S),
        N_("Got unexpected extra arguments ({args})"),
    ),
    (
        re.compile(r"Option '(?P<name>.*)' requires (?:an argument|\d+ arguments)\.\Z", re.S),
        N_("Option {name!r} requires a value."),
    ),
    (
        re.compile(r"Option '(?P<name>.*)' does not take a value\.\Z", re.S),
        N_("Option {name!r} does not take a value."),
    ),
)
OTHER = N_("the command line was not understood: {detail}")


def click_message(exc) -> str | Msg:
    """A click/typer usage error, worded from its kind and values in the chosen language."""
    from typer._click import exceptions as errors

    if isinstance(exc, errors.MissingParameter):
        hint = exc.param_hint if exc.param_hint is not None else _hint_of(exc.param)
        kind = exc.param_type or (exc.param.param_type_name if exc.param else "parameter")
        template = MISSING.get(kind, MISSING["parameter"])
        return declared(template, name=errors._join_param_hints(hint) or "")
    if isinstance(exc, errors.BadParameter):
        problem = _problem(exc)
        hint = exc.param_hint if exc.param_hint is not None else _hint_of(exc.param)
        if hint is None:
            return declared(INVALID_VALUE, problem=problem)
        return declared(INVALID, name=errors._join_param_hints(hint), problem=problem)
    if isinstance(exc, errors.NoSuchOption):
        message = declared(NO_SUCH_OPTION, name=textsafe.shown(exc.option_name))
        if exc.possibilities:
            return declared(POSSIBLE, message=message, options=", ".join(sorted(exc.possibilities)))
        return message
    text = exc.message
    if text in FAILS:
        return declared(FAILS[text])
    for shape, template in FAIL_SHAPES:
        match = shape.match(text)
        if match:
            return declared(template, **match.groupdict())
    return declared(OTHER, detail=text)


def _hint_of(param):
    return param.get_error_hint() if param is not None else None


def _problem(exc) -> str | Msg:
    """What was wrong with a value: pydantic's errors by type, else typer's own sentence."""
    from pydantic import ValidationError

    cause = exc.__cause__
    if isinstance(cause, ValidationError):
        return joined([explained(error) for error in cause.errors()])
    return declared(OTHER, detail=exc.message)


@contextlib.contextmanager
def speaking() -> Iterator[None]:
    """click's and typer's own words in the chosen language until the block ends."""
    from typer import rich_utils
    from typer._click import core, formatting

    saved: list[tuple[object, str, object]] = []

    def replace(owner: object, name: str, value: object) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    for name, title in PANEL_TITLES.items():
        replace(rich_utils, name, _(title))
    help_option = core.Command.get_help_option
    write_usage = formatting.HelpFormatter.write_usage
    format_error = rich_utils.rich_format_error

    def get_help_option(self, ctx):
        option = help_option(self, ctx)
        if option is not None:
            option.help = _(SHOW_HELP)
        return option

    def usage(self, prog: str, args: str = "", prefix: str | None = None) -> None:
        # no space after a full-width colon (用法：labctl ...), as the glossary's typography asks
        word = _(USAGE)
        write_usage(
            self,
            prog,
            args,
            (word if word.endswith("：") else f"{word} ") if prefix is None else prefix,
        )

    def rich_format_error(exc) -> None:
        shown = _(click_message(exc))
        # wrapped here to fit the panel typer draws it in (its border and padding take 4 cells)
        inside = rich_utils._get_rich_console(stderr=True).width - 4
        exc.format_message = lambda: fill(shown, inside)
        format_error(exc)

    make_text = rich_utils._make_rich_text

    def folding_text(*args, **kwargs):
        # Help wraps as labctl's own text does (`Prose`): Chinese has few spaces to break at,
        # and rich's default broke it at the first one, split words longer than the rest of
        # a line (LAB.NA|ME), started lines with "，", and cut a run longer than its column.
        made = make_text(*args, **kwargs)
        return Prose(made) if isinstance(made, Text) else made

    replace(core.Command, "get_help_option", get_help_option)
    replace(formatting.HelpFormatter, "write_usage", usage)
    replace(rich_utils, "rich_format_error", rich_format_error)
    replace(rich_utils, "_make_rich_text", folding_text)
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


class Language(str, Enum):
    # Read from the raw arguments by `localized` before parsing; declared for help and checking
    # (the global --lang and report's).
    zh = "zh"
    en = "en"


def lang_from_args(args: Sequence[str]) -> str | None:
    """The value of `--lang X` or `--lang=X` among the arguments, if any (the last one wins)."""
    value = None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--lang" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--lang="):
            value = arg.split("=", 1)[1]
    return value


def translate_help(command) -> None:
    """Translate every help text of a click command tree in place.

    typer reads help as rich markup: escaped, a "[default: ...]" written in a help text
    is shown as written rather than taken for a style tag and dropped.
    """
    if command.help:
        command.help = escape(_(command.help))
    if command.short_help:
        command.short_help = escape(_(command.short_help))
    for param in command.params:
        if getattr(param, "help", None):
            param.help = escape(_(param.help))
    subs = getattr(command, "commands", {})
    # the root's commands not built yet are translated as they are built (`labctl.cli.main`)
    for sub in subs.built.values() if hasattr(subs, "built") else subs.values():
        translate_help(sub)


def localized(group_cls: type) -> type:
    """`group_cls` that sets the language for the length of one invocation and translates help."""

    class Localized(group_cls):
        def main(self, args=None, *rest, **kwargs):
            import sys

            argv = list(sys.argv[1:] if args is None else args)
            previous = set_language(choose(lang_from_args(argv)))
            try:
                translate_help(self)
                with speaking():
                    return super().main(argv, *rest, **kwargs)
            finally:
                set_language(previous)

    Localized.__name__ = f"Localized{group_cls.__name__}"
    return Localized
