"""Limits the worker puts on itself before a learner's code loads.

Standard library only: this runs in the process (or sandbox) that holds a
learner's code, as its first act, so nothing the clean room does at import
time runs without them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import stat
from pathlib import Path

# The whole worker's CPU time, every call of a verify run together (the
# project's clean room needs ~20 s with the metrics): a backstop for a worker
# that spins while labctl itself is stopped and cannot enforce its timeout.
CPU_LIMIT_S = 600
# Nothing a clean room writes is kept; 64 MiB bounds a flood into the private tmp.
FILE_SIZE_LIMIT = 64 << 20
NOBODY = 65534
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def apply_rlimits(memory_mb: int) -> None:
    """Address space, CPU seconds, file size, no new processes, no core dumps."""
    limits = [
        (resource.RLIMIT_CPU, CPU_LIMIT_S),
        (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT),
        (resource.RLIMIT_CORE, 0),
        # 0: no fork and no thread (numpy runs single-threaded here). The kernel
        # does not enforce it for uid 0, which is why root drops its uid first.
        (resource.RLIMIT_NPROC, 0),
    ]
    if memory_mb > 0:
        limits.append((resource.RLIMIT_AS, memory_mb << 20))
    for which, value in limits:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(which, (value, value))


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when labctl dies (Linux); exit now if it already has."""
    if _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) and os.getppid() != parent_pid:
        os._exit(1)


def become_subreaper() -> bool:
    """Orphans of labctl's descendants are re-parented to labctl, which can then end them."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _readable_by_others(path: Path) -> bool:
    """Every directory above `path` searchable and `path` readable by any user."""
    try:
        if not path.stat().st_mode & stat.S_IROTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.parents)
    except OSError:
        return False


def drop_privileges(needed: list[Path]) -> str:
    """As root, become `nobody` if it can read what the worker still has to load.

    Returns how the worker runs, for the record: "uid 65534" or why it stayed.
    """
    if os.getuid() != 0:
        return f"uid {os.getuid()}"
    unreadable = [str(p) for p in needed if not _readable_by_others(p)]
    if unreadable:
        return f"uid 0 (kept: {unreadable[0]} is not readable by nobody)"
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    return f"uid {NOBODY}"
