"""Limits the worker puts on itself before a learner's code loads.

Standard library only: this runs in the process (or sandbox) that holds a
learner's code, as its first act, so nothing the clean room does at import
time runs without them. The folders labctl stages for a worker (at the end) are
labctl's side only: their `shutil` and `tempfile` are imported where they are
used, out of every worker's start (~3 ms of it, with the modules they import).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import functools
import os
import resource
import signal
import stat
import threading
from pathlib import Path

from labctl.isolation import seccomp

# The whole worker's CPU time, every call of a verify run together (the
# project's clean room needs ~20 s with the metrics): a backstop for a worker
# that spins while labctl itself is stopped and cannot enforce its timeout.
CPU_LIMIT_S = 600
# Nothing a clean room writes is kept; 64 MiB bounds a flood into the private tmp.
FILE_SIZE_LIMIT = 64 << 20
# Open descriptors: the worker needs about ten (its pipes, what numpy and an import hold
# open a moment). Each pipe or socket holds kernel memory that RLIMIT_AS does not count,
# and a descriptor in flight in a socket still counts against this limit: with buffers
# kept at the system's default (`seccomp`), 64 descriptors bound what they hold to about
# 128 sockets' default buffers or 64 pipes of pipe-max-size (tens of MiB), where 20,000
# descriptors with 4 MiB buffers held gigabytes.
DESCRIPTOR_LIMIT = 64
NOBODY = 65534
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def apply_rlimits(memory_mb: int) -> None:
    """Address space, CPU seconds, file size, descriptors, no new processes, no core dumps."""
    limits = [
        (resource.RLIMIT_CPU, CPU_LIMIT_S),
        (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT),
        (resource.RLIMIT_NOFILE, DESCRIPTOR_LIMIT),
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


def release_free_memory() -> None:
    """Give the heap's free pages back to the kernel (`malloc_trim`): a call measured next
    then shows every page it touches as growth, none of them taken from what earlier calls
    freed and the heap kept (the worker's GLIBC_TUNABLES, `sandbox`). Where libc has no
    `malloc_trim` (musl), nothing is kept back to give."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


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


def readable_by_others(path: Path) -> bool:
    """Every directory above `path` searchable and `path` readable by any user."""
    try:
        if not path.stat().st_mode & stat.S_IROTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.parents)
    except OSError:
        return False


# A folder of the worker's files (the room's copy, the staged modules, a runtime's mirror)
# is named `labctl-<kind>-<pid>-…`, so that one a killed labctl left behind can be swept.
STAGED_KINDS = ("room", "worker", "runtime", "numpy", "probe")


def staging_parent() -> str | None:
    """Where a root labctl puts what a worker that is uid 65534 must read: the temporary
    folder when that uid reaches it, else the first of /tmp, /var/tmp and /dev/shm it does
    (a grader's TMPDIR under /root, or a test's under pytest's own folder, it does not);
    None: the temporary folder, as for any other user."""
    import tempfile

    if os.geteuid() != 0 or readable_by_others(Path(tempfile.gettempdir())):
        return None
    for candidate in ("/tmp", "/var/tmp", "/dev/shm"):
        if Path(candidate).is_dir() and readable_by_others(Path(candidate)):
            return candidate
    return None


def sweep_staged(parent: str) -> None:
    """Remove the worker folders under `parent` that a labctl no longer running left
    (killed, it ran no cleanup of its own): this user's, of a pid that is gone."""
    import shutil

    for entry in os.scandir(parent):
        kind, _, rest = entry.name.removeprefix("labctl-").partition("-")
        pid = rest.partition("-")[0]
        if not (entry.name.startswith("labctl-") and kind in STAGED_KINDS and pid.isdigit()):
            continue
        with contextlib.suppress(OSError):
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid() or not entry.is_dir():
                continue
            if not os.path.exists(f"/proc/{pid}"):
                shutil.rmtree(entry.path, ignore_errors=True)


def drop_privileges(needed: list[Path]) -> str:
    """As root, become `nobody` if it can read what the worker still has to load.

    Returns how the worker runs, for the record: "uid 65534" or why it stayed (`still_root`
    then holds, and the worker refuses to load a room).
    """
    if os.getuid() != 0 and os.geteuid() != 0:
        return f"uid {os.getuid()}"
    unreadable = [str(p) for p in needed if not readable_by_others(p)]
    if unreadable:
        return f"uid 0 (kept: {unreadable[0]} is not readable by nobody)"
    try:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    except OSError as exc:  # no CAP_SETUID (a container that keeps uid 0 without it)
        return f"uid 0 (kept: {exc.strerror or exc})"
    return f"uid {NOBODY}"


def still_root() -> bool:
    """Whether this process still has uid 0, real, effective or saved."""
    return 0 in os.getresuid()


_CLONE_NEWUSER = 0x10000000
_KEY_SPEC_SESSION_KEYRING = -3
NAMESPACES = ("mnt", "pid", "net", "ipc", "uts")


def measure_layers() -> dict:
    """What this process may do, measured by trying: the sandbox probe's report.

    Run it single-threaded (unshare of a user namespace fails in a threaded process
    whatever the filter says), before numpy starts its threads.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    column = {"x86_64": 0, "aarch64": 1}.get(seccomp.machine() or "")

    def attempt(name: str, *args) -> str:
        if column is None:
            return "unknown"
        if libc.syscall(seccomp.DENIED[name][column], *args) != -1:
            return "allowed"
        return errno.errorcode.get(ctypes.get_errno(), "error")

    found = {
        "uid": os.getuid(),
        "caps": seccomp.status_field("CapEff"),
        "seccomp": seccomp.in_force(),
        "namespaces": {n: _readlink(f"/proc/self/ns/{n}") for n in NAMESPACES},
        "keyctl": attempt("keyctl", 0, _KEY_SPEC_SESSION_KEYRING, 0),
        "memfd_create": attempt("memfd_create", b"probe", 0),
    }
    found["unshare_user"] = (
        "allowed"
        if libc.unshare(_CLONE_NEWUSER) == 0
        else errno.errorcode.get(ctypes.get_errno(), "error")
    )
    return found


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


# The worker folders this process made and has not removed, each with the pid that made
# it: removed as the process exits, by that process only (a forked child exits too).
_STAGED: dict[Path, int] = {}


@atexit.register
def _remove_staged() -> None:
    for top, pid in list(_STAGED.items()):
        if pid == os.getpid():
            remove_staged(top)


@contextlib.contextmanager
def _kills_held():
    """SIGINT and SIGTERM held back on the main thread, where Python runs their handlers: a
    kill just as a folder appeared fell between making it and marking it for removal, and
    left it behind (the test that kills labctl once a folder shows caught it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def staged_folder(kind: str) -> Path:
    """A new folder, 0755, for what the worker must read, where uid 65534 reaches it
    (`limits.staging_parent`), named for this process; removed when labctl exits (or sooner,
    `remove_staged`), and by the next labctl should this one be killed first."""
    import tempfile

    parent = _staging_parent_swept()
    with _kills_held():
        top = Path(tempfile.mkdtemp(prefix=f"labctl-{kind}-{os.getpid()}-", dir=parent))
        _STAGED[top] = os.getpid()
    top.chmod(0o755)
    return top


def remove_staged(top: Path) -> None:
    """Remove a folder `staged_folder` made, now."""
    import shutil

    shutil.rmtree(top, ignore_errors=True)
    _STAGED.pop(top, None)


@functools.cache
def _staging_parent_swept() -> str | None:
    # The temporary folder too, not only root's staging parent: where that was the temporary
    # folder itself (/tmp, as for any user), a labctl killed outright left its folders for good.
    import tempfile

    parent = staging_parent()
    with contextlib.suppress(OSError):
        sweep_staged(parent or tempfile.gettempdir())
    return parent
