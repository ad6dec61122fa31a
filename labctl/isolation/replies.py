"""Checking what a worker sends back, before labctl reads a field of it.

A worker runs learner code, so its replies are claims. Each is checked
against the request it answers (sequence number, schema, types) and anything
else is a named failure of that call: "the clean room's process sent a
malformed reply". Purity is decided here too, in labctl's process: the
arguments as they came back are compared with the ones labctl sent.
"""

from __future__ import annotations

import gc
import math
import re
import threading
import weakref
from typing import Any

import numpy as np

from labctl import textsafe
from labctl.isolation import calltrace, wire

MALFORMED = "the clean room's process sent a malformed reply"
# The reply bytes labctl's process holds at once, every clean room together. Measured: a
# verify with its metrics holds at most 12 MiB at once, `labctl run all` 12 MiB, and the
# diagnosis's kept fault rooms (one seed's) 61 MiB once every catalogued fault has been
# observed (`labctl faults`); 512 MiB is two frames at wire's cap, so a legitimate run never
# meets it, and labctl's own memory stays bounded however many calls return the most.
REPLY_BUDGET_BYTES = 512 << 20
ERROR_KINDS = frozenset({"exception", "missing", "not-callable", "unsupported-return", "protocol"})
# What a genuine worker sends (`worker`): a message cut to 500 characters, at most 100
# violations of as many, a trace of at most `calltrace.MAX_ENTRIES` calls. Past these a reply
# is forged, and labctl would copy its text into every line and record that shows it.
MESSAGE_CHARS = 1000
NAME_CHARS = 200
PLACE_CHARS = 4200  # a path in the room (PATH_MAX) and a line number
MAX_VIOLATIONS = 100
LOAD_ERROR_KINDS = frozenset({"import-policy", "load", "protocol"})
_SHOWN_OUTPUT = 300
# Control characters (terminal escapes, bidi overrides) other than newline and tab.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _is_str_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) <= MAX_VIOLATIONS
        and all(isinstance(v, str) and len(v) <= MESSAGE_CHARS for v in value)
    )


def _text(value: Any, limit: int) -> bool:
    return isinstance(value, str) and len(value) <= limit


def _error_problem(reply: dict, kinds: frozenset[str]) -> str | None:
    error = reply.get("error")
    if not isinstance(error, dict) or error.get("kind") not in kinds:
        return "an error of no known kind"
    if not isinstance(error.get("message"), str):
        return "an error without a message"
    if len(error["message"]) > MESSAGE_CHARS:
        return f"a message of {len(error['message'])} characters"
    if error["kind"] == "exception" and not (
        _text(error.get("type"), NAME_CHARS)
        and (error.get("where") is None or _text(error["where"], PLACE_CHARS))
    ):
        return "an exception without its type"
    if error["kind"] == "import-policy" and not _is_str_list(error.get("violations")):
        return "an import-policy error without its violations"
    return None


def loading_problem(reply: Any, request: dict) -> str | None:
    """Why `reply` is not the worker's word that it begins loading the room of `request`
    (sent before any of the room's code runs), or None."""
    if reply != {"seq": request["seq"], "ok": True, "loading": True}:
        return "not the word that loading begins"
    return None


def problem(reply: Any, request: dict) -> str | None:
    """Why `reply` cannot be the answer to `request`, or None."""
    if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
        return "not a reply"
    if reply.get("seq") != request["seq"]:
        return f"an answer to request {reply.get('seq')!r}, not to request {request['seq']}"
    if "violations" in reply and not _is_str_list(reply["violations"]):
        return "violations that are not text, or more than a worker sends"
    if "trace" in reply and not request.get("trace"):
        return "a trace of calls, which was not asked for"
    if "trace" in reply and not _trace_ok(reply["trace"]):
        return "a trace that is not a list of calls"
    load = request["op"] == "load"
    if not reply["ok"]:
        return _error_problem(reply, LOAD_ERROR_KINDS if load else ERROR_KINDS)
    if load:
        signatures = reply.get("signatures")
        if not isinstance(signatures, dict) or not all(
            _signature_ok(v) for v in signatures.values()
        ):
            return "signatures that are not a table of parameters"
        if not isinstance(reply.get("privileges"), str):
            return "no privileges line"
        return None
    if request["op"] == "trim":
        return None
    if "value" not in reply:
        return "no value"
    if not request.get("want_value", True) and reply["value"] is not None:
        return "a value, which was not asked for"
    elapsed = reply.get("elapsed_s")
    if type(elapsed) is not float or not math.isfinite(elapsed) or elapsed < 0:
        return "a compute time that is not a finite number of seconds"
    after = reply.get("args_after")
    if not request.get("echo_args", True):
        return None if after is None else "arguments after the call, which were not asked for"
    if not (isinstance(after, list) and len(after) == 2 and isinstance(after[1], dict)):
        return "no arguments after the call"
    return None


_TRACE_KEYS = frozenset({"function", "depth", "args", "kwargs", "out", "raised", "edited"})


def _trace_ok(trace: Any) -> bool:
    """`[{"function": str, "depth": int >= 1, "args": list, "kwargs": dict, "out"?, "raised"?,
    "edited"?: bool}]`,
    at most `calltrace.MAX_ENTRIES` calls: each is judged in labctl, which runs the reference."""
    return (
        isinstance(trace, list)
        and len(trace) <= calltrace.MAX_ENTRIES
        and all(
            isinstance(e, dict)
            and set(e) <= _TRACE_KEYS
            and _text(e.get("function"), NAME_CHARS)
            and type(e.get("depth")) is int
            and 1 <= e["depth"] <= calltrace.MAX_DEPTH
            and isinstance(e.get("args"), list)
            and isinstance(e.get("kwargs"), dict)
            and _text(e.get("raised", ""), NAME_CHARS)
            and isinstance(e.get("edited", False), bool)
            for e in trace
        )
    )


_KINDS = frozenset(
    {"POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD", "VAR_POSITIONAL", "KEYWORD_ONLY", "VAR_KEYWORD"}
)


def _signature_ok(entry: Any) -> bool:
    """`{"present": bool, "callable": bool, "params": [{"name", "kind", "default"?}] | None,
    "stub"?: bool}`."""
    if not isinstance(entry, dict) or not isinstance(entry.get("present"), bool):
        return False
    if not isinstance(entry.get("stub", False), bool):
        return False
    if not entry["present"]:
        return True
    if not isinstance(entry.get("callable"), bool):
        return False
    params = entry.get("params")
    if not entry["callable"] or params is None:
        return True
    return isinstance(params, list) and all(
        isinstance(p, dict)
        and isinstance(p.get("name"), str)
        and p.get("kind") in _KINDS
        and set(p) <= {"name", "kind", "default"}
        for p in params
    )


def arrays(value: Any) -> dict[str, np.ndarray]:
    """Every array inside args, kwargs and nested params, by its path (`[0][2]['wq']`)."""
    found: dict[str, np.ndarray] = {}
    _collect(value, "", found)
    return found


# What can be or hold an array: only these get a path (a call's many numbers need none).
_HOLDERS = (np.ndarray, list, tuple, dict)


def _collect(value: Any, path: str, found: dict[str, np.ndarray]) -> None:
    if isinstance(value, np.ndarray):
        found[path] = value
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if isinstance(item, _HOLDERS):
                _collect(item, f"{path}[{i}]", found)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, _HOLDERS):
                _collect(item, f"{path}[{key!r}]", found)


def mutated(args: list, kwargs: dict, after: list) -> list[str] | None:
    """Paths of the arrays the call changed, from what was sent and what came back.

    None when the arguments came back with another structure, shape or dtype:
    a call cannot do that to its caller's arrays, so the reply is not genuine.
    """
    sent = arrays([args, kwargs])
    back = arrays(after)
    if sent.keys() != back.keys():
        return None
    changed = []
    for path, old in sent.items():
        new = back[path]
        if new.shape != old.shape or new.dtype != old.dtype:
            return None
        if not calltrace.same_values(old, new):
            changed.append(path)
    return changed


def argument_name(path: str, names: list[str]) -> str:
    """Turn `[0][2]['wq']` into `params['wq']` using the call's parameter names."""
    head, _, rest = path[1:].partition("]")
    if head == "0":
        index, _, tail = rest[1:].partition("]")
        position = int(index)
        label = names[position] if position < len(names) else f"argument {position}"
        return label + tail
    key, _, tail = rest[1:].partition("]")
    return key.strip("'") + tail


def printable(text: str, dropped: int = 0) -> str:
    """Learner output made safe to show: control characters escaped, the length capped."""
    text = _CONTROL.sub(
        lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 256 else f"\\u{ord(m[0]):04x}", text
    )
    text = text.strip()
    if len(text) > _SHOWN_OUTPUT:
        dropped += len(text) - _SHOWN_OUTPUT
        text = text[:_SHOWN_OUTPUT]
    return f"{text} … ({dropped} more characters)" if dropped else text


class OverBudget(Exception):
    """A reply that would take labctl's held replies past the budget."""


class ReplyBudget:
    """The bytes of replies still alive in labctl's process, at most `limit`.

    A frame's arrays are views of its one buffer, so the frame's whole length is held
    until the last array decoded from it is collected (a finalizer per array says so).
    """

    def __init__(self, limit: int = REPLY_BUDGET_BYTES):
        self.limit = limit
        self.held = 0
        self.peak = 0
        self._lock = threading.Lock()

    def admit(self, nbytes: int) -> None:
        """Reserve `nbytes` for a frame about to be read; raise OverBudget past the limit."""
        with self._lock:
            fits = self.held + nbytes <= self.limit
        if not fits:
            gc.collect()  # replies in reference cycles, kept by nothing else
        with self._lock:
            if self.held + nbytes > self.limit:
                raise OverBudget(
                    f"a reply of {nbytes / 2**20:.0f} MiB while labctl holds "
                    f"{self.held / 2**20:.0f} MiB of this run's replies (at most "
                    f"{self.limit / 2**20:.0f} MiB)"
                )
            self.held += nbytes
            self.peak = max(self.peak, self.held)

    def hold(self, value: Any, nbytes: int) -> None:
        """`value`, decoded from an admitted frame of `nbytes` (or the frame's buffer, of which
        its arrays are views), keeps them until its arrays go."""
        found = list(arrays(value).values())
        if not found:
            self.release(nbytes)
            return
        left = [len(found)]

        def one_gone() -> None:
            with self._lock:
                left[0] -= 1
                done = left[0] == 0
            if done:
                self.release(nbytes)

        for array in found:
            weakref.finalize(array, one_gone)

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.held -= nbytes


BUDGET = ReplyBudget()
# The replies of labctl's own rooms (the fault catalogue's, the project's): no learner writes
# them, what they hold is bounded by the catalogue, and a cache of them (the diagnosis keeps
# each fault room's observation) must not leave a learner's replies no room in BUDGET.
OWN = ReplyBudget(2**62)


def read_counted(fd: int, deadline: float | None = None, budget: ReplyBudget = BUDGET) -> Any:
    """The next frame on `fd`, its bytes and what decoding it builds counted against `budget`
    while its arrays live; OverBudget (the frame left unread or undecoded) past the budget.

    The worker's text is the learner's: a lone surrogate in it would stop every writer of a
    record or a terminal line that reads it later, so it comes escaped (`wire.decode`)."""
    admitted: list[int] = []

    def admit(nbytes: int) -> None:
        budget.admit(nbytes)
        admitted.append(nbytes)

    try:
        body = wire.read_body(fd, deadline, admit)
        reply = wire.decode(body, admit, repair_text=textsafe.valid)
    except BaseException:
        budget.release(sum(admitted))
        raise
    # Every array decoded is a view of the body: held, it is the frame's arrays held at once,
    # without a walk of the reply and a finalizer per array.
    budget.hold(body, sum(admitted))
    return reply
