"""Lab `tiled-attention`: the online softmax, exactness, memory measured where the code runs.

Faulty clean rooms are written into tmp_path; evidence goes under tmp_path too.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from labtools import ROOM, faulty_room, rows, run, values

from labctl.faults.inference import TILED_MATERIALIZED
from labctl.isolation.sandbox import CleanRoom
from labctl.labs.tiled_attention import LAB, online_softmax_steps, skipped_tiles

SOFTMAX = "online_softmax_chapter_max_error"
F64, F32 = "tiled_vs_naive_max_error[float64]", "tiled_vs_naive_max_error[float32]"
MEMORY = "tiled_memory_ratio[T=4096]"
TILES = "causal_tiles_skipped_error"


@pytest.fixture(scope="module")
def seed5():
    return run(LAB)


def test_passes_on_both_implementations_at_seed_5(seed5):
    assert seed5.error is None and seed5.passed, seed5.failures()
    got = rows(seed5)
    for impl in ("reference", "clean-room"):
        assert got[(SOFTMAX, impl)].actual <= 1e-15
        assert got[(F64, impl)].actual <= 1e-14  # float64 reordering: ~1e-15
        assert 0 < got[(F32, impl)].actual <= 5e-6  # float32 is not bit-exact, but close
        assert got[(MEMORY, impl)].actual <= 0.1  # the bar, measured
        assert got[(TILES, impl)].actual == 0


def test_the_recurrence_and_the_tile_count_follow_the_chapter():
    steps = online_softmax_steps(np.array([2.0, 1.0, 0.5, 3.0]))
    m, rescale, d = steps[-1]
    assert m == 3.0 and rescale == pytest.approx(np.exp(-1.0), abs=1e-15)
    assert d == pytest.approx(np.exp([-1.0, -2.0, -2.5, 0.0]).sum(), abs=1e-15)
    blocked = np.arange(64)[None, :] > np.arange(64)[:, None]
    assert skipped_tiles(blocked, 8) == 8 * 7 // 2


def test_a_tiled_attention_without_rescale_fails_the_exactness_rows(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "tiled-no-rescale"), impl="clean-room")
    got = rows(result)
    for name in (SOFTMAX, F64, F32):
        assert not got[(name, "clean-room")].passed, name
    assert got[(SOFTMAX, "clean-room")].actual > 0.1  # weights before the max stay e^1.. too big
    assert got[(MEMORY, "clean-room")].passed and got[(TILES, "clean-room")].passed


def test_a_tiled_attention_that_builds_the_full_matrix_fails_the_memory_row(tmp_path):
    result = run(LAB, faulty_room(tmp_path, TILED_MATERIALIZED), impl="clean-room")
    got = rows(result)
    assert got[(MEMORY, "clean-room")].actual > 0.5  # the same (T, T) arrays as full attention
    assert not got[(MEMORY, "clean-room")].passed
    for name in (SOFTMAX, F64, F32, TILES):
        assert got[(name, "clean-room")].passed, name  # its values are right


def test_a_reversed_causal_mask_fails_the_tile_count(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "mask-reversed"), impl="clean-room")
    got = rows(result)
    assert not got[(TILES, "clean-room")].passed
    assert got[(TILES, "clean-room")].actual == 27 - 15  # 27 tiles below the band, not 15 above
    assert got[(SOFTMAX, "clean-room")].passed


def test_the_worker_measures_peak_memory_only_when_asked():
    x = np.random.default_rng(0).standard_normal((1, 1, 256, 8))
    with CleanRoom(ROOM) as room:
        plain = room.invoke("scaled_dot_product_attention", x, x, x)
        traced = room.invoke("scaled_dot_product_attention", x, x, x, trace_memory=True)
    assert plain.peak_bytes is None
    assert traced.peak_bytes >= 256 * 256 * 8  # at least the (T, T) float64 weights it returns


def test_same_seed_same_values():
    first, again = values(run(LAB, seed=7)), values(run(LAB, seed=7))
    assert set(first) == set(again)
    for key, value in first.items():
        if key[0] == MEMORY:
            assert again[key] == pytest.approx(value, rel=0.05)  # allocator bookkeeping
        else:
            assert again[key] == value, key


def test_the_new_lab_modules_import_without_torch():
    modules = ("tiled_attention", "sliding_window", "decoder", "attention_inspect")
    code = "; ".join(f"import labctl.labs.{m}" for m in modules)
    code += "; import sys; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
