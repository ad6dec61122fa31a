"""Run a clean room in a worker process, inside bubblewrap where it works.

`CleanRoom` looks like the clean-room package to its caller (`room.softmax(x)`),
but every call crosses to a worker (`labctl.isolation.worker`) at the
isolation level `resolve_isolation` chose: `sandbox` (bwrap: the operating
system is the boundary) or `process` (a hardened child process, not a
security boundary). A hang, a stopped worker or the memory limit ends the
whole worker (its process group, and with bwrap its PID namespace); each
becomes a `CallError` that names the function, and the next call starts a
fresh worker. Replies are checked before anything reads them (`replies`);
the learner's stdout and stderr are captured here, never shown on labctl's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import socket
import subprocess
import sysconfig
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labctl import contract, textsafe
from labctl.errors import CallError, CleanRoomError, ImportPolicyError
from labctl.i18n import N_, Msg, declared
from labctl.isolation import bwrap, limits, replies, sealed, seccomp, staging, wire
from labctl.isolation.exits import crash_reason, crash_site
from labctl.isolation.levels import resolve_isolation
from labctl.isolation.loader import SENT_TEMPLATES, resolve_package_dir
from labctl.isolation.orphans import LIVE, SPAWN, sweep_orphans
from labctl.isolation.peak import PeakMeter, worker_pid

DEFAULT_TIMEOUT_S = 20.0
DEFAULT_MEMORY_MB = 4096
# The worker's own start (Python, numpy, its limits) before the room's code: never less
# than this; the room's import then has the time of one call.
_MIN_LOAD_TIMEOUT_S = 10.0
OUTPUT_LIMIT = 64 << 10
MAX_VIOLATIONS = 10_000  # a hundred a reply at most (`replies`), over a room's whole life
# No collection while Python, numpy and the worker's modules load: they make ~36,000 objects
# and keep them all, and collecting among them cost ~7 ms of every worker's start (~90 ms).
# `worker.main` freezes them and turns the collector back on before it reads a request: the
# room's code runs with it on, as anywhere.
_BOOT = (
    "import gc, sys; gc.disable(); sys.path[:0] = [sys.argv.pop(1), sys.argv.pop(1)]; "
    "from labctl.isolation.worker import main; main(sys.argv[1:])"
)
_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    # Arrays under 32 MiB come from the heap, and up to 64 MiB of what calls free stays there
    # for the next call. By default glibc maps each array over 128 KiB afresh and unmaps it
    # when freed, so every call paid the kernel's faulting and zeroing of its pages again: 60%
    # of a room's CPU time over the template metrics' calls (0.98 s against 0.42 s). A call
    # whose memory is measured is preceded by a `trim` (`limits.release_free_memory`).
    "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864",
}
# Which kernels numpy and its OpenBLAS pick, where labctl's environment chooses them: a
# worker picks as labctl does, so a call answers to the last bit as it would in labctl's
# process (the diagnosis runs labctl's own fault rooms there). Left to itself, OpenBLAS on an
# AVX-512 machine takes another kernel than an OPENBLAS_CORETYPE=Haswell labctl, and a
# matmul differs in its last bit.
_KERNELS = (
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "NPY_DISABLE_CPU_FEATURES",
    "NPY_ENABLE_CPU_FEATURES",
)


def worker_env() -> dict[str, str]:
    """The worker's whole environment: fixed, but for the kernel choices labctl runs with."""
    return {**_ENV, **{k: os.environ[k] for k in _KERNELS if k in os.environ}}


# Every worker is started from this one long-lived thread: a parent-death signal (bwrap's
# --die-with-parent, the fallback's PR_SET_PDEATHSIG) fires when the *thread* that started
# the process ends, so a room opened in a short-lived thread would die with that thread.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="labctl-spawner")


@dataclass
class CallResult:
    value: Any
    elapsed_s: float
    mutated: list[str] = field(default_factory=list)
    peak_bytes: int | None = None
    trace: list[dict] = field(default_factory=list)


class _Output:
    """The worker's stdout and stderr, drained as they come, the first OUTPUT_LIMIT bytes kept."""

    def __init__(self, fd: int):
        self.fd = fd
        self.kept = bytearray()
        self.total = 0
        # Over the worker's whole life (a take does not reset them): for the grader's record.
        self.first = bytearray()
        self.seen = 0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        with contextlib.suppress(OSError):
            while chunk := os.read(self.fd, 1 << 16):
                with self.lock:
                    self.total += len(chunk)
                    room = OUTPUT_LIMIT - len(self.kept)
                    if room > 0:
                        self.kept += chunk[:room]
                    self.seen += len(chunk)
                    room = OUTPUT_LIMIT - len(self.first)
                    if room > 0:
                        self.first += chunk[:room]
        with contextlib.suppress(OSError):
            os.close(self.fd)

    def take_raw(self) -> tuple[str, int]:
        """What was printed since the last take, as printed, and how much was not kept."""
        with self.lock:
            data, total = bytes(self.kept), self.total
            self.kept.clear()
            self.total = 0
        return data.decode("utf-8", "replace"), total - len(data)

    def take(self) -> str:
        """What was printed since the last take, cleaned for a terminal."""
        return replies.printable(*self.take_raw())


# Frames carry arrays of megabytes; Linux pipes hold 64 KiB unless asked (up to
# /proc/sys/fs/pipe-max-size, 1 MiB by default), and each refill is a wake-up of the reader.
PIPE_BYTES = 1 << 20


def _widen(fd: int) -> None:
    """Ask for a 1 MiB pipe; where the system refuses, the default pipe works, only slower."""
    with contextlib.suppress(AttributeError, OSError):
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


_SPENT = N_("not run: the room's time budget is spent")


class CleanRoom:
    """A clean room held in a worker; contract functions are its attributes.

    `deadline` (time.monotonic, None: none) is the end of the room's whole time budget:
    no call starts past it, and a call's timeout is cut to what is left of it."""

    _proc: subprocess.Popen | None = None
    _copy: Path | None = None
    deadline: float | None = None
    cut_by_budget = False  # a call was refused, or stopped, at `deadline`

    def __init__(
        self,
        path: str | Path,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        memory_mb: int = DEFAULT_MEMORY_MB,
        *,
        isolation: str = "auto",
        guard: bool = True,
        defer_load: bool = False,
        budget: replies.ReplyBudget = replies.BUDGET,
    ):
        """Start the worker and load the clean room in it; its replies count against `budget`
        (`replies.OWN` for labctl's own rooms only).

        With `defer_load` the load request is sent but its answer is read only by
        `wait_loaded()` or the first call: the worker starts Python and numpy on
        another core while the caller does something else (imports torch, say).
        """
        self.path = resolve_package_dir(path)
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.guard = guard
        self.budget = budget
        self.isolation = resolve_isolation(isolation)
        self.violations: list[str] = []
        self.signatures: dict[str, dict] = {}
        self.privileges = ""
        self.printed = ""
        self._seq = 0
        self._inside = ""  # the room's path inside the worker
        # One call at a time: labs measured side by side on threads share the worker.
        self._calls = threading.RLock()
        self._copy: Path | None = None
        self._output: _Output | None = None
        self._outputs: list[_Output] = []  # every worker's, a worker restarted after a hang too
        self._loading: tuple[dict, float, float] | None = None
        # Every version's functions (v2 holds v1's): the checks ask for the version they check.
        self._names = contract.function_names(contract.LATEST)
        self._arg_names = argument_names()
        if self.isolation == "process":
            limits.become_subreaper()
        self._start()
        if not defer_load:
            self.wait_loaded()

    # -- process lifetime -------------------------------------------------

    def _command(self, to_child_r: int, from_child_w: int, filter_fd: int | None):
        fds = [str(to_child_r), str(from_child_w), str(self.memory_mb)]
        if self.isolation == "sandbox":
            boot = [bwrap.python_binary(), "-I", "-S", "-c", _BOOT, bwrap.SITE, bwrap.WORKER]
            env = worker_env()
            if self._copy is None:
                self._copy = bwrap.copy_room(self.path)
            inside = bwrap.room_path(self._copy)
            needed = [sysconfig.get_paths()["stdlib"], inside]
            sandbox = bwrap.command(self._copy, env, filter_fd)
            return [*sandbox, *boot, *fds, "0", *needed], inside
        # A private, world-readable copy, as the sandbox binds: the worker drops to uid 65534
        # whatever the room's modes, and the room cannot change under a run.
        if self._copy is None:
            self._copy = bwrap.copy_room(self.path)
        staged = str(bwrap.staged_worker())
        binary, stdlib = staging.runtime()
        site, numpy = staging.numpy_site()
        needed = [stdlib, numpy, str(self._copy), staged]
        # -S: no site-packages on its path, only the staged numpy and worker modules.
        boot = [binary, "-I", "-S", "-c", _BOOT, site, staged]
        return [*boot, *fds, str(os.getpid()), *needed], str(self._copy)

    def _start(self) -> None:
        # Requests go on a Unix socket, which can carry a large array's sealed file with the
        # frame (`sealed`); labctl's end takes nothing back (no descriptor can come to labctl
        # that way). Replies come on a pipe.
        to_child, ours = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.shutdown(socket.SHUT_RD)
        to_child_r, to_child_w = to_child.detach(), ours.detach()
        from_child_r, from_child_w = os.pipe()
        _widen(from_child_w)
        output_r, output_w = os.pipe()
        # The filter bwrap loads; at the process level the worker loads it on itself.
        filter_fd = seccomp.program_fd() if self.isolation == "sandbox" else None
        extra = () if filter_fd is None else (filter_fd,)
        command, room_path = self._command(to_child_r, from_child_w, filter_fd)
        try:
            with SPAWN:
                self._proc = _SPAWNER.submit(
                    subprocess.Popen,
                    command,
                    pass_fds=(to_child_r, from_child_w, *extra),
                    stdin=subprocess.DEVNULL,
                    stdout=output_w,
                    stderr=output_w,
                    cwd=self._copy.parent if self._copy is not None else self.path.parent,
                    env=worker_env() if self.isolation == "process" else {"PATH": "/usr/bin:/bin"},
                    start_new_session=True,
                ).result()
                LIVE.add(self._proc.pid)
        finally:
            for fd in (to_child_r, from_child_w, output_w, *extra):
                os.close(fd)
        self._write, self._read = to_child_w, from_child_r
        self._output = _Output(output_r)
        self._outputs.append(self._output)
        self._inside = room_path
        request = {"op": "load", "path": room_path, "guard": self.guard, "names": self._names}
        self._post(request)
        timeout_s = max(self.timeout_s, _MIN_LOAD_TIMEOUT_S)
        self._loading = (request, timeout_s, time.monotonic() + timeout_s)

    def wait_loaded(self) -> None:
        """Read the answer to the load request; the clean room's load errors raise here."""
        if self._loading is None:
            return
        request, timeout_s, deadline = self._loading
        self._loading = None
        what = N_("loading the clean room")
        self._reply(request, timeout_s, deadline, what, replies.loading_problem)
        reply = self._reply(request, self.timeout_s, time.monotonic() + self.timeout_s, what)
        violations = reply.get("violations", [])
        self._keep(violations)
        if reply["ok"] and violations:
            # An import the clean room wrapped in try/except was refused all the same.
            self.close()
            raise ImportPolicyError(
                f"clean room {self.path.name} breaks the import policy: " + "; ".join(violations)
            )
        if not reply["ok"]:
            self.close()
            error = reply["error"]
            if error["kind"] == "import-policy":
                raise ImportPolicyError(
                    f"clean room {self.path.name} breaks the import policy: "
                    + "; ".join(error["violations"])
                )
            shown = _load_message(error)
            if self._printed_note():
                shown = Msg("{error}; it printed: {printed}", error=shown, printed=self.printed)
            raise CleanRoomError(shown)
        self.signatures = reply["signatures"]
        self.privileges = reply["privileges"]

    def close(self) -> None:
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        self._loading = None
        for fd in (self._write, self._read):
            with contextlib.suppress(OSError):
                os.close(fd)
        # The whole group: with bwrap, its PID namespace goes with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        LIVE.discard(proc.pid)
        if self.isolation == "process":
            sweep_orphans()
        if self._output is not None:
            self._output.thread.join(timeout=1.0)

    def dispose(self) -> None:
        """Close the worker and remove the sandbox's copy of the clean room."""
        self.close()
        if self._copy is not None:
            limits.remove_staged(self._copy.parent)
            self._copy = None

    def __enter__(self) -> CleanRoom:
        return self

    def __exit__(self, *exc) -> None:
        self.dispose()

    def __del__(self) -> None:
        self.dispose()

    def output(self) -> tuple[int, str]:
        """What the room's workers printed in all: how many bytes, and the first OUTPUT_LIMIT
        of them, cleaned for a terminal."""
        total, first = 0, bytearray()
        for output in self._outputs:
            with output.lock:
                total += output.seen
                first += output.first[: OUTPUT_LIMIT - len(first)]
        text = textsafe.shown(bytes(first).decode("utf-8", "replace"), lines=True)
        return total, text

    def _keep(self, violations: list[str]) -> None:
        """The worker's refusals, kept up to MAX_VIOLATIONS over the room's life."""
        self.violations.extend(violations[: max(0, MAX_VIOLATIONS - len(self.violations))])

    def _printed_note(self) -> str:
        if self._output is None:
            return ""
        self.printed = self._output.take()
        return f"; it printed: {self.printed}" if self.printed else ""

    def _exchange(self, request: dict, timeout_s: float, what: str, share: bool) -> dict:
        """Send one request and wait for its checked reply; a hang, crash or forgery raises.
        With `share`, its large arrays go as sealed files (`sealed`)."""
        self._post(request, share)
        return self._reply(request, timeout_s, time.monotonic() + timeout_s, what)

    def _post(self, request: dict, share: bool = False) -> None:
        self._seq += 1
        request["seq"] = self._seq
        frame = sealed.Frame() if share and sealed.available() else None
        try:
            # A worker that is gone cannot take the request; the read that follows names why.
            with contextlib.suppress(OSError):
                wire.write_frame(self._write, request, frame)
        finally:
            if frame is not None:
                frame.close()

    def _reply(
        self,
        request: dict,
        timeout_s: float,
        deadline: float,
        what: str,
        check: Callable[[Any, dict], str | None] = replies.problem,
    ) -> dict:
        try:
            reply = replies.read_counted(self._read, deadline, self.budget)
        except replies.OverBudget as exc:
            self.close()  # the frame is left unread: this pipe is done
            raise CallError(
                what, "malformed", f"labctl's reply budget: {exc}{self._printed_note()}"
            ) from None
        except wire.Timeout:
            self.close()
            note = self._printed_note()
            printed = Msg("; it printed: {text}", text=self.printed) if note else ""
            raise CallError(
                what,
                "timeout",
                f"no answer within {timeout_s:g} s (stopped){note}",
                shown=Msg(
                    "no answer within {seconds:g} s (stopped){printed}",
                    seconds=timeout_s,
                    printed=printed,
                ),
            ) from None
        except (EOFError, BrokenPipeError, OSError) as exc:
            code = None
            if self._proc is not None:
                # The pipe closes a moment before the process can be reaped: wait for its code.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = self._proc.wait(timeout=2.0)
            self.close()
            taken, dropped = self._output.take_raw() if self._output else ("", 0)
            # The stack the worker printed as it ended gives the room's line; what the
            # learner printed before it is shown, the stack (thread addresses) is not.
            own, site = crash_site(taken, self._inside)
            self.printed = replies.printable(own, dropped) if own.strip() else ""
            if self.isolation == "sandbox" and code is not None and 128 < code < 128 + 65:
                code = 128 - code  # bwrap exits 128 + N when its child dies of signal N
            printed = Msg("; it printed: {text}", text=self.printed) if self.printed else ""
            reason = crash_reason(code, exc, printed)
            raise CallError(what, "crash", str(reason), where=site, shown=reason) from None
        except wire.WireError as exc:
            # Its text only: the exception's traceback holds the frame's buffer (up to 256 MiB)
            # in a reference cycle that only the collector would break, while the next frames
            # are read.
            problem: str | None = f"unreadable frame ({exc})"
        else:
            problem = check(reply, request)
        if problem:
            self.close()
            note = self._printed_note()
            raise CallError(what, "malformed", f"{replies.MALFORMED}: {problem}{note}")
        return reply

    # -- calls ------------------------------------------------------------

    def invoke(
        self,
        name: str,
        *args: Any,
        measure_memory: bool = False,
        echo_args: bool = True,
        want_value: bool = True,
        trace: bool = False,
        value_part: int | None = None,
        **kwargs: Any,
    ) -> CallResult:
        """Call `name` in the worker; return its value, compute time and the inputs it edited.

        With `measure_memory`, labctl measures the worker's peak resident memory
        during the call from outside it (`peak`): `CallResult.peak_bytes`. Without
        `echo_args` the arguments do not travel back, so `mutated` stays empty: for
        callers that never read it (the labs), whose large inputs would otherwise
        cross the pipe twice. Without `want_value` the value stays behind too
        (`CallResult.value` is None): for a call made only for its time or memory.
        `value_part` asks for one element of a tuple value alone (attention's output without
        its (Tq, Tk) weights), for a call whose other parts would only fill the pipe.
        With `trace`, the calls it made to the room's other contract functions come back
        (`CallResult.trace`, or `CallError.trace` when it raised; see `calltrace`).
        Calls from several threads take turns.
        """
        with self._calls:
            return self._invoke(
                name, args, kwargs, measure_memory, echo_args, want_value, trace, value_part
            )

    def _invoke(
        self,
        name: str,
        args: tuple,
        kwargs: dict,
        measure_memory: bool,
        echo_args: bool,
        want_value: bool,
        trace: bool,
        value_part: int | None = None,
    ) -> CallResult:
        timeout_s = self.timeout_s
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.cut_by_budget = True
                raise CallError(name, "timeout", _SPENT, shown=declared(_SPENT))
            timeout_s = min(timeout_s, left)
        try:
            return self._call(
                name,
                args,
                kwargs,
                measure_memory,
                echo_args,
                want_value,
                trace,
                timeout_s,
                value_part,
            )
        except CallError as exc:
            if exc.kind == "timeout" and timeout_s < self.timeout_s:
                self.cut_by_budget = True
            raise

    def _call(
        self,
        name: str,
        args: tuple,
        kwargs: dict,
        measure_memory: bool,
        echo_args: bool,
        want_value: bool,
        trace: bool,
        timeout_s: float,
        value_part: int | None,
    ) -> CallResult:
        if self._proc is None:
            self._start()
        self.wait_loaded()
        request = call_request(name, args, kwargs, echo_args, want_value, trace, value_part)
        peak = None
        if measure_memory:
            # What earlier calls freed goes back to the kernel first: the call's pages are
            # then all new to it, and all counted.
            self._exchange({"op": "trim"}, timeout_s, name, share=False)
            # its inputs inline in the frame, as the memory the labs measure was measured
            with PeakMeter(worker_pid(self._proc.pid)) as meter:
                reply = self._exchange(request, timeout_s, name, share=False)
            peak = meter.growth
        else:
            reply = self._exchange(request, timeout_s, name, share=True)
        self._keep(reply.get("violations", []))
        self._printed_note()
        try:
            arg_names = self._arg_names.get(name, [])
            return call_result(name, args, kwargs, reply, arg_names, echo_args, peak)
        except CallError as exc:
            if exc.kind == "malformed":
                self.close()
            raise

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self.invoke(name, *args, echo_args=False, **kwargs).value

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in self._names:
            raise AttributeError(name)
        return lambda *args, **kwargs: self.call(name, *args, **kwargs)


def call_request(
    name: str,
    args: tuple,
    kwargs: dict,
    echo_args: bool,
    want_value: bool,
    trace: bool,
    value_part: int | None = None,
) -> dict:
    """The request for one call of `name`; a trace (and one part of a tuple value) is asked
    for only when wanted (a room that records nothing need not know the option)."""
    request = {
        "op": "call",
        "function": name,
        "args": list(args),
        "kwargs": kwargs,
        "echo_args": echo_args,
        "want_value": want_value,
    }
    if trace:
        request["trace"] = True
    if value_part is not None:
        request["value_part"] = value_part
    return request


def argument_names() -> dict[str, list[str]]:
    """Each contract function's parameter names, every version's: how an edited input is
    named (`replies.argument_name`)."""
    return {f.name: [p.name for p in f.params] for f in contract.functions(contract.LATEST)}


def call_result(
    name: str,
    args: tuple,
    kwargs: dict,
    reply: dict,
    arg_names: list[str],
    echo_args: bool = True,
    peak: int | None = None,
) -> CallResult:
    """A checked reply to a call of `name`, as the caller reads it: its value, or the
    CallError its raise is. The inputs it edited are named where the reply echoed them."""
    if not reply["ok"]:
        error = reply["error"]
        if error["kind"] == "exception":
            failure = CallError(
                name, "exception", error["message"], error.get("where"), error["type"]
            )
            failure.trace = reply.get("trace", [])
            raise failure
        if error["kind"] == "not-callable":
            shown = Msg("not callable (an object of type {type})", type=error["message"])
            raise CallError(name, "not-callable", error["message"], shown=shown)
        raise CallError(name, error["kind"], error["message"])
    if not echo_args:
        return CallResult(reply["value"], reply["elapsed_s"], [], peak, reply.get("trace", []))
    mutated = replies.mutated(list(args), kwargs, reply["args_after"])
    if mutated is None:
        raise CallError(
            name, "malformed", f"{replies.MALFORMED}: the arguments came back changed in kind"
        )
    names = [replies.argument_name(path, arg_names) for path in mutated]
    return CallResult(reply["value"], reply["elapsed_s"], names, peak, reply.get("trace", []))


def _load_message(error: dict) -> str | Msg:
    """A load error as the worker sent it; one of the loader's own messages (a template
    labctl knows, with typed values, never a template of the worker's) is shown translated."""
    said = error.get("said")
    if isinstance(said, dict) and said.get("template") in SENT_TEMPLATES:
        values = said.get("values")
        fields = set(re.findall(r"{(\w+)", said["template"]))
        if (
            isinstance(values, dict)
            and set(values) == fields
            and all(isinstance(v, str | int | None) for v in values.values())
        ):
            return declared(said["template"], **values)
    return error["message"]
