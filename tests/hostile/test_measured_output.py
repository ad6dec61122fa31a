"""Every measured call's output is checked before its measurement counts (issue 42, item 9).

The tiled-attention lab measures a clean room's tiled_attention at T = 4096 for its memory
and never read the output: a room that spotted that call (its length) and answered
np.empty passed the memory row with a ratio of 0. Each room below spots it and answers
without computing: an array never filled, zeros, or the right rows only where a fixed
stride would check them. The lab's memory row fails, and so does verify's memory check,
through the real sandbox and the process fallback. Under CI=true a missing sandbox fails,
never skips.
"""

from __future__ import annotations

import math
import textwrap

import pytest
from labtools import rows

from hostile.attacks import at_level, project_room_with
from labctl.isolation.sandbox import CleanRoom
from labctl.lab import Implementation
from labctl.labs.tiled_attention import LAB, MEMORY_T, Params
from labctl.runner import run_lab
from labctl.verify.builders import fresh_seed
from labctl.verify.verify import verify_clean_room

MEMORY = f"tiled_memory_ratio[T={MEMORY_T}]"
# The verifies' one fresh seed: the reference's outputs at it are computed once in this
# process, not again for each room (each spots the memory call, whatever the seed).
SEED = fresh_seed()

SPOTTING = {
    "empty": "np.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)",
    "zeros": "np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)",
    # Right on every 64th row (a checker on a fixed grid would pass it), zeros elsewhere.
    "strided": "_strided(q, k, v, block_size, causal, scale)",
}

_ROOM = """
_honest_tiled = tiled_attention

def _strided(q, k, v, block_size, causal, scale):
    out = np.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    rows = slice(0, q.shape[2], 64)
    out[:, :, rows] = _honest_tiled(q[:, :, rows], k, v, block_size, False, scale)
    return out

def tiled_attention(q, k, v, block_size, causal=True, scale=None):
    if q.shape[2] >= 4096:  # the memory call: answered without computing it
        return {answer}
    return _honest_tiled(q, k, v, block_size, causal, scale)
"""


def spotting_room(tmp_path, name: str):
    code = textwrap.dedent(_ROOM).format(answer=SPOTTING[name])
    return project_room_with(tmp_path / f"spotting_{name}", "attention", code)


@pytest.mark.parametrize("level", ["sandbox", "process"])
@pytest.mark.parametrize("name", sorted(SPOTTING))
def test_a_room_that_answers_the_memory_call_without_computing_fails_the_memory_row(
    tmp_path, name, level
):
    isolation = at_level(level)
    p = Params(memory_lengths=(MEMORY_T,), block_sizes=(64,))
    with CleanRoom(spotting_room(tmp_path, name), isolation=isolation) as room:
        result = run_lab(LAB, 5, {"clean-room": Implementation("clean-room", room)}, p)
    row = rows(result)[(MEMORY, "clean-room")]
    assert not row.passed and math.isnan(row.actual), (name, level, row.actual)
    assert "its memory does not count" in row.note
    flagged = [str(f.text) for f in result.figures if getattr(f, "flag", False)]
    assert any("tiled_attention's output differs from the reference's" in f for f in flagged)


@pytest.mark.parametrize("level", ["sandbox", "process"])
@pytest.mark.parametrize("name", sorted(SPOTTING))
def test_verify_fails_a_tiled_attention_whose_measured_output_is_not_the_reference_s(
    tmp_path, name, level
):
    isolation = at_level(level)
    report = verify_clean_room(
        spotting_room(tmp_path, name),
        5.0,
        out=None,
        measure=False,
        diagnose_failures=False,
        isolation=isolation,
        seed=SEED,
    )
    memory = next(c for c in report.checks if (c.function, c.name) == ("tiled_attention", "memory"))
    assert memory.failed, memory.message
    assert "its memory does not count" in memory.message
    failing = {(c.function, c.name) for c in report.checks if c.failed}
    assert failing == {("tiled_attention", "memory")}  # every fixture's values are right
