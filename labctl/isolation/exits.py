"""Why a clean room's worker is gone: the reason from its exit status, and the room's
line from the stack the worker printed as it died."""

from __future__ import annotations

import re
import signal
from pathlib import PurePosixPath

from labctl.i18n import Msg


def crash_reason(code: int | None, exc: Exception, printed: Msg | str = "") -> Msg:
    """Why the worker is gone, and what it printed; `str()` of it is the record's English."""
    if code is not None and code < 0:
        signame = signal.Signals(-code).name
        if -code in (signal.SIGKILL, signal.SIGSEGV):
            return Msg(
                "the clean-room process died with {signal} (likely the memory limit){printed}",
                signal=signame,
                printed=printed,
            )
        return Msg(
            "the clean-room process died with {signal}{printed}", signal=signame, printed=printed
        )
    if code is not None:
        return Msg(
            "the clean-room process exited with code {code}{printed}", code=code, printed=printed
        )
    return Msg(
        "the clean-room process stopped answering: {error}{printed}",
        error=str(exc),
        printed=printed,
    )


# The stack `faulthandler` prints as the process ends, and each frame of it (most recent
# call first).
_DUMP = "Fatal Python error: "
_FRAME = re.compile(r'^\s*File "(?P<file>[^"\n]+)", line (?P<line>\d+) in ', re.MULTILINE)


def crash_site(printed: str, room_path: str) -> tuple[str, str | None]:
    """What was printed before the stack the worker printed as it ended, and the stack's
    innermost frame inside the room (at `room_path` in the worker) as `dir/file.py:line`,
    or None. What the worker printed is the learner's: a site is a hint for the diagnosis,
    never a verdict."""
    start = printed.rfind(_DUMP)
    if start < 0:
        return printed, None
    own, dump = printed[:start], printed[start:]
    root = PurePosixPath(room_path) if room_path else None
    for frame in _FRAME.finditer(dump):
        file = PurePosixPath(frame["file"])
        if root is not None and file != root and file.is_relative_to(root):
            return own, f"{root.name}/{file.relative_to(root)}:{frame['line']}"
    return own, None
