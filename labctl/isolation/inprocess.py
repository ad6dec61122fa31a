"""labctl's own clean rooms (the fault catalogue's), run in labctl's process.

A catalogued fault's room is labctl's code: the project's clean room with one
function rewritten, written by labctl into a private directory of its own. The
diagnosis compares a learner's failing function with dozens of them, and a
worker per room (a sandbox, Python, numpy) costs about half a second where the
calls cost milliseconds. Here each call goes through the worker's own code
(`worker.Worker`), and the request and the reply both through the wire's
encoding and labctl's reply checks, so a fault room answers exactly as it would
in a worker: the same values and dtypes, the same inputs edited, the same trace
(`tests/test_inprocess.py` holds every catalogued fault to that).

What a worker gives and this cannot: a timeout (a fault that hangs declares it,
`Fault.hangs`, and runs in a worker) and a boundary, which labctl's own code
does not need. Learner code never comes here: `CleanRoom` is the one way it runs.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from labctl import contract, textsafe
from labctl.errors import CallError
from labctl.isolation import replies, wire
from labctl.isolation.loader import load_package, resolve_package_dir, source_files
from labctl.isolation.sandbox import CallResult, argument_names, call_request, call_result
from labctl.isolation.worker import Worker

IN_PROCESS = "in-process"


@dataclass
class _Held:
    worker: Worker  # holds the room's module, its calls traced
    signatures: dict
    calls: threading.Lock = field(default_factory=threading.Lock)  # the trace is per call


# Each room is loaded once per process and text: observed again at another seed (a grading
# worker's next batch, a test's next verify), it would otherwise add its modules anew each
# time (5 MiB for the catalogue, per seed). A load also points the room's directory name at
# it while its modules run (`load_package`), so loads on several threads take turns.
_HELD: dict[tuple[str, str], _Held] = {}
_LOADING = threading.Lock()


def _hold(path: Path, names: tuple[str, ...]) -> _Held:
    digest = hashlib.sha256()
    for file in source_files(path):
        digest.update(f"{file.relative_to(path)}\0".encode())
        digest.update(file.read_bytes())
    key = (str(path), digest.hexdigest())
    with _LOADING:
        if key not in _HELD:
            worker = Worker(privileges="")
            worker.root = path
            _HELD[key] = _Held(worker, worker.hold(load_package(path), names))
        return _HELD[key]


def _as_sent(message: dict) -> Any:
    """`message` as the other side of a pipe would read it: encoded, then decoded from a
    frame's buffer (arrays are this side's own, writable)."""
    return wire.decode(bytearray(wire.encode(message)))


class InProcessRoom:
    """One of labctl's own clean rooms, loaded here, called as `CleanRoom` is."""

    isolation = IN_PROCESS

    def __init__(self, path: str | Path, timeout_s: float) -> None:
        self.path = resolve_package_dir(path)
        # Kept for the caller's arithmetic (`observe` cuts it to a budget): nothing here can
        # stop a call, which is why a room that hangs is never loaded here.
        self.timeout_s = timeout_s
        self.violations: list[str] = []
        self._names = contract.function_names(contract.LATEST)
        self._arg_names = argument_names()
        self._held = _hold(self.path, self._names)
        self.signatures = _as_sent(self._held.signatures)
        self._seq = 0

    def invoke(
        self,
        name: str,
        *args: Any,
        echo_args: bool = True,
        want_value: bool = True,
        trace: bool = False,
        value_part: int | None = None,
        **kwargs: Any,
    ) -> CallResult:
        """Call `name` as a worker would, and read its reply as `CleanRoom.invoke` does."""
        self._seq += 1
        request = {
            **call_request(name, args, kwargs, echo_args, want_value, trace, value_part),
            "seq": self._seq,
        }
        # A worker prints numpy's warnings into the output labctl captures; here they would
        # reach labctl's stderr. The values are the same either way.
        with self._held.calls, np.errstate(all="ignore"):
            reply = self._held.worker.handle(_as_sent(request))
        if reply.get("error", {}).get("type") == "KeyboardInterrupt":
            raise KeyboardInterrupt  # labctl's own, not the room's: the worker took it for one
        reply = textsafe.valid(_as_sent(reply))
        problem = replies.problem(reply, request)
        if problem:
            raise CallError(name, "malformed", f"{replies.MALFORMED}: {problem}")
        return call_result(
            name, args, kwargs, reply, self._arg_names.get(name, []), echo_args=echo_args
        )

    def output(self) -> tuple[int, str]:
        """What the room printed: nothing is captured here (labctl's rooms print nothing)."""
        return 0, ""

    def __enter__(self) -> InProcessRoom:
        return self

    def __exit__(self, *exc) -> None:
        """Nothing to end: the room's modules stay loaded until labctl exits."""
