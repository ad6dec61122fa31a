"""Grading workers' scratch folders (`$TMPDIR/labctl-grading-*`), and those a killed run left.

Each grading worker keeps its temporary files in a folder of its own, which the pool
removes when the worker ends. A labctl killed outright (`kill -9`) removes nothing,
so each folder names its owner: the worker's process id and that process's start time
(`.owner`). The next run removes every such folder of this user whose owner is gone,
never one whose owner still runs (another batch's) nor one that names no owner.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from labctl import owners

PREFIX = "labctl-grading-"
OWNER = ".owner"


def make(private: bool = False) -> str:
    """A fresh scratch folder; a clean room's process drops to uid 65534 and reads the
    worker staged in it, so it is readable by all, writable by this user alone; `private`:
    this user's alone (what only labctl's own processes read)."""
    folder = tempfile.mkdtemp(prefix=PREFIX)
    if not private:
        os.chmod(folder, 0o755)
    return folder


def claim(folder: str, pid: int) -> None:
    """Name process `pid` the owner of `folder`."""
    with contextlib.suppress(OSError):
        Path(folder, OWNER).write_text(owners.owner(pid) + "\n", encoding="ascii")


def remove_stale(where: str | None = None) -> list[str]:
    """Remove this user's scratch folders whose owner process is gone; returns them."""
    removed = []
    top = where or tempfile.gettempdir()
    with contextlib.suppress(OSError), os.scandir(top) as listing:
        found = [e for e in listing if e.name.startswith(PREFIX)]
    for entry in found:
        try:
            if entry.is_symlink() or not entry.is_dir() or entry.stat().st_uid != os.getuid():
                continue
            named = Path(entry.path, OWNER).read_text("ascii")
            if owners.parse(named) is None or owners.alive(named):
                continue
        except OSError:
            continue  # no owner named (being made, or an older labctl's): left alone
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed
