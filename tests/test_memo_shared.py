"""What a grading batch's workers share through a folder (`labctl.memo_shared`).

A value crosses exactly (types, dtypes, bits) or not at all; a file that does not read back
exactly is a miss, never a value; the labs are split so that each is computed once; a worker
waits for what another still computes, never for a worker that is gone. And a learner's lab
values, computed on results another process shared, are those a fresh process computes.
"""

from __future__ import annotations

import math
import os
import threading
import time

import numpy as np
import pytest

from labctl import contract, faults, memo, reference, registry
from labctl.isolation import sealed
from labctl.isolation.sandbox import CleanRoom
from labctl.lab import Implementation
from labctl.memo_shared import Shared, Unshareable, read, write
from labctl.runner import run_lab
from labctl.verify.verify import template_reference

SEED = 20261207
LABS = ("mask-ablation", "residual-ablation", "scale-ablation")


def _same(a, b) -> bool:
    """Equal, and of the same types all the way down (np.float64 is not float)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, float):
        return a.hex() == b.hex()
    if isinstance(a, np.generic):
        return a.tobytes() == b.tobytes()
    return a == b


VALUES = {
    "arrays": [
        np.arange(12, dtype=np.float64).reshape(3, 4)[:, ::2],  # not contiguous
        np.zeros((0, 5), np.float32),
        np.array(3.5),
        np.array([True, False]),
        np.array([1 + 2j], np.complex64),
        np.array(["ab", "ü"]),
    ],
    "scalars": (np.float64(0.1), np.int64(-3), np.float32(np.nan), np.bool_(True)),
    "numbers": [1, -(2**100), 0.1, -0.0, math.inf, math.nan, True, None],
    "text": ["", "注意力", "\udcff"],
    "keys": {2: "two", (1, "a"): [()], "s": {}},
}


@pytest.mark.parametrize("name", VALUES)
def test_a_value_reads_back_exactly(tmp_path, name):
    value = VALUES[name]
    write(tmp_path / "v", value)
    assert _same(read(tmp_path / "v"), value)


@pytest.mark.parametrize(
    "value",
    [
        np.array([object()]),
        np.array(["2026-12-07"], "datetime64[D]"),
        {1, 2},
        [object()],
        b"x",
        {"k": 1j},
    ],
)
def test_what_the_format_cannot_carry_is_refused_and_leaves_no_file(tmp_path, value):
    with pytest.raises(Unshareable):
        write(tmp_path / "v", value)
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_does_not_read_back_exactly_is_a_miss(tmp_path):
    path = tmp_path / "k.memo"
    write(path, {"a": np.arange(1000.0)})
    whole = path.read_bytes()
    shared = Shared(tmp_path, 1 << 20)
    assert shared.load("k")[0]
    broken = {
        "cut short": whole[:-8],
        "longer": whole + b"\0",
        "another format": b"PK\x03\x04" + whole[4:],
        "an object array named": whole.replace(b'"<f8"', b'"|O8"', 1),
        "a header past the file": whole[:8] + (1 << 40).to_bytes(8, "little") + whole[16:],
    }
    for what, data in broken.items():
        path.write_bytes(data)
        with pytest.raises(ValueError):
            read(path)
        assert shared.load("k") == (False, None), what
    assert shared.load("absent") == (False, None)


def test_the_first_to_take_a_work_computes_it_and_the_end_is_marked(tmp_path):
    one, two = Shared(tmp_path, 1 << 20), Shared(tmp_path, 1 << 20)
    with one.take("lab") as mine, two.take("lab") as theirs:
        assert mine and not theirs
        assert not (tmp_path / "lab.done").exists()
    assert (tmp_path / "lab.done").exists()
    with pytest.raises(RuntimeError), one.take("failing") as mine:
        assert mine
        raise RuntimeError  # however it ends, no one waits for it any more
    assert (tmp_path / "failing.done").exists()


def test_a_miss_waits_for_what_another_computes_and_only_for_that(tmp_path, monkeypatch):
    writer, reader = Shared(tmp_path, 1 << 20), Shared(tmp_path, 1 << 20)
    taken = threading.Event()

    def compute_later():
        with writer.take("lab"):
            taken.set()
            time.sleep(0.3)
            writer.save("k", np.ones(3), 24)

    thread = threading.Thread(target=compute_later)
    thread.start()
    taken.wait()
    start = time.monotonic()
    found, value = reader.wait("k")
    thread.join()
    assert found and value.tolist() == [1.0, 1.0, 1.0]
    assert time.monotonic() - start >= 0.2
    # Work taken by a process that is gone is waited for no more.
    (tmp_path / "orphan.taken").write_text("999999999 -")
    start = time.monotonic()
    assert reader.wait("never") == (False, None)
    assert time.monotonic() - start < 1.0
    # A process that has taken work itself never waits: two such would wait on each other.
    (tmp_path / "busy.taken").write_text(f"{os.getpid()} -")
    with reader.take("mine") as mine:
        assert mine
        start = time.monotonic()
        assert reader.wait("never") == (False, None)
        assert time.monotonic() - start < 1.0


def test_memo_reads_what_another_process_shared(tmp_path, remembering):
    calls = []

    def draw_and_count():
        calls.append(1)
        return np.random.default_rng(SEED).standard_normal(4), 1.5

    memo.share(tmp_path)
    first = memo.remember(("k",), draw_and_count)
    rng = np.random.default_rng(SEED)
    drawn = memo.remember_draws(rng, ("draws",), lambda: rng.standard_normal((2, 3)))
    memo.disable()  # another process: nothing in memory, the same folder
    memo.enable()
    memo.share(tmp_path)
    again = memo.remember(("k",), draw_and_count)
    rng = np.random.default_rng(SEED)
    shared_draws = memo.remember_draws(rng, ("draws",), lambda: pytest.fail("drawn again"))
    assert calls == [1] and _same(again, first)
    assert _same(shared_draws.copy(), drawn.copy()) and sealed.immutable(shared_draws)
    fresh = np.random.default_rng(SEED)
    fresh.standard_normal((2, 3))
    assert rng.bit_generator.state == fresh.bit_generator.state  # as if it had drawn them
    again[0][:] = 0  # what a caller got is its own
    assert _same(memo.remember(("k",), draw_and_count), first)


def test_what_is_computed_inside_another_remembered_computation_is_neither_kept_nor_shared(
    tmp_path, remembering
):
    """The outer result is kept, which makes the inner one unneeded: not digested, not
    copied, not written."""
    memo.share(tmp_path)
    inner = []

    def compute_inner():
        inner.append(1)
        return np.ones(2)

    memo.remember(("outer",), lambda: memo.remember(("inner",), compute_inner) * 2)
    assert len(list(tmp_path.glob("*.memo"))) == 1 and memo._held == 16  # the outer alone
    memo.remember(("inner",), compute_inner)  # on its own: computed, kept and written
    assert len(inner) == 2 and len(list(tmp_path.glob("*.memo"))) == 2


def _rows(result) -> list[tuple]:
    return sorted((m.name, m.impl, m.actual) for m in result.metrics)


def test_a_learner_gets_what_a_fresh_process_computes_from_what_another_shared(
    tmp_path, remembering, monkeypatch
):
    """The labs' reference side computed by one process (`template_reference`) and read by
    another: the reversed-mask room's values are a fresh process's, bit for bit."""
    labs = {lab.id: lab for lab in registry.discover() if lab.id in LABS}
    folder = tmp_path / "shared"
    folder.mkdir()
    fault = faults.get("mask-reversed").materialize(tmp_path / "reversed" / "clean_room")
    memo.share(folder)
    template_reference(SEED)
    assert {p.name for p in folder.glob("*.done")} >= {
        f"template-reference-{lab}-{SEED}.done" for lab in LABS
    }
    plain = Implementation("reference", reference)
    read_back = []
    real_load = Shared.load

    def load(self, key):
        found = real_load(self, key)
        read_back.append(found[0])
        return found

    with CleanRoom(fault, 20, 4096) as theirs:
        for lab_id, lab in labs.items():
            memo.disable()
            fresh = run_lab(
                lab, SEED, {"reference": plain, "clean-room": Implementation("clean-room", theirs)}
            )
            memo.enable()
            memo.share(folder)  # another process: only the folder
            kept = memo.Remembered(reference, contract.function_names(2), "reference")
            read_back.clear()
            monkeypatch.setattr(Shared, "load", load)
            served = run_lab(
                lab,
                SEED,
                {
                    "reference": Implementation("reference", kept),
                    "clean-room": Implementation("clean-room", theirs),
                },
            )
            monkeypatch.setattr(Shared, "load", real_load)
            assert not fresh.error and not served.error, (lab_id, fresh.error, served.error)
            assert _rows(served) == _rows(fresh), lab_id
            assert any(read_back), f"{lab_id}: nothing read from the folder"


def test_an_owner_is_a_process_id_and_its_start_so_a_reused_id_is_not_it():
    from labctl import owners

    me = owners.owner(os.getpid())
    assert owners.alive(me) and owners.parse(me)[0] == os.getpid()
    assert not owners.alive(f"{os.getpid()} 1")  # this id, but a process started at boot
    assert owners.alive(f"{os.getpid()} -")  # a start not known: the id decides
    for text in ("", "12", "x -", "-1 -", "1 2 3"):
        assert owners.parse(text) is None and not owners.alive(text)
