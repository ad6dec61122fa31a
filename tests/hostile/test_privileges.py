"""No learner code as root, at either isolation level.

Started by root, the worker becomes uid 65534 before the room loads. A room folder of
mode 0700 (under a folder of mode 0700) kept the process-level worker at uid 0, and so
did a Python runtime under /root: labctl now stages a readable copy of the room, and a
mirror of what else uid 65534 cannot read. A worker that cannot drop refuses to load
any room, and says why. Each room reports the uid its code ran as.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from gradetools import append, copy_room

from hostile.attacks import require_sandbox
from labctl.errors import CleanRoomError
from labctl.isolation.sandbox import CleanRoom

LEVELS = ("sandbox", "process")
WHO = """
import os as _os

def softmax(x, axis=-1):
    return np.full(np.shape(x), float(_os.getuid()) + float(_os.geteuid()) / 1e6)
"""


def _as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the uid a worker drops to matters where labctl runs as root")


def private_room(tmp_path: Path) -> Path:
    """The project's room, whose softmax returns its uid, in folders only root may enter."""
    room = copy_room(tmp_path / "private" / "clean_room")
    append(room, "primitives", WHO)
    for folder in (tmp_path / "private", room):
        folder.chmod(0o700)
    (room / "primitives.py").chmod(0o600)
    return room


@pytest.mark.parametrize("level", LEVELS)
def test_a_room_of_mode_0700_runs_as_uid_65534(tmp_path, level):
    _as_root()
    if level == "sandbox":
        require_sandbox()
    with CleanRoom(private_room(tmp_path), isolation=level) as room:
        value = room.call("softmax", np.zeros(2))
        assert room.privileges == "uid 65534", room.privileges
    assert value.tolist() == [65534.065534, 65534.065534]


@pytest.mark.parametrize("level", LEVELS)
def test_a_worker_that_cannot_drop_refuses_to_run_the_room(tmp_path, level, monkeypatch):
    """A path the worker must read that uid 65534 cannot: it stays root, and loads nothing."""
    _as_root()
    if level == "sandbox":
        require_sandbox()
    unreadable = tmp_path / "unreadable"
    unreadable.mkdir(mode=0o700)
    command = CleanRoom._command

    def with_an_unreadable_path(self, *args):
        argv, inside = command(self, *args)
        return [*argv, str(unreadable)], inside

    monkeypatch.setattr(CleanRoom, "_command", with_an_unreadable_path)
    room = private_room(tmp_path)
    with pytest.raises(CleanRoomError) as refused:
        CleanRoom(room, isolation=level).dispose()
    said = str(refused.value)
    assert "refuses to run the clean room as root" in said, said
    assert "is not readable by nobody" in said, said
