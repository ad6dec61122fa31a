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
from labtools import cli_run_json, faulty_room, passed, rows, run, values

from labctl import faults, reference
from labctl.lab import Implementation
from labctl.labs import mask_ablation as lab_module
from labctl.labs.mask_ablation import LAB, Params
from labctl.reference.transformer_block import BLOCK_KEYS
from labctl.runner import run_lab

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
    measured = passed(result)
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


# ---- the lab's parts, in this process -------------------------------------------------------


class MaskAt:
    """The torch reference, with `causal_mask(T)` replaced for the LM's context T only."""

    def __init__(self, T: int, mask):
        self.T, self.mask = T, mask

    def __getattr__(self, fn):
        return getattr(reference, fn)

    def causal_mask(self, t_q, t_k=None):
        return self.mask if t_q == self.T else reference.causal_mask(t_q, t_k)


def run_here(target, p: Params | None = None, name: str = "clean-room"):
    return run_lab(LAB, SEED, {name: Implementation(name, target)}, p)


def test_a_causal_mask_the_lm_cannot_use_is_refused_by_name():
    """Probes at T = 6 use the right mask; the LM's context of 8 gets this one."""
    mask = np.triu(np.ones((8, 9), dtype=bool), k=1)
    result = run_here(MaskAt(8, mask), Params(T=6))
    assert result.error is not None
    assert f"causal_mask(8) returned {mask.dtype} {mask.shape}, expected bool (8, 8)" in (
        result.error
    )


def test_a_mask_of_ints_fails_the_room_s_rows_by_name():
    """A mask of another dtype is refused where the lab takes it (labctl.returns): the room's
    rows fail, and a flagged note names the function and the contract's form."""
    mask = np.triu(np.ones((8, 8), dtype=int), k=1)
    result = run_here(MaskAt(8, mask), Params(T=6))
    assert result.error is None and not result.passed
    assert all(not m.measured for m in result.metrics if m.impl == "clean-room")
    (note,) = [f for f in result.figures if getattr(f, "flag", False)]
    assert str(note.text) == (
        "the clean room's causal_mask returned an array of dtype int64 and shape (8, 8) where "
        "the contract says an array bool (t_q, t_k)"
    )


def test_a_clean_room_alone_trains_no_unmasked_lm():
    """The unmasked LM is the reference's experiment: a clean room's run leaves it out."""
    result = run_here(reference, Params(steps=20, tail=5, heldout=16))
    assert result.error is None, result.error
    assert {m.impl for m in result.metrics} == {"clean-room"}
    assert "unmasked_train_loss_over_lnV" not in {m.name for m in result.metrics}


def test_the_loss_rows_read_the_training_and_held_out_losses_they_name(monkeypatch):
    """Made-up losses in: masked (train 1.5, held 2.5), unmasked (train 0.25, held 0.75)."""
    curve = [3.0] * 12

    def trained(ctx, rng):
        masks = {name: reference.causal_mask(8) for name in ctx.impls}
        return {name: (1.5, 2.5, curve) for name in ctx.impls}, (0.25, 0.75, curve), masks

    monkeypatch.setattr(lab_module, "_language_models", trained)
    result = run_here(reference, Params(steps=12, tail=4), name="reference")
    got = rows(result)
    ln_v = math.log(16)
    assert got[(HELDOUT, "reference")].actual == 2.5 / ln_v
    assert got[("unmasked_train_loss_over_lnV", "reference")].actual == 0.25 / ln_v
    assert got[("mask_leak_loss_gap", "reference")].actual == 2.5 - 0.25
    (curves,) = [f for f in result.figures if getattr(f, "columns", ("",))[0] == "step"]
    assert curves.columns[1:] == ("causal_mask", "no mask")  # the masked LM, and the one without


def test_the_training_loss_is_the_mean_of_the_last_tail_steps():
    p = Params(steps=12, tail=4, heldout=8)
    init, batches, heldout = lab_module._lm_data(np.random.default_rng(0), p)
    train, held, losses = lab_module._train_lm(init, batches, heldout, None, p)
    assert len(losses) == 12 and math.isfinite(held)
    assert train == float(np.mean(losses[-4:]))
    assert train != float(np.mean(losses[4:]))


def test_the_tiny_lm_is_the_contract_s_block_then_a_final_norm_and_the_tied_head():
    """Against the reference's transformer_block and rms_norm (eps 1e-6), with norm weights
    drawn from [0.5, 1.5] so a norm that divides by its weight shows; float64, 1e-12."""
    p = Params()
    rng = np.random.default_rng(0)
    init, batches, _ = lab_module._lm_data(rng, p)
    for name in ("norm1", "norm2", "final_norm"):
        init[name] = rng.uniform(0.5, 1.5, p.width)
    ids = batches[0][:, :-1]  # (B, T)
    P = {name: torch.tensor(value) for name, value in init.items()}
    blocked = torch.from_numpy(reference.causal_mask(p.context))
    got = lab_module._lm_logits(P, torch.from_numpy(ids), blocked, p.heads).numpy()
    x = init["embed"][ids] + init["pos"][: p.context]  # (B, T, C)
    block = {name: init[name] for name in BLOCK_KEYS}
    y = reference.transformer_block(x, block, p.heads)
    want = reference.rms_norm(y, init["final_norm"], eps=1e-6) @ init["embed"].T  # (B, T, V)
    assert got.shape == (p.batch, p.context, p.vocab)
    assert np.max(np.abs(got - want)) <= 1e-12


def test_adam_written_out_is_torch_s_adam():
    """Five steps on two float64 tensors with made-up gradients: the same updates, 1e-12."""
    rng = np.random.default_rng(0)
    ours = [torch.tensor(rng.standard_normal(s), requires_grad=True) for s in ((3, 4), (5,))]
    theirs = [q.detach().clone().requires_grad_(True) for q in ours]
    adam = lab_module._Adam(ours, lr=0.01)
    torch_adam = torch.optim.Adam(theirs, lr=0.01, betas=(0.9, 0.999), eps=1e-8)
    for _ in range(5):
        grads = [torch.tensor(rng.standard_normal(q.shape)) * 1e-3 for q in ours]
        for q, g in zip(ours, grads, strict=True):
            q.grad = g.clone()
        for q, g in zip(theirs, grads, strict=True):
            q.grad = g.clone()
        adam.step()
        torch_adam.step()
        for a, b in zip(ours, theirs, strict=True):
            assert torch.max(torch.abs(a - b)).item() <= 1e-12


def test_the_prefix_probe_is_the_largest_move_of_any_prefix_when_the_rest_moves():
    """Its value by definition: max over t of |out[:t+1]| moved by noise on keys and values
    after t; and a mask that lets only position T-2 see T-1 is caught at t = T-2 alone."""
    rng = np.random.default_rng(1)
    q, k, v, noise_k, noise_v = (rng.standard_normal((1, 2, 5, 4)) for _ in range(5))
    leaky = np.triu(np.ones((5, 5), dtype=bool), k=1)
    leaky[3, 4] = False
    for mask in (None, leaky):
        out, _ = reference.scaled_dot_product_attention(q, k, v, mask)
        want = 0.0
        for t in range(4):
            later = np.zeros((1, 1, 5, 1), dtype=bool)
            later[:, :, t + 1 :] = True
            moved, _ = reference.scaled_dot_product_attention(
                q, np.where(later, k + noise_k, k), np.where(later, v + noise_v, v), mask
            )
            want = max(want, float(np.max(np.abs(moved[:, :, : t + 1] - out[:, :, : t + 1]))))
        got = lab_module._probe(reference, q, k, v, noise_k, noise_v, mask)[2]
        assert got == pytest.approx(want, abs=1e-15)
        assert got > 1e-3


def test_the_noise_is_scaled_by_the_perturbation_parameter():
    """No mask: the prefix moves in proportion to the noise; at 1e-6 it moves by ~1e-6."""
    small = rows(run_here(reference, Params(perturbation=1e-6, steps=5, tail=1, heldout=4)))
    moved = small[(TEMPLATE, "clean-room")].actual
    assert 0 < moved < 1e-4
