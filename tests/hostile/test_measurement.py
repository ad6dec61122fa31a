"""A measurement that decides a verdict is taken where the learner's code cannot reach it.

Each room below computes full attention inside `tiled_attention` (a (T, T)
array, the fault tiled-attention's memory row exists to catch) and then tries
to hide it from the meter: the tracer labctl used to read inside the worker is
stopped and restarted; the kernel's high-water mark is reset through
/proc/self/clear_refs; the worker makes itself dumpable again (through the
ctypes numpy carries) so that reset is allowed. labctl reads the peak from
/proc from outside the worker and samples it during the call, so every one of
them still fails the memory row, through the real sandbox and the process
fallback. Under CI=true a missing sandbox fails, never skips.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
from labtools import rows

from hostile.attacks import at_level, project_room_with
from labctl.isolation.peak import high_water_bytes, resident_bytes, worker_pid
from labctl.isolation.sandbox import CleanRoom
from labctl.lab import Implementation
from labctl.labs.tiled_attention import LAB, MEMORY_T, Params
from labctl.runner import run_lab

MEMORY = f"tiled_memory_ratio[T={MEMORY_T}]"

_FULL = """
import numpy as _np

def _full(q, k, v, block_size, causal=True, scale=None):
    mask = causal_mask(q.shape[2], k.shape[2]) if causal else None
    return scaled_dot_product_attention(q, k, v, mask, scale)[0]
"""

HIDING = {
    "tracer-reset": """
    import tracemalloc

    def tiled_attention(q, k, v, block_size, causal=True, scale=None):
        out = _full(q, k, v, block_size, causal, scale)
        tracemalloc.stop()
        tracemalloc.start()
        return out
    """,
    "clear-refs": """
    def tiled_attention(q, k, v, block_size, causal=True, scale=None):
        out = _full(q, k, v, block_size, causal, scale)
        try:
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")
        except OSError:
            pass
        return out
    """,
    "dumpable-then-clear-refs": """
    def tiled_attention(q, k, v, block_size, causal=True, scale=None):
        out = _full(q, k, v, block_size, causal, scale)
        try:
            _np.ctypeslib.ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")
        except (OSError, AttributeError):
            pass
        return out
    """,
}


def hiding_room(tmp_path, name: str):
    code = textwrap.dedent(_FULL) + textwrap.dedent(HIDING[name])
    return project_room_with(tmp_path / name.replace("-", "_"), "__init__", code)


@pytest.mark.parametrize("level", ["sandbox", "process"])
@pytest.mark.parametrize("name", sorted(HIDING))
def test_a_room_that_hides_its_full_matrix_from_the_meter_fails_the_memory_row(
    tmp_path, name, level
):
    isolation = at_level(level)
    # Only T = 4096 and one block size: the memory row is what is judged here.
    p = Params(memory_lengths=(MEMORY_T,), block_sizes=(64,))
    with CleanRoom(hiding_room(tmp_path, name), isolation=isolation) as room:
        result = run_lab(LAB, 5, {"clean-room": Implementation("clean-room", room)}, p)
    row = rows(result)[(MEMORY, "clean-room")]
    assert not row.passed, (name, level, row.actual)
    assert row.actual > 0.5  # at least the (T, T) weights, over full attention's own peak


@pytest.mark.parametrize("level", ["sandbox", "process"])
def test_the_room_s_own_reset_is_refused_so_the_kernel_s_mark_alone_sees_the_matrix(
    tmp_path, level
):
    """No samples here: the high-water mark labctl reset, read after a room that resets it too.

    A worker that dropped to uid 65534 is not dumpable: its /proc entries are root's.
    """
    isolation = at_level(level)
    T = 2048
    q = np.random.default_rng(0).standard_normal((1, 1, T, 16)).astype(np.float32)
    with CleanRoom(hiding_room(tmp_path, "clear-refs"), isolation=isolation) as room:
        room.wait_loaded()
        if room.privileges != "uid 65534":
            # A worker that kept labctl's uid owns its /proc entries: the samples catch it.
            assert isolation == "process" or os.getuid() != 0, room.privileges
            pytest.skip(f"the worker runs as {room.privileges}, not as nobody")
        pid = worker_pid(room._proc.pid)
        assert pid != room._proc.pid or isolation == "process"  # bwrap's child, not bwrap
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        start = resident_bytes(pid)
        room.invoke("tiled_attention", q, q, q, 64, False, echo_args=False, want_value=False)
        mark = high_water_bytes(pid)
        now = resident_bytes(pid)
    assert mark - start >= T * T * 4  # the (T, T) float32 weights were resident
    assert now - start < T * T * 4  # and are gone: only the mark remembers them
