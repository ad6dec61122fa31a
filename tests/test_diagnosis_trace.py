"""The record of what a call reached (`calltrace` in the worker) and its judging in labctl.

The worker wraps the room's contract functions wherever its modules hold them,
so a call from one to another is seen however it was imported; a trace comes
back only when asked, bounded in size, and is checked like any reply. Each
recorded call is then judged here, against the reference on the inputs it
actually received.
"""

from __future__ import annotations

import misdiagnosed as m
import numpy as np
import pytest
from hostile.attacks import require_sandbox

from labctl import faults
from labctl.errors import CallError
from labctl.isolation import calltrace, replies
from labctl.isolation.sandbox import CleanRoom
from labctl.verify import fixtures as fx
from labctl.verify import likeness
from labctl.verify.calls import Call, calls_of, complete, judge

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _mha_fixture(name: str):
    return next(f for f in fx.fixtures("multi_head_attention") if f.name == name)


def _traced(room: CleanRoom, fixture):
    args, kwargs = fixture.call()
    return room.invoke(fixture.function, *args, trace=True, **kwargs)


@pytest.mark.parametrize("isolation", ["process", "sandbox"])
def test_the_worker_records_the_contract_functions_a_call_reached(tmp_path, isolation):
    if isolation == "sandbox":
        require_sandbox()
    room_path = faults.project_clean_room()
    with CleanRoom(room_path, 20.0, 2048, isolation=isolation) as room:
        result = _traced(room, _mha_fixture("gqa-rope"))
        calls = calls_of(result.trace)
        direct = [c.function for c in calls if c.depth == 1]
        assert direct == [
            "split_heads",
            "split_heads",
            "split_heads",
            "rope",
            "rope",
            "causal_mask",
            "scaled_dot_product_attention",
            "merge_heads",
        ]
        # Below sdpa: repeat_kv twice (GQA) and softmax, one level deeper.
        assert [(c.function, c.depth) for c in calls if c.depth == 2] == [
            ("repeat_kv", 2),
            ("repeat_kv", 2),
            ("softmax", 2),
        ]
        rope = next(c for c in calls if c.function == "rope")
        assert rope.args[0].shape == (2, 4, 6, 4) and rope.args[2] == 10000.0
        assert all(judge(c).kind is None for c in calls)  # the project's room: all correct
        # Not asked, not sent.
        args, kwargs = _mha_fixture("gqa-rope").call()
        assert room.invoke("multi_head_attention", *args, **kwargs).trace == []


def test_a_call_that_raises_brings_back_what_it_reached_before(tmp_path):
    room_path = m.room(tmp_path, ("primitives", m.ROPE_STUB))
    with (
        CleanRoom(room_path, 20.0, 2048, isolation="process") as room,
        pytest.raises(CallError) as raised,
    ):
        _traced(room, _mha_fixture("gqa-rope"))
    calls = calls_of(raised.value.trace)
    assert [c.function for c in calls] == ["split_heads"] * 3 + ["rope"]
    assert calls[-1].raised == "NotImplementedError"
    assert judge(calls[-1]).kind == "runs"  # the reference does not raise on those inputs


def test_a_trace_is_a_reply_checked_like_the_rest():
    request = {"op": "call", "seq": 1, "function": "softmax", "args": [], "kwargs": {}}
    reply = {"ok": True, "seq": 1, "value": None, "elapsed_s": 0.0, "args_after": [[], {}]}
    assert replies.problem(reply, request) is None
    assert replies.problem({**reply, "trace": []}, request) == (
        "a trace of calls, which was not asked for"
    )
    asked = {**request, "trace": True}
    good = {"function": "rope", "depth": 1, "args": [], "kwargs": {}, "raised": "ValueError"}
    assert replies.problem({**reply, "trace": [good]}, asked) is None
    for bad in (
        {"function": "rope", "depth": 0, "args": [], "kwargs": {}},
        {"function": "rope", "depth": True, "args": [], "kwargs": {}},
        {"function": 3, "depth": 1, "args": [], "kwargs": {}},
        {**good, "extra": 1},
        {**good, "raised": 7},
        "rope",
    ):
        assert replies.problem({**reply, "trace": [bad]}, asked) == (
            "a trace that is not a list of calls"
        ), bad


def test_a_call_that_writes_into_its_input_comes_back_marked_and_is_judged_impure(tmp_path):
    """An RMSNorm that divides its input in place returns the right values; the block that
    called it breaks. The worker marks the call edited, the reply carries the mark (before,
    a trace entry with it was refused as malformed), and labctl judges the call "pure"."""
    in_place = (
        "primitives",
        """
        def rms_norm(x, weight, eps=1e-6):
            x /= np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
            return x * weight
        """,
    )
    room_path = m.room(tmp_path, in_place)
    fixture = next(f for f in fx.fixtures("transformer_block") if f.name == "default")
    with CleanRoom(room_path, 20.0, 2048, isolation="process") as room:
        result = _traced(room, fixture)
    norms = [c for c in calls_of(result.trace) if c.function == "rms_norm"]
    assert norms[0].edited and judge(norms[0]).kind == "pure"
    request = {"op": "call", "seq": 1, "function": "softmax", "args": [], "kwargs": {}}
    reply = {"ok": True, "seq": 1, "value": None, "elapsed_s": 0.0, "args_after": [[], {}]}
    entry = {"function": "rms_norm", "depth": 1, "args": [], "kwargs": {}, "edited": True}
    asked = {**request, "trace": True}
    assert replies.problem({**reply, "trace": [entry]}, asked) is None
    assert replies.problem({**reply, "trace": [{**entry, "edited": 1}]}, asked) == (
        "a trace that is not a list of calls"
    )


def test_an_argument_is_edited_when_its_values_change_and_compared_cheaply_when_untouched(
    monkeypatch,
):
    """`edited` means "the values changed", as `array_equal` says (NaN equal to NaN, -0.0 to
    0.0); an argument left alone costs a byte comparison, not an `array_equal` each."""
    compared = []
    array_equal = np.array_equal
    monkeypatch.setattr(
        np, "array_equal", lambda *a, **k: compared.append(1) or array_equal(*a, **k)
    )

    def edited(before, after) -> bool:
        recorder = calltrace.Recorder()
        recorder.start()
        return calltrace._edited(recorder._kept([before]), [after])

    x = np.array([[1.0, np.nan, 0.0]])
    assert not edited(x, x) and not compared
    assert not edited(x, np.array([[1.0, np.nan, -0.0]]))
    assert edited(x, np.array([[2.0, np.nan, 0.0]]))
    assert edited(np.arange(3), np.array([0, 1, 5]))
    assert not edited(x, x.astype(np.float32))  # the values, not the dtype, as before
    assert not edited(x, x.ravel())  # another shape is another array


def test_a_trace_keeps_arrays_within_its_bound_and_marks_the_rest():
    recorder = calltrace.Recorder()
    recorder.start()
    small = np.ones(10)
    large = np.ones(calltrace.MAX_ELEMENTS)
    kept = recorder._kept([small, large, object(), (1, "a", None)])
    assert np.array_equal(kept[0], small) and kept[0] is not small  # a copy, not a view
    assert kept[1] == {calltrace.TOO_LARGE: [[calltrace.MAX_ELEMENTS], "float64"]}
    assert kept[2] == {calltrace.TOO_LARGE: [[], "object"]}
    assert kept[3] == [1, "a", None]
    assert not complete(kept) and complete(kept[0])
    # A call whose input did not travel whole is judged by nothing.
    assert judge(Call("softmax", 1, (kept[1],), {}, out=np.zeros(3))).kind is None


def test_the_recorder_stops_at_its_entry_bound():
    recorder = calltrace.Recorder()
    traced = recorder.wrap("softmax", lambda x: x)
    outer = recorder.wrap("rms_norm", lambda: [traced(np.ones(2)) for _ in range(100)])
    recorder.start()
    outer()
    assert len(recorder.stop()) == calltrace.MAX_ENTRIES
    assert recorder.entries is None  # nothing is recorded between calls
    outer()
    assert recorder.entries is None


def _softmax_call(out, x=None, **extra) -> Call:
    x = np.array([[1.0, 2.0, 3.0]]) if x is None else x
    return Call("softmax", 1, (x,), {}, out=out, **extra)


def test_a_recorded_call_is_judged_against_the_reference_on_its_own_inputs():
    x = np.array([[1.0, 2.0, 3.0]])
    right = np.exp(x) / np.exp(x).sum()
    assert judge(_softmax_call(right)).kind is None
    assert judge(_softmax_call(right * 1.01)).kind == "parity"
    assert judge(_softmax_call(right.astype(np.float32))).kind == "dtype"
    assert judge(_softmax_call(right[0])).kind == "shape"
    assert judge(_softmax_call(None, raised="ValueError")).kind == "runs"
    # The reference refuses what it was given: the caller's doing, never the callee's.
    assert judge(_softmax_call(None, x="text", raised="TypeError")).kind is None
    # A float32 call differs from the reference by float32 rounding only, as honest code does.
    x32 = x.astype(np.float32)
    rounded = (right * (1 + 3e-7)).astype(np.float32)
    assert judge(_softmax_call(rounded, x=x32)).kind is None
    assert judge(_softmax_call((right * 1.01).astype(np.float32), x=x32)).kind == "parity"


def test_a_call_handed_float32_and_float64_at_once_is_not_blamed_for_its_dtype():
    q = np.ones((1, 1, 2, 4), dtype=np.float32)
    k = np.ones((1, 1, 2, 4))  # a float64 cache from np.zeros
    out = (np.ones((1, 1, 2, 4)), np.full((1, 1, 2, 2), 0.5))
    mixed = Call("scaled_dot_product_attention", 1, (q, k, k), {}, out=list(out))
    assert judge(mixed).kind is None
    alike = Call("scaled_dot_product_attention", 1, (q, q, q), {}, out=list(out))
    assert judge(alike).kind == "dtype"


def test_a_fault_computed_in_float32_matches_nearer_it_than_the_reference():
    reference = np.linspace(-2.0, 2.0, 12)
    fault = reference + 0.3
    in_float32 = fault.astype(np.float32).astype(np.float64)
    assert likeness._nearer_at_float32(in_float32, fault, reference)
    assert not likeness._nearer_at_float32(fault + 1e-3, fault, reference)  # beyond float32
    # Within float32 rounding of both: nearer the reference, so not the fault.
    close = reference + 1e-7
    assert not likeness._nearer_at_float32(reference, close, reference)
    assert not likeness._nearer_at_float32(np.array([True]), np.array([True]), np.array([True]))


def test_a_forged_call_too_large_to_be_a_fixture_s_is_not_judged():
    """Judging runs the reference here: a trace asking for a huge mask costs nothing."""
    assert judge(Call("causal_mask", 1, (300,), {}, out=np.zeros((2, 2), bool))).kind is None
    wide = np.ones(calltrace.MAX_ELEMENTS + 1)
    assert judge(Call("softmax", 1, (wide,), {}, out=wide)).kind is None
    assert judge(Call("causal_mask", 1, (3,), {}, out=np.zeros((3, 3), bool))).kind == "parity"
