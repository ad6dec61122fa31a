"""Local grading workers: N long-lived processes, each learner with its own time limit.

Each worker (`labctl.grade.worker`) runs in its own session, in a private folder, with an
isolated import path (`python -I`): nothing in the grader's working directory is imported.
A learner's `learner_timeout_s` is its verify budget (the rule of `verify --budget`): its
calls stop there, with an over-budget verdict. A learner whose observation
still runs `HARD_STOP_AFTER_S` later is a `hang`: its worker gets SIGTERM
(it closes its clean room and exits), then SIGKILL for its whole process group
after a grace period, and a fresh worker takes the next learner meanwhile. A worker that
dies mid-learner (a crash, the memory limit, an attack on its parent) is a
`crash` of that learner only. Either way the batch goes on, and the outcome
carries the isolation level the worker announced before the learner's code ran.
Each worker keeps its temporary files (its clean-room copies, staged worker,
fault rooms) in a folder of its own, which the pool removes when the worker
ends: a worker killed at a limit or by a learner's code cleans up nothing; the
folders of a labctl killed outright are removed by the next run (`labctl.grade.scratch`).
A worker with nothing left to take ends as soon as it is idle, while the others finish;
`close` waits for every worker and folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from labctl.errors import LabctlError, UsageError
from labctl.grade import scratch
from labctl.grade.worker import MEMO_SHARED
from labctl.i18n import Msg, _

BOOT_TIMEOUT_S = 180.0
_GRACE_S = 3.0
# How long after its budget a learner's worker is stopped: the budget ends the calls, and
# evaluating what came back takes well under this.
HARD_STOP_AFTER_S = 5.0
# A learner's status when labctl itself failed (an exception in the worker, not the learner's
# code): never a grade; the batch that has one does not pass.
INTERNAL_ERROR = "internal-error"
# The worker's start: the folder that holds this labctl is appended to its isolated path.
_BOOT = (
    "import sys; sys.path.append(sys.argv.pop(1)); "
    "from labctl.grade.worker import run; run(sys.argv[1:])"
)
_HOME = str(Path(__file__).resolve().parents[2])


class GradingError(LabctlError):
    """The grading workers could not be started."""


@dataclass
class Outcome:
    """What came back for one learner: facts, or the named failure that stopped it."""

    status: str  # observed | hang | crash | internal-error
    facts: dict | None = None
    message: str = ""
    isolation: str | None = None  # the level the learner's code ran under (None: it never ran)


@dataclass
class _Slot:
    proc: subprocess.Popen
    fd: int
    tmp: str
    buffer: bytes = b""
    ready: bool = False
    key: str | None = None
    isolation: str | None = None
    deadline: float = 0.0
    started: float = field(default_factory=time.monotonic)
    served: int = 0  # jobs sent to it


def _signal_name(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-code).name
    return _(Msg("exit code {code}", code=code))


def _end(proc: subprocess.Popen, gently: bool) -> int:
    """Wait for `proc` to exit (gently: up to `_GRACE_S` after the SIGTERM it was sent), then
    kill whatever is left of its process group; its exit code."""
    if gently and proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=_GRACE_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        proc.stdin.close()
    return proc.wait()


class LocalPool:
    def __init__(
        self,
        jobs: int,
        learner_timeout_s: float,
        env: dict[str, str] | None = None,
        share_memo: bool = False,
    ):
        """`share_memo`: the workers share what `labctl.memo` keeps through a folder of the
        pool's (`labctl.memo_shared`); only where learner code runs in the sandbox, which
        mounts no such folder."""
        self.jobs = max(1, jobs)
        self.learner_timeout_s = learner_timeout_s
        self.env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            **(env or {}),
        }
        self._slots: list[_Slot] = []
        self._ending: list[threading.Thread] = []  # workers ending, folders being removed
        self._selector = selectors.DefaultSelector()
        scratch.remove_stale()  # what a run killed outright left behind
        self._memo: str | None = None
        if share_memo and self.jobs > 1:
            self._memo = scratch.make(private=True)
            scratch.claim(self._memo, os.getpid())
            self.env[MEMO_SHARED] = self._memo

    # -- workers ------------------------------------------------------------

    def _command(self, reply_fd: int) -> list[str]:
        # -I: neither the working directory nor PYTHON* variables reach the worker's import
        # path (`-m` would put the grader's folder first: a class folder's `numpy/` or a
        # learner's `json.py` would run here, as the grader, outside any sandbox). The folder
        # holding this labctl goes last, for a labctl that is importable only through them.
        return [sys.executable, "-I", "-c", _BOOT, _HOME, str(reply_fd)]

    def _start(self) -> _Slot:
        read_fd, write_fd = os.pipe()
        debug = os.environ.get("LABCTL_DEBUG") == "1"
        tmp = scratch.make()
        proc = subprocess.Popen(
            self._command(write_fd),
            stdin=subprocess.PIPE,
            stdout=None if debug else subprocess.DEVNULL,
            stderr=None if debug else subprocess.DEVNULL,
            pass_fds=(write_fd,),
            start_new_session=True,
            # its own folder: nothing the worker resolves from "." is the grader's
            cwd=tmp,
            env={**self.env, "TMPDIR": tmp},
        )
        os.close(write_fd)
        scratch.claim(tmp, proc.pid)
        slot = _Slot(proc, read_fd, tmp, deadline=time.monotonic() + BOOT_TIMEOUT_S)
        self._selector.register(read_fd, selectors.EVENT_READ, slot)
        self._slots.append(slot)
        return slot

    def _stop(self, slot: _Slot, gently: bool) -> int | None:
        """Stop `slot`'s worker and return its exit code (gently: SIGTERM, then SIGKILL after a
        grace period); its folder is removed in the background (`_finish`)."""
        self._detach(slot)
        code = _end(slot.proc, gently)
        self._finish(slot, None)
        return code

    def _retire(self, slot: _Slot) -> None:
        """Stop `slot`'s worker without waiting for it: it exits, and its folder is removed,
        while the other workers go on (a worker's folder took 0.2 to 0.4 s to remove, a
        hanging worker's grace period up to `_GRACE_S`, during which no learner was sent)."""
        self._detach(slot)
        self._finish(slot, slot.proc)  # `_end` closes its stdin and sends SIGTERM first

    def _detach(self, slot: _Slot) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(slot.fd)
        with contextlib.suppress(OSError):
            os.close(slot.fd)
        if slot in self._slots:
            self._slots.remove(slot)

    def _finish(self, slot: _Slot, ending: subprocess.Popen | None) -> None:
        """In the background: wait for `ending` to exit (`_end`), then remove the folder."""

        def finish() -> None:
            if ending is not None:
                _end(ending, gently=True)
            shutil.rmtree(slot.tmp, ignore_errors=True)

        thread = threading.Thread(target=finish, name="labctl-worker-end")
        thread.start()
        self._ending.append(thread)

    def close(self) -> None:
        # Every worker is asked to stop before any is waited for: their exits, and the
        # removal of their folders, overlap.
        for slot in list(self._slots):
            self._retire(slot)
        if self._memo is not None:
            memo, self._memo = self._memo, None
            thread = threading.Thread(target=shutil.rmtree, args=(memo, True))
            thread.start()
            self._ending.append(thread)
        for thread in self._ending:
            thread.join()
        self._ending.clear()
        self._selector.close()

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def boot(self, count: int) -> None:
        """Start now the workers `count` jobs will need, so they boot while the batch gets
        ready (`run` starts any still missing)."""
        while len(self._slots) < min(self.jobs, count):
            self._start()

    # -- the loop -----------------------------------------------------------

    def run(self, jobs: Iterable[tuple[str, dict]], done: Callable[[str, Outcome], None]) -> None:
        """Observe every (key, job); call `done(key, outcome)` as each one ends."""
        pending = list(jobs)
        pending.reverse()
        while len(self._slots) < min(self.jobs, len(pending)):
            self._start()
        while pending or any(s.key for s in self._slots):
            for slot in self._slots:
                if slot.ready and slot.key is None and pending:
                    key, job = pending.pop()
                    # One rule with `verify --budget`: the learner's calls stop at the limit
                    # with an over-budget verdict; the stop here, a little later, is for what
                    # no budget reaches (an import that never returns).
                    job = {**job, "budget_s": self.learner_timeout_s}
                    slot.key = key
                    # Until the learner's clock starts, the worker makes ready what the job
                    # needs; a worker's first job may need all of it (torch, the labs'
                    # reference side), as long as a worker may take to start.
                    ready_s = 0.0 if slot.served else BOOT_TIMEOUT_S
                    slot.served += 1
                    slot.deadline = (
                        time.monotonic() + self.learner_timeout_s + HARD_STOP_AFTER_S + ready_s
                    )
                    slot.isolation = None
                    try:
                        slot.proc.stdin.write((json.dumps(job) + "\n").encode("utf-8"))
                        slot.proc.stdin.flush()
                    except BrokenPipeError:
                        pass  # its death shows as end of file below
            if not pending:
                # Nothing left to send: an idle worker ends now, while the others finish.
                for slot in [s for s in self._slots if s.key is None]:
                    self._retire(slot)
            now = time.monotonic()
            wait = max(0.0, min((s.deadline for s in self._slots), default=now + 1) - now)
            for selected, _events in self._selector.select(timeout=min(wait, 1.0)):
                self._read(selected.data, done, pending)
            now = time.monotonic()
            for slot in [s for s in self._slots if s.deadline <= now]:
                self._expired(slot, done, pending)

    def _replace(self, pending: list) -> None:
        if pending:
            self._start()

    def _read(self, slot: _Slot, done, pending) -> None:
        chunk = os.read(slot.fd, 1 << 20)
        if not chunk:
            code = self._stop(slot, gently=False)
            if slot.key is None:
                raise GradingError(
                    Msg(
                        "a grading worker exited before taking a learner ({how}); "
                        "LABCTL_DEBUG=1 shows its output",
                        how=_signal_name(code),
                    )
                )
            done(
                slot.key,
                Outcome(
                    "crash",
                    message=_(
                        Msg(
                            "the grading process died with {how} "
                            "(the learner's code, or the memory limit)",
                            how=_signal_name(code),
                        )
                    ),
                    isolation=slot.isolation,
                ),
            )
            self._replace(pending)
            return
        slot.buffer += chunk
        while b"\n" in slot.buffer:
            line, slot.buffer = slot.buffer.split(b"\n", 1)
            reply = json.loads(line)
            if reply.get("ready"):
                slot.ready = True
                slot.deadline = float("inf")
                continue
            if "started" in reply:
                if slot.key is not None and slot.isolation is None:
                    # The learner's clock starts with its code, after what the worker made
                    # ready for the job (torch, for a rubric that runs labs); once per job.
                    slot.deadline = time.monotonic() + self.learner_timeout_s + HARD_STOP_AFTER_S
                slot.isolation = reply["started"]
                continue
            key, slot.key, slot.deadline = slot.key, None, float("inf")
            if "facts" in reply:
                done(key, Outcome("observed", reply["facts"], isolation=slot.isolation))
            elif reply.get("raised") == "UsageError":
                raise UsageError(reply["message"])
            else:
                message = f"{reply['raised']}: {reply['message']}"
                done(key, Outcome(INTERNAL_ERROR, message=message, isolation=slot.isolation))

    def _expired(self, slot: _Slot, done, pending) -> None:
        key, isolation = slot.key, slot.isolation
        self._retire(slot)
        if key is None:
            raise GradingError(
                Msg("a grading worker did not start within {seconds:g} s", seconds=BOOT_TIMEOUT_S)
            )
        done(
            key,
            Outcome(
                "hang",
                message=_(
                    Msg(
                        "stopped after the learner's limit of {seconds:g} s",
                        seconds=self.learner_timeout_s,
                    )
                ),
                isolation=isolation,
            ),
        )
        self._replace(pending)
