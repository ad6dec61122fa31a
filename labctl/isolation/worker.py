"""The process that holds a clean room: it loads the package, runs calls, and reports.

Started by `labctl.isolation.sandbox` (inside bubblewrap, or as a plain
process) with two pipe descriptors for frames; its stdout and stderr go to a
third pipe that labctl captures. Its first act is to limit itself
(`limits`), before any learner code loads. It speaks only `wire` frames,
judges nothing, and measures nothing a verdict rests on: a call's memory is
read by labctl from outside (`peak`), and its compute time is only shown. It
returns the value (unless labctl wants only the call's time or memory:
`want_value`) and, where labctl asks (`echo_args`), the arguments as they
are after the call, which labctl compares with what it sent. Every failure of the
learner's code becomes a reply that names it; only a hang or a hard crash
ends the process, and the parent names those.
"""

from __future__ import annotations

import faulthandler
import gc
import sys
import time
from pathlib import Path

from labctl.errors import LabctlError
from labctl.i18n import Msg
from labctl.isolation import audit, calltrace, guard, limits, loader, seccomp, wire

_MESSAGE_LIMIT = 500
_VIOLATIONS_LIMIT = 100  # replies.MAX_VIOLATIONS: labctl refuses more as forged


def _short(text: str) -> str:
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 1] + "…"


class Worker:
    def __init__(self, privileges: str, refuse: str = "") -> None:
        self.root: Path | None = None
        self.module = None
        self.guard: guard.RuntimeGuard | None = None
        self.reported = 0
        self.privileges = privileges
        # Why this process runs no room at all (it could not stop being root), or "".
        self.refuse = refuse
        self.recorder = calltrace.Recorder()
        self.refused_code = lambda: []

    def _new_violations(self) -> list[str]:
        """The refusals since the last reply, each once and cut short, at most as many as
        labctl reads (a room may try an import in a loop, or name a module of a megabyte)."""
        found = [str(v) for v in self.guard.violations[self.reported :]] if self.guard else []
        self.reported = len(self.guard.violations) if self.guard else 0
        fresh = list(dict.fromkeys(_short(v) for v in [*found, *self.refused_code()]))
        return fresh[:_VIOLATIONS_LIMIT]

    def load(self, request: dict) -> dict:
        if self.refuse:
            return {"ok": False, "error": {"kind": "load", "message": self.refuse}}
        try:
            self.root = loader.resolve_package_dir(request["path"])
            if request.get("guard", True):
                self.guard = guard.RuntimeGuard(self.root)
                self.guard.install()
            # Before any of the room's code runs: it cannot be removed once in place.
            self.refused_code = audit.install(self.root, loader.source_files(self.root))
            module = loader.load_package(self.root, in_worker=True)
            signatures = self.hold(module, tuple(request.get("names", ())))
        except LabctlError as exc:
            violations = self._new_violations()
            kind = "import-policy" if violations else "load"
            error = {"kind": kind, "message": str(exc), "violations": violations}
            given = exc.message
            if isinstance(given, Msg) and given.template in loader.SENT_TEMPLATES:
                error["said"] = {"template": given.template, "values": given.args}
            return {"ok": False, "error": error}
        return {
            "ok": True,
            "signatures": signatures,
            "violations": self._new_violations(),
            "privileges": self.privileges,
        }

    def hold(self, module, names: tuple[str, ...]) -> dict:
        """Take the loaded `module` as the room: its contract functions are traced from here
        on. Returns their signatures."""
        signatures = loader.observe_signatures(module, names)
        try:
            calltrace.install(module, names, self.recorder)
        except BaseException as exc:
            # Wrapping reads the room's objects (a property `__doc__`, a module `__setattr__`
            # of its own), whatever they raise: a room that cannot be held, not a crash.
            raise loader.failed_import(self.root, exc) from None
        self.module = module
        return signatures

    def call(self, request: dict) -> dict:
        name = request["function"]
        fn = loader.attribute(self.module, name)
        if fn is loader.ABSENT:
            return {
                "ok": False,
                "error": {"kind": "missing", "message": "not exposed by the package"},
            }
        if not callable(fn):
            # what the room holds under the name instead (an int, a module), as the learner
            # would look for it: the contract check says "not callable" of it too
            what = _short(loader.class_name(fn))
            return {"ok": False, "error": {"kind": "not-callable", "message": what}}
        args, kwargs = request.get("args", []), request.get("kwargs", {})
        traced = request.get("trace", False)
        if traced:
            self.recorder.start()
        start = time.perf_counter()
        try:
            value = fn(*args, **kwargs)
            part = request.get("value_part")
            if type(part) is int and isinstance(value, (tuple, list)) and 0 <= part < len(value):
                value = value[part]  # one array of several, asked for alone (labctl judges it)
        except BaseException as exc:
            kind, text = loader.described(exc)
            reply = {
                "ok": False,
                "error": {
                    "kind": "exception",
                    "type": kind,
                    "message": _short(text),
                    "where": loader.where(self.root, loader.traceback_of(exc)),
                },
                "violations": self._new_violations(),
            }
        else:
            reply = {
                "ok": True,
                "value": value if request.get("want_value", True) else None,
                "args_after": [args, kwargs] if request.get("echo_args", True) else None,
                "violations": self._new_violations(),
            }
        finally:
            elapsed = time.perf_counter() - start
        if reply["ok"]:
            reply["elapsed_s"] = elapsed
        if traced:
            reply["trace"] = self.recorder.stop()
        return reply

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "load":
            reply = self.load(request)
        elif op == "call" and self.module is not None:
            reply = self.call(request)
        elif op == "trim":
            limits.release_free_memory()
            reply = {"ok": True}
        else:
            reply = {"ok": False, "error": {"kind": "protocol", "message": f"unexpected op {op!r}"}}
        reply["seq"] = request.get("seq")
        return reply


def main(argv: list[str]) -> None:
    # Off while the worker's modules loaded (`sandbox._BOOT`): what they made lives as long
    # as the worker, so it is frozen, out of every collection's walk (turned on with those
    # ~36,000 objects pending, the collector walked them all at the first allocation).
    gc.freeze()
    gc.enable()
    read_fd, write_fd, memory_mb, parent_pid = (int(a) for a in argv[:4])
    # A hard crash (a segfault, abort) prints the stack to the output labctl captures, so
    # labctl can say in which of the room's lines the process ended (`exits.crash_site`).
    faulthandler.enable()
    needed = [Path(p) for p in argv[4:]]
    privileges = limits.drop_privileges(needed)
    if parent_pid > 0:
        # After the drop: a change of uid clears the parent-death signal (prctl(2)), and a
        # worker dropped to uid 65534 outlived a killed labctl. A labctl already gone by now
        # is seen by die_with_parent's own check of the parent.
        limits.die_with_parent(parent_pid)
    # No learner code as root, at either level: a worker that could not drop answers every
    # load with why, and loads nothing.
    refuse = (
        f"the worker refuses to run the clean room as root: {privileges}"
        if limits.still_root()
        else ""
    )
    limits.apply_rlimits(memory_mb)
    if not seccomp.in_force():  # the process level: bwrap has not loaded the filter
        seccomp.install()
    worker = Worker(privileges, refuse)
    while True:
        try:
            request = wire.read_request(read_fd)
        except EOFError:
            return
        if isinstance(request, dict) and request.get("op") == "load":
            # labctl's own start ends here (Python, numpy, the limits): what follows is the
            # room's code, which labctl holds to the time of one call
            loading = {"seq": request.get("seq"), "ok": True, "loading": True}
            try:
                wire.write_frame(write_fd, loading)
            except BrokenPipeError:
                return  # labctl stopped listening: as below
        reply = worker.handle(request)
        try:
            try:
                wire.write_frame(write_fd, reply)
            except OSError:
                raise
            except BaseException as exc:
                # The value's own code runs as it is encoded (a dict whose items() raises, an
                # object whose __array__ does, a list whose __iter__ raises GeneratorExit): the
                # room's error, whatever it raises, not a crash of this process.
                shown = _short("{}: {}".format(*loader.described(exc)))
                error = {
                    "kind": "unsupported-return",
                    "message": f"cannot send the result: {shown}",
                }
                wire.write_frame(write_fd, {"ok": False, "error": error, "seq": reply["seq"]})
        except BrokenPipeError:
            # labctl stopped listening (a call past its time is stopped): this is no output of
            # the room's, and a stack of labctl's here would be shown as if the room printed it.
            return


if __name__ == "__main__":
    main(sys.argv[1:])
