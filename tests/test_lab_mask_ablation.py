"""The mask-ablation lab: the leak without a mask, the course's two mask bugs, the too-good loss.

The lab passes on both implementations; each fault below is a clean room with
one mask bug, and the metric that names the bug must fail on the clean-room row
while the reference row passes. The tiny LM trains in float64 on tensors of a
few thousand numbers: a second intra-op thread only adds waiting (ten times
slower on a loaded two-core machine), so this module runs torch on one thread
and checks that the thread count does not change a single bit of the result.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from labtools import cli_run_json, faulty_room, rows, run, values

from labctl import faults
from labctl.labs import mask_ablation as lab_module
from labctl.labs.mask_ablation import LAB

SEED = 5
TEMPLATE = "no_mask_future_prefix_influence"
MASKED = "masked_future_prefix_influence"
HELDOUT = "masked_heldout_loss_over_lnV"

# A learner bug beyond the catalogue: attention always applies a causal mask, whatever
# mask it is given, so "remove the mask" experiments silently keep it.
SDPA_ALWAYS_CAUSAL = faults.Fault(
    name="sdpa-always-causal",
    function="scaled_dot_product_attention",
    module="attention",
    description="the mask argument is ignored and a causal mask always applied",
    course="逐部件讲透 §6.13 故意失败的实验: 去掉 causal mask",
    source="""
    from .primitives import causal_mask as _causal_mask

    _correct_sdpa = scaled_dot_product_attention

    def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
        blocked = _causal_mask(np.shape(q)[2], np.shape(k)[2])
        return _correct_sdpa(q, k, v, blocked, scale)
    """,
)


def faulty(tmp_path_factory, fault):
    return run(LAB, faulty_room(tmp_path_factory.mktemp("fault"), fault))


@pytest.fixture(scope="module")
def result():
    return run(LAB)


def assert_caught(result, name):
    measured = rows(result)
    assert measured[(name, "reference")].passed, f"{name} fails on the reference"
    assert not measured[(name, "clean-room")].passed, f"{name} misses the fault"


def test_passes_on_both_implementations(result):
    assert result.error is None
    assert result.passed, result.failures()
    measured = rows(result)
    for metric in LAB.metrics:
        for impl in metric.impls:
            assert (metric.name, impl) in measured, f"{metric.name} ({impl}) not measured"


def test_the_masked_prefix_does_not_move_and_the_losses_tell_the_story(result):
    got = values(result)
    ln_v = math.log(LAB.params().vocab)
    for impl in ("reference", "clean-room"):
        assert got[(MASKED, impl)] == 0.0  # exact: masked keys add exact zeros
        assert got[(TEMPLATE, impl)] > 0.1  # a unit perturbation moves O(1) outputs visibly
        # the masked LM cannot beat ln V on noise (it is ≈1.005); 2% is far beyond its error
        assert got[(HELDOUT, impl)] == pytest.approx(1.0, abs=0.02)
    # both causal masks are identical, so the two masked LM rows are one run
    assert got[(HELDOUT, "reference")] == got[(HELDOUT, "clean-room")]
    # the leaking LM sits near its floor ln V / T (T=8: 0.125); 0.02 absorbs the last steps
    assert got[("unmasked_train_loss_over_lnV", "reference")] == pytest.approx(1 / 8, abs=0.02)
    unmasked = got[("unmasked_train_loss_over_lnV", "reference")]
    gap = got[("mask_leak_loss_gap", "reference")]
    assert gap == pytest.approx(ln_v * (got[(HELDOUT, "reference")] - unmasked), abs=1e-12)


def test_mask_adds_zero_is_caught(tmp_path_factory):
    caught = faulty(tmp_path_factory, faults.get("mask-adds-zero"))
    assert_caught(caught, MASKED)
    assert_caught(caught, "mask_reversed_future_share")  # the reversed mask is ignored too
    # the fault lives in attention, not in causal_mask: the LM, trained with the mask, is fine
    assert rows(caught)[(HELDOUT, "clean-room")].passed


def test_mask_reversed_is_caught_by_the_probe_and_by_the_too_good_loss(tmp_path_factory):
    caught = faulty(tmp_path_factory, faults.get("mask-reversed"))
    assert_caught(caught, MASKED)
    assert_caught(caught, HELDOUT)
    # the LM with the reversed mask reads its own target: near the floor 1/T
    assert rows(caught)[(HELDOUT, "clean-room")].actual < 0.2
    flagged = [str(f.text) for f in caught.figures if getattr(f, "flag", False)]
    assert any("differ" in text for text in flagged)


def test_attention_that_always_masks_fails_the_ablations(tmp_path_factory):
    caught = faulty(tmp_path_factory, SDPA_ALWAYS_CAUSAL)
    for name in (TEMPLATE, "mask_adds_zero_prefix_influence", "mask_reversed_future_share"):
        assert_caught(caught, name)
    assert rows(caught)[(TEMPLATE, "clean-room")].actual == 0.0
    assert rows(caught)[(MASKED, "clean-room")].passed


def test_an_ablation_that_forgets_to_remove_the_mask_fails(monkeypatch):
    train = lab_module._train_lm
    T = LAB.params().context
    causal = np.triu(np.ones((T, T), dtype=bool), k=1)  # (T, T)

    def still_masked(init, batches, heldout, blocked_mask, p):
        return train(init, batches, heldout, causal if blocked_mask is None else blocked_mask, p)

    monkeypatch.setattr(lab_module, "_train_lm", still_masked)
    broken = run(LAB, None, impl="reference")
    measured = rows(broken)
    assert not measured[("unmasked_train_loss_over_lnV", "reference")].passed
    assert not measured[("mask_leak_loss_gap", "reference")].passed
    assert measured[(HELDOUT, "reference")].passed


def test_reversed_share_on_equal_scores_is_the_count_of_future_keys():
    """q = 0 gives equal scores: row i spreads over keys i..T-1, (T-1-i)/(T-i) of it future."""
    from labctl import reference

    B, H, T, D = 1, 1, 8, 4
    rng = np.random.default_rng(0)
    q = np.zeros((B, H, T, D))
    k, v, noise_k, noise_v = (rng.standard_normal((B, H, T, D)) for _ in range(4))
    reversed_mask = lab_module._masks(reference, T)["reversed"]
    _, share, moved, _ = lab_module._probe(reference, q, k, v, noise_k, noise_v, reversed_mask)
    expected = np.mean([(T - 1 - i) / (T - i) for i in range(T - 1)])  # ≈0.755 for T=8
    assert share == pytest.approx(expected, abs=1e-12)
    assert moved > 1e-5


def test_same_seed_gives_identical_values(result):
    again = run(LAB)
    assert values(again) == values(result)


def test_another_seed_gives_other_values_and_still_passes(result):
    other = run(LAB, seed=SEED + 1)
    assert other.passed, other.failures()
    first, second = values(result), values(other)
    names = (TEMPLATE, "mask_reversed_future_share", HELDOUT, "unmasked_train_loss_over_lnV")
    for name in names:
        assert first[(name, "reference")] != second[(name, "reference")], name
    assert second[(MASKED, "reference")] == 0.0  # exact zero whatever the seed


def test_the_thread_count_does_not_change_the_lm():
    """One or two intra-op threads: the same losses, bit for bit (a few steps suffice)."""
    params = lab_module.Params(steps=8, tail=4)
    init, batches, heldout = lab_module._lm_data(np.random.default_rng(SEED), params)
    results = []
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            results.append(lab_module._train_lm(init, batches, heldout, None, params))
    finally:
        torch.set_num_threads(before)
    assert results[0] == results[1]


def test_importing_the_lab_does_not_import_torch():
    code = "import sys, labctl.labs.mask_ablation; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_cli_run_json(tmp_path, monkeypatch):
    lab, out = cli_run_json("mask-ablation", tmp_path, monkeypatch)
    by_key = {(m["name"], m["impl"]): m for m in lab["metrics"]}
    assert by_key[(TEMPLATE, "clean-room")]["actual"] > 1e-5
    assert by_key[(MASKED, "clean-room")]["actual"] == 0.0
    assert any(path.suffix == ".csv" for path in (out / "mask-ablation").iterdir())  # heatmap
