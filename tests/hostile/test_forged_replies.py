"""Replies a room forges to make labctl's own process hold memory, spend time, or crash.

A worker's reply is read in labctl's process, so a room that writes on the worker's pipe
(it finds the wire module in `sys.modules`, as the `forged-reply` attack does) decides what
labctl decodes. Each attack below is its own room (the stubs, `softmax` replaced) and each
is sized to prove the bound, never to take the machine down: a cap lowered for the test or a
payload just past it, where the old code took labctl to gigabytes:

- a JSON header of `[]`s (120 MiB took 7 GB): decoding is counted against the reply budget
  before anything is built;
- a frame of many zero-size arrays (1,000,000 took 2.87 GB): a named limit;
- an exception message of megabytes (200 MiB took 6.2 GB and wrote 200 MB records): a
  reply whose text is past what a worker sends is malformed;
- an array of shape [0, 10**30] (an internal ValueError in verify, an `internal-error`
  row in grade): a named malformed reply;
- a trace of calls judged in labctl with NumPy integers as sizes (`causal_mask(np.int64(50000))`
  took labctl's reference to 5 GB), and traces of many calls whose judging ran a verify to
  481 s of its 120 s budget.

Forging the wire works alike at both levels (labctl reads the same pipe); the frames are
refused in labctl's process, so one level shows each.
"""

from __future__ import annotations

import gc
import json
import textwrap
import time
import tracemalloc
import uuid
from pathlib import Path

import numpy as np
import pytest
from gradetools import append, copy_room, rubric_without
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.errors import CallError
from labctl.isolation import replies, wire
from labctl.isolation.sandbox import CleanRoom
from labctl.verify import calls
from labctl.verify.builders import fresh_seed
from labctl.verify.stubs import init_clean_room

# Every verify here draws its inputs from one fresh seed, as one grading batch does: the
# reference's outputs and the diagnosis's fault rooms at it are computed once in this process,
# not again for each forged room (the forgeries are on labctl's reading of replies, whatever
# the seed).
SEED = str(fresh_seed())

# Installed at import: the reply to each call of softmax goes through `_forge(seq)`, which
# writes the frame the attack wants in its place (the load's reply and the other functions'
# are the worker's own: a malformed reply ends its worker, and forging all 170 of verify's
# calls only started 170 workers).
_FORGER = """
import json as _json, os as _os, struct as _struct, sys as _sys
_wire = _sys.modules["labctl.isolation.wire"]
_send = _wire.write_frame

def _raw(fd, tree, blobs=(), data=b""):
    header = _json.dumps({"tree": tree, "blobs": list(blobs)}).encode()
    body = _struct.pack(">I", len(header)) + header + data
    view = memoryview(_struct.pack(">Q", len(body)) + body)
    while view:
        view = view[_os.write(fd, view):]

def _reply(seq, **fields):
    return {"$dict": {"seq": seq, **fields}}

def _write(fd, message):
    if "signatures" in message or message.get("seq") is None or not _FORGING:
        return _send(fd, message)
    _FORGING.clear()
    return _forge(fd, message)

_FORGING = []

_wire.write_frame = _write
"""
HEADER_OF_LISTS = """
def _forge(fd, message):
    lists = [[] for _ in range({N})]
    _raw(fd, _reply(message["seq"], ok=True, value=lists, elapsed_s=0.0, args_after=None))
"""
ZERO_SIZE_ARRAYS = """
def _forge(fd, message):
    specs = [{"dtype": "<f8", "shape": [0]}] * {N}
    value = [{"$nd": i} for i in range({N})]
    _raw(fd, _reply(message["seq"], ok=True, value=value, elapsed_s=0.0, args_after=None), specs)
"""
LONG_MESSAGE = """
def _forge(fd, message):
    error = {"kind": "exception", "type": "ValueError", "message": "x" * {N}, "where": None}
    _raw(fd, _reply(message["seq"], ok=False, error={"$dict": error}))
"""
HUGE_EMPTY_SHAPE = """
def _forge(fd, message):
    spec = {"dtype": "<f8", "shape": [0, 10**30]}
    fields = {"ok": True, "value": {"$nd": 0}, "elapsed_s": 0.0, "violations": []}
    if "args_after" in message and message["args_after"] is not None:
        fields["args_after"] = [[], {"$dict": {}}]
    _raw(fd, _reply(message["seq"], **fields), [spec])
"""
# The worker's own reply, its trace (asked for with each of verify's calls) replaced.
FORGED_TRACE = """
import numpy as _np

def _forge(fd, message):
    if "trace" in message:
        message["trace"] = {ENTRIES}
    return _send(fd, message)
"""
BIG_SIZES = (
    '[{"function": "causal_mask", "depth": 1, "args": [_np.int64(50000)], "kwargs": {}, '
    '"raised": "ValueError"}, '
    '{"function": "causal_mask", "depth": 1, "args": [_np.array(60000)], "kwargs": {}, '
    '"raised": "ValueError"}, '
    '{"function": "sinusoidal_positions", "depth": 1, "args": [_np.uint32(70000), 8], '
    '"kwargs": {}, "raised": "ValueError"}, '
    '{"function": "repeat_kv", "depth": 1, "args": [_np.zeros((1, 1, 2, 2)), _np.int16(30000)], '
    '"kwargs": {}, "raised": "ValueError"}]'
)
# Calls the reference accepts, whose output "did not travel" (too large): each is judged in
# labctl, and judged correct, so the diagnosis goes on to the next.
MANY_CALLS = (
    '[{"function": "causal_mask", "depth": 1, "args": [8], "kwargs": {}, '
    '"out": {"$too-large": [[8, 8], "bool"]}}] * 47'
)


def forging_room(parent: Path, attack: str, **values: str) -> Path:
    dest = parent / f"forged{uuid.uuid4().hex[:12]}"
    init_clean_room(dest)
    code = textwrap.dedent(_FORGER) + textwrap.dedent(attack)
    for key, value in values.items():
        code = code.replace("{" + key + "}", value)
    # softmax returns zeros (a failing function whose calls are diagnosed) and marks its
    # reply for the forger, which replaces what the worker sends.
    code += "\n\ndef softmax(x, axis=-1):\n    _FORGING.append(True)\n    return _np_zeros(x)\n"
    code += "\ndef _np_zeros(x):\n    import numpy\n    return numpy.zeros_like(x)\n"
    with (dest / "__init__.py").open("a", encoding="utf-8") as handle:
        handle.write("\n\n" + code + "\n")
    return dest


def called(path: Path) -> CallError:
    with CleanRoom(path, timeout_s=30, isolation="process") as room, pytest.raises(CallError) as e:
        room.call("softmax", np.zeros(3))
    return e.value


def verify(path: Path, *extra: str) -> tuple[int, dict]:
    result = CliRunner().invoke(
        app,
        [
            "verify",
            "clean-room",
            "--path",
            str(path),
            "--no-metrics",
            "--json",
            "--timeout",
            "10",
            "--isolation",
            "process",
            "--out",
            str(path.parent / "evidence"),
            "--seed",
            SEED,
            *extra,
        ],
    )
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(result.stdout)


def test_a_header_of_empty_lists_is_counted_against_the_budget_before_it_is_built(
    tmp_path, monkeypatch
):
    # A 1.5 MiB header (half a million lists) against a budget 8 MiB above what labctl holds:
    # its decoding would build some 60 MiB of lists, counted first and refused unbuilt.
    monkeypatch.setattr(replies.BUDGET, "limit", replies.BUDGET.held + (8 << 20))
    failure = called(forging_room(tmp_path, HEADER_OF_LISTS, N=str(500_000)))
    assert failure.kind == "malformed" and "labctl's reply budget" in str(failure), failure


def test_a_frame_of_many_zero_size_arrays_is_refused_by_name(tmp_path):
    count = 20_000  # past the limit (16,384), where 1,000,000 took labctl to 2.87 GB
    failure = called(forging_room(tmp_path, ZERO_SIZE_ARRAYS, N=str(count)))
    assert failure.kind == "malformed", failure
    assert f"{count} arrays in one frame exceed" in str(failure), failure
    assert count > wire.MAX_ARRAYS


def test_a_message_of_megabytes_is_a_malformed_reply_and_the_records_stay_small(tmp_path):
    room = forging_room(tmp_path, LONG_MESSAGE, N=str(2 << 20))
    failure = called(room)
    assert failure.kind == "malformed" and "characters exceeds" in str(failure), failure
    code, document = verify(room)
    assert code == 1 and "malformed reply" in json.dumps(document)
    written = [p for p in (tmp_path / "evidence").rglob("*") if p.is_file()]
    assert written and all(p.stat().st_size < 1 << 20 for p in written), [
        (p.name, p.stat().st_size) for p in written
    ]


def test_an_array_of_shape_0_by_10_to_the_30_is_a_named_malformed_reply(tmp_path):
    room = forging_room(tmp_path, HUGE_EMPTY_SHAPE)
    failure = called(room)
    assert failure.kind == "malformed" and "exceeds the" in str(failure), failure
    code, document = verify(room)
    assert code == 1
    runs = next(c for c in document["checks"] if c["function"] == "softmax" and c["name"] == "runs")
    assert runs["status"] == "fail" and "malformed reply" in json.dumps(runs), runs


def test_grade_gives_an_array_of_shape_0_by_10_to_the_30_a_row_not_an_internal_error(tmp_path):
    klass = tmp_path / "class"
    forging_room(klass / "forger", HUGE_EMPTY_SHAPE).rename(klass / "forger" / "clean_room")
    rubric = rubric_without(tmp_path, "metric", "submission")
    result = CliRunner().invoke(
        app,
        [
            "grade",
            str(klass),
            "--out",
            str(tmp_path / "grades"),
            "--rubric",
            str(rubric),
            "--jobs",
            "1",
            "--isolation",
            "process",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)["rows"]
    assert row["status"] != "internal-error", row
    feedback = (tmp_path / "grades").rglob("forger*")
    assert any("malformed reply" in p.read_text("utf-8") for p in feedback if p.is_file())


def test_numpy_integers_in_a_forged_trace_never_reach_labctls_reference(tmp_path, monkeypatch):
    asked: list = []

    def reference_on(call):  # records what judging would have computed; computes nothing
        asked.append((call.function, call.args))
        return None, False

    monkeypatch.setattr(calls, "reference_on", reference_on)
    code, _ = verify(forging_room(tmp_path, FORGED_TRACE, ENTRIES=BIG_SIZES))
    assert code == 1
    sizes = [int(np.asarray(a)) for _, args in asked for a in args if np.ndim(a) == 0]
    assert all(abs(n) <= calls.MAX_INT_ARGUMENT for n in sizes), asked[:4]


def test_judging_traced_calls_stops_with_the_rooms_time_budget(tmp_path, monkeypatch):
    """47 forged calls per fixture, each judged at a cost: none is judged after the budget
    (a stand-in for an expensive reference, 0.2 s a call, keeps the test short)."""
    judge = calls.judge
    late: list[float] = []
    started = time.monotonic()
    budget = 8.0

    def costly(call):
        now = time.monotonic()
        # The room's own deadline where the call carries it, else a bound before it.
        if now > (getattr(call, "deadline", None) or started + budget) + 0.3:
            late.append(now - started)
            return calls.Judged(None)
        time.sleep(0.2)
        return judge(call)

    monkeypatch.setattr(calls, "judge", costly)
    code, document = verify(
        forging_room(tmp_path, FORGED_TRACE, ENTRIES=MANY_CALLS), "--budget", str(budget)
    )
    assert code == 1 and document["passed"] is False
    assert late == [], f"{len(late)} calls judged after the budget, the last at {late[-1]:.1f} s"


UNREADABLE = """
def _forge(fd, message):
    _raw(fd, _reply(message["seq"], ok=True, value=" " * (17 << 20)))
"""


def test_unreadable_frames_are_let_go_as_they_are_refused(tmp_path):
    """Each reply a frame of 17 MiB refused as unreadable (its header past 16 MiB): labctl
    holds none of them once its call has failed, the collector idle (an exception kept with
    its traceback held each frame's buffer in a cycle: 200 MiB messages took labctl to
    1.8 GiB)."""
    room = forging_room(tmp_path, UNREADABLE)
    gc.collect()
    gc.disable()
    tracemalloc.start()
    try:
        with CleanRoom(room, timeout_s=30, isolation="process") as clean:
            for _ in range(6):
                with pytest.raises(CallError, match="exceeds the 16777216 limit"):
                    clean.call("softmax", np.zeros(3))
            held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        gc.enable()
    assert held < 24 << 20, held


def test_a_room_that_breaks_the_policy_in_a_loop_keeps_its_records_small(tmp_path):
    """Every call of softmax asks for 300 packages of long names, new ones each call (each
    refused, each swallowed): the worker reports each refusal once, cut short, a hundred a
    reply, and the room's observation keeps 200. The records stay under 1 MiB where they
    grew with each call."""
    dest = tmp_path / "looping"
    init_clean_room(dest)
    with (dest / "__init__.py").open("a", encoding="utf-8") as handle:
        handle.write(
            textwrap.dedent(
                """

                import importlib as _importlib, itertools as _itertools
                _calls = _itertools.count()

                def softmax(x, axis=-1):
                    call = next(_calls)
                    for i in range(300):
                        try:
                            _importlib.import_module(f"forbidden_{call}_{i}_" + "x" * 900)
                        except ImportError:
                            pass
                    raise NotImplementedError
                """
            )
        )
    code, document = verify(dest)
    assert code == 1 and "breaks the import policy" in json.dumps(document)
    written = [p for p in (tmp_path / "evidence").rglob("*") if p.is_file()]
    assert written and all(p.stat().st_size < 1 << 20 for p in written), [
        (p.name, p.stat().st_size) for p in written
    ]


def test_the_labs_calls_share_the_rooms_time_budget(tmp_path):
    """The project's room whose softmax takes 1.5 s on any input larger than a fixture's:
    its calls on the fixtures end well within the budget, and the template's labs then call
    it on their own inputs. Verify ends near its budget, not after every lab's calls, and
    is over budget."""
    room = copy_room(tmp_path / "clean_room")
    append(
        room,
        "primitives",
        textwrap.dedent(
            """
            import time as _time
            _softmax = softmax

            def softmax(x, axis=-1):
                if np.size(x) > 4096:
                    _time.sleep(1.5)
                return _softmax(x, axis)
            """
        ),
    )
    budget = 15.0
    result = CliRunner().invoke(
        app,
        [
            "verify",
            "clean-room",
            "--path",
            str(room),
            "--json",
            "--timeout",
            "10",
            "--isolation",
            "process",
            "--budget",
            str(budget),
            "--out",
            str(tmp_path / "evidence"),
            "--seed",
            SEED,
        ],
    )
    document = json.loads(result.stdout)
    assert document["wall_time_s"] < budget + 20, document["wall_time_s"]
    # The labs ran out of the room's time: over budget, never a pass.
    assert document["status"] == "over-budget" and document["passed"] is False, document
    assert document["not_run"] == ["metrics"]
