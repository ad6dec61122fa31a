"""What a worker leaves behind: processes re-parented to labctl (the subreaper), ended.

A clean room can start processes that outlive its worker (under the `process`
fallback; the sandbox's PID namespace ends them itself). labctl is their
subreaper, so they become its children, and each worker's close sweeps them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path

LIVE: set[int] = set()  # pids of workers in use, which the orphan sweep spares
# A worker is started and registered in one step, so a sweep in another thread never
# takes a worker that has just started for an orphan.
SPAWN = threading.Lock()


def _children() -> list[tuple[int, int]]:
    """(pid, session id) of this process's children, from /proc (Linux)."""
    found = []
    me = str(os.getpid())
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            fields = stat.rpartition(")")[2].split()
            if fields[1] == me:
                found.append((int(entry.name), int(fields[3])))
    return found


def sweep_orphans() -> None:
    """End what a worker left behind (re-parented to labctl, the subreaper), and reap it.

    A child in labctl's own session is labctl's (git, say); a worker in use is spared.
    """
    with SPAWN:
        _sweep(os.getsid(0))


def _sweep(own_session: int) -> None:
    for pid, session in _children():
        if pid in LIVE or session == own_session:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
