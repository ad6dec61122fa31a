"""Lab `tiled-attention`: the online softmax, exactness, memory measured out of the room's reach.

Faulty clean rooms are written into tmp_path; evidence goes under tmp_path too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from labtools import ROOM, Recorded, at_seed_5, faulty_room, passed, rows, values

from labctl import reference
from labctl.faults.inference import TILED_MATERIALIZED
from labctl.isolation.sandbox import CleanRoom
from labctl.lab import Implementation, Note, satisfies
from labctl.labs.tiled_attention import (
    FULL_CAP_MATRICES,
    LAB,
    MEMORY_T,
    Params,
    _accuracy,
    memory_ratio,
    online_softmax_steps,
    skipped_tiles,
)
from labctl.runner import implementations, run_lab

SOFTMAX = "online_softmax_chapter_max_error"
F64, F32 = "tiled_vs_naive_max_error[float64]", "tiled_vs_naive_max_error[float32]"
MEMORY = "tiled_memory_ratio[T=4096]"
TILES = "causal_tiles_skipped_error"


seed5 = at_seed_5(LAB)
# The memory rows' shortest legal setting: only T = 4096, the length of their one row (the
# shorter lengths are drawn, never judged). Every other size is the lab's default.
SMALL = Params(memory_lengths=(4096,))


def run_small(room: Path, impl: str = "clean-room", seed: int = 5):
    with implementations(impl, room) as impls:
        return run_lab(LAB, seed, impls, SMALL)


def test_passes_on_both_implementations_at_seed_5(seed5):
    got = passed(seed5)
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
    result = run_small(faulty_room(tmp_path, "tiled-no-rescale"))
    got = rows(result)
    for name in (SOFTMAX, F64, F32):
        assert not got[(name, "clean-room")].passed, name
    assert got[(SOFTMAX, "clean-room")].actual > 0.1  # weights before the max stay e^1.. too big
    assert got[(TILES, "clean-room")].passed
    # Its memory call's output is wrong too, so that memory does not count (issue 42).
    memory = got[(MEMORY, "clean-room")]
    assert not memory.passed and "its memory does not count" in memory.note
    # Its exactness note names a broken recurrence, never the rounding of another order.
    notes = [str(f.text) for f in result.figures if isinstance(f, Note)]
    (mine,) = [t for t in notes if t.startswith("clean-room: tiled and full attention differ")]
    assert "no rounding, a broken recurrence" in mine and "exp(m_old - m_new)" in mine
    assert not any(t.startswith("clean-room: tiling is exact") for t in notes)


def test_a_tiled_attention_that_builds_the_full_matrix_fails_the_memory_row(tmp_path):
    result = run_small(faulty_room(tmp_path, TILED_MATERIALIZED))
    got = rows(result)
    assert got[(MEMORY, "clean-room")].actual > 0.5  # the same (T, T) arrays as full attention
    assert not got[(MEMORY, "clean-room")].passed
    for name in (SOFTMAX, F64, F32, TILES):
        assert got[(name, "clean-room")].passed, name  # its values are right


def test_a_reversed_causal_mask_fails_the_tile_count(tmp_path):
    result = run_small(faulty_room(tmp_path, "mask-reversed"))
    got = rows(result)
    assert not got[(TILES, "clean-room")].passed
    assert got[(TILES, "clean-room")].actual == 27 - 15  # 27 tiles below the band, not 15 above
    assert got[(SOFTMAX, "clean-room")].passed


def test_labctl_measures_the_worker_s_peak_memory_only_when_asked():
    x = np.random.default_rng(0).standard_normal((1, 1, 512, 8))
    with CleanRoom(ROOM) as room:
        plain = room.invoke("scaled_dot_product_attention", x, x, x)
        measured = room.invoke("scaled_dot_product_attention", x, x, x, measure_memory=True)
    assert plain.peak_bytes is None
    assert measured.peak_bytes >= 512 * 512 * 8  # at least the (T, T) float64 weights it returns


def test_same_seed_same_values():
    first, again = (values(run_small(ROOM, "both", seed=7)) for _ in range(2))
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


def recorded_run(p: Params = SMALL):
    target = Recorded()
    result = run_lab(LAB, 5, {"clean-room": Implementation("clean-room", target)}, p)
    return result, target


@pytest.fixture(scope="module")
def recorded():
    """One recorded run at SMALL, whose calls the tests below only read."""
    return recorded_run()


def test_the_chapter_example_is_tiled_one_key_at_a_time_unmasked_at_scale_1(recorded):
    result, target = recorded
    assert result.error is None and result.passed, result.failures()
    chapter = [(a, kw) for a, kw in target.made("tiled_attention") if a[0].shape == (1, 1, 1, 1)]
    assert len(chapter) == 4  # one call for each prefix of [2, 1, 0.5, 3]
    for n, (args, kwargs) in enumerate(chapter, start=1):
        q, k, v, block, causal, scale = args
        assert kwargs == {}
        assert k.shape == (1, 1, n, 1) and v.shape == (1, 1, n, n)  # V = I: out is the weights
        assert block == 1 and causal is False and scale == 1.0


def test_exactness_is_measured_in_each_dtype_causal_and_not_for_every_block(recorded):
    p = SMALL
    _, target = recorded
    seen = set()
    for args, kwargs in target.made("tiled_attention"):
        if "value_part" in kwargs or args[0].shape == (1, 1, 1, 1):
            continue  # the memory rows, the chapter's example
        q, k, v, block, causal = args
        assert kwargs == {} and q.dtype == k.dtype == v.dtype
        assert q.shape == (1, p.H, q.shape[2], p.D) and k.shape == v.shape == (1, p.Hkv, p.Tk, p.D)
        seen.add((q.dtype.name, q.shape[2], causal, block))
    dtypes, lengths, masks = ("float64", "float32"), (p.Tq, p.Tk), (True, False)
    assert seen == {
        (d, t, c, b) for d in dtypes for t in lengths for c in masks for b in (1, 7, 8, 64)
    }
    masked = {
        a[3] is not None for a, _ in target.made("scaled_dot_product_attention") if len(a) > 3
    }
    assert masked == {True, False}


def test_the_memory_rows_bring_back_attention_s_output_alone_at_float32_and_d_16(recorded):
    """Each measured call's output comes back to be checked (issue 42): attention's without
    its (T, T) weights, which stay in the worker."""
    _, target = recorded
    sent = [(name, args, kwargs) for name, args, kwargs in target.calls if "value_part" in kwargs]
    assert [name for name, _, _ in sent] == ["scaled_dot_product_attention", "tiled_attention"]
    for name, args, kwargs in sent:
        assert kwargs == {"value_part": 0 if name == "scaled_dot_product_attention" else None}
        q, k, v, *rest = args
        assert q.shape == k.shape == v.shape == (1, 1, 4096, 16)  # (B, H, T, D)
        assert q.dtype == k.dtype == v.dtype == np.float32
        if name == "tiled_attention":
            block, causal = rest
            assert block == 64 and causal is False
        else:
            assert rest == []


def test_the_identical_fraction_counts_equal_outputs_over_all_outputs():
    """A tiled function off in one output of each call: 16 calls of 4096 and 2560 outputs."""

    class OneOff:
        def __getattr__(self, fn):
            return getattr(reference, fn)

        def tiled_attention(self, q, k, v, block, causal):
            out = reference.scaled_dot_product_attention(
                q, k, v, reference.causal_mask(q.shape[2], k.shape[2]) if causal else None
            )[0].copy()
            out[0, 0, 0, 0] += 0.5
            return out

    p = Params()
    worst, identical = _accuracy(OneOff(), np.random.default_rng(0), p, np.float64)
    total = 8 * p.H * p.D * (p.Tq + p.Tk)  # 8 calls at each query length
    assert worst == pytest.approx(0.5, abs=1e-12)
    assert identical == (total - 16) / total


@pytest.mark.parametrize(
    ("changed", "wrong"),
    [({"H": 3, "Hkv": 2}, "H % Hkv"), ({"Tq": 41, "Tk": 40}, "Tq <= Tk"),
     ({"memory_lengths": (512,)}, "memory_lengths must include 4096")],
)  # fmt: skip
def test_parameters_the_lab_cannot_run_are_refused_by_name(changed, wrong):
    result, _ = recorded_run(SMALL.model_copy(update=changed))
    assert result.error is not None and wrong in result.error


def test_a_query_as_long_as_the_keys_is_a_legal_setting():
    result, _ = recorded_run(SMALL.model_copy(update={"Tq": 40, "Tk": 40}))
    assert result.error is None and result.passed, result.failures()


def test_the_tile_count_is_exact_for_any_tile_size():
    """Tiles of 1 count blocked entries: sum over i < 48 of (47 - i), by the definition."""
    result, _ = recorded_run(SMALL.model_copy(update={"tile": 1}))
    assert rows(result)[(TILES, "clean-room")].actual == 0
    blocked = np.arange(64)[None, :] > 16 + np.arange(48)[:, None]
    assert skipped_tiles(blocked, 1) == sum(47 - i for i in range(48)) == 1128


def test_the_tile_table_shows_each_implementation_s_own_counts(recorded):
    result, _ = recorded
    (table,) = [f for f in result.figures if getattr(f, "columns", ())[:3] == ("Tq", "Tk", "tiles")]
    assert [row[:4] for row in table.rows] == [("48", "64", "48", "15"), ("64", "64", "64", "28")]


def test_a_full_attention_made_to_hold_more_cannot_shrink_the_ratio():
    """A room whose full attention pads itself to 10 GiB, and whose tiled one builds (T, T)."""
    matrix = MEMORY_T * MEMORY_T * 4
    assert memory_ratio(10 << 30, matrix) == pytest.approx(1 / FULL_CAP_MATRICES)
    assert not satisfies(memory_ratio(10 << 30, matrix), LAB.metric(MEMORY).expected)
    assert memory_ratio(3 * matrix, matrix) == pytest.approx(1 / 3)  # under the cap: as measured
