"""Where a command will write, checked before anything runs: a folder that exists or can be
made and written to, or a file that is not a folder and whose folder exists.

A command that found out only when it wrote would have run for nothing (a whole class
graded, every fault observed) and then stopped on an error of the operating system's.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from labctl.errors import UsageError, refusal_text
from labctl.i18n import N_, Msg, declared

NOT_A_DIRECTORY = N_("{option} {path}: {where} is not a directory")


def _refused(template: str, option: str, out: Path, where: Path) -> UsageError:
    """`out`, given as `option`, refused because of `where` (it or a folder above it)."""
    return UsageError(declared(template, option=option, path=str(out), where=str(where)))


@contextlib.contextmanager
def named_by(option: str, out: Path) -> Iterator[None]:
    """The filesystem's refusal of the name itself (too long, a loop of links) as the option's
    usage error: asking whether such a path exists raises instead of answering no."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        raise UsageError(
            Msg(
                "{option} {path}: cannot be used ({error})",
                option=option,
                path=str(out),
                error=refusal_text(exc),
            )
        ) from None


def check_recordable(out: Path, option: str = "--out") -> None:
    """`out` has a name that is text: the records written under it name their files, and a
    record is UTF-8 (a name the filesystem holds as bytes that are not UTF-8 cannot be in
    one). Refused before anything is written, not after the first file."""
    try:
        str(out).encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(
            Msg(
                "{option} {path}: the name is not UTF-8 text, which the records must hold; "
                "choose another name (nothing was written)",
                option=option,
                path=str(out),
            )
        ) from None


def check_out_dir(out: Path, option: str = "--out") -> None:
    """`out` is a directory that exists or can be created, and can be written to."""
    with named_by(option, out):
        _check_out_dir(out, option)


def _check_out_dir(out: Path, option: str) -> None:
    probe = out
    while not probe.exists():
        if probe.is_symlink():
            with contextlib.suppress(FileNotFoundError):
                probe.resolve(strict=True)  # a loop of links raises here: `named_by` says so
            raise UsageError(
                Msg("{option} {path}: a dangling symbolic link", option=option, path=str(out))
            )
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise _refused(NOT_A_DIRECTORY, option, out, probe)
    try:
        # os.access says yes to root everywhere; a nameless file (O_TMPFILE) asks the filesystem
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError:
        raise _refused(N_("{option} {path}: {where} is not writable"), option, out, probe) from None


def check_out_file(out: Path, option: str = "--out") -> None:
    """`out` can be written as a file: not a directory, in a directory that exists."""
    with named_by(option, out):
        _check_out_file(out, option)


def _check_out_file(out: Path, option: str) -> None:
    if out.is_dir():
        raise UsageError(
            Msg("{option} {path}: is a directory; name a file", option=option, path=str(out))
        )
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise _refused(NOT_A_DIRECTORY, option, out, parent)
