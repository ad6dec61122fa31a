"""Run a clean room in a separate process, with a timeout per call and a memory limit.

`CleanRoom` looks like the clean-room package to its caller (`room.softmax(x)`),
but every call crosses to a worker process (`labctl.isolation.worker`) that holds
the learner's code behind the runtime import guard. A hang is stopped at the
timeout, a crash or the memory limit ends only the worker, and each becomes a
`CallError` that names the function; the next call starts a fresh worker.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import labctl
from labctl import contract
from labctl.errors import CallError, CleanRoomError, ImportPolicyError, UsageError
from labctl.isolation import wire
from labctl.isolation.loader import resolve_package_dir

DEFAULT_TIMEOUT_S = 20.0
DEFAULT_MEMORY_MB = 4096
# Loading starts Python and numpy before the learner's code: never less than this.
_MIN_LOAD_TIMEOUT_S = 10.0
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from labctl.isolation.worker import main; main(sys.argv[1:])"
)


@dataclass
class CallResult:
    value: Any
    elapsed_s: float
    mutated: list[str] = field(default_factory=list)
    peak_bytes: int | None = None


class CleanRoom:
    """A clean room held in a worker process; contract functions are its attributes."""

    _proc: subprocess.Popen | None = None

    def __init__(
        self,
        path: str | Path,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        memory_mb: int = DEFAULT_MEMORY_MB,
        guard: bool = True,
    ):
        self.path = resolve_package_dir(path)
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.guard = guard
        self.violations: list[str] = []
        self.signatures: dict[str, dict] = {}
        self._names = contract.function_names()
        self._arg_names = {f.name: [p.name for p in f.params] for f in contract.functions()}
        self._start()

    # -- process lifetime -------------------------------------------------

    def _start(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        debug = os.environ.get("LABCTL_DEBUG") == "1"
        package_parent = str(Path(labctl.__file__).resolve().parent.parent)
        command = [sys.executable, "-I", "-c", _BOOT, package_parent]
        command += [str(to_child_r), str(from_child_w), str(self.memory_mb)]
        self._proc = subprocess.Popen(
            command,
            pass_fds=(to_child_r, from_child_w),
            stdin=subprocess.DEVNULL,
            stdout=None if debug else subprocess.DEVNULL,
            stderr=None if debug else subprocess.DEVNULL,
            cwd=self.path.parent,
            env=env,
            start_new_session=True,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._write, self._read = to_child_w, from_child_r
        request = {"op": "load", "path": str(self.path), "guard": self.guard, "names": self._names}
        load_timeout_s = max(self.timeout_s, _MIN_LOAD_TIMEOUT_S)
        reply = self._exchange(request, load_timeout_s, "loading the clean room")
        self.violations.extend(reply.get("violations", []))
        if reply["ok"] and reply.get("violations"):
            # An import the clean room wrapped in try/except was refused all the same.
            self.close()
            raise ImportPolicyError(
                f"clean room {self.path.name} breaks the import policy: "
                + "; ".join(reply["violations"])
            )
        if not reply["ok"]:
            self.close()
            error = reply["error"]
            if error["kind"] == "import-policy":
                raise ImportPolicyError(
                    f"clean room {self.path.name} breaks the import policy: "
                    + "; ".join(error["violations"])
                )
            if error["kind"] == "UsageError":
                raise UsageError(error["message"])
            raise CleanRoomError(error["message"])
        self.signatures = reply["signatures"]

    def close(self) -> None:
        if self._proc is None:
            return
        for fd in (self._write, self._read):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()
        self._proc = None

    def __enter__(self) -> CleanRoom:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def _exchange(self, request: dict, timeout_s: float, what: str) -> dict:
        """Send one request and wait for its reply; a hang or crash raises CallError."""
        try:
            wire.write_frame(self._write, request)
            ready, _, _ = select.select([self._read], [], [], timeout_s)
            if not ready:
                self.close()
                raise CallError(what, "timeout", f"no answer within {timeout_s:g} s (stopped)")
            reply = wire.read_frame(self._read)
        except (EOFError, BrokenPipeError, wire.WireError) as exc:
            code = None
            if self._proc is not None:
                # The pipe closes a moment before the process can be reaped: wait for its code.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = self._proc.wait(timeout=2.0)
            self.close()
            raise CallError(what, "crash", _crash_reason(code, exc)) from None
        if not isinstance(reply, dict) or "ok" not in reply:
            self.close()
            raise CallError(what, "crash", "the worker sent a malformed reply")
        return reply

    # -- calls ------------------------------------------------------------

    def invoke(
        self, name: str, *args: Any, trace_memory: bool = False, **kwargs: Any
    ) -> CallResult:
        """Call `name` in the worker; return its value, compute time and mutated inputs.

        With `trace_memory`, the worker also measures the call's peak memory with
        tracemalloc (`peak_bytes`): where the code runs, not estimated from shapes.
        """
        if self._proc is None:
            self._start()
        request = {
            "op": "call",
            "function": name,
            "args": list(args),
            "kwargs": kwargs,
            "arg_names": self._arg_names.get(name, []),
            "trace_memory": trace_memory,
        }
        reply = self._exchange(request, self.timeout_s, name)
        self.violations.extend(reply.get("violations", []))
        if not reply["ok"]:
            error = reply["error"]
            if error["kind"] == "exception":
                raise CallError(
                    name, "exception", error["message"], error.get("where"), error["type"]
                )
            raise CallError(name, error["kind"], error["message"])
        return CallResult(
            reply["value"], reply["elapsed_s"], reply["mutated"], reply.get("peak_bytes")
        )

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.invoke(name, *args, **kwargs).value

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in contract.function_names():
            raise AttributeError(name)
        return lambda *args, **kwargs: self.call(name, *args, **kwargs)


def _crash_reason(code: int | None, exc: Exception) -> str:
    if code is not None and code < 0:
        signame = signal.Signals(-code).name
        hint = " (likely the memory limit)" if -code in (signal.SIGKILL, signal.SIGSEGV) else ""
        return f"the clean-room process died with {signame}{hint}"
    if code is not None:
        return f"the clean-room process exited with code {code}"
    return f"the clean-room process stopped answering: {exc}"
