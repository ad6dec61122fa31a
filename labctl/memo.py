"""What a long-lived process computes once and serves again: the reference's side of a lab.

A grading worker observes learner after learner at one batch seed, and the course
template's labs compute the same reference values for each of them: the reference's calls
on inputs drawn from the seed, a tiny language model trained with the reference's mask,
the gradients of a 32-layer stack. Those were most of a grading worker's time per learner.
`remember(parts, compute)` keeps such a result under the sha256 of everything it depends
on (`parts`: arrays by dtype, shape and bytes), so the same inputs give the same result,
bit for bit, wherever it was computed. Only a process that turned the memory on keeps
anything (`enable`: grading workers); elsewhere every call computes, as before.

Only labctl's own pure computations are kept, never a learner's function: a learner's
outputs may be among the inputs (a mask the room returned), which changes the digest and
so the result, never what the next learner gets. Results are handed out as copies, so no
caller can change what is kept, but for a lab's drawn inputs (`remember_draws`), which the
labs only read: those are handed out read-only, and a write raises. The memory holds at
most `LIMIT` bytes and keeps nothing past it. A grading batch's workers also share what
they compute through a folder (`share`, `labctl.memo_shared`): a result one worker computed
is read, not computed again, by the others.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from labctl.memo_shared import Shared

T = TypeVar("T")
LIMIT = 512 << 20

_store: dict[str, Any] | None = None
_held = 0
_limit = LIMIT
_shared: Shared | None = None
_inside = threading.local()  # how deep this thread is in computations being remembered


class _Unkeyable(Exception):
    """A value whose content no digest here can speak for: its call is not remembered."""


def enable(limit: int = LIMIT) -> None:
    """Keep results from now on, at most `limit` bytes of them, in this process."""
    global _store, _limit
    if _store is None:
        _store = {}
    _limit = limit


def enabled() -> bool:
    return _store is not None


def disable() -> None:
    """Keep nothing from now on, forget what was kept, and share nothing."""
    global _store, _held, _shared
    _store, _held, _shared = None, 0, None


def shared() -> bool:
    return _shared is not None


def share(folder: Path) -> None:
    """Share results with the other processes that share `folder` (memory must be on)."""
    global _shared
    _shared = Shared(folder, _limit)


@contextlib.contextmanager
def taking(name: str) -> Iterator[bool]:
    """Whether this process computes the work `name` that the sharing processes split: the
    first to ask does (`Shared.take`); without a shared folder, always."""
    if _shared is None:
        yield True
        return
    with _shared.take(name) as mine:
        yield mine


def _feed(value: Any, h) -> None:
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise _Unkeyable
        h.update(f"a{value.dtype.str}{value.shape}".encode())
        h.update(memoryview(np.ascontiguousarray(value)).cast("B"))
    elif isinstance(value, (bool, np.bool_)):
        h.update(b"b1" if value else b"b0")
    elif isinstance(value, (int, np.integer)):
        h.update(f"i{int(value)}".encode())
    elif isinstance(value, (float, np.floating)):
        h.update(f"f{float(value).hex()}".encode())
    elif value is None:
        h.update(b"n")
    elif isinstance(value, str):
        h.update(b"s%d:" % len(value) + value.encode("utf-8", "surrogatepass"))
    elif isinstance(value, (list, tuple)):
        h.update(f"l{len(value)}".encode())
        for item in value:
            _feed(item, h)
    elif isinstance(value, dict):
        h.update(f"d{len(value)}".encode())
        for key in sorted(value, key=repr):
            _feed(key, h)
            _feed(value[key], h)
    else:
        raise _Unkeyable


def digest(parts: Any) -> str | None:
    """The sha256 of `parts` by content, or None when some part has no content digest."""
    h = hashlib.sha256()
    try:
        _feed(parts, h)
    except _Unkeyable:
        return None
    return h.hexdigest()


def _each_array(value: Any, change: Callable[[np.ndarray], np.ndarray]) -> Any:
    """`value` with `change` made to every array in it, its containers rebuilt."""
    if isinstance(value, np.ndarray):
        return change(value)
    if isinstance(value, tuple):
        return tuple(_each_array(v, change) for v in value)
    if isinstance(value, list):
        return [_each_array(v, change) for v in value]
    if isinstance(value, dict):
        return {k: _each_array(v, change) for k, v in value.items()}
    return value


def _copy(value: Any) -> Any:
    return _each_array(value, np.ndarray.copy)


def _frozen(array: np.ndarray) -> np.ndarray:
    """A view of `array` that nothing writes: it and every array it is a view of, down to the
    one that owns the memory, are made read-only (a write through any of them raises, and numpy
    makes no view of a read-only array writable). Such an array keeps its sealed file from one
    learner's room to the next (`labctl.isolation.sealed`)."""
    chain = array
    while isinstance(chain, np.ndarray):
        chain.flags.writeable = False
        chain = chain.base
    return array.view()


def _size(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (list, tuple)):
        return sum(_size(v) for v in value) + 8 * len(value)
    if isinstance(value, dict):
        return sum(_size(v) for v in value.values()) + 16 * len(value)
    return 32


def _plain(value: Any) -> bool:
    """Whether `value` is made of arrays, numbers, text and containers of them: what a copy
    here copies whole."""
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(_plain(v) for v in value.values())
    return isinstance(value, (np.ndarray, bool, int, float, str, np.generic, type(None)))


def _computed(compute: Callable[[], T]) -> T:
    _inside.depth = getattr(_inside, "depth", 0) + 1
    try:
        return compute()
    finally:
        _inside.depth -= 1


def remember(parts: Any, compute: Callable[[], T], *, read_only: bool = False) -> T:
    """`compute()`, or what it gave before for the same `parts` (see the module docstring).
    With `read_only`, `compute` makes arrays no one else holds (fresh draws): they are kept as
    they are, not copied, made read-only (`_frozen`), and handed to every caller."""
    global _held
    if _store is None or getattr(_inside, "depth", 0):
        # Inside another remembered computation, nothing is kept: the outer result is, and
        # it makes this one unneeded (the digests alone of the scale ablation's reference
        # calls, 340 MB of inputs, took 0.6 s of CPU).
        return compute()
    key = digest(parts)
    if key is None:
        return compute()
    if key in _store:
        return _store[key] if read_only else _copy(_store[key])
    shared = _shared
    found, value = shared.wait(key) if shared is not None else (False, None)
    if not found:
        value = _computed(compute)
    size = _size(value)
    if _plain(value) and _held + size <= _limit:
        # A result read from the folder is this process's alone: kept as read, read-only.
        _store[key] = _each_array(value, _frozen) if read_only or found else _copy(value)
        _held += size
        if shared is not None and not found:
            shared.save(key, _store[key], size)
        if read_only:
            return _store[key]
        return _copy(_store[key]) if found else value
    return value


def remember_draws(rng: np.random.Generator, parts: Any, compute: Callable[[], T]) -> T:
    """`compute()`, which draws from `rng`, or what it gave before from the same generator
    state for the same `parts`; either way `rng` is left where `compute` leaves it, so every
    later draw is the one a fresh run makes. What is kept is what `compute` drew, read-only,
    never copied: the scale ablation's 171 MB of inputs were copied for every learner, then
    once for each grading worker."""
    if _store is None:
        return compute()
    state = rng.bit_generator.state
    drawn = remember(
        ("draws", parts, state),
        lambda: (compute(), rng.bit_generator.state),
        read_only=True,
    )
    value, after = drawn
    rng.bit_generator.state = after
    return value


class Remembered:
    """A module whose functions in `names` have their results remembered (`remember`), by
    name and arguments; every other attribute is the module's own."""

    def __init__(self, target: Any, names: Iterable[str], label: str):
        self._target = target
        self._names = frozenset(names)
        self._label = label

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._target, name)
        if name not in self._names or not callable(found):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            return remember((self._label, name, args, kwargs), lambda: found(*args, **kwargs))

        return call
