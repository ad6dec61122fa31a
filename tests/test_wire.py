"""Replies from a clean room's process: what the wire carries back, and how it names a bad frame.

A worker's reply is decoded in labctl's process; a forged or broken one must be a named
WireError (the verdict code turns it into a failure of that function), never a wrong value.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import threading
import time

import numpy as np
import pytest

from labctl.isolation import wire


def _frame(tree, blobs=(), payload: bytes = b"") -> bytes:
    header = json.dumps({"tree": tree, "blobs": list(blobs)}).encode()
    return struct.pack(">I", len(header)) + header + payload


def test_arrays_inside_tuples_and_dicts_come_back_equal():
    value = (np.arange(3.0), {"k": np.ones((2, 2), dtype=np.float32)}, [np.int64(4)])
    back = wire.decode(wire.encode(value))
    assert isinstance(back, tuple) and len(back) == 3
    assert np.array_equal(back[0], value[0]) and back[0].dtype == np.float64
    assert np.array_equal(back[1]["k"], value[1]["k"]) and back[1]["k"].dtype == np.float32
    scalar = back[2][0]
    assert isinstance(scalar, np.generic) and not isinstance(scalar, np.ndarray)
    assert scalar == 4 and scalar.dtype == np.int64  # a numpy scalar stays a scalar


def test_a_fortran_ordered_array_keeps_its_values():
    value = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    assert np.array_equal(wire.decode(wire.encode(value)), value)


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (b"\x00\x00\x00", "frame too short"),
        (b"\x00\x00\x00\x00", "bad header: .+"),  # a header length, then no header
        (_frame({"a": 1, "b": 2}), "bad node"),
        (_frame({"$what": 1}), r"unknown tag '\$what'"),
        (_frame({"$dict": [1]}), "bad dict node"),
        (_frame({"$tuple": 5}), "bad value tree: 'int' object is not iterable"),
        (_frame({"$nd": 0}, [{"dtype": "float64"}]), "bad array spec: .+"),
        (
            _frame({"$nd": 0}, [{"dtype": "<f8", "shape": "abc"}]),
            "bad array spec: shape is not a list of at most 32 sizes",
        ),
        (
            _frame({"$nd": 0}, [{"dtype": "<f8", "shape": [1] * 33}], b"\x00" * 8),
            "bad array spec: shape is not a list of at most 32 sizes",
        ),
        (
            _frame({"$nd": 0}, [{"dtype": "<f8", "shape": [-1]}]),
            r"bad array spec: shape \(-1,\) holds a size that is not a natural number",
        ),
        (
            _frame({"$nd": 0}, [{"dtype": "<f8", "shape": [4]}], b"\x00" * 16),
            "truncated array data",
        ),
        (
            _frame({"$nd": 0}, [{"dtype": "<f8", "shape": [1]}], b"\x00" * 11),
            "3 bytes of array data that no array claims",
        ),
        (_frame({"$nd": 0}, {"dtype": "<f8"}), "bad header: blobs is not a list of array specs"),
        (_frame({"$nd": 3}), "bad array index 3"),
        (_frame({"$nd": 1}, [{"dtype": "<f8", "shape": [1]}], b"\x00" * 8), "bad array index 1"),
        (_frame({"$tuple": [{"$nd": 0}]}, [{"dtype": "<f8", "shape": [1]}], b"\x00" * 8), None),
    ],
)
def test_a_broken_frame_is_a_named_wire_error(payload, says):
    if says is None:  # the well-formed control: a tuple holding an array
        assert np.array_equal(wire.decode(payload)[0], np.zeros(1))
        return
    with pytest.raises(wire.WireError, match=f"^{says}$"):
        wire.decode(payload)


def test_the_largest_array_and_the_most_axes_allowed_come_back(monkeypatch):
    """At the limits, not past them: 32 axes, and exactly MAX_ELEMENTS elements (made small)."""
    deep = np.zeros((1,) * 32)
    assert wire.decode(wire.encode(deep)).shape == deep.shape
    monkeypatch.setattr(wire, "MAX_ELEMENTS", 6)
    assert wire.decode(wire.encode(np.ones((2, 3)))).shape == (2, 3)
    with pytest.raises(wire.WireError, match=r"^an array of 8 elements exceeds the 6 limit$"):
        wire.decode(wire.encode(np.ones((2, 4))))


@pytest.fixture
def pipe():
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_bytes_already_there_are_read_before_a_deadline(pipe):
    read_fd, write_fd = pipe
    os.write(write_fd, b"abcd")
    assert wire.read_exactly(read_fd, 4, time.monotonic() + 0.5) == b"abcd"


def test_a_deadline_already_past_is_a_timeout_even_with_bytes_waiting(pipe):
    read_fd, write_fd = pipe
    os.write(write_fd, b"abcd")
    with pytest.raises(wire.Timeout, match=r"^no complete frame before the deadline$"):
        wire.read_exactly(read_fd, 4, time.monotonic() - 1)


def test_a_sender_that_stalls_is_a_timeout_at_the_deadline(pipe):
    read_fd, write_fd = pipe
    os.write(write_fd, b"ab")
    start = time.monotonic()
    with pytest.raises(wire.Timeout):
        wire.read_exactly(read_fd, 4, start + 0.2)
    assert 0.15 <= time.monotonic() - start < 2.0


def test_bytes_sent_in_pieces_are_read_whole(pipe):
    read_fd, write_fd = pipe

    def send():
        for piece in (b"abc", b"def", b"gh"):
            os.write(write_fd, piece)
            time.sleep(0.05)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        assert wire.read_exactly(read_fd, 8, time.monotonic() + 5) == b"abcdefgh"
    finally:
        sender.join()


@pytest.mark.parametrize("sent", [3, 8 + 2], ids=["in the length", "in the body"])
def test_a_frame_that_stops_short_is_a_timeout_at_the_deadline(pipe, sent):
    read_fd, write_fd = pipe
    body = wire.encode(np.arange(4.0))
    os.write(write_fd, (struct.pack(">Q", len(body)) + body)[:sent])
    with pytest.raises(wire.Timeout):
        wire.read_frame(read_fd, time.monotonic() + 0.2)


def test_a_frame_length_past_the_limit_is_refused_before_reading(pipe, monkeypatch):
    """A frame of exactly MAX_FRAME_BYTES (made small) is read; one byte more, or a length
    with the top bit set (2^64 - 1), is refused without waiting for the body."""
    read_fd, write_fd = pipe
    frame = wire.encode([1, 2, 3])
    monkeypatch.setattr(wire, "MAX_FRAME_BYTES", len(frame))
    os.write(write_fd, struct.pack(">Q", len(frame)) + frame)
    assert wire.read_frame(read_fd, time.monotonic() + 1) == [1, 2, 3]
    for length in (len(frame) + 1, 2**64 - 1):
        os.write(write_fd, struct.pack(">Q", length))
        with pytest.raises(wire.WireError, match=f"^frame of {length} bytes exceeds the "):
            wire.read_frame(read_fd, time.monotonic() + 1)


def test_a_closed_pipe_is_named():
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"\x00" * 3)
    os.close(write_fd)
    try:
        with pytest.raises(EOFError, match=r"^the other side closed the pipe$"):
            wire.read_frame(read_fd)
    finally:
        os.close(read_fd)


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (
            _frame({"$nd": 0}, [{"dtype": "<f8", "shape": [0, 10**30]}]),
            r"an array of shape \[0, 1000000000000000000000000000000\] exceeds the 67108864 limit",
        ),
        (
            _frame({"$nd": 0}, [{"dtype": "<f8", "shape": [0, 2**26 + 1]}]),
            r"an array of shape \[0, 67108865\] exceeds the 67108864 limit",
        ),
        (_frame("x" * (wire.MAX_TEXT + 1)), "a text of 16385 characters exceeds the 16384 limit"),
        (
            _frame({"$dict": {"k" * (wire.MAX_TEXT + 1): 1}}),
            "a key longer than the 16384 character limit",
        ),
        (_frame({"$unsupported": 5}), "bad unsupported node"),
        (
            _frame([], [{"dtype": "<f8", "shape": [0]}] * (wire.MAX_ARRAYS + 1)),
            "16385 arrays in one frame exceed the 16384 limit",
        ),
    ],
)
def test_a_frame_past_the_limits_of_what_a_worker_sends_is_a_named_wire_error(payload, says):
    with pytest.raises(wire.WireError, match=f"^{says}$"):
        wire.decode(payload)


def test_a_header_past_its_limit_is_refused_before_it_is_parsed(monkeypatch):
    monkeypatch.setattr(wire, "MAX_HEADER_BYTES", 64)
    with pytest.raises(wire.WireError, match=r"^a header of \d+ bytes exceeds the 64 limit$"):
        wire.decode(_frame([[]] * 30))


def test_what_decoding_would_build_is_admitted_before_it_is_built():
    """`admit` sees an upper bound of the header's cost first, and refusing leaves it unbuilt."""
    seen: list[int] = []

    class Refused(Exception):
        pass

    def admit(cost: int) -> None:
        seen.append(cost)
        raise Refused

    payload = _frame([[]] * 1000)
    with pytest.raises(Refused):
        wire.decode(payload, admit)
    # A thousand lists and the outer one: at least two counted values each, NODE_BYTES apiece.
    assert seen == [wire.decode_cost(payload[4:])]
    assert seen[0] >= 2000 * wire.NODE_BYTES


def test_a_long_string_a_room_returns_travels_as_unsupported():
    value = wire.decode(wire.encode(["x" * (wire.MAX_TEXT + 1), "short"]))
    assert value == [wire.Unsupported(f"str of {wire.MAX_TEXT + 1} characters"), "short"]


def test_any_corruption_of_a_frame_is_a_wire_error_or_a_value():
    """Every byte of a genuine frame changed, one at a time, to each of a few values, and
    thirty zeros put after it: decode gives a value or a WireError, never another exception
    (labctl's internal error; an empty array's other size made 10**30 was one)."""
    value = (np.arange(6.0).reshape(2, 3), [np.int64(4)], np.zeros((0, 3)))
    frame = wire.encode({"ok": True, "value": value})
    (length,) = struct.unpack(">I", frame[:4])
    header, data = frame[4 : 4 + length], frame[4 + length :]
    for i in range(len(header)):
        changed = [header[:i] + bytes([b]) + header[i + 1 :] for b in (0, 34, 45, 49, 57, 91, 255)]
        for text in [*changed, header[: i + 1] + b"0" * 30 + header[i + 1 :]]:
            for broken in (struct.pack(">I", len(text)) + text + data, frame[:i] + frame[i + 1 :]):
                with contextlib.suppress(wire.WireError):
                    wire.decode(broken)
