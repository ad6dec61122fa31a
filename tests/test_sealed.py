"""Large arguments cross to a clean room's worker as sealed memory files (`labctl.isolation.sealed`).

What must hold: the room gets the same values as through the pipe; nothing the room does to
its argument reaches labctl's array, the next call or the next learner's room; a sealed
file cannot be written by anyone; labctl's end of the socket takes nothing back; and where
no memory file can be made, the arguments go inline as before.
"""

from __future__ import annotations

import array
import fcntl
import mmap
import os
import socket
import textwrap
import threading

import numpy as np
import pytest

from labctl.isolation import sealed, wire
from labctl.isolation.sandbox import CleanRoom

LARGE = (4100, 1024)  # 32.03 MiB of float64: past sealed.MIN_BYTES


def _frozen(values: np.ndarray) -> np.ndarray:
    """An array no one can write, as `labctl.memo` hands out drawn inputs."""
    kept = values.copy()
    kept.flags.writeable = False
    return kept.view()


@pytest.fixture
def channel():
    theirs, ours = socket.socketpair()
    yield ours.fileno(), theirs.fileno()
    ours.close()
    theirs.close()


def test_a_large_array_crosses_as_a_sealed_file_and_a_small_one_inline(channel):
    ours, theirs = channel
    large = np.random.default_rng(0).standard_normal(LARGE)
    small = np.arange(6.0)
    frame = sealed.Frame()
    try:
        wire.write_frame(ours, {"args": [large, small, large]}, frame)
        assert len(frame.fds) == 1  # the large array, once though it is sent twice
    finally:
        frame.close()
    got = wire.read_request(theirs)["args"]
    assert np.array_equal(got[0], large) and np.array_equal(got[2], large)
    assert np.array_equal(got[1], small)
    assert got[0].flags.writeable  # the callee may write into it, as into a pipe's array
    got[0][0, 0] = 99.0
    assert large[0, 0] != 99.0 and got[2][0, 0] != 99.0  # its own pages, not the others'


def test_no_process_can_write_a_sealed_file():
    values = np.ones(LARGE)
    fd = sealed.sealed_file(values)
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        for seal in (fcntl.F_SEAL_WRITE, fcntl.F_SEAL_GROW, fcntl.F_SEAL_SHRINK, fcntl.F_SEAL_SEAL):
            assert seals & seal
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"x", 0)
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 1)
        with pytest.raises(PermissionError):
            mmap.mmap(fd, values.nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_WRITE)
        # opened again by its path, as a room could try through /proc: still sealed
        again = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
        try:
            with pytest.raises(PermissionError):
                os.write(again, b"x")
        finally:
            os.close(again)
        assert os.pread(fd, 8, 0) == np.float64(1.0).tobytes()
    finally:
        os.close(fd)


def test_only_an_array_no_one_can_write_keeps_its_file():
    assert sealed.immutable(_frozen(np.ones(3)))
    assert not sealed.immutable(np.ones(3))
    read_only_view = np.ones(3).view()
    read_only_view.flags.writeable = False
    assert not sealed.immutable(read_only_view)  # its owner can still be written


def test_labctls_own_read_only_inputs_cross_sealed_from_one_mib_and_keep_their_file(channel):
    """The scale ablation's drawn inputs (2 to 43 MB, read-only) are the same for every
    learner: sealed once and kept; a writable array of the same size still goes inline."""
    ours, theirs = channel
    values = np.random.default_rng(1).standard_normal((512, 512))  # 2 MiB
    drawn = _frozen(values)
    for _ in range(2):
        frame = sealed.Frame()
        replies: list = []
        # the writable array's 2 MiB fill the socket: read while it is written
        reader = threading.Thread(target=lambda got=replies: got.append(wire.read_request(theirs)))
        reader.start()
        try:
            wire.write_frame(ours, {"args": [drawn, values.copy()]}, frame)
            assert len(frame.fds) == 1  # the read-only one only
            kept = [fd for array, fd in sealed._kept.values() if array is drawn]
            assert len(kept) == 1  # one file, kept for the next frame
        finally:
            frame.close()
            reader.join(timeout=30)
        got = replies[0]["args"]
        assert np.array_equal(got[0], values) and np.array_equal(got[1], values)
    tiny = _frozen(np.ones((8, 8)))  # below 1 MiB: inline, kept or not
    frame = sealed.Frame()
    try:
        wire.write_frame(ours, {"args": [tiny]}, frame)
        assert frame.fds == []
    finally:
        frame.close()
    wire.read_request(theirs)
    sealed.forget()


def test_a_frame_with_more_descriptors_than_allowed_is_refused(channel):
    ours, theirs = channel
    extra = [os.open(os.devnull, os.O_RDONLY) for _ in range(wire.MAX_FDS + 1)]
    body = wire.encode([1])
    head = len(body).to_bytes(8, "big")
    try:
        rights = array.array("i", extra)
        sender = socket.socket(fileno=ours)
        sender.sendmsg([head + body], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
        sender.detach()
    finally:
        for fd in extra:
            os.close(fd)
    with pytest.raises(wire.WireError, match="more descriptors"):
        wire.read_request(theirs)


MUTATES = """
import os
import sys

import numpy as np

def softmax(x, axis=-1):
    seen = x.copy()
    x += 1.0  # writes into its argument
    return seen

def causal_mask(t_q, t_k=None):
    try:  # the descriptor labctl sends requests on: writing back into it must fail
        os.write(int(sys.argv[1]), b"\\0" * 8)
    except OSError:
        return np.zeros(1)
    return np.ones(1)
"""


def test_a_room_that_writes_into_its_argument_changes_its_own_pages_only(tmp_path, monkeypatch):
    root = tmp_path / "room"
    root.mkdir()
    (root / "__init__.py").write_text(textwrap.dedent(MUTATES).lstrip("\n"), encoding="utf-8")
    made = []
    real = sealed.sealed_file
    monkeypatch.setattr(
        sealed, "sealed_file", lambda a: made.append(sealed.immutable(a)) or real(a)
    )
    sealed.forget()
    drawn = _frozen(np.random.default_rng(1).standard_normal(LARGE))
    fresh = np.random.default_rng(2).standard_normal(LARGE)
    try:
        for _learner in range(2):
            with CleanRoom(root, timeout_s=10) as room:
                for _call in range(2):
                    assert np.array_equal(room.call("softmax", drawn), drawn)
                    assert np.array_equal(room.call("softmax", fresh), fresh)
                assert room.call("causal_mask", 4).tolist() == [0.0]
    finally:
        sealed.forget()
    assert np.array_equal(fresh, np.random.default_rng(2).standard_normal(LARGE))
    # the frozen array is sealed once for both rooms and all four calls; the other at each call
    assert made == [True, False, False, False, False]


def test_without_memory_files_large_arrays_go_inline(monkeypatch, channel):
    ours, theirs = channel

    def refused(*args):
        raise OSError(38, "memfd_create refused here")

    monkeypatch.setattr(os, "memfd_create", refused)
    large = np.random.default_rng(3).standard_normal(LARGE)
    frame = sealed.Frame()
    sender = _sender(ours, large, frame)
    try:
        got = wire.read_request(theirs)
    finally:
        sender.join()
        frame.close()
    assert frame.fds == [] and np.array_equal(got, large)


def _sender(fd: int, value, frame):
    """Write the frame on another thread: inline, it is larger than the socket's buffer."""
    thread = threading.Thread(target=wire.write_frame, args=(fd, value, frame))
    thread.start()
    return thread
