"""Reading a file a user named on the command line: a regular file only, never past a limit.

Opening a FIFO for reading waits for a writer forever, and a device (`/dev/zero`) or a
`/proc` file says it holds 0 bytes and never ends: read as they are named, each would hang
labctl or fill its memory instead of being refused in words. The file is opened without
waiting (O_NONBLOCK), asked what it is from the open descriptor (so what was checked is
what is read), and read up to `limit` bytes and one more, to know it is larger.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from labctl.errors import UsageError
from labctl.i18n import N_, Msg, declared


def kind(mode: int) -> str:
    """What a file that is not a regular file is, in words (marked for translation)."""
    for test, what in (
        (stat.S_ISDIR, N_("a directory")),
        (stat.S_ISFIFO, N_("a FIFO")),
        (stat.S_ISCHR, N_("a character device")),
        (stat.S_ISBLK, N_("a block device")),
        (stat.S_ISSOCK, N_("a socket")),
    ):
        if test(mode):
            return what
    return N_("a special file")


def read_regular(path: Path, limit: int) -> bytes | None:
    """`path`'s bytes, or None when it holds more than `limit`. A missing or unreadable file
    raises OSError, as `open` does, for the caller to name; anything but a regular file is a
    UsageError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UsageError(
                Msg(
                    "{path}: is {kind}, not a regular file",
                    path=str(path),
                    kind=declared(kind(mode)),
                )
            )
        data = handle.read(limit + 1)
    return None if len(data) > limit else data
