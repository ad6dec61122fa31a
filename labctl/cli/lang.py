"""The language of one invocation, chosen before typer parses or prints anything.

`--lang` is a global option, but help is printed while options are parsed
(`labctl --help` never reaches a callback), so the language is read from the
raw arguments and the environment when the root command starts, and the help
texts of the freshly built command tree are translated in place then.
"""

from __future__ import annotations

from collections.abc import Sequence

from labctl.i18n import N_, _, choose, set_language

# typer's help panels read these module globals when they draw; they are set for the
# length of one invocation and put back after it.
PANEL_TITLES = {
    "ARGUMENTS_PANEL_TITLE": N_("Arguments"),
    "OPTIONS_PANEL_TITLE": N_("Options"),
    "COMMANDS_PANEL_TITLE": N_("Commands"),
    "ERRORS_PANEL_TITLE": N_("Error"),
}

LANG_HELP = "Language of the output: zh or en [default: LABCTL_LANG, else the locale, else en]."


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
    """Translate every help text of a click command tree in place."""
    if command.help:
        command.help = _(command.help)
    if command.short_help:
        command.short_help = _(command.short_help)
    for param in command.params:
        if getattr(param, "help", None):
            param.help = _(param.help)
    for sub in getattr(command, "commands", {}).values():
        translate_help(sub)


def localized(group_cls: type) -> type:
    """`group_cls` that sets the language for the length of one invocation and translates help."""

    class Localized(group_cls):
        def main(self, args=None, *rest, **kwargs):
            import sys

            from typer import rich_utils

            argv = list(sys.argv[1:] if args is None else args)
            previous = set_language(choose(lang_from_args(argv)))
            titles = {name: getattr(rich_utils, name) for name in PANEL_TITLES}
            try:
                translate_help(self)
                for name, title in PANEL_TITLES.items():
                    setattr(rich_utils, name, _(title))
                return super().main(argv, *rest, **kwargs)
            finally:
                for name, title in titles.items():
                    setattr(rich_utils, name, title)
                set_language(previous)

    Localized.__name__ = f"Localized{group_cls.__name__}"
    return Localized
