"""A safe wire format between labctl and the process that runs a clean room.

Never pickle: the other side runs a learner's code, and unpickling its replies
would let that code run in labctl. A message is a JSON header describing a
tree of plain values plus raw array buffers, each decoded with an explicit,
checked numeric dtype. Anything else a clean room returns arrives as an
`Unsupported` marker naming its type, so the caller can name the failure.

Frame: 8-byte big-endian length, then 4-byte header length, header JSON, blobs.

From labctl to a worker only, a large array may travel as a sealed memory file instead
of a blob (`labctl.isolation.sealed`): its spec names the file by its place among the
descriptors sent with the frame's length (`SCM_RIGHTS`), and the worker maps it
copy-on-write. The worker's replies are always blobs, on a pipe that carries no
descriptors.
"""

from __future__ import annotations

import array as _array_module
import json
import math
import mmap
import os
import re
import select
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

# The largest reply labctl reads: a fixture's arrays are kilobytes, the largest
# lab input a few MiB; 256 MiB leaves room and bounds what a forged length costs.
MAX_FRAME_BYTES = 256 << 20
MAX_ELEMENTS = 1 << 26
MAX_NDIM = 32
# A frame's JSON header describes values; the arrays' bytes travel beside it. A genuine
# header is kilobytes (a trace of 48 calls, a few dozen arrays): these bound what decoding a
# forged one builds. Decoding turns each JSON value into a Python object, so its cost is
# counted before anything is built (`decode_cost`): a 120 MiB header of `[]`s took labctl to
# 7 GB, a frame of 1,000,000 zero-size arrays to 2.87 GB.
MAX_HEADER_BYTES = 16 << 20
MAX_ARRAYS = 1 << 14
# Text in a frame: names, dtypes, a path, a message the worker cut to 500 characters.
MAX_TEXT = 1 << 14
# Python's cost per JSON value decoded (an empty list is 72 bytes with its collector header,
# and `_decode` builds the tree a second time), and per array beside its spec (the array and
# its view, and the finalizer the reply budget keeps on it): upper bounds, measured.
NODE_BYTES = 128
ARRAY_BYTES = 1024
# The dtypes that cross the wire, whatever their byte order: numeric, fixed size.
ALLOWED_DTYPES = frozenset(
    ["b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16"]
)


class WireError(Exception):
    """A frame that cannot be read: truncated, oversized, or not in this format."""


@dataclass(frozen=True)
class Unsupported:
    """Stands in for a value the wire does not carry (an object, a generator, ...)."""

    type_name: str


# The most buffers one writev takes (Linux's UIO_MAXIOV); a frame of more is written in turns.
_IOV_MAX = 1024
# Descriptors one frame may carry (its large arrays); a frame with more sends the rest inline.
MAX_FDS = 16
# labctl reads a reply of more than this into a buffer not zeroed first (numpy.empty): zeroing a
# large buffer before reading into it cost as much as the read. A worker still reads its
# requests into zeroed buffers (bytearray): the memory the labs measure in a worker was
# measured with them, and its allocator's history is part of that figure.
ZEROED_BYTES = 1 << 16


def _encode(value: Any, blobs: list, specs: list[dict], share: Share | None) -> Any:
    if isinstance(value, str) and len(value) > MAX_TEXT:
        return {"$unsupported": f"str of {len(value)} characters"}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.str[1:] not in ALLOWED_DTYPES:
            return {"$unsupported": f"ndarray of dtype {array.dtype}"}
        spec = {"dtype": array.dtype.str, "shape": list(array.shape)}
        fd_index = share(array) if share is not None else None
        if fd_index is not None:
            spec["fd"] = fd_index
        else:
            # The bytes in C order: a view of a C-contiguous array, else one copy. The shape
            # travels in the spec, so flattening (a 0-d array too) loses nothing.
            blobs.append(memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8)))
        specs.append(spec)
        return {"$nd" if isinstance(value, np.ndarray) else "$np": len(specs) - 1}
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, blobs, specs, share) for v in value]}
    if isinstance(value, list):
        return [_encode(v, blobs, specs, share) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) and len(k) <= MAX_TEXT for k in value):
        return {"$dict": {k: _encode(v, blobs, specs, share) for k, v in value.items()}}
    return {"$unsupported": type(value).__name__}


def _parts(value: Any, share: Share | None = None) -> list:
    """The frame body as buffers, arrays not copied into one string: header, then each array
    (but those `share` sends as a descriptor: it returns the descriptor's place, or None)."""
    blobs: list = []
    specs: list[dict] = []
    tree = _encode(value, blobs, specs, share)
    header = json.dumps({"tree": tree, "blobs": specs}).encode("utf-8")
    return [struct.pack(">I", len(header)) + header, *blobs]


def encode(value: Any) -> bytes:
    return b"".join(_parts(value))


def _array(spec: dict, payload: memoryview, offset: int, fds: list[int]) -> tuple[np.ndarray, int]:
    try:
        if not isinstance(spec["dtype"], str) or spec["dtype"][1:] not in ALLOWED_DTYPES:
            raise ValueError(f"dtype {spec['dtype']!r} is not a plain numeric dtype")
        dtype = np.dtype(spec["dtype"])
        if not isinstance(spec["shape"], list) or len(spec["shape"]) > MAX_NDIM:
            raise ValueError("shape is not a list of at most 32 sizes")
        shape = tuple(spec["shape"])
        if not all(type(n) is int and n >= 0 for n in shape):
            raise ValueError(f"shape {shape} holds a size that is not a natural number")
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"bad array spec: {exc}") from None
    # Each size on its own too: an empty array can claim (0, 10**30), which numpy cannot make.
    if any(n > MAX_ELEMENTS for n in shape):
        raise WireError(f"an array of shape {_shown(shape)} exceeds the {MAX_ELEMENTS} limit")
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        raise WireError(f"an array of {count} elements exceeds the {MAX_ELEMENTS} limit")
    nbytes = dtype.itemsize * count
    if "fd" in spec:
        return _mapped(spec["fd"], fds, dtype, shape, nbytes), offset
    if offset + nbytes > len(payload):
        raise WireError("truncated array data")
    try:
        array = np.frombuffer(payload[offset : offset + nbytes], dtype=dtype).reshape(shape)
    except ValueError as exc:
        raise WireError(f"bad array spec: {exc}") from None
    if not array.flags.writeable:  # a frame read from a pipe is already this process's own
        array = array.copy()
    return array, offset + nbytes


def _mapped(index: Any, fds: list[int], dtype: np.dtype, shape: tuple, nbytes: int) -> np.ndarray:
    """The array in the `index`-th descriptor sent with the frame, mapped copy-on-write: the
    callee may write into its argument as into one read from the pipe, and the file (sealed
    by labctl) stays as it was for the next call."""
    if type(index) is not int or not 0 <= index < len(fds):
        raise WireError(f"bad descriptor index {index!r}")
    if nbytes == 0 or os.fstat(fds[index]).st_size < nbytes:
        raise WireError("a shared array's file is smaller than its spec")
    view = mmap.mmap(
        fds[index], nbytes, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE
    )
    return np.frombuffer(view, dtype=dtype).reshape(shape)


def _shown(shape: tuple) -> str:
    """A forged shape as text of bounded length (a size can have thousands of digits)."""
    text = str(list(shape))
    return text if len(text) <= 200 else text[:200] + "…"


def decode_cost(header: bytes) -> int:
    """What decoding `header` can cost in Python objects, at most: every JSON value follows a
    `[`, `{`, `,` or `:` (or is the first), and each array spec becomes arrays too."""
    values = 1 + sum(header.count(c) for c in (b"[", b"{", b",", b":"))
    return values * NODE_BYTES + header.count(b'"dtype"') * ARRAY_BYTES


# JSON text holds a lone surrogate only as a `\ud800`-`\udfff` escape or as raw bytes: `json`
# decodes bytes with surrogatepass, as UTF-16 or UTF-32 too where a header holds a NUL.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _may_hold_lone_surrogate(header: bytes) -> bool:
    """False for a header of ASCII without a NUL or a surrogate's escape: what `json.dumps`
    writes for any text but one with a lone surrogate, so a genuine reply is not walked."""
    return not header.isascii() or b"\0" in header or bool(_SURROGATE_ESCAPE.search(header))


def decode(
    payload: bytes | np.ndarray,
    admit: Callable[[int], None] | None = None,
    fds: list[int] | None = None,
    repair_text: Callable[[Any], Any] | None = None,
) -> Any:
    """The value in a frame's body. `admit` sees what decoding its header can cost (beyond the
    frame's own bytes) before anything is built, and may raise to leave it undecoded. `fds`:
    the descriptors that came with the frame (a worker's requests only). `repair_text`
    (`textsafe.valid`, labctl's side) is applied to the value where its text may hold a lone
    surrogate: not to a genuine reply's."""
    view = memoryview(payload)
    if len(view) < 4:
        raise WireError("frame too short")
    (header_len,) = struct.unpack(">I", view[:4])
    if header_len > MAX_HEADER_BYTES:
        raise WireError(f"a header of {header_len} bytes exceeds the {MAX_HEADER_BYTES} limit")
    text = bytes(view[4 : 4 + header_len])
    if admit is not None:
        admit(decode_cost(text))
    try:
        header = json.loads(text)
        tree, specs = header["tree"], header["blobs"]
        if not isinstance(specs, list) or not all(isinstance(s, dict) for s in specs):
            raise TypeError("blobs is not a list of array specs")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise WireError(f"bad header: {str(exc)[:200]}") from None
    if len(specs) > MAX_ARRAYS:
        raise WireError(f"{len(specs)} arrays in one frame exceed the {MAX_ARRAYS} limit")
    arrays = []
    offset = 4 + header_len
    for spec in specs:
        array, offset = _array(spec, view, offset, fds or [])
        arrays.append(array)
    if offset != len(view):
        raise WireError(f"{len(view) - offset} bytes of array data that no array claims")
    try:
        value = _decode(tree, arrays)
        if repair_text is not None and _may_hold_lone_surrogate(text):
            value = repair_text(value)
        return value
    except (IndexError, TypeError, AttributeError, RecursionError) as exc:
        raise WireError(f"bad value tree: {exc}") from None


def _decode(node: Any, arrays: list[np.ndarray]) -> Any:
    if isinstance(node, list):
        return [_decode(v, arrays) for v in node]
    if isinstance(node, str) and len(node) > MAX_TEXT:
        raise WireError(f"a text of {len(node)} characters exceeds the {MAX_TEXT} limit")
    if not isinstance(node, dict):
        return node
    if len(node) != 1:
        raise WireError("bad node")
    ((tag, body),) = node.items()
    if tag in ("$nd", "$np"):
        if type(body) is not int or not 0 <= body < len(arrays):
            raise WireError(f"bad array index {body!r}")
        return arrays[body] if tag == "$nd" else arrays[body][()]
    if tag == "$tuple":
        return tuple(_decode(v, arrays) for v in body)
    if tag == "$dict":
        if not isinstance(body, dict):
            raise WireError("bad dict node")
        if any(len(k) > MAX_TEXT for k in body):
            raise WireError(f"a key longer than the {MAX_TEXT} character limit")
        return {k: _decode(v, arrays) for k, v in body.items()}
    if tag == "$unsupported":
        # A genuine worker cannot send a lone surrogate in a type's name (its reply would not
        # encode): one here is forged, and would reach a message as the room's own words.
        if not isinstance(body, str) or len(body) > MAX_TEXT or _LONE_SURROGATE.search(body):
            raise WireError("bad unsupported node")
        return Unsupported(body)
    raise WireError(f"unknown tag {tag!r}")


class Share(Protocol):
    """Where a frame's large arrays go as descriptors: `share(array)` gives the place of its
    descriptor among `share.fds` (those sent with the frame), or None to send it inline."""

    fds: list[int]

    def __call__(self, array: np.ndarray) -> int | None: ...


def write_frame(fd: int, message: Any, share: Share | None = None) -> None:
    """`message` as one frame on `fd`; with `share`, `fd` is a Unix socket and the descriptors
    `share` chose travel with the frame's length."""
    parts = _parts(message, share)
    size = sum(memoryview(p).nbytes for p in parts)
    head = struct.pack(">Q", size)
    if share is not None and share.fds:
        sock = socket.socket(fileno=fd)
        try:
            rights = _array_module.array("i", share.fds)
            sent = sock.sendmsg([head], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
        finally:
            sock.detach()
        head = head[sent:]
    # One writev for the frame, not a write per part: a reply of dozens of arrays took as many
    # system calls, and as many wakeups of the reader.
    pending = [view for part in (head, *parts) if (view := memoryview(part).cast("B"))]
    first = 0
    while first < len(pending):
        written = os.writev(fd, pending[first : first + _IOV_MAX])
        while written:  # drop the parts that went, cut the one it stopped in
            if written < len(pending[first]):
                pending[first] = pending[first][written:]
                break
            written -= len(pending[first])
            first += 1


class Timeout(Exception):
    """No complete frame arrived before the deadline."""


def read_exactly(
    fd: int, n: int, deadline: float | None = None, zeroed: bool = False
) -> bytearray | np.ndarray:
    """`n` bytes from `fd`; with a deadline (time.monotonic), a stalled sender raises Timeout.
    `zeroed`: into a buffer zeroed first whatever its size (`ZEROED_BYTES`)."""
    buffer = bytearray(n) if zeroed or n <= ZEROED_BYTES else np.empty(n, dtype=np.uint8)
    view = memoryview(buffer)
    done = 0
    while done < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise Timeout("no complete frame before the deadline")
        got = os.readv(fd, [view[done : done + (1 << 20)]])
        if not got:
            raise EOFError("the other side closed the pipe")
        done += got
    return buffer


def read_body(
    fd: int, deadline: float | None = None, admit: Callable[[int], None] | None = None
) -> np.ndarray:
    """The next frame's body (for `decode`), as an array of bytes: every array decoded from it
    is a view of it, so it lives as long as they do. `admit` sees its length before it is
    read, and may raise to leave it unread (the caller then closes the pipe)."""
    (length,) = struct.unpack(">Q", read_exactly(fd, 8, deadline))
    if length > MAX_FRAME_BYTES:
        raise WireError(f"frame of {length} bytes exceeds the {MAX_FRAME_BYTES} byte limit")
    if admit is not None:
        admit(length)
    return np.frombuffer(read_exactly(fd, length, deadline), dtype=np.uint8)


def read_frame(
    fd: int, deadline: float | None = None, admit: Callable[[int], None] | None = None
) -> Any:
    """The next frame's value; `admit` sees its length before the body is read, then what
    decoding its header can cost before that is built (`decode`), and may raise to leave it
    unread or undecoded (the caller then closes the pipe)."""
    return decode(read_body(fd, deadline, admit), admit)


def read_request(fd: int) -> Any:
    """The next frame from labctl on the Unix socket `fd` (a worker's side), the descriptors
    sent with it mapped where its spec names them and then closed."""
    sock = socket.socket(fileno=fd)
    try:
        head, ancillary, flags, _ = sock.recvmsg(
            8, socket.CMSG_SPACE(MAX_FDS * 4), getattr(socket, "MSG_CMSG_CLOEXEC", 0)
        )
    finally:
        sock.detach()
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds += _array_module.array("i", data[:usable]).tolist()
    try:
        if not head:
            raise EOFError("the other side closed the pipe")
        if flags & socket.MSG_CTRUNC:
            raise WireError("more descriptors than a frame may carry")
        if len(head) < 8:
            head += bytes(read_exactly(fd, 8 - len(head)))
        (length,) = struct.unpack(">Q", head)
        if length > MAX_FRAME_BYTES:
            raise WireError(f"frame of {length} bytes exceeds the {MAX_FRAME_BYTES} byte limit")
        return decode(read_exactly(fd, length, zeroed=True), None, fds)
    finally:
        for received in fds:
            os.close(received)
