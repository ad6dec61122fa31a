"""Which process owns a file or folder, named so that a reused process id is not mistaken
for it: the id and that process's start time (clock ticks since boot, `/proc/PID/stat`)."""

from __future__ import annotations

import os
from pathlib import Path


def started(pid: int) -> str | None:
    """When process `pid` started, or None where that is not known."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def owner(pid: int) -> str:
    """`pid` and its start time, as one line of text (`-` for a start not known)."""
    return f"{pid} {started(pid) or '-'}"


def parse(text: str) -> tuple[int, str] | None:
    """The process id and start time an `owner` text names; None for text that names none."""
    parts = text.split()
    if len(parts) != 2 or not parts[0].isdigit():
        return None
    return int(parts[0]), parts[1]


def alive(text: str) -> bool:
    """Whether the process an `owner` text names still runs; False for text that names
    none. A process of another user's counts as running."""
    named = parse(text)
    if named is None:
        return False
    pid, when = named
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return when == "-" or started(pid) in (None, when)
