"""`labctl.memo`'s results shared by the processes of one grading batch, through a folder.

A batch's workers start at the same seed, and each computed the template labs' reference
side for itself: the same draws, the same trained language models, the same reference
calls, about 3 s of CPU in each worker on two cores. With a shared folder, a result is
computed by one process and read by the others: at the batch's start the workers split the
labs between them (`take`: the first to ask computes a lab), and a process that misses a
result while another still computes one waits for it (`wait`) before computing it itself.

Only plain values cross (arrays by dtype, shape and bytes; bools, ints, floats, text, None,
and lists, tuples and dicts of them), in a format read without pickle: a header in JSON,
then each array's bytes. A file is written whole under a temporary name and renamed into
place, so a reader sees all of it or nothing; one that does not read back exactly is a miss.
The folder is the batch pool's (mode 0700, removed with the pool), made only where learner
code runs in the sandbox, which mounts no such folder: nothing a learner runs reaches it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from labctl import owners

MAGIC = b"LABCTLM1"
_HEADER_MAX = 16 << 20
_ALIGN = 64
WAIT_S = 120.0  # a result another process computes is waited for this long at most
_POLL_S = 0.01
_TAKEN, _DONE, _RESULT = ".taken", ".done", ".memo"
_KINDS = "biufcSU"  # bool, integers, floats, complex, bytes and text: memory as it is

_counter = iter(range(1 << 62))
_lock = threading.Lock()


class Unshareable(Exception):
    """A value this format does not carry exactly: it is not shared (only kept in memory)."""


# ---- values to and from files -------------------------------------------------------------


def _encode(value: Any, arrays: list[np.ndarray]) -> Any:
    # Exact types: a subclass (np.float64 is a float, bool an int) keeps its own tag.
    kind = type(value)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _KINDS:
            raise Unshareable
        # not `ascontiguousarray`, which makes a 0-d array 1-d
        arrays.append(value if value.flags.c_contiguous else value.copy(order="C"))
        return {"a": len(arrays) - 1}
    if isinstance(value, np.generic):
        if value.dtype.kind not in _KINDS:
            raise Unshareable
        arrays.append(np.asarray(value).reshape(1))
        return {"g": len(arrays) - 1}
    if value is None:
        return None
    if kind is bool:
        return {"b": value}
    if kind is int:
        return {"i": str(value)}
    if kind is float:
        return {"f": value.hex()}
    if kind is str:
        return {"s": value}
    if kind in (list, tuple):
        return {"l" if kind is list else "t": [_encode(v, arrays) for v in value]}
    if kind is dict:
        return {"d": [[_encode(k, arrays), _encode(v, arrays)] for k, v in value.items()]}
    raise Unshareable


def _decode(tree: Any, arrays: list[np.ndarray]) -> Any:
    if tree is None:
        return None
    if not isinstance(tree, dict) or len(tree) != 1:
        raise ValueError("not a memo value")
    ((tag, item),) = tree.items()
    if tag == "a":
        return arrays[item]
    if tag == "g":
        return arrays[item][0]
    if tag == "b" and type(item) is bool:
        return item
    if tag == "i" and type(item) is str:
        return int(item)
    if tag == "f" and type(item) is str:
        return float.fromhex(item)
    if tag == "s" and type(item) is str:
        return item
    if tag in ("l", "t") and type(item) is list:
        items = [_decode(v, arrays) for v in item]
        return items if tag == "l" else tuple(items)
    if tag == "d" and type(item) is list:
        return {_decode(k, arrays): _decode(v, arrays) for k, v in item}
    raise ValueError(f"not a memo value: {tag!r}")


def _padded(offset: int) -> int:
    return -offset % _ALIGN


def write(path: Path, value: Any) -> int:
    """`value` into the file `path`, whole or not at all; the bytes written. Raises
    `Unshareable` for a value this format does not carry."""
    arrays: list[np.ndarray] = []
    tree = _encode(value, arrays)
    header = json.dumps(
        {"value": tree, "arrays": [[a.dtype.str, list(a.shape)] for a in arrays]},
        separators=(",", ":"),
    ).encode("utf-8")
    with _lock:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_counter)}.tmp")
    written = 0
    try:
        with open(tmp, "xb") as handle:
            handle.write(MAGIC + len(header).to_bytes(8, "little") + header)
            written = len(MAGIC) + 8 + len(header)
            for array in arrays:
                handle.write(b"\0" * _padded(written))
                written += _padded(written)
                if array.nbytes:
                    handle.write(memoryview(array).cast("B"))
                written += array.nbytes
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return written


def read(path: Path) -> Any:
    """The value in the file `path`. Raises OSError where there is none, ValueError where
    the file is not exactly one value of this format."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        start = handle.read(len(MAGIC) + 8)
        if len(start) != len(MAGIC) + 8 or start[: len(MAGIC)] != MAGIC:
            raise ValueError("not a memo file")
        length = int.from_bytes(start[len(MAGIC) :], "little")
        if length > min(_HEADER_MAX, size):
            raise ValueError("header too long")
        header = json.loads(handle.read(length).decode("utf-8"))
        offset = len(MAGIC) + 8 + length
        arrays = []
        for dtype_text, shape in header["arrays"]:
            dtype = np.dtype(dtype_text)
            if dtype.kind not in _KINDS or not all(type(n) is int and n >= 0 for n in shape):
                raise ValueError("not an array of plain values")
            array = np.empty(shape, dtype)
            offset += _padded(offset)
            handle.seek(offset)
            if array.nbytes and handle.readinto(memoryview(array).cast("B")) != array.nbytes:
                raise ValueError("cut short")
            offset += array.nbytes
            arrays.append(array)
        if offset != size:
            raise ValueError("not the size its header gives")
        return _decode(header["value"], arrays)


# ---- the folder: results, and who computes what -------------------------------------------


class Shared:
    """A batch's shared folder, as one process uses it."""

    def __init__(self, folder: Path, limit: int):
        self.folder = folder
        self.limit = limit  # bytes this process writes at most
        self.written = 0
        self._owner = owners.owner(os.getpid())
        self._mine: set[str] = set()  # names this process took and has not finished

    def _path(self, name: str, suffix: str) -> Path:
        return self.folder / f"{name}{suffix}"

    def load(self, key: str) -> tuple[bool, Any]:
        """(True, value) for a result in the folder; (False, None) for none, or one that does
        not read back exactly."""
        try:
            return True, read(self._path(key, _RESULT))
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return False, None

    def save(self, key: str, value: Any, size: int) -> None:
        """`value` for the others, unless this process has written its share or it is not
        a plain value."""
        if self.written + size > self.limit:
            return
        with contextlib.suppress(Unshareable, OSError):
            self.written += write(self._path(key, _RESULT), value)

    @contextlib.contextmanager
    def take(self, name: str) -> Iterator[bool]:
        """Whether this process computes `name` (the first to ask does); the others wait for
        it (`wait`) until it ends, however it ends."""
        try:
            fd = os.open(self._path(name, _TAKEN), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError:
            yield False
            return
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(self._owner)
        self._mine.add(name)
        try:
            yield True
        finally:
            self._mine.discard(name)
            with contextlib.suppress(OSError):
                self._path(name, _DONE).touch()

    def _others_busy(self) -> bool:
        """Whether another live process has taken something it has not finished."""
        try:
            taken = [p for p in self.folder.iterdir() if p.name.endswith(_TAKEN)]
        except OSError:
            return False
        for path in taken:
            name = path.name[: -len(_TAKEN)]
            if name in self._mine or self._path(name, _DONE).exists():
                continue
            with contextlib.suppress(OSError):
                if owners.alive(path.read_text("ascii")):
                    return True
        return False

    def wait(self, key: str) -> tuple[bool, Any]:
        """The result `key` once it is in the folder, waiting while another process still
        computes what it took; (False, None) when none comes. A process that has taken work
        of its own never waits (two such could wait on each other)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            found = self.load(key)
            if found[0] or self._mine or not self._others_busy():
                return found if found[0] else self.load(key)
            if time.monotonic() > deadline:
                return False, None
            time.sleep(_POLL_S)
