"""labctl's commands by name: the module that holds each, and its one line of help.

The root command reads this table, never the commands' modules: `labctl --help` lists
every command without importing one, and `labctl X ...` imports X's module alone
(`labctl.cli.main`). Each command's help is written here once and translated where it is
shown; the command takes it from here (a function command's docstring holds only what its
own `--help` says after that line).

Importing this module is cheap on purpose: the catalog's markers and nothing else.
"""

from typing import NamedTuple

from labctl.i18n import N_


class Command(NamedTuple):
    """A command: `attribute` of `module` is a function (a command) or a `typer.Typer`
    (a group of commands). A tuple, not a dataclass: dataclasses brings inspect with it."""

    name: str
    module: str
    attribute: str
    help: str


# In the order `labctl --help` lists them: the commands a learner meets first, then groups.
COMMANDS = (
    Command(
        "list",
        "labctl.cli.show",
        "list_labs",
        N_("List the labs: id, title, course sections, metrics."),
    ),
    Command(
        "run",
        "labctl.cli.run",
        "run",
        N_("Run labs on the reference and a clean room; print metrics; write evidence records."),
    ),
    Command(
        "show",
        "labctl.cli.show",
        "show",
        N_("Show a lab: its question, course sections, parameters and metrics with tolerances."),
    ),
    Command(
        "faults",
        "labctl.cli.verify",
        "faults",
        N_("Run every check against every catalogued fault; print which checks catch which fault."),
    ),
    Command(
        "doctor",
        "labctl.cli.doctor",
        "doctor",
        N_(
            "Python, numpy, torch; whether the sandbox works (why not, the fix); Chinese in report, terminal."
        ),
    ),
    Command(
        "report",
        "labctl.cli.report",
        "report",
        N_("Build one HTML report (figures inlined, opens offline) from the evidence records."),
    ),
    Command(
        "quiz",
        "labctl.cli.quiz",
        "quiz",
        N_("Answer the chapters' self-check questions; labctl checks each against its own labs."),
    ),
    Command(
        "contract",
        "labctl.cli.contract",
        "app",
        N_("The frozen clean-room interfaces, contracts v1 and v2."),
    ),
    Command(
        "evidence",
        "labctl.cli.evidence",
        "app",
        N_("The learn-llm.evidence.v1 schema, the learner template, validate and submit."),
    ),
    Command(
        "grade",
        "labctl.cli.grade",
        "app",
        N_("Grade a class of clean rooms and submissions: gradebook, JUnit, Gradescope."),
    ),
    Command(
        "verify",
        "labctl.cli.verify",
        "verify_app",
        N_("Prove a clean room against its contract (v1, v2) and the reference."),
    ),
    Command(
        "clean-room",
        "labctl.cli.verify",
        "clean_room_app",
        N_("Start a clean room of your own."),
    ),
)
BY_NAME = {command.name: command for command in COMMANDS}

# The root command's own help and options.
ROOT_HELP = N_("Run the attention and Transformer-block labs, verify clean rooms, submit evidence.")
VERSION_HELP = N_("Print the version.")
LANG_HELP = N_("Language of the output: zh or en [default: LABCTL_LANG, else the locale, else en].")
