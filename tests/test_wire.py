"""Replies from a clean room's process: what the wire carries back, and how it names a bad frame.

A worker's reply is decoded in labctl's process; a forged or broken one must be a named
WireError (the verdict code turns it into a failure of that function), never a wrong value.
"""

from __future__ import annotations

import json
import os
import struct

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
        (b"\x00\x00\x00\x00", "bad header"),  # four bytes: a header length, then no header
        (_frame({"a": 1, "b": 2}), "bad node"),
        (_frame({"$what": 1}), r"unknown tag '\$what'"),
        (_frame({"$nd": 0}, [{"dtype": "float64"}]), "bad array spec"),
        (
            _frame({"$nd": 0}, [{"dtype": "<f8", "shape": [4]}], b"\x00" * 16),
            "truncated array data",
        ),
        (_frame({"$nd": 3}), "bad array index 3"),
        (_frame({"$tuple": [{"$nd": 0}]}, [{"dtype": "<f8", "shape": [1]}], b"\x00" * 8), None),
    ],
)
def test_a_broken_frame_is_a_named_wire_error(payload, says):
    if says is None:  # the well-formed control: a tuple holding an array
        assert np.array_equal(wire.decode(payload)[0], np.zeros(1))
        return
    with pytest.raises(wire.WireError, match=says):
        wire.decode(payload)


def test_a_closed_pipe_is_named():
    read_fd, write_fd = os.pipe()
    os.write(write_fd, b"\x00" * 3)
    os.close(write_fd)
    try:
        with pytest.raises(EOFError, match="the other side closed the pipe"):
            wire.read_frame(read_fd)
    finally:
        os.close(read_fd)
