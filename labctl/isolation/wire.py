"""A safe wire format between labctl and the process that runs a clean room.

Never pickle: the other side runs a learner's code, and unpickling its replies
would let that code run in labctl. A message is a JSON header describing a
tree of plain values plus raw array buffers, each decoded with an explicit,
checked numeric dtype. Anything else a clean room returns arrives as an
`Unsupported` marker naming its type, so the caller can name the failure.

Frame: 8-byte big-endian length, then 4-byte header length, header JSON, blobs.
"""

from __future__ import annotations

import json
import math
import os
import select
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

# The largest reply labctl reads: a fixture's arrays are kilobytes, the largest
# lab input a few MiB; 256 MiB leaves room and bounds what a forged length costs.
MAX_FRAME_BYTES = 256 << 20
MAX_ELEMENTS = 1 << 26
MAX_NDIM = 32
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


def _encode(value: Any, blobs: list[bytes], specs: list[dict]) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.str[1:] not in ALLOWED_DTYPES:
            return {"$unsupported": f"ndarray of dtype {array.dtype}"}
        specs.append({"dtype": array.dtype.str, "shape": list(array.shape)})
        # The bytes in C order: a view of a C-contiguous array, else one copy. The shape
        # travels in the spec, so flattening (a 0-d array too) loses nothing.
        blobs.append(memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8)))
        return {"$nd" if isinstance(value, np.ndarray) else "$np": len(blobs) - 1}
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, blobs, specs) for v in value]}
    if isinstance(value, list):
        return [_encode(v, blobs, specs) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"$dict": {k: _encode(v, blobs, specs) for k, v in value.items()}}
    return {"$unsupported": type(value).__name__}


def _parts(value: Any) -> list:
    """The frame body as buffers, arrays not copied into one string: header, then each array."""
    blobs: list = []
    specs: list[dict] = []
    tree = _encode(value, blobs, specs)
    header = json.dumps({"tree": tree, "blobs": specs}).encode("utf-8")
    return [struct.pack(">I", len(header)) + header, *blobs]


def encode(value: Any) -> bytes:
    return b"".join(_parts(value))


def _array(spec: dict, payload: memoryview, offset: int) -> tuple[np.ndarray, int]:
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
    count = math.prod(shape)
    if count > MAX_ELEMENTS:
        raise WireError(f"an array of {count} elements exceeds the {MAX_ELEMENTS} limit")
    nbytes = dtype.itemsize * count
    if offset + nbytes > len(payload):
        raise WireError("truncated array data")
    array = np.frombuffer(payload[offset : offset + nbytes], dtype=dtype).reshape(shape)
    if not array.flags.writeable:  # a frame read from a pipe is already this process's own
        array = array.copy()
    return array, offset + nbytes


def decode(payload: bytes) -> Any:
    view = memoryview(payload)
    if len(view) < 4:
        raise WireError("frame too short")
    (header_len,) = struct.unpack(">I", view[:4])
    try:
        header = json.loads(bytes(view[4 : 4 + header_len]))
        tree, specs = header["tree"], header["blobs"]
        if not isinstance(specs, list) or not all(isinstance(s, dict) for s in specs):
            raise TypeError("blobs is not a list of array specs")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise WireError(f"bad header: {exc}") from None
    arrays = []
    offset = 4 + header_len
    for spec in specs:
        array, offset = _array(spec, view, offset)
        arrays.append(array)
    if offset != len(view):
        raise WireError(f"{len(view) - offset} bytes of array data that no array claims")
    try:
        return _decode(tree, arrays)
    except (IndexError, TypeError, AttributeError, RecursionError) as exc:
        raise WireError(f"bad value tree: {exc}") from None


def _decode(node: Any, arrays: list[np.ndarray]) -> Any:
    if isinstance(node, list):
        return [_decode(v, arrays) for v in node]
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
        return {k: _decode(v, arrays) for k, v in body.items()}
    if tag == "$unsupported":
        return Unsupported(str(body))
    raise WireError(f"unknown tag {tag!r}")


def write_frame(fd: int, message: Any) -> None:
    parts = _parts(message)
    size = sum(memoryview(p).nbytes for p in parts)
    for part in (struct.pack(">Q", size), *parts):
        view = memoryview(part).cast("B")
        while view:
            written = os.write(fd, view)
            view = view[written:]


class Timeout(Exception):
    """No complete frame arrived before the deadline."""


def read_exactly(fd: int, n: int, deadline: float | None = None) -> bytearray:
    """`n` bytes from `fd`; with a deadline (time.monotonic), a stalled sender raises Timeout."""
    buffer = bytearray(n)
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


def read_frame(
    fd: int, deadline: float | None = None, admit: Callable[[int], None] | None = None
) -> Any:
    """The next frame's value; `admit` sees its length before the body is read, and may
    raise to leave it unread (the caller then closes the pipe)."""
    (length,) = struct.unpack(">Q", read_exactly(fd, 8, deadline))
    if length > MAX_FRAME_BYTES:
        raise WireError(f"frame of {length} bytes exceeds the {MAX_FRAME_BYTES} byte limit")
    if admit is not None:
        admit(length)
    return decode(read_exactly(fd, length, deadline))
