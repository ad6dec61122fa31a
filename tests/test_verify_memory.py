"""Verify checks what makes tiled_attention what it is (issue 38, item 3): its memory.

A tiled_attention that calls full attention has full attention's values, so every other
check passed it; only `labctl run tiled-attention` measured its memory. verify now measures
it as that lab does (the worker's peak read from outside, T = 4096, blocks of 64, its
output checked first) and the diagnosis names the fault with what to change.
"""

from __future__ import annotations

import pytest
from checktools import learner_room

from labctl.i18n import _, set_language
from labctl.labs.tiled_attention import LAB, MEMORY_T
from labctl.verify.checks_memory import _bound
from labctl.verify.verify import verify_clean_room

FULL_AS_TILED = """
def tiled_attention(q, k, v, block_size, causal=True, scale=None):
    if block_size < 1:
        raise ValueError("block_size: must be >= 1")
    Tq, Tk = q.shape[2], k.shape[2]
    mask = (np.arange(Tk)[None, :] > (Tk - Tq) + np.arange(Tq)[:, None]) if causal else None
    return scaled_dot_product_attention(q, k, v, mask, scale)[0]
"""

NEVER_FILLED_WHEN_LONG = """
_honest_tiled = tiled_attention

def tiled_attention(q, k, v, block_size, causal=True, scale=None):
    if q.shape[2] >= 4096:
        return np.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    return _honest_tiled(q, k, v, block_size, causal, scale)
"""


def _memory(report):
    return next(c for c in report.checks if (c.function, c.name) == ("tiled_attention", "memory"))


def _said(report, lang: str) -> str:
    (diagnosis,) = [d for d in report.diagnosis if d.function == "tiled_attention"]
    previous = set_language(lang)
    try:
        return _(diagnosis.shown)
    finally:
        set_language(previous)


def test_the_bound_is_the_lab_s_metric():
    expected, bound = _bound()
    assert expected == LAB.metric(f"tiled_memory_ratio[T={MEMORY_T}]").expected
    assert bound == 0.1


def test_the_project_s_tiled_attention_passes_its_memory_check(tmp_path):
    room = learner_room(tmp_path, "attention", "")
    report = verify_clean_room(room, 5.0, out=None, measure=False, diagnose_failures=False)
    memory = _memory(report)
    assert memory.passed, memory.message
    assert memory.max_error < 0.1 and "of full attention's 256 MiB" in memory.message


def test_full_attention_posing_as_tiled_fails_verify_and_is_named(tmp_path):
    room = learner_room(tmp_path, "attention", FULL_AS_TILED)
    report = verify_clean_room(room, 5.0, out=None, measure=False)
    memory = _memory(report)
    assert memory.failed and memory.max_error > 0.5, memory.message  # a (T, T) array, at least
    failing = {(c.function, c.name) for c in report.checks if c.failed}
    assert failing == {("tiled_attention", "memory")}  # its values are full attention's
    english = _said(report, "en")
    assert "matches fault `tiled-full-attention`" in english
    assert "loop over key blocks of block_size with an online softmax" in english
    chinese = _said(report, "zh")
    assert "与故障 `tiled-full-attention` 相符" in chinese
    assert "请按 block_size 把 key 分块循环" in chinese


def test_an_output_never_filled_for_the_measured_call_is_said_so(tmp_path):
    room = learner_room(tmp_path, "attention", NEVER_FILLED_WHEN_LONG)
    report = verify_clean_room(room, 5.0, out=None, measure=False)
    assert _memory(report).failed
    english = _said(report, "en")
    assert "returns an output that is not the reference's" in english
    assert "tiled-full-attention" not in english  # a peak too large is not this
    assert "都要算出输出的每一行" in _said(report, "zh")


@pytest.mark.parametrize("contract_version", [1, 2])
def test_the_memory_check_is_a_column_of_verify_s_table(contract_version):
    from labctl.verify.checks import CHECK_NAMES, applicable

    assert "memory" in CHECK_NAMES
    memory_applies = {c.name for c in applicable("tiled_attention", contract_version)}
    assert "memory" in memory_applies
    assert "memory" not in {c.name for c in applicable("scaled_dot_product_attention")}
