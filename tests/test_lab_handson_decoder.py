"""Lab `handson-decoder`: 手撕 §08's decoder as printed, and its components swapped one at a time.

Faulty clean rooms are written into tmp_path; evidence goes under tmp_path too.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from labtools import at_seed_5, cli_run_json, failing, faulty_room, passed, run, values

from labctl import faults
from labctl.faults import labs_v2
from labctl.labs.handson_decoder import CHAPTER_TOKENS, LAB, Params, chapter_model, written_out
from labctl.runner import implementations, run_lab

BOTH = ("handson_reference_max_error", "both")


seed5 = at_seed_5(LAB)


def test_passes_on_both_implementations(seed5):
    got = passed(seed5)
    for impl in ("reference", "clean-room"):
        # float64 rounding only (~1e-16) where the models are one; O(1) where a swap acts.
        assert got[("handson_forward_max_error", impl)].actual <= 1e-14
        assert got[("handson_swaps_max_error", impl)].actual <= 1e-14
        assert got[("handson_llama_rope_change", impl)].actual > 0.5
        assert got[("handson_layernorm_change", impl)].actual > 0.1


def test_the_chapters_minus_1e9_mask_is_a_blocked_key_exactly():
    # exp(-1e9 - max) underflows to exactly 0 in float64: the chapter's mask and -inf agree.
    assert np.exp(np.float64(-1e9)) == 0.0


def test_the_chapters_own_run_has_its_printed_shape(seed5):
    written, reference, room = seed5.figures[0].rows
    assert written[1] == reference[1] == room[1] == "(5, 256)"  # 手撕 §08: # (5, 256)
    assert written[2:] == reference[2:] == room[2:]  # the same argmax and top-5


def test_the_chapter_model_is_drawn_as_the_chapter_draws_it():
    # np.random.seed(42); the embedding is the first draw, V x d = 256 x 64, times 0.02.
    np.random.seed(42)
    embed = np.random.randn(256, 64) * 0.02
    wq = np.random.randn(64, 64) * 0.02
    model = chapter_model()
    assert np.array_equal(model["embed"], embed)
    assert np.array_equal(model["blocks"][0]["wq"], wq)
    assert model["blocks"][0]["w_up"].shape == (64, 85)  # int(128 * 2 / 3)
    assert written_out(np.array(CHAPTER_TOKENS), model, 4, 1e-6).shape == (5, 256)


@pytest.mark.parametrize(
    ("fault", "caught"),
    [
        ("decoder-positional-ignored", {"handson_swaps_max_error", "handson_llama_rope_change"}),
        ("layer-norm-as-rms", {"handson_swaps_max_error", "handson_layernorm_change"}),
        ("decoder-no-final-norm", {"handson_forward_max_error", "handson_swaps_max_error"}),
        ("swiglu-swapped", {"handson_forward_max_error", "handson_swaps_max_error"}),
    ],
)
def test_each_fault_is_caught_at_its_metrics_only(tmp_path, fault, caught):
    found = labs_v2.get(fault) if fault in {f.name for f in labs_v2.LABS_V2} else faults.get(fault)
    result = run(LAB, faulty_room(tmp_path, found))
    assert result.error is None
    assert failing(result) == {(name, "clean-room") for name in caught} | {BOTH}


def test_same_seed_same_values_other_seed_other_values():
    first, again, other = (values(run(LAB, seed=seed, impl="reference")) for seed in (5, 5, 6))
    assert first == again
    key = ("handson_layernorm_change", "reference")
    assert first[key] != other[key]


def test_the_lab_module_imports_without_torch():
    code = "import sys, labctl.labs.handson_decoder; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("params", [{"C": 63, "H": 3}, {"C": 12, "H": 4}])
def test_widths_without_an_even_head_width_are_refused(params):
    with implementations("reference", None) as impls:
        result = run_lab(LAB, 5, impls, Params(**params))
    assert result.error is not None and "must be H" in result.error
    assert result.metrics == []


def test_cli_run_json(tmp_path, monkeypatch):
    lab, _ = cli_run_json("handson-decoder", tmp_path, monkeypatch)
    chapter, swaps = lab["tables"]
    assert chapter["rows"][0][1] == "(5, 256)"
    assert swaps["rows"][0][0].startswith("positions")
    assert any("完全一致" in note["text"] and note["flag"] for note in lab["notes"])
