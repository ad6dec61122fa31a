"""The sandbox: bubblewrap (`bwrap`) around the worker, and the worker's private copy.

Inside the sandbox the worker sees, read-only: the system's libraries (/usr),
the Python runtime with its standard library (its site-packages hidden under
an empty tmpfs), numpy's own directory, the clean room, and a private copy of
the worker's few modules (`STAGED`). labctl, its reference, torch and the
repository are not there to read. It gets a private 64 MiB /tmp, no network,
its own PID, IPC, UTS and cgroup namespaces, a new session (no terminal to
inject into), and it dies with labctl. Started by root, the worker drops to the
real uid 65534 before any learner code loads (no capabilities, and the process
limit then holds: no fork); started by another user, it runs as uid 65534 in a
user namespace, mapped to that user.

Inside both, a seccomp filter (`seccomp`) refuses new namespaces, mounts, the
kernel keyring, debugging other processes and memory that RLIMIT_AS does not
count; without root, bwrap's `--disable-userns` also forbids a nested user
namespace. Each of these layers is measured inside a probe sandbox
(`sandbox_status().layers`), never assumed from the command line.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import platform
import py_compile
import shutil
import subprocess
import sys
import sysconfig
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from labctl.errors import refusal_text
from labctl.i18n import N_, Msg, declared
from labctl.isolation import seccomp
from labctl.isolation.limits import remove_staged, staged_folder

ENV_BWRAP = "LABCTL_BWRAP"  # another bwrap binary, or a missing path to test the fallback
INSTALL_HINT = N_(
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
    "bubblewrap); in a container, allow user namespaces"
)
SITE = "/opt/labctl/site"
WORKER = "/opt/labctl/worker"
ROOM_PARENT = "/opt/labctl/room"
TMP_SIZE = 64 << 20
_PACKAGE = Path(__file__).resolve().parent.parent
# The worker's own modules: all it imports from labctl (standard library and numpy only).
STAGED = (
    "errors.py",
    "i18n/__init__.py",
    "isolation/audit.py",
    "isolation/calltrace.py",
    "isolation/guard.py",
    "isolation/limits.py",
    "isolation/loader.py",
    "isolation/seccomp.py",
    "isolation/wire.py",
    "isolation/worker.py",
    "pysource.py",
)


# The layers of the sandbox, each measured by the probe.
LAYERS = ("namespaces", "uid drop", "seccomp", "user namespaces disabled")


@dataclass(frozen=True)
class Layer:
    name: str
    works: bool
    reason: str | Msg


@dataclass(frozen=True)
class SandboxStatus:
    works: bool  # bwrap starts the worker's interpreter with numpy
    reason: str | Msg
    layers: tuple[Layer, ...] = ()

    @property
    def missing(self) -> list[str]:
        """The layers a working sandbox lacks here (every layer when it does not start)."""
        if not self.works:
            return list(LAYERS)
        return [layer.name for layer in self.layers if not layer.works]


@functools.cache
def staged_worker() -> Path:
    """A private directory holding `labctl/` with only the worker's modules (once per process)."""
    top = staged_folder("worker")
    for relative in STAGED:
        dest = top / "labctl" / relative
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_PACKAGE / relative, dest)
    for package in (top / "labctl", top / "labctl" / "isolation"):
        (package / "__init__.py").write_text("")
    # Compiled here, once: the worker never writes bytecode (PYTHONDONTWRITEBYTECODE, and a
    # read-only bind), so every start would compile these modules anew: ~9 ms of a ~98 ms start.
    for module in (top / "labctl").rglob("*.py"):
        py_compile.compile(str(module), doraise=True, optimize=0)
    for path in [top, *top.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    # numpy alone, for the process level: its sys.path holds no site-packages (no torch).
    site = top / "site"
    site.mkdir(mode=0o755)
    numpy = numpy_dir()
    for name in ("numpy", "numpy.libs"):
        if (numpy.parent / name).is_dir():
            (site / name).symlink_to(numpy.parent / name)
    return top


ROOM_COPY_LIMIT = 64 << 20


def copy_room(room: Path) -> Path:
    """A private, world-readable copy of the clean room, the one the sandbox binds.

    The worker drops to uid 65534, which must read the room whatever the
    learner's umask; and a copy cannot change under a run. Returns the
    copy's own directory (same name), inside a new temporary directory.
    """
    from labctl.errors import CleanRoomError

    files = [p for p in room.rglob("*") if "__pycache__" not in p.parts]
    size = sum(p.stat().st_size for p in files if p.is_file() and not p.is_symlink())
    if size > ROOM_COPY_LIMIT:
        raise CleanRoomError(
            f"clean room {room.name} holds {size >> 20} MiB; a clean room is source code "
            f"(at most {ROOM_COPY_LIMIT >> 20} MiB)"
        )
    top = staged_folder("room")
    dest = top / room.name
    shutil.copytree(room, dest, ignore=_not_source, symlinks=True)
    for path in [top, *top.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


def _not_source(folder: str, names: list[str]) -> list[str]:
    """Left out of the copy: caches, and anything but directories, files and links (a FIFO
    would block the copy forever, a device has no business in a clean room)."""
    skipped = []
    for name in names:
        path = Path(folder, name)
        if name == "__pycache__" or not (path.is_symlink() or path.is_dir() or path.is_file()):
            skipped.append(name)
    return skipped


def python_binary() -> str:
    """The real interpreter (not a venv's link to it): it finds its stdlib from its own path."""
    return os.path.realpath(sys.executable)


def numpy_dir() -> Path:
    return Path(importlib.util.find_spec("numpy").origin).parent


def bwrap_binary() -> str | None:
    return os.environ.get(ENV_BWRAP) or shutil.which("bwrap")


def _site_dirs() -> list[str]:
    """Where the runtime would find third-party packages: hidden inside the sandbox."""
    found = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    for base in {sys.base_prefix, "/usr", "/usr/local"}:
        lib = Path(base) / "lib"
        found.update(str(p) for p in lib.glob("python3*/site-packages"))
        found.update(str(p) for p in lib.glob("python3*/dist-packages"))
        found.update(str(p) for p in lib.glob("python3/dist-packages"))
    return sorted(p for p in found if Path(p).is_dir())


def _reachable(path: Path) -> list[str]:
    """Directories above `path` made searchable inside the sandbox (bwrap copies their modes).

    A runtime under /root (0700) would otherwise be out of reach of the uid the worker drops to.
    """
    args = []
    for parent in reversed(path.parents):
        if str(parent) != "/":
            args += ["--perms", "0755", "--dir", str(parent)]
    return args


def _namespaces() -> list[str]:
    """As root: no user namespace, so the worker can become a real unprivileged uid itself
    (CAP_SETUID and CAP_SETGID kept for that, and lost with it). Otherwise bwrap needs a
    user namespace, where the worker runs as uid 65534 mapped to the caller's own uid."""
    if os.geteuid() == 0:
        return [
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--cap-drop",
            "ALL",
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
        ]
    args = ["--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534"]
    binary = bwrap_binary()
    if binary is not None and _supports(binary, "--disable-userns"):
        args.append("--disable-userns")
    return args


@functools.cache
def _supports(binary: str, option: str) -> bool:
    """Whether this bwrap knows `option` (--disable-userns came with 0.8)."""
    try:
        done = subprocess.run([binary, "--help"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option.encode() in done.stdout


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
    for file in ("/etc/ld.so.cache", "/etc/localtime"):
        if Path(file).exists():
            args += ["--ro-bind", file, file]
    runtime = Path(python_binary()).parent.parent
    if not runtime.is_relative_to("/usr"):
        args += [*_reachable(runtime), "--ro-bind", str(runtime), str(runtime)]
    # Only what a bind above made visible: hiding a directory the sandbox does not hold
    # would create it, and show its host path in /proc/self/mountinfo.
    for site in _site_dirs():
        if Path(site).is_relative_to("/usr") or Path(site).is_relative_to(runtime):
            args += ["--tmpfs", site]
    return args


def command(room: Path, env: dict[str, str], seccomp_fd: int | None = None) -> list[str]:
    """The bwrap command line that runs the worker's interpreter on `room` (resolved).

    `seccomp_fd` (from `seccomp.program_fd()`, passed to the child) holds the filter.
    """
    numpy = numpy_dir()
    args = [
        bwrap_binary() or "bwrap",
        *_namespaces(),
        "--die-with-parent",
        "--new-session",
        "--hostname",
        "clean-room",
        *_system_binds(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(TMP_SIZE),
        "--tmpfs",
        "/tmp",
        *_reachable(Path(SITE) / "numpy"),
        "--perms",
        "0755",
        "--dir",
        ROOM_PARENT,
        "--ro-bind",
        str(numpy),
        f"{SITE}/numpy",
    ]
    libs = numpy.parent / "numpy.libs"
    if libs.is_dir():
        args += ["--ro-bind", str(libs), f"{SITE}/numpy.libs"]
    args += ["--ro-bind", str(staged_worker()), WORKER]
    args += ["--ro-bind", str(room), f"{ROOM_PARENT}/{room.name}", "--chdir", ROOM_PARENT]
    # In a user namespace the root and /dev tmpfs belong to the sandbox's own uid: unbounded
    # memory to write into, unless read-only (the private /tmp stays writable, 64 MiB).
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return [*args, "--"]


def room_path(room: Path) -> str:
    """Where the clean room appears inside the sandbox."""
    return f"{ROOM_PARENT}/{room.name}"


# A probe started early, with the bwrap it was started for: another binary, another probe.
_pending: tuple[str | None, Future] | None = None


def probe_soon() -> None:
    """Start the probe in a thread: its sandboxed Python boots while the caller imports.

    The next `sandbox_status()` takes the answer; without this it probes itself.
    """
    global _pending
    if _pending is not None or sandbox_status.cache_info().currsize:
        return
    future: Future = Future()
    _pending = (os.environ.get(ENV_BWRAP), future)

    def probe() -> None:
        try:
            future.set_result(_probe())
        except BaseException as exc:  # handed to the caller of sandbox_status
            future.set_exception(exc)

    threading.Thread(target=probe, name="labctl-probe", daemon=True).start()


@functools.cache
def sandbox_status() -> SandboxStatus:
    """Whether bwrap can start the worker's interpreter with numpy here (probed once)."""
    global _pending
    pending, _pending = _pending, None
    if pending is not None and pending[0] == os.environ.get(ENV_BWRAP):
        return pending[1].result()
    return _probe()


_PROBE = (
    "import json, sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
    "from labctl.isolation import limits; "
    "privileges = limits.drop_privileges([__import__('pathlib').Path(p) for p in sys.argv[3:]]); "
    "found = limits.measure_layers(); "
    "import numpy, labctl.isolation.worker; "
    "print(json.dumps({**found, 'privileges': privileges}))"
)


def _probe() -> SandboxStatus:
    if not sys.platform.startswith("linux"):
        return SandboxStatus(
            False, Msg("bubblewrap needs Linux (this is {platform})", platform=sys.platform)
        )
    binary = bwrap_binary()
    if binary is None or not Path(binary).is_file():
        return SandboxStatus(False, Msg("bwrap is not installed; {hint}", hint=_hint()))
    # Read by uid 65534, as a worker's room is; removed as labctl exits should the command end
    # while the probe's thread is still running (`probe_soon`: a kill, a refusal), and by the
    # next labctl should this one be killed outright: a kill in the probe left it in /tmp.
    probe = staged_folder("probe")
    fd = seccomp.program_fd()
    try:
        env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
        needed = [sysconfig.get_paths()["stdlib"], room_path(probe)]
        done = subprocess.run(
            [
                *command(probe, env, fd),
                python_binary(),
                "-I",
                "-S",
                "-c",
                _PROBE,
                SITE,
                WORKER,
                *needed,
            ],
            capture_output=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
            pass_fds=() if fd is None else (fd,),
        )
    except subprocess.TimeoutExpired as exc:
        # its message is the whole command line, pages of it: the seconds say it
        return SandboxStatus(
            False,
            Msg(
                "bwrap did not finish the probe in {seconds} s; {hint}",
                seconds=exc.timeout,
                hint=_hint(),
            ),
        )
    except OSError as exc:
        return SandboxStatus(
            False,
            Msg("bwrap could not start: {error}; {hint}", error=refusal_text(exc), hint=_hint()),
        )
    finally:
        if fd is not None:
            os.close(fd)
        remove_staged(probe)
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = lines[-1] if lines else Msg("exit code {code}", code=done.returncode)
        return SandboxStatus(
            False, Msg("bwrap cannot start a sandbox here: {why}; {hint}", why=why, hint=_hint())
        )
    layers = judge_layers(done.stdout)
    if layers is None:
        # a bwrap that exits 0 without running the probe would run no room either: `auto`
        # must not choose it, and verify must not blame the room for it
        return SandboxStatus(
            False,
            Msg(
                "bwrap ({binary}) exited 0 but the probe inside it reported nothing readable; "
                "{hint}",
                binary=binary,
                hint=_hint(),
            ),
        )
    return SandboxStatus(True, Msg("bubblewrap works ({binary})", binary=binary), layers)


def _hint() -> Msg:
    return declared(INSTALL_HINT)


def judge_layers(report: bytes) -> tuple[Layer, ...] | None:
    """Each layer from what the probe measured inside, against labctl's own namespaces; None
    when its report cannot be read (the probe did not run)."""
    try:
        found = json.loads(report.decode("utf-8", "replace").strip().splitlines()[-1])
        inside = found["namespaces"]
        uid, caps = int(found["uid"]), str(found["caps"])
        refused = {key: found[key] for key in ("keyctl", "memfd_create", "unshare_user")}
        filtered = bool(found["seccomp"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    from labctl.isolation.limits import NAMESPACES

    own = {name: _own_namespace(name) for name in NAMESPACES}
    shared = [name for name in NAMESPACES if not own[name] or inside.get(name) == own[name]]
    namespaces = (
        Layer("namespaces", True, Msg("own mount, PID, network, IPC and UTS namespaces"))
        if not shared
        else Layer(
            "namespaces",
            False,
            Msg("shares labctl's namespaces: {names}", names=", ".join(shared)),
        )
    )
    dropped = uid != 0 and caps.strip("0") == ""
    uid_drop = Layer(
        "uid drop", dropped, Msg("uid {uid}, capabilities {caps}", uid=uid, caps=caps or "?")
    )
    if seccomp.machine() is None:
        why = Msg("no seccomp table for this architecture ({machine})", machine=platform.machine())
        filter_layer = Layer("seccomp", False, why)
    elif not filtered:
        filter_layer = Layer("seccomp", False, Msg("no seccomp filter in force inside the sandbox"))
    elif refused["keyctl"] != "EPERM" or refused["memfd_create"] != "EPERM":
        why = Msg(
            "the filter let through keyctl ({keyctl}), memfd_create ({memfd})",
            keyctl=refused["keyctl"],
            memfd=refused["memfd_create"],
        )
        filter_layer = Layer("seccomp", False, why)
    else:
        filter_layer = Layer(
            "seccomp", True, Msg("filter in force: keyctl and memfd_create refused")
        )
    by = (
        Msg("--disable-userns and the seccomp filter")
        if "--disable-userns" in _namespaces()
        else Msg("the seccomp filter")
    )
    userns = (
        Layer("user namespaces disabled", False, Msg("unshare(CLONE_NEWUSER) succeeded inside"))
        if refused["unshare_user"] == "allowed"
        else Layer(
            "user namespaces disabled",
            True,
            Msg(
                "unshare(CLONE_NEWUSER) refused ({errno}) by {by}",
                errno=refused["unshare_user"],
                by=by,
            ),
        )
    )
    return (namespaces, uid_drop, filter_layer, userns)


def _own_namespace(name: str) -> str:
    try:
        return os.readlink(f"/proc/self/ns/{name}")
    except OSError:
        return ""
