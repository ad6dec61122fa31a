"""Which contract functions a call reached, recorded inside the worker.

After a load, every module of the clean room that holds one of its exported
contract functions under a global name gets a recording wrapper in its place,
so a call from the learner's `multi_head_attention` to the room's own `rope`
(however it was imported) passes through it. While labctl asks for a trace,
each call below the one labctl made is recorded in order: its function, its
depth, the arguments it received and what it returned or raised. Arrays travel
as data up to a bound; past it (or for a value the wire does not carry) only
a marker does, and labctl judges nothing from it. A trace is a claim of the
learner's process: labctl uses it to choose which function a diagnosis names,
never to decide a check.

Standard library and numpy only: this runs in the process that holds a learner's code.
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType

import numpy as np

from labctl.isolation.loader import attribute

# What one traced call may send back: entries, and array elements over all of them.
MAX_ENTRIES = 48
MAX_ELEMENTS = 1 << 15
MAX_DEPTH = 8
TOO_LARGE = "$too-large"


class Recorder:
    """The trace of the call in progress (none between calls)."""

    def __init__(self) -> None:
        self.entries: list[dict] | None = None
        self.depth = 0
        self.elements = 0

    def start(self) -> None:
        self.entries, self.depth, self.elements = [], 0, 0

    def stop(self) -> list[dict]:
        found, self.entries = self.entries or [], None
        return found

    def _kept(self, value, level: int = 0):
        """`value` as plain data the wire carries, arrays copied while the budget lasts."""
        if isinstance(value, (np.ndarray, np.generic)):
            array = np.asarray(value)
            if array.dtype.kind not in "biuf" or self.elements + array.size > MAX_ELEMENTS:
                return {TOO_LARGE: [list(array.shape), str(array.dtype)]}
            self.elements += array.size
            return array.copy()
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if level < 4 and isinstance(value, (tuple, list)):
            return [self._kept(v, level + 1) for v in value]
        if level < 4 and isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {k: self._kept(v, level + 1) for k, v in value.items()}
        return {TOO_LARGE: [[], type(value).__name__]}

    def wrap(self, name: str, fn):
        @functools.wraps(fn)
        def traced(*args, **kwargs):
            entries = self.entries
            if entries is None or self.depth > MAX_DEPTH:
                return fn(*args, **kwargs)
            entry = None
            if self.depth > 0 and len(entries) < MAX_ENTRIES:
                entry = {
                    "function": name,
                    "depth": self.depth,
                    "args": self._kept(list(args)),
                    "kwargs": self._kept(kwargs),
                }
                entries.append(entry)
            self.depth += 1
            try:
                value = fn(*args, **kwargs)
            except BaseException as exc:
                if entry is not None:
                    entry["raised"] = type(exc).__name__
                raise
            finally:
                self.depth -= 1
            if entry is not None:
                entry["out"] = self._kept(value)
                # A call that writes into an array it was given breaks its caller, whose own
                # output it changes: the caller's failure is this call's (`calls.judge`).
                entry["edited"] = _edited(entry["args"], list(args)) or _edited(
                    entry["kwargs"], kwargs
                )
            return value

        return traced


def same_values(kept: np.ndarray, live: np.ndarray) -> bool:
    """Equal values, a NaN equal to a NaN. The same bytes of the same dtype always are, and are
    what an argument left alone comes back as: a memcmp, where `array_equal` costs ~12 µs an
    array, a thousand arrays a traced verify. Other bytes may still be equal values (0.0 and
    -0.0, two NaNs); a subclass of the room's compares as the room says."""
    plain = type(live) is np.ndarray and live.dtype == kept.dtype
    if plain and live.tobytes() == kept.tobytes():
        return True
    return np.array_equal(kept, live, equal_nan=kept.dtype.kind in "fc")


def _edited(kept, live, level: int = 0) -> bool:
    """Does a live argument differ from the copy `_kept` made of it before the call?"""
    if isinstance(kept, np.ndarray):
        if not isinstance(live, np.ndarray) or live.shape != kept.shape:
            return False
        return not same_values(kept, live)
    if level < 4 and isinstance(kept, list) and isinstance(live, (list, tuple)):
        return any(_edited(k, v, level + 1) for k, v in zip(kept, live, strict=False))
    if level < 4 and isinstance(kept, dict) and isinstance(live, dict):
        return any(_edited(k, live.get(key), level + 1) for key, k in kept.items())
    return False


def install(package: ModuleType, names: tuple[str, ...], recorder: Recorder) -> None:
    """Put a recording wrapper wherever the room's modules hold one of its contract functions."""
    originals = {
        id(fn): (name, fn)
        for name in names
        if callable(fn := attribute(package, name)) and not isinstance(fn, type)
    }
    wrapped = {key: recorder.wrap(name, fn) for key, (name, fn) in originals.items()}
    prefix = package.__name__ + "."
    modules = [
        m
        # a copy taken at once: another thread may import while this one walks
        for key, m in sys.modules.copy().items()
        if isinstance(m, ModuleType) and (key == package.__name__ or key.startswith(prefix))
    ]
    for module in modules:
        for attr, value in list(vars(module).items()):
            if id(value) in originals and originals[id(value)][1] is value:
                setattr(module, attr, wrapped[id(value)])
