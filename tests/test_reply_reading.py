"""Reading a worker's reply in labctl's process, at what it costs per call.

A verify makes about 180 calls, each reply decoded and checked here: the shortcuts that keep
it cheap (a genuine header is not walked for lone surrogates, a frame goes in one system
call, the budget holds the frame's buffer, an argument left alone is compared by its bytes)
must give what the long way gives, forged frames included.
"""

from __future__ import annotations

import json
import os
import struct
import threading

import numpy as np
import pytest

from labctl.isolation import replies, wire


def _read(frame: bytes, budget: replies.ReplyBudget | None = None):
    read, write = os.pipe()
    try:
        os.write(write, struct.pack(">Q", len(frame)) + frame)
        return replies.read_counted(read, None, budget or replies.ReplyBudget())
    finally:
        os.close(read)
        os.close(write)


def _header(text: str, encoding: str = "utf-8") -> bytes:
    header = text.encode(encoding, "surrogatepass")
    return struct.pack(">I", len(header)) + header


@pytest.mark.parametrize(
    "frame",
    [
        wire.encode(["x\udcff"]),  # as json.dumps writes it: an escape
        _header('{"tree": ["x\\uDCFF"], "blobs": []}'),  # an escape in capitals
        _header('{"tree": ["x\udcff"], "blobs": []}'),  # raw bytes, which json lets pass
        _header('{"tree": ["x\\udcff"], "blobs": []}', "utf-16-be"),  # ASCII, but UTF-16
        _header('{"tree": ["x\udcff"], "blobs": []}', "utf-32-le"),
    ],
    ids=["escape", "capitals", "raw", "utf-16 escape", "utf-32 raw"],
)
def test_a_lone_surrogate_comes_escaped_however_a_header_carries_it(frame):
    assert _read(frame) == ["x\\udcff"]


def test_a_genuine_header_is_not_walked_for_lone_surrogates():
    walked = []
    value = {"text": "注意力, 한국어", "arrays": [np.arange(3.0)], "n": 1}
    back = wire.decode(wire.encode(value), repair_text=walked.append)
    assert walked == [] and back["text"] == value["text"]
    assert np.array_equal(back["arrays"][0], value["arrays"][0])


def test_a_frame_is_written_in_one_system_call(monkeypatch):
    calls = []
    writev = os.writev
    monkeypatch.setattr(
        os, "writev", lambda fd, parts: calls.append(len(parts)) or writev(fd, parts)
    )
    monkeypatch.setattr(os, "write", lambda *_: pytest.fail("a write per part"))
    read, write = os.pipe()
    try:
        wire.write_frame(write, {"args": [np.arange(4.0)] * 20, "seq": 3})
        assert calls == [22]  # the length, the header, twenty arrays
        assert wire.read_frame(read)["seq"] == 3
    finally:
        os.close(read)
        os.close(write)


def test_a_frame_of_more_parts_than_one_system_call_takes_arrives_whole():
    # More parts than a writev takes, and more bytes than a pipe holds: written in turns.
    value = [np.full(n % 7, n, dtype=np.int32) for n in range(3000)] + [np.zeros(1 << 16)]
    read, write = os.pipe()
    writer = threading.Thread(target=wire.write_frame, args=(write, value))
    writer.start()
    try:
        back = wire.read_frame(read)
    finally:
        writer.join()
        os.close(read)
        os.close(write)
    assert all(
        np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(back, value, strict=True)
    )


def test_a_read_frame_is_held_while_any_of_its_arrays_lives():
    budget = replies.ReplyBudget()
    reply = _read(wire.encode({"a": np.zeros(3), "b": [np.ones(2)], "c": np.float64(2)}), budget)
    assert budget.held > 0
    kept = reply["b"][0][1:]
    del reply
    assert budget.held > 0
    del kept
    assert budget.held == 0
    assert _read(wire.encode({"no": ["arrays"]}), budget) == {"no": ["arrays"]}
    assert budget.held == 0


@pytest.mark.parametrize(
    ("sent", "back", "edited"),
    [
        (np.array([0.0, 1.0]), np.array([-0.0, 1.0]), []),  # other bytes, equal values
        (np.array([np.nan]), np.array([-np.nan]), []),  # two NaNs
        (np.array([1 + 0j]), np.array([complex(np.nan, 1)]), ["[0][0]"]),
        (np.array([np.nan, 1.0]), np.array([np.nan, 2.0]), ["[0][0]"]),
        (np.arange(6).reshape(2, 3).T, np.arange(6).reshape(2, 3).T.copy(), []),
        (np.array([True, False]), np.array([True, True]), ["[0][0]"]),
    ],
)
def test_an_argument_is_edited_where_a_value_changed_not_a_byte(sent, back, edited):
    assert replies.mutated([sent], {}, [[back], {}]) == edited


@pytest.mark.parametrize("name", ["\udc80evil", "ok\ud800"])
def test_a_type_name_with_a_lone_surrogate_is_a_forged_frame(name):
    # A worker's own encoder cannot send one (its reply does not encode); forged, it reached
    # the check's message as the name of the type the room returned.
    with pytest.raises(wire.WireError, match="bad unsupported node"):
        _read(_header(json.dumps({"tree": {"$unsupported": name}, "blobs": []})))
    assert isinstance(
        _read(_header('{"tree": {"$unsupported": "Evil"}, "blobs": []}')), wire.Unsupported
    )
