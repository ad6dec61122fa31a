"""Lab `gqa`: passes on both implementations, catches a tiled head order, recomputes the course.

Faulty clean rooms are written into tmp_path; evidence goes under tmp_path too.
"""

from __future__ import annotations

import numpy as np
import pytest
from labtools import CACHE_REPEATED, at_seed_5, cli_run_json, faulty_room, passed, rows, run, values

from labctl import faults
from labctl.lab import Note, TableFigure
from labctl.labs.gqa import LAB, _mean_pool, _per_head_mha, _torch_gqa
from labctl.runner import implementations

ROOM = faults.project_clean_room()
FULL = "gqa_full_kv_vs_mha_max_error"
ORDER = "gqa_head_order_vs_torch_max_error"
POOL = "gqa_meanpool_error_ratio"
BYTES = "gqa_kv_bytes_llama2_70b_error"
REFERENCE = "gqa_reference_max_error"
LLAMA_BYTES = 2 * 4096 * 8 * 128 * 2 * 80  # 手撕 §7.4's expression, evaluated here


seed5 = at_seed_5(LAB)


def test_passes_on_both_implementations_at_seed_5(seed5):
    got = passed(seed5)
    for impl in ("reference", "clean-room"):
        # float64 sums over D = 8 and T = 8 terms: rounding only (~1e-16 relative).
        assert got[(FULL, impl)].actual <= 1e-14
        assert got[(ORDER, impl)].actual <= 1e-14
        assert got[(BYTES, impl)].actual == 0.0
        assert 0.5 < got[(POOL, impl)].actual < 1.0
    # The two implementations compute the same conversion: ratios agree to rounding.
    assert got[(POOL, "reference")].actual == pytest.approx(got[(POOL, "clean-room")].actual, abs=1e-12)  # fmt: skip


def _table(result, word: str) -> TableFigure:
    (table,) = [f for f in result.figures if isinstance(f, TableFigure) and word in str(f.title)]
    return table


def test_course_numbers_are_recomputed_and_the_llama_line_is_flagged():
    result = run(LAB)  # not the module fixture: mutation runs credit a fixture to one test only
    course = _table(result, "course")
    by_quantity = {row[0]: row for row in course.rows}
    llama = next(row for q, row in by_quantity.items() if "Llama-2-70B" in q)
    assert llama[2].startswith(f"{LLAMA_BYTES:,} B")
    assert llama[3] == f"{LLAMA_BYTES:,} B"  # measured from attention_decode's cache
    assert llama[4] == "~10.7 GB" and llama[5] == "NO"
    mha_64 = next(row for q, row in by_quantity.items() if "64 KV heads" in q)
    assert mha_64[2].startswith(f"{LLAMA_BYTES * 8:,} B") and mha_64[5] == "yes"
    d2048 = next(row for q, row in by_quantity.items() if "§13.4 MHA" in q)
    assert d2048[2] == d2048[3] == d2048[4] == f"{16_777_216:,}"
    flagged = [f for f in result.figures if isinstance(f, Note) and f.flag]
    assert len(flagged) == 1
    assert f"{LLAMA_BYTES:,} B" in str(flagged[0].text) and "64 KV heads" in str(flagged[0].text)


def test_the_rows_notes_and_the_distance_table_agree():
    result = run(LAB)
    got = rows(result)
    distances = _table(result, "mean-pooling")
    by_variant = {row[0]: row for row in distances.rows}
    for column, impl in enumerate(("reference", "clean-room"), start=4):
        mha, gqa, mqa = (by_variant[v][column] for v in ("MHA", "GQA", "MQA"))
        # ||out - out_MHA|| / ||out_MHA||: 0 for MHA itself, below 1 for the pooled layers.
        assert mha == 0.0 and 0.5 < gqa < mqa < 1.0
        assert got[(POOL, impl)].actual == pytest.approx(gqa / mqa, rel=1e-12)
        # The cache attention_decode returned: (B, Hkv, Tn, D) for 8 KV heads of width 128.
        assert got[(BYTES, impl)].note == "cache shape (1, 8, 2, 128)"


# Not in the catalogue: a room whose exported repeat_kv tiles the heads while its attention
# expands them with a repeat of its own, interleaved (0,0,1,1) as it should.
REPEAT_KV_ALONE_TILED = faults.Fault(
    name="repeat-kv-alone-tiled",
    function="repeat_kv",
    module="__init__",
    description="the exported repeat_kv tiles the heads; attention interleaves them",
    course="手撕 §05.5",
    source="""
    import numpy as _np

    def repeat_kv(x, n_rep):
        return _np.tile(x, (1, n_rep, 1, 1))
    """,
)


def test_a_tiled_repeat_kv_fails_the_head_order_even_when_attention_is_right(tmp_path):
    result = run(LAB, faulty_room(tmp_path, REPEAT_KV_ALONE_TILED), impl="clean-room")
    order = rows(result)[(ORDER, "clean-room")]
    assert not order.passed and order.actual > 0.1  # another K/V head's values: O(1)
    assert order.note == "larger: repeat_kv"  # the row names the function that is wrong
    assert rows(result)[(POOL, "clean-room")].passed  # multi_head_attention never calls it


def test_gqa_tiled_fails_head_order_and_mean_pooling(tmp_path):
    result = run(LAB, faulty_room(tmp_path, "gqa-tiled"))
    assert result.error is None and not result.passed
    got = rows(result)
    for name in (ORDER, POOL):
        assert not got[(name, "clean-room")].passed, name
        assert got[(name, "reference")].passed, name
    assert got[(ORDER, "clean-room")].actual > 0.1  # another key head: O(1), not rounding
    # attention's output is further off than the repeated heads (4.0 against 3.0 at seed 5)
    assert got[(ORDER, "clean-room")].note == "larger: sdpa"
    assert got[(POOL, "clean-room")].actual > 1.0  # GQA now further from MHA than MQA
    assert got[(FULL, "clean-room")].passed  # with Hkv = H there is nothing to tile


def test_a_cache_of_repeated_heads_fails_the_llama_bytes(tmp_path):
    result = run(LAB, faulty_room(tmp_path, CACHE_REPEATED))
    got = rows(result)
    assert not got[(BYTES, "clean-room")].passed
    assert got[(BYTES, "clean-room")].actual == LLAMA_BYTES  # 16 heads cached instead of 8
    assert got[(BYTES, "clean-room")].note == "cache shape (1, 16, 2, 128)"
    assert got[(BYTES, "reference")].passed and got[(ORDER, "clean-room")].passed
    # The course table's check shows the reference's measurement, not the faulty room's.
    llama = next(row for row in _table(result, "course").rows if "Llama-2-70B" in row[0])
    assert llama[3] == f"{LLAMA_BYTES:,} B"


def test_mean_pool_keeps_groups_contiguous():
    C, H, Hkv, D = 4, 4, 2, 3
    w = np.arange(C * H * D, dtype=float).reshape(C, H * D)
    pooled = _mean_pool(w, H, Hkv)
    # K/V head 0 is the mean of query-group heads 0 and 1, head 1 of heads 2 and 3.
    np.testing.assert_array_equal(pooled[:, :D], (w[:, 0:D] + w[:, D : 2 * D]) / 2)
    np.testing.assert_array_equal(pooled[:, D:], (w[:, 2 * D : 3 * D] + w[:, 3 * D :]) / 2)
    np.testing.assert_array_equal(_mean_pool(w, H, H), w)


def test_same_seed_same_values_other_seed_other_values():
    first, again, other = (values(run(LAB, seed=seed)) for seed in (5, 5, 6))
    assert first == again
    assert first[(POOL, "clean-room")] != other[(POOL, "clean-room")]
    assert first[(POOL, "reference")] != other[(POOL, "reference")]
    # Rounding errors (~1e-16) are quantised in ulps and may repeat across seeds: not compared.
    assert other[(BYTES, "clean-room")] == 0.0  # byte counts do not depend on the seed


def test_cli_run_json(tmp_path, monkeypatch):
    lab, _ = cli_run_json("gqa", tmp_path, monkeypatch)
    assert {m["name"] for m in lab["metrics"]} == {FULL, ORDER, POOL, BYTES, REFERENCE}
    (compared,) = [m for m in lab["metrics"] if m["name"] == REFERENCE]
    assert compared["impl"] == "both" and compared["actual"] <= 1e-13  # float64 rounding
    assert any("~10.7 GB" in note["text"] and note["flag"] for note in lab["notes"])


def _causal_gqa_by_loop(q, k, v) -> np.ndarray:
    """Causal GQA one query head at a time, as 手撕 §05.5 states it: head h reads K/V head
    h // (H / Hkv)."""
    B, H, T, D = q.shape
    n_rep = H // k.shape[1]
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    out = np.empty_like(q)
    for h in range(H):
        kv = h // n_rep
        scores = np.where(future, -np.inf, q[:, h] @ k[:, kv].transpose(0, 2, 1) / np.sqrt(D))
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))  # (B, T, T)
        out[:, h] = weights / weights.sum(axis=-1, keepdims=True) @ v[:, kv]
    return out


@pytest.mark.parametrize("version", ["installed", "2.4.1"])
def test_the_torch_side_interleaves_heads_on_every_supported_torch(monkeypatch, version):
    import torch

    if version != "installed":  # torch < 2.5 has no enable_gqa: the lab's fallback runs
        monkeypatch.setattr(torch, "__version__", version)
    rng = np.random.default_rng(0)
    B, H, Hkv, T, D = 2, 4, 2, 5, 3  # T != D, so a shape read from the wrong axis shows
    q = rng.standard_normal((B, H, T, D))
    k, v = (rng.standard_normal((B, Hkv, T, D)) for _ in range(2))
    repeated, out = _torch_gqa(q, k, v, H // Hkv)
    np.testing.assert_array_equal(repeated, np.repeat(k, 2, axis=1))  # (0,0,1,1): exact copies
    # float64, the same formula in another order: rounding only (~1e-16).
    np.testing.assert_allclose(out, _causal_gqa_by_loop(q, k, v), rtol=0, atol=1e-12)


def test_the_per_head_loop_stays_finite_where_scores_are_large():
    # Scores of O(1000): exp overflows or a whole row underflows to 0/0 unless each row's own
    # maximum is subtracted before it.
    rng = np.random.default_rng(1)
    B, T, C, H = 2, 6, 8, 2
    x = 30 * rng.standard_normal((B, T, C))  # (B, T, C)
    weights = [rng.standard_normal((C, C)) for _ in range(4)]
    got = _per_head_mha(x, *weights, H)
    with implementations("reference", None) as impls:
        expected = impls["reference"].multi_head_attention(x, *weights, H, H)
    assert np.isfinite(got).all()
    # Near one-hot weights, float64: agreement to rounding of outputs of O(1e3).
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
