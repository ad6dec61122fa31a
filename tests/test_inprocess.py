"""labctl's own fault rooms run in labctl's process (`labctl.isolation.inprocess`): each answers
exactly as it does in a worker, a fault that hangs never runs here, and a learner's room
never does."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from fixturetools import same

from labctl import faults
from labctl.isolation import inprocess
from labctl.isolation.inprocess import InProcessRoom
from labctl.verify import diagnosis as dg
from labctl.verify.builders import fresh_seed
from labctl.verify.observe import FunctionRun, Outcome, RoomObservation, observe
from labctl.verify.stubs import init_clean_room
from labctl.verify.verify import verify_clean_room

TIMEOUT_S = 10.0  # a busy machine's worker; no call of a fault that does not hang comes near
MEMORY_MB = 2048


@pytest.fixture(scope="module")
def seed():
    """Inputs nobody knew in advance (printed, to rerun a failure)."""
    drawn = fresh_seed()
    print(f"fault rooms compared at seed {drawn}")
    return drawn


@pytest.fixture(scope="module")
def rooms(tmp_path_factory):
    return dg.FaultRooms()


def differences(worker: Outcome, here: Outcome) -> list[str]:
    found = [
        field
        for field in ("kind", "exc_type", "where", "mutated", "skipped_for")
        if getattr(worker, field) != getattr(here, field)
    ]
    if str(worker.message) != str(here.message):
        found.append("message")
    if not same(worker.value, here.value, equal_nan=True):
        found.append("value")
    if len(worker.calls) != len(here.calls) or any(
        (a.function, a.depth, a.raised) != (b.function, b.depth, b.raised)
        or not same(a.args, b.args, equal_nan=True)
        or not same(a.kwargs, b.kwargs, equal_nan=True)
        or not same(a.out, b.out, equal_nan=True)
        for a, b in zip(worker.calls, here.calls, strict=False)
    ):
        found.append("calls")
    return found


def compare_runs(worker: FunctionRun, here: FunctionRun) -> list[str]:
    found = []
    for part in ("fixtures", "probes", "causal", "bad"):
        a, b = getattr(worker, part), getattr(here, part)
        if a.keys() != b.keys():
            found.append(f"{part}: {sorted(a)} != {sorted(b)}")
            continue
        found += [f"{part}[{k}]: {d}" for k in a if (d := differences(a[k], b[k]))]
    return found


def compare_rooms(worker: RoomObservation, here: RoomObservation) -> list[str]:
    found = [
        field
        for field in ("status", "violations", "deviations", "declared", "contract", "over_budget")
        if getattr(worker, field) != getattr(here, field)
    ]
    if worker.runs.keys() != here.runs.keys():
        return [*found, "runs"]
    for function in worker.runs:
        found += [
            f"{function} {d}" for d in compare_runs(worker.runs[function], here.runs[function])
        ]
    return found


def beyond_numpy_warnings(printed: str) -> list[str]:
    """What a room printed, less numpy's floating-point warnings (each a line and the source
    line under it), which `InProcessRoom` keeps off labctl's stderr."""
    lines = printed.splitlines()
    return [
        line
        for i, line in enumerate(lines)
        if "RuntimeWarning: " not in line and not (i and "RuntimeWarning: " in lines[i - 1])
    ]


CALM = [f for f in faults.CATALOGUE if not f.hangs]


@pytest.mark.parametrize("fault", CALM, ids=lambda f: f.name)
def test_a_fault_room_answers_here_exactly_as_in_a_worker(fault, rooms, seed):
    """Every outcome of the fault's function (fixtures, float32 probes, causal variants, bad
    input): kind, exception, place, inputs edited, value and calls traced, equal; and the room
    prints nothing in a worker but numpy's warnings, so nothing of it reaches labctl's output."""
    root = rooms.path(fault)
    functions = (fault.function,)
    worker = observe(root, TIMEOUT_S, MEMORY_MB, functions=functions, seed=seed)
    # Nothing could stop it here: a fault that hangs says so (`Fault.hangs`).
    assert not any(run.timed_out for run in worker.runs.values()), fault.name
    # Observed here at another seed first: the room loaded then is the one that answers.
    observe(root, TIMEOUT_S, MEMORY_MB, functions=functions, seed=seed + 1, in_process=True)
    here = observe(root, TIMEOUT_S, MEMORY_MB, functions=functions, seed=seed, in_process=True)
    assert here.isolation == "in-process" and worker.isolation in ("sandbox", "process")
    assert beyond_numpy_warnings(worker.output) == [], worker.output
    assert compare_rooms(worker, here) == [], fault.name


def test_a_room_observed_at_another_seed_adds_no_modules(rooms, seed):
    """A long-lived process (a Dask worker, batch after batch) would otherwise hold every fault
    room's modules once per seed it met."""
    fault = CALM[0]
    root = rooms.path(fault)
    observe(root, TIMEOUT_S, MEMORY_MB, (fault.function,), seed=seed, in_process=True)
    before = len(sys.modules)
    for other in range(1, 4):
        observe(root, TIMEOUT_S, MEMORY_MB, (fault.function,), seed=seed + other, in_process=True)
    assert len(sys.modules) == before


def test_an_edited_room_is_loaded_again(tmp_path):
    room = faults.get("softmax-no-max").materialize(tmp_path / "clean_room")
    first = observe(room, TIMEOUT_S, MEMORY_MB, ("softmax",), in_process=True)
    with (room / "primitives.py").open("a") as handle:
        handle.write("\n\ndef softmax(x, axis=-1):\n    raise ValueError('edited')\n")
    again = observe(room, TIMEOUT_S, MEMORY_MB, ("softmax",), in_process=True)
    assert next(iter(first.runs["softmax"].fixtures.values())).kind == "value"
    assert {o.kind for o in again.runs["softmax"].fixtures.values()} == {"exception"}


def test_the_comparison_catches_a_room_that_shares_its_inputs(rooms, seed, monkeypatch):
    """Without the wire's copy of the request, the fault that edits its input would edit
    labctl's own arrays and no edit would be seen: the comparison above fails on it."""
    fault = faults.get(next(f.name for f in CALM if f.signal == "pure"))
    root = rooms.path(fault)
    functions = (fault.function,)
    worker = observe(root, TIMEOUT_S, MEMORY_MB, functions=functions, seed=seed)
    monkeypatch.setattr(inprocess, "_as_sent", lambda message: message)
    here = observe(root, TIMEOUT_S, MEMORY_MB, functions=functions, seed=seed, in_process=True)
    assert any("mutated" in d for d in compare_rooms(worker, here))


def test_a_fault_that_hangs_hangs_in_a_worker_and_is_observed_only_for_a_learner_that_hangs(
    tmp_path, monkeypatch
):
    hang = next(f for f in faults.CATALOGUE if f.hangs)
    seen = observe(hang.materialize(tmp_path / "hang" / "clean_room"), 1.0, 512, (hang.function,))
    run = seen.runs[hang.function]
    assert next(iter(run.fixtures.values())).kind == "timeout"
    assert all(o.kind in ("timeout", "skipped") for o in run.outcomes())

    observed: list[str] = []
    real = dg.FaultRooms.observe

    def spy(self, fault, *args, **kwargs):
        observed.append(fault.name)
        return real(self, fault, *args, **kwargs)

    monkeypatch.setattr(dg.FaultRooms, "observe", spy)
    # A learner's sinusoidal_positions that answers, wrongly: the hang cannot be its fault.
    room = tmp_path / "learner" / "clean_room"
    faults.get("rms-eps-outside-sqrt").materialize(room)
    with (room / "primitives.py").open("a") as handle:
        handle.write(
            "\n\ndef sinusoidal_positions(seq_len, d_model):\n"
            "    return np.ones((seq_len, d_model))\n"
        )
    report = verify_clean_room(room, 5.0, out=None, measure=False)
    assert {c.function for c in report.checks if c.failed} >= {"sinusoidal_positions"}
    assert observed and hang.name not in observed


def test_a_learners_room_never_loads_in_labctls_process(tmp_path, monkeypatch):
    loaded = []
    real = InProcessRoom.__init__

    def spy(self, path, *args, **kwargs):
        loaded.append(path)
        real(self, path, *args, **kwargs)

    monkeypatch.setattr(InProcessRoom, "__init__", spy)
    room = tmp_path / "clean_room"
    faults.get("softmax-no-max").materialize(room)
    report = verify_clean_room(room, 5.0, out=None, measure=False)
    assert [d.fault for d in report.diagnosis if d.function == "softmax"] == ["softmax-no-max"]
    assert loaded, "the diagnosis observed no fault room here"
    fault_dir = dg.ROOMS.path(faults.get("softmax-no-max")).parent.parent
    assert all(path.is_relative_to(fault_dir) for path in loaded), loaded
    assert room not in loaded


def test_a_keyboard_interrupt_is_labctls_not_the_rooms(tmp_path):
    room = tmp_path / "clean_room"
    init_clean_room(room)
    with (room / "transformer_block.py").open("a") as handle:
        handle.write("\n\ndef softmax(x, axis=-1):\n    raise KeyboardInterrupt\n")
    with InProcessRoom(room, 1.0) as loaded, pytest.raises(KeyboardInterrupt):
        loaded.invoke("softmax", np.zeros(3))
