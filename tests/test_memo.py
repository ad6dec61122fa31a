"""The reference side of the template labs, computed once per grading worker (`labctl.memo`).

A grading worker remembers labctl's own pure computations at the batch's seed (the
reference's calls on the labs' inputs, the mask ablation's language models, the residual
ablation's gradients), keyed by a digest of everything they depend on. The values a
learner gets must be those a fresh process computes, bit for bit, whoever was graded
before: here a room with a reversed causal mask, after labctl's own room, in the labs
whose reference side is remembered.
"""

from __future__ import annotations

import numpy as np
import pytest
from gradetools import ROOM

from labctl import contract, faults, memo, reference, registry
from labctl.isolation.sandbox import CleanRoom
from labctl.lab import Implementation
from labctl.runner import run_lab

SEED = 20260306
LABS = ("mask-ablation", "residual-ablation", "scale-ablation")
# Smaller than the labs' defaults: what is remembered, and under which digest, is the same at
# any size (the defaults' scale ablation and 80 Adam steps were most of this module's CPU).
SMALL = {"mask-ablation": {"steps": 10, "tail": 5, "heldout": 32},
         "scale-ablation": {"pairs": 1000, "rows": 256}}  # fmt: skip


def test_a_digest_is_the_content_of_every_part():
    a = np.arange(6, dtype=np.float64)
    assert memo.digest(("x", a, {"p": 1})) == memo.digest(("x", a.copy(), {"p": 1}))
    others = (a.astype(np.float32), a.reshape(2, 3), a + 1e-12, ("x", a, {"p": 2}))
    digests = {memo.digest(("x", other, {"p": 1})) for other in others[:3]}
    digests.add(memo.digest(others[3]))
    assert memo.digest(("x", a, {"p": 1})) not in digests and len(digests) == 4
    assert memo.digest((1, 1.0, True)) != memo.digest((1.0, 1, True))
    assert memo.digest(object()) is None  # no content digest: never remembered


def test_only_a_process_that_turned_it_on_remembers(remembering):
    calls = []

    def compute():
        calls.append(1)
        return np.ones(3)

    first = memo.remember(("k",), compute)
    first[:] = 7  # a caller changing what it got changes nothing kept
    again = memo.remember(("k",), compute)
    assert len(calls) == 1 and again.tolist() == [1.0, 1.0, 1.0]
    again[:] = 9
    assert memo.remember(("k",), compute).tolist() == [1.0, 1.0, 1.0]
    memo.remember((object(),), compute)  # no digest: computed
    assert len(calls) == 2
    memo.disable()
    memo.remember(("k",), compute)
    assert len(calls) == 3


def test_nothing_is_kept_past_the_limit(remembering):
    memo.enable(limit=1000)
    calls = []

    def big():
        calls.append(1)
        return np.zeros(1000)

    memo.remember(("big",), big)
    memo.remember(("big",), big)
    assert len(calls) == 2


def test_remembered_draws_leave_the_generator_where_a_fresh_run_would(remembering):
    def run() -> tuple[np.ndarray, float]:
        rng = np.random.default_rng(SEED)
        drawn = memo.remember_draws(rng, ("draws",), lambda: rng.standard_normal(5))
        return drawn, rng.standard_normal()  # the next draw, after the remembered ones

    memo.disable()
    fresh = run()
    memo.enable()
    first, again = run(), run()
    for got in (first, again):
        assert got[0].tolist() == fresh[0].tolist() and got[1] == fresh[1]
    # handed out without a copy, and read-only, so no lab can change what the next one reads
    assert np.shares_memory(first[0], again[0])
    with pytest.raises(ValueError, match="read-only"):
        again[0][0] = 7.0
    assert run()[0].tolist() == fresh[0].tolist()


def test_remembered_draws_are_what_was_drawn_and_no_one_can_write_them(remembering):
    """Kept as drawn (the scale ablation's 171 MB were copied once per grading worker), and
    read-only down to the array owning the memory: so a grading worker sends them to each
    learner's room in one sealed file (`labctl.isolation.sealed.immutable`)."""
    from labctl.isolation import sealed

    rng = np.random.default_rng(SEED)
    made = []

    def draw() -> tuple[np.ndarray, np.ndarray]:
        whole = rng.standard_normal(12)
        made.append(whole)
        return whole[:6].reshape(2, 3), whole[6:]

    pair = memo.remember_draws(rng, ("views",), draw)
    for part in pair:
        assert np.shares_memory(part, made[0])  # not a copy
        assert sealed.immutable(part)
        with pytest.raises(ValueError, match="read-only"):
            part.base[0] = 7.0  # nor written through the array it views
        with pytest.raises(ValueError):
            part.flags.writeable = True
    assert not made[0].flags.writeable


def _rows(result) -> list[tuple]:
    return sorted((m.name, m.impl, m.actual) for m in result.metrics)


def test_a_learner_gets_what_a_fresh_process_computes_whoever_came_before(tmp_path, remembering):
    """Fails if a digest left out what a result depends on (the room's own mask, say): the
    reversed-mask room would be given the language model trained with labctl's mask."""
    labs = {lab.id: lab for lab in registry.discover() if lab.id in LABS}
    fault = faults.get("mask-reversed").materialize(tmp_path / "reversed" / "clean_room")
    plain = Implementation("reference", reference)
    kept = Implementation(
        "reference", memo.Remembered(reference, contract.function_names(2), "reference")
    )
    with CleanRoom(ROOM, 20, 4096) as ours, CleanRoom(fault, 20, 4096) as theirs:
        for lab_id, lab in labs.items():
            params = lab.params(**SMALL.get(lab_id, {}))
            memo.disable()
            fresh = run_lab(
                lab,
                SEED,
                {"reference": plain, "clean-room": Implementation("clean-room", theirs)},
                params,
            )
            memo.enable()
            run_lab(
                lab,
                SEED,
                {"reference": kept, "clean-room": Implementation("clean-room", ours)},
                params,
            )
            served = run_lab(
                lab,
                SEED,
                {"reference": kept, "clean-room": Implementation("clean-room", theirs)},
                params,
            )
            assert not fresh.error and not served.error, (lab_id, fresh.error, served.error)
            assert _rows(served) == _rows(fresh), lab_id
