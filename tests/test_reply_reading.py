"""Reading a worker's reply in labctl's process, at what it costs per call.

A verify makes about 180 calls, each reply decoded and checked here: the shortcuts that keep
it cheap (a genuine header is not walked for lone surrogates, a frame goes in one system
call, the budget holds the frame's buffer, an argument left alone is compared by its bytes)
must give what the long way gives, forged frames included.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from labctl.isolation import wire


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
