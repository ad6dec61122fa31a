"""The one error family of labctl.

The library raises these and never prints or exits; the CLI's single handler
(`labctl.cli.main`) turns each into a one-line message and an exit code.
"""

from __future__ import annotations

import errno
import os

# Imported here, not when a message is shown: a clean-room worker formats errors under an
# import guard that refuses late imports. labctl.i18n imports nothing heavy.
from labctl.i18n import Msg, _, declared

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class LabctlError(Exception):
    """Base of every error labctl raises on purpose. Exit code 1: input refused.

    The message is English source text or a `labctl.i18n.Msg`; it is translated
    when shown (`str(error)`), in the language of the invocation.
    """

    exit_code = EXIT_FAILED

    def __str__(self) -> str:
        if len(self.args) == 1 and isinstance(self.args[0], (str, Msg)):
            return _(self.args[0])
        return super().__str__()

    @property
    def message(self) -> str | Msg:
        """The message as given: English text or a Msg, to nest in another Msg untranslated."""
        given = self.args[0] if len(self.args) == 1 else None
        return given if isinstance(given, (str, Msg)) else super().__str__()

    def english(self) -> str:
        """The message in English whatever the language of the invocation (for --json)."""
        return str(self.message)


class UsageError(LabctlError):
    """The command line asks for something that does not exist (unknown lab, missing file)."""

    exit_code = EXIT_USAGE


class CourseTextError(UsageError):
    """The course's chapters are not where the setting (`LABCTL_COURSE_DIR`, or an option) says."""


class ContractError(LabctlError):
    """The contract data no longer matches its pinned digest."""


class CleanRoomError(LabctlError):
    """A clean room could not be loaded: not a package, a syntax error, an import that fails."""


class ImportPolicyError(CleanRoomError):
    """A clean room imports something other than the standard library and numpy."""


class CallError(LabctlError):
    """A clean-room function raised, hung, crashed or returned something unusable.

    `kind` is one of: exception, timeout, crash, missing, not-callable (the package holds
    something else under the name: `detail` names its class), unsupported-return;
    `exc_type` names the learner's exception class when `kind` is exception.
    """

    def __init__(
        self,
        function: str,
        kind: str,
        message: str,
        where: str | None = None,
        exc_type: str | None = None,
        shown: str | Msg | None = None,
    ):
        self.function = function
        self.kind = kind
        self.detail = message
        # what a person reads, in the chosen language where labctl wrote it (`detail` stays English)
        self.shown = message if shown is None else shown
        self.where = where
        self.exc_type = exc_type
        # The calls it reached before it raised, where labctl asked for them (`calltrace`).
        self.trace: list[dict] = []
        place = Msg(" at {where}", where=where) if where else ""
        said = (
            Msg("raised {exc_type}: {message}", exc_type=exc_type, message=self.shown)
            if exc_type
            else self.shown
        )
        # A contract function's name as it is; what labctl was doing ("loading the clean
        # room", marked for translation where it is said) in the chosen language.
        named = function if function.isidentifier() else declared(function)
        super().__init__(Msg("{function}: {said}{place}", function=named, said=said, place=place))


class EvidenceError(LabctlError):
    """An evidence record or submission is malformed or refused."""


class StoreError(LabctlError):
    """The evidence store refused a write (it would overwrite, or escape its directory)."""


def message_of(exc: BaseException) -> str | Msg:
    """What an exception says, untranslated: a LabctlError's message as given, else its text.

    For nesting one error in another message that is shown translated and kept in English."""
    return exc.message if isinstance(exc, LabctlError) else str(exc)


def refusal_text(exc: OSError | RuntimeError) -> str:
    """Why the filesystem refused a path, in its own words, never naming the path again."""
    if isinstance(exc, RuntimeError):  # Path.resolve's loop of links before Python 3.13
        return os.strerror(errno.ELOOP)
    return exc.strerror or str(exc)
