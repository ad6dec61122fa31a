"""Large arrays to a clean room's worker as sealed memory files, not through the pipe.

The scale ablation hands `scaled_dot_product_attention` 143 MB of (q, k) pairs, twice for
each learner: through a pipe that is a copy into the kernel, a copy out, and before it the
worker's buffer zeroed, about a third of a grading worker's room time per learner. Here an
array of at least `MIN_BYTES` (32 MiB) is written once into a memory file (`memfd_create`)
and sealed against every write, growth and shrinking (`F_SEAL_WRITE`..., then `F_SEAL_SEAL`):
no process, labctl included, can change it after. Its descriptor travels with the frame
(`SCM_RIGHTS`, `wire.write_frame`) and the worker maps it copy-on-write
(`wire.read_request`): a learner who writes into an argument changes its own pages only.

An array no one can write (read-only down to the array that owns its memory, like the drawn
inputs `labctl.memo` hands out) goes so from `KEPT_MIN_BYTES` (1 MiB) and keeps its sealed
file for the next call and the next learner's room, `LIMIT` bytes of them at most; any other
is written anew for each frame.
Where memory files cannot be made, every array goes inline, as before.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections import OrderedDict

import numpy as np

from labctl.isolation import wire

# Smaller arrays go through the socket as before: a worker's allocator (glibc) reuses buffers
# under its largest mmap threshold, 32 MiB on 64-bit, and the memory a lab measures in a worker
# was measured with them there (the embedding lab subtracts the table its worker received: with
# 1 MiB here, its one-hot fault measured 0.62 of the matrix beyond the table, where 0.74 before).
MIN_BYTES = 32 << 20
# labctl's own read-only inputs (`immutable`: a lab's draws that `labctl.memo` keeps) travel
# sealed from this size: the same bytes for every call and every learner, written once, so no
# learner's room copies them out of the pipe again. None of the labs that measure a worker's
# memory draws its inputs so. The scale ablation's 2 to 43 MB arrays below `MIN_BYTES`, piped
# to each learner's room, were about half of a grading worker's CPU for that lab (0.68 s of
# CPU per learner, labctl's and the room's, against 0.36 s sealed; its values the same).
KEPT_MIN_BYTES = 1 << 20
LIMIT = 512 << 20

_kept: OrderedDict[int, tuple[np.ndarray, int]] = OrderedDict()
_held = 0
_lock = threading.Lock()


def available() -> bool:
    return hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS")


def _seals() -> int:
    return fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL


def sealed_file(array: np.ndarray) -> int:
    """A new memory file holding `array`'s bytes in C order, sealed; its descriptor."""
    fd = os.memfd_create("labctl-array", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
        while view:
            view = view[os.write(fd, view) :]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _seals())
    except BaseException:
        os.close(fd)
        raise
    return fd


def immutable(array: np.ndarray) -> bool:
    """Whether nothing writes `array`'s memory: it and every array it is a view of are
    read-only, down to the one that owns the memory (a write through any raises, and numpy
    makes no view of a read-only array writable). Only labctl's own code holds such arrays (a
    learner's room gets its own copy): none of it makes the owner writable again."""
    while True:
        if array.flags.writeable:
            return False
        base = array.base
        if base is None:
            return True
        if not isinstance(base, np.ndarray):
            return False
        array = base


def _kept_file(array: np.ndarray) -> int:
    """The sealed file kept for `array` (made now if it is not), duplicated for the caller:
    dropping the kept one later never closes a descriptor a frame is about to send."""
    global _held
    with _lock:
        entry = _kept.get(id(array))
        if entry is not None and entry[0] is array:
            _kept.move_to_end(id(array))
            return os.dup(entry[1])
    fd = sealed_file(array)
    with _lock:
        if array.nbytes <= LIMIT and id(array) not in _kept:
            # the array is held with its file: its id cannot pass to another array meanwhile
            _kept[id(array)] = (array, fd)
            _held += array.nbytes
            while _held > LIMIT:
                _, (dropped, dropped_fd) = _kept.popitem(last=False)
                _held -= dropped.nbytes
                os.close(dropped_fd)
            return os.dup(fd)
    return fd


def forget() -> None:
    """Close every kept file."""
    global _held
    with _lock:
        while _kept:
            _, (_, fd) = _kept.popitem()
            os.close(fd)
        _held = 0


class Frame(wire.Share):
    """The descriptors of one frame's large arrays (`wire.Share`); `close()` once the frame is
    sent (the worker holds its own descriptors by then)."""

    def __init__(self) -> None:
        self.fds: list[int] = []
        self._places: dict[int, int] = {}

    def __call__(self, array: np.ndarray) -> int | None:
        if array.nbytes < KEPT_MIN_BYTES:
            return None
        kept = immutable(array)
        if not kept and array.nbytes < MIN_BYTES:
            return None
        if id(array) in self._places:  # the same array twice in one frame: one file
            return self._places[id(array)]
        if len(self.fds) >= wire.MAX_FDS:
            return None
        try:
            fd = _kept_file(array) if kept else sealed_file(array)
        except OSError:  # no memory file here (a seccomp profile, a descriptor limit): inline
            return None
        self.fds.append(fd)
        self._places[id(array)] = len(self.fds) - 1
        return len(self.fds) - 1

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []
