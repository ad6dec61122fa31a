"""How labctl reads a worker's end: the reason from its exit status, the room's line from
the stack the worker printed as it died."""

from __future__ import annotations

import pytest

from labctl.isolation.exits import crash_reason, crash_site

DUMP = """\
Fatal Python error: Segmentation fault

Current thread 0x00007f0000000000 (most recent call first):
  File "/opt/labctl/worker/numpy/core/fromnumeric.py", line 86 in _wrapreduction
  File "/opt/labctl/room/clean_room/primitives.py", line 41 in softmax
  File "/opt/labctl/room/clean_room/attention.py", line 55 in scaled_dot_product_attention
  File "/opt/labctl/worker/labctl/isolation/worker.py", line 90 in call
"""


def test_the_innermost_frame_inside_the_room_is_the_site_and_what_came_before_stays():
    own, site = crash_site("my own line\n" + DUMP, "/opt/labctl/room/clean_room")
    assert site == "clean_room/primitives.py:41"
    assert own == "my own line\n"


@pytest.mark.parametrize(
    ("printed", "room", "expected"),
    [
        ("no stack here", "/opt/labctl/room/clean_room", ("no stack here", None)),
        (DUMP, "/elsewhere/clean_room", ("", None)),  # no frame inside the room
        (DUMP, "", ("", None)),  # the room's path never sent
        # A look-alike prefix is not the room: /opt/labctl/room/clean is not its parent.
        (DUMP, "/opt/labctl/room/clean", ("", None)),
    ],
)
def test_without_a_frame_inside_the_room_there_is_no_site(printed, room, expected):
    assert crash_site(printed, room) == expected


def test_the_reason_names_the_signal_and_the_memory_hint_and_what_was_printed():
    gone = OSError("gone")
    assert str(crash_reason(-11, gone)) == (
        "the clean-room process died with SIGSEGV (likely the memory limit)"
    )
    assert str(crash_reason(-6, gone, "; it printed: hi")) == (
        "the clean-room process died with SIGABRT; it printed: hi"
    )
    assert str(crash_reason(3, gone)) == "the clean-room process exited with code 3"
    assert str(crash_reason(None, gone)) == "the clean-room process stopped answering: gone"
