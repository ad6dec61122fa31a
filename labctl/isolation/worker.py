"""The process that holds a clean room: it loads the package, runs calls, and reports.

Started by `labctl.sandbox` with two pipe descriptors and a memory limit. It
speaks only `labctl.wire` frames, so nothing a clean room returns or prints can
run code in labctl. Every failure of the learner's code becomes a reply that
names it; only a hang or a hard crash ends the process, and the parent names
those.
"""

from __future__ import annotations

import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from labctl.errors import LabctlError
from labctl.isolation import guard, loader, wire

_MESSAGE_LIMIT = 500


def _short(text: str) -> str:
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 1] + "…"


def _arrays(value, path: str):
    """Yield (path, array) for every array inside args, kwargs and nested params."""
    if isinstance(value, np.ndarray):
        yield path, value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _arrays(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _arrays(item, f"{path}[{key!r}]")


class Worker:
    def __init__(self) -> None:
        self.root: Path | None = None
        self.module = None
        self.guard: guard.RuntimeGuard | None = None
        self.reported = 0

    def _new_violations(self) -> list[str]:
        if self.guard is None:
            return []
        fresh = [str(v) for v in self.guard.violations[self.reported :]]
        self.reported = len(self.guard.violations)
        return fresh

    def load(self, request: dict) -> dict:
        try:
            self.root = loader.resolve_package_dir(request["path"])
            if request.get("guard", True):
                self.guard = guard.RuntimeGuard(self.root)
                self.guard.install()
            self.module = loader.load_package(self.root, keep_alias=True)
        except LabctlError as exc:
            violations = self._new_violations()
            kind = "import-policy" if violations else type(exc).__name__
            return {
                "ok": False,
                "error": {"kind": kind, "message": str(exc), "violations": violations},
            }
        signatures = loader.observe_signatures(self.module, tuple(request.get("names", ())))
        return {"ok": True, "signatures": signatures, "violations": self._new_violations()}

    def call(self, request: dict) -> dict:
        name = request["function"]
        fn = getattr(self.module, name, None)
        if not callable(fn):
            return {
                "ok": False,
                "error": {"kind": "missing", "message": "not a callable of the package"},
            }
        args, kwargs = request.get("args", []), request.get("kwargs", {})
        before = {path: array.copy() for path, array in _arrays([args, kwargs], "")}
        trace = bool(request.get("trace_memory", False))
        if trace:
            # NumPy reports its array buffers to tracemalloc: the peak is the call's own memory.
            tracemalloc.start()
        start = time.perf_counter()
        try:
            value = fn(*args, **kwargs)
        except BaseException as exc:
            if trace:
                tracemalloc.stop()
            return {
                "ok": False,
                "error": {
                    "kind": "exception",
                    "type": type(exc).__name__,
                    "message": _short(str(exc)),
                    "where": loader.where(self.root, exc.__traceback__),
                },
                "violations": self._new_violations(),
            }
        elapsed = time.perf_counter() - start
        peak_bytes = None
        if trace:
            peak_bytes = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        after = dict(_arrays([args, kwargs], ""))
        mutated = [
            _argument_name(path, request)
            for path, old in before.items()
            if not np.array_equal(old, after[path], equal_nan=True)
        ]
        return {
            "ok": True,
            "value": value,
            "elapsed_s": elapsed,
            "peak_bytes": peak_bytes,
            "mutated": mutated,
            "violations": self._new_violations(),
        }

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "load":
            return self.load(request)
        if op == "call" and self.module is not None:
            return self.call(request)
        return {"ok": False, "error": {"kind": "protocol", "message": f"unexpected op {op!r}"}}


def _argument_name(path: str, request: dict) -> str:
    """Turn `[0][2]['wq']` into `params['wq']` using the call's parameter names."""
    names = request.get("arg_names", [])
    head, _, rest = path[1:].partition("]")
    if head == "0":
        index, _, tail = rest[1:].partition("]")
        position = int(index)
        label = names[position] if position < len(names) else f"argument {position}"
        return label + tail
    key, _, tail = rest[1:].partition("]")
    return key.strip("'") + tail


def main(argv: list[str]) -> None:
    read_fd, write_fd, memory_mb = int(argv[0]), int(argv[1]), int(argv[2])
    if memory_mb > 0:
        limit = memory_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    worker = Worker()
    while True:
        try:
            request = wire.read_frame(read_fd)
        except EOFError:
            return
        reply = worker.handle(request)
        try:
            wire.write_frame(write_fd, reply)
        except (RecursionError, ValueError, TypeError) as exc:
            error = {"kind": "unsupported-return", "message": f"cannot send the result: {exc}"}
            wire.write_frame(write_fd, {"ok": False, "error": error})


if __name__ == "__main__":
    main(sys.argv[1:])
