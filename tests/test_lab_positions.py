"""Lab `positions`: permutation symmetry, the chapter's PE dot products, RoPE's properties and layouts.

Faulty clean rooms are written into tmp_path; evidence goes under tmp_path too.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from labtools import (
    ROOM,
    at_seed_5,
    cli_run_json,
    failing,
    faulty_room,
    passed,
    rows,
    run,
    values,
    wave2_fault,
)

from labctl import faults
from labctl.labs.positions import (
    CHAPTER_DOTS,
    LAB,
    Params,
    half_split_rope,
    interleaved_rope,
    pe_dot,
)
from labctl.runner import implementations, run_lab

BOTH = ("positions_reference_max_error", "both")


seed5 = at_seed_5(LAB)


def test_passes_on_both_implementations(seed5):
    got = passed(seed5)
    for impl in ("reference", "clean-room"):
        # float64 rounding only (~1e-15) where a property holds; O(0.1) where positions act.
        assert got[("positions_perm_equivariance_error", impl)].actual <= 1e-14
        assert got[("positions_perm_change_sinusoidal", impl)].actual > 0.05
        assert got[("positions_perm_change_rope", impl)].actual > 0.05
        assert got[("rope_permutation_max_error", impl)].actual <= 1e-14
        assert got[("rope_layouts_difference", impl)].actual > 0.1


def test_the_chapters_pe_dot_products_are_reproduced_to_the_printed_digits():
    # 第8章 阶段五 prints 6 decimals: half a unit of the last digit is 5e-7.
    for delta, printed in CHAPTER_DOTS.items():
        assert abs(pe_dot(delta) - printed) <= 5e-7


def test_a_column_permutation_maps_half_split_onto_interleaved_exactly():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((5, 12)), rng.standard_normal((12, 8))
    positions = np.array([0, 1, 4, 9, 100])
    P = np.concatenate([np.arange(0, 8, 2), np.arange(1, 8, 2)])
    ours = interleaved_rope(x @ w, positions, 10000.0)[:, P]
    assert np.array_equal(half_split_rope(x @ w[:, P], positions, 10000.0), ours)
    # Without the permutation the layouts disagree by O(1), not by rounding.
    assert np.max(np.abs(half_split_rope(x @ w, positions, 10000.0) - ours)) > 0.1


@pytest.mark.parametrize(
    ("fault", "caught"),
    [
        ("mha-always-causal", {"positions_perm_equivariance_error"}),
        ("sinusoidal-unfilled", {"positions_perm_change_sinusoidal", "pe_dot_chapter_max_error"}),
        ("sinusoidal-odd-frequency", {"pe_dot_chapter_max_error", "pe_dot_start_spread"}),
        (
            "rope-unapplied",
            {"positions_perm_change_rope", "rope_nonconsecutive_max_error",
             "rope_permutation_max_error"},
        ),
        (
            "rope-not-rotation",
            {"rope_norm_change", "rope_shift_invariance_error", "rope_nonconsecutive_max_error",
             "rope_permutation_max_error"},
        ),
        (
            "rope-half-split",
            {"rope_layouts_difference", "rope_nonconsecutive_max_error",
             "rope_permutation_max_error"},
        ),
        ("rope-ignores-positions", {"rope_nonconsecutive_max_error", "rope_permutation_max_error"}),
    ],
)  # fmt: skip
def test_each_fault_is_caught_at_its_metrics_only(tmp_path, fault, caught):
    result = run(LAB, faulty_room(tmp_path, wave2_fault(fault)))
    assert result.error is None
    assert failing(result) == {(name, "clean-room") for name in caught} | {BOTH}


def test_same_seed_same_values_other_seed_other_values():
    first, again, other = (values(run(LAB, seed=seed)) for seed in (5, 5, 6))
    assert first == again
    assert set(first) == set(other)
    key = ("positions_perm_change_sinusoidal", "clean-room")
    assert first[key] != other[key]  # random inputs: a new seed moves the O(0.1) changes


def test_the_lab_module_imports_without_torch():
    code = "import sys, labctl.labs.positions; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_run_json(tmp_path, monkeypatch):
    lab, _ = cli_run_json("positions", tmp_path, monkeypatch)
    assert any("15.313649" in note["text"] for note in lab["notes"])
    (table,) = lab["tables"]
    assert table["rows"][1][2] == "15.313649"


# Not in the catalogue: the table's formula written without p, so every row is the same
# nonzero vector (the sin/cos of one fixed angle per pair): positions add a constant only.
SINUSOIDAL_ONE_ROW = faults.Fault(
    name="sinusoidal-one-row",
    function="sinusoidal_positions",
    module="primitives",
    description="every position gets the same nonzero vector",
    course="手撕 §1.2.2",
    source="""
    _correct_positions = sinusoidal_positions

    def sinusoidal_positions(seq_len, d_model):
        row = _correct_positions(2, d_model)[1]
        return np.broadcast_to(row, (seq_len, d_model)).copy()
    """,
)


def test_a_table_of_one_repeated_row_leaves_attention_order_blind(tmp_path):
    # x + c for a constant c is still a plain input: permuting it permutes the output exactly.
    result = run(LAB, faulty_room(tmp_path, SINUSOIDAL_ONE_ROW), impl="clean-room")
    row = rows(result)[("positions_perm_change_sinusoidal", "clean-room")]
    assert not row.passed and row.actual <= 1e-12  # float64 rounding only


def test_every_rope_check_uses_the_labs_base():
    # theta = 100 is far from the contract's default 10000: a rope call that drops it
    # rotates q and k by other angles than the written-out RoPE and than each other.
    with implementations("both", ROOM) as impls:
        result = run_lab(LAB, 5, impls, Params(rope_theta=100.0))
    got = passed(result)
    for impl in ("reference", "clean-room"):
        assert got[("rope_nonconsecutive_max_error", impl)].actual <= 1e-12
        assert got[("rope_shift_invariance_error", impl)].actual <= 1e-10


def test_the_written_out_ropes_rotate_the_last_axis_of_any_shape():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 4))  # (B, T, D), T != D
    positions = np.array([0, 5, 9])
    for rope in (half_split_rope, interleaved_rope):
        np.testing.assert_array_equal(rope(x, positions, 100.0)[1], rope(x[1], positions, 100.0))


@pytest.mark.parametrize("params", [{"D": 3}, {"C": 63, "H": 3}, {"C": 64, "H": 3}])
def test_odd_widths_and_heads_that_do_not_divide_are_refused(params):
    with implementations("reference", None) as impls:
        result = run_lab(LAB, 5, impls, Params(**params))
    assert result.error is not None and "must be even and a multiple of H" in result.error
    assert result.metrics == []


def test_meta_s_llama_pairs_interleaved_and_huggingface_s_port_half_split():
    """The lab's text (issue 40): Meta's llama/model.py rotates consecutive pairs, the contract's
    layout; HuggingFace's port (rotate_half) rotates (i, i + D/2). Each written here as its
    source computes it, at Llama's θ = 10000, on the reference's rope and the lab's half split."""
    import numpy as np
    import torch

    from labctl import reference
    from labctl.labs.positions import half_split_rope

    T, D, theta = 7, 8, 10000.0
    x = torch.from_numpy(np.random.default_rng(3).standard_normal((1, T, 1, D)))  # (B, T, H, D)
    # Meta: precompute_freqs_cis, then apply_rotary_emb (complex64 there; complex128 here)
    freqs = 1.0 / (theta ** (torch.arange(0, D, 2)[: D // 2].double() / D))
    freqs_cis = torch.polar(
        torch.ones(T, D // 2, dtype=torch.float64), torch.outer(torch.arange(T).double(), freqs)
    )
    x_ = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    meta = (
        torch.view_as_real(x_ * freqs_cis[None, :, None, :]).flatten(3)[0, :, 0].numpy()
    )  # (T, D)
    # HuggingFace: LlamaRotaryEmbedding's cos and sin, then apply_rotary_pos_emb's rotate_half
    emb = torch.cat((torch.outer(torch.arange(T).double(), freqs),) * 2, dim=-1)  # (T, D)
    q = x[0, :, 0]  # (T, D)
    rotated = torch.cat((-q[..., D // 2 :], q[..., : D // 2]), dim=-1)
    hf = (q * emb.cos() + rotated * emb.sin()).numpy()
    rows, positions = q.numpy(), np.arange(T)
    np.testing.assert_allclose(meta, reference.rope(rows, positions, theta), rtol=0, atol=1e-12)
    np.testing.assert_allclose(hf, half_split_rope(rows, positions, theta), rtol=0, atol=1e-12)
    assert np.max(np.abs(meta - hf)) > 0.1  # the two layouts are not one
