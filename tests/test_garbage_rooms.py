"""No lab passes garbage: every garbage room (tests/garbage.py) fails the lab that drives it.

For each lab, the contract functions it calls (`CALLS`, the audit's rows) are made
garbage of each kind together (a room whose multi_head_attention and
attention_decode both return zeros, as issue 20 found passing kv-cache), and, for
the labs that run in well under a second, one at a time. The reference's rows must
still pass: the lab fails because of the room. Run in this process on labctl's own
clean room (test code, not a learner's), with the torch reference.
"""

from __future__ import annotations

import copy
import math
import warnings

import pytest
from checktools import learner_room
from garbage import KINDS, ODD_KINDS, GarbageRoom, applies, nan_room
from labtools import rows

from labctl import contract, memo, registry
from labctl.lab import Implementation, larger, largest
from labctl.runner import implementations, run_lab, run_labs

# The contract functions each lab calls (recorded on the project's clean room).
CALLS = {
    "causal-attention": ("causal_mask", "scaled_dot_product_attention", "multi_head_attention"),
    "scale-ablation": ("scaled_dot_product_attention",),
    "mask-ablation": ("causal_mask", "scaled_dot_product_attention"),
    "residual-ablation": ("rms_norm", "multi_head_attention", "transformer_block", "swiglu_ffn"),
    "gqa": (
        "multi_head_attention", "repeat_kv", "scaled_dot_product_attention", "causal_mask",
        "attention_decode",
    ),
    "kv-cache": ("multi_head_attention", "attention_decode"),
    "positions": ("multi_head_attention", "sinusoidal_positions", "rope"),
    "norms-ffn": ("layer_norm", "rms_norm", "swiglu_ffn"),
    "multi-head": (
        "split_heads", "scaled_dot_product_attention", "causal_mask", "merge_heads",
        "multi_head_attention",
    ),
    "worked-examples": (
        "causal_mask", "repeat_kv", "scaled_dot_product_attention", "sinusoidal_positions",
        "softmax", "sliding_window_mask", "tiled_attention",
    ),
    "tiled-attention": ("tiled_attention", "causal_mask", "scaled_dot_product_attention"),
    "sliding-window": ("sliding_window_mask", "transformer_block", "attention_decode"),
    "decoder": ("decoder_forward", "rms_norm", "attention_decode", "swiglu_ffn"),
    "attention-inspect": (
        "sinusoidal_positions", "causal_mask", "rms_norm", "split_heads",
        "scaled_dot_product_attention", "merge_heads", "swiglu_ffn", "padding_mask",
    ),
    "embedding-lookup": ("learned_positions",),
    "learned-positions": (
        "learned_positions", "decoder_forward", "transformer_block", "rms_norm",
        "sinusoidal_positions", "rope",
    ),
    "decoder-options": (
        "decoder_forward", "sinusoidal_positions", "transformer_block", "rms_norm", "split_heads",
        "repeat_kv", "causal_mask", "softmax", "merge_heads", "swiglu_ffn", "multi_head_attention",
        "attention_decode",
    ),
    "induction-heads": (
        "causal_mask", "split_heads", "scaled_dot_product_attention", "merge_heads", "softmax",
    ),
    "precision": ("softmax",),
    "handson-decoder": (
        "decoder_forward", "sinusoidal_positions", "multi_head_attention", "rms_norm",
        "swiglu_ffn", "layer_norm", "relu_ffn",
    ),
    "temperature": ("softmax",),
    "alibi": ("alibi_slopes", "alibi_bias", "softmax", "rope", "sinusoidal_positions"),
    "rope-scaling": ("rope",),
    "ffn-variants": ("gelu", "glu_ffn", "geglu_ffn", "swiglu_ffn"),
    "entropy": ("attention_entropy",),
}  # fmt: skip
# Smaller settings where a lab allows them: these rows do not depend on the sizes.
PARAMS = {
    "kv-cache": {"repeats": 1},
    "tiled-attention": {"memory_lengths": (4096,), "block_sizes": (7, 64)},
    "embedding-lookup": {"vocabs": (1000, 24000)},
}
SLOW = {"scale-ablation", "mask-ablation", "kv-cache", "tiled-attention", "induction-heads"}
# Rooms only a comparison with the reference catches (each passed its lab before it had one).
ONLY_THE_REFERENCE_CATCHES = {
    ("kv-cache", "zeros"): "decode_reference_max_error",
    ("kv-cache", "identity"): "decode_reference_max_error",
    ("kv-cache", "heads-reversed"): "decode_reference_max_error",
    ("kv-cache", "weight-transposed"): "decode_reference_max_error",
    ("residual-ablation", "heads-reversed"): "residual_reference_max_error",
    ("residual-ablation", "weight-transposed"): "residual_reference_max_error",
    ("sliding-window", "zeros"): "window_reference_max_error",
    ("sliding-window", "heads-reversed"): "window_reference_max_error",
    ("sliding-window", "weight-transposed"): "window_reference_max_error",
    ("tiled-attention", "identity"): "tiled_reference_max_error",
    ("worked-examples", "sin-cos-swapped"): "worked_impl_max_difference",
    ("positions", "sin-cos-swapped"): "positions_reference_max_error",
}


def _rooms() -> list:
    found = []
    for lab_id, calls in CALLS.items():
        for kind in KINDS:
            chosen = tuple(fn for fn in calls if applies(kind, fn))
            if chosen:
                found.append(pytest.param(lab_id, kind, chosen, id=f"{lab_id}-{kind}-all"))
            if lab_id in SLOW or len(chosen) < 2:
                continue
            found += [
                pytest.param(lab_id, kind, (fn,), id=f"{lab_id}-{kind}-{fn}") for fn in chosen
            ]
    return found


# The reference's measured calls, by digest of the function and its arguments (`Remembering`).
_MEASURED: dict[str, tuple] = {}


class Remembering(Implementation):
    """A reference whose calls' values are remembered (`labctl.memo`, as in a grading worker),
    and its measured calls with them; a timed call runs the reference itself, whose time a
    lab reads."""

    def __init__(self, plain: Implementation):
        label = f"reference {plain._target.__name__}"
        target = memo.Remembered(plain._target, contract.function_names(2), label)
        super().__init__(plain.name, target, hidden=plain.hidden)
        self._plain = plain

    def for_contract(self, version: int) -> Implementation:
        plain = self._plain.for_contract(version)
        return self if plain is self._plain else Remembering(plain)

    def timed(self, fn: str, *args, **kwargs):
        return self._plain.timed(fn, *args, **kwargs)

    def measured(self, fn: str, *args, part: int | None = None, **kwargs):
        # The torch reference's peak is a count of the bytes its tensors hold
        # (`labctl.reference.memory`), not a reading of the process: the same call on the same
        # inputs measures the same peak, every time. Tiled attention's full attention at
        # T = 4096, measured again for each of its rooms, was half this module's time.
        # Kept here, not in `labctl.memo`: the other labs' reference values fill its limit
        # before tiled attention runs, and it would keep none of these.
        key = memo.digest((self._plain._target.__name__, fn, args, kwargs, part))
        if key is None:
            return self._plain.measured(fn, *args, part=part, **kwargs)
        if key not in _MEASURED:
            _MEASURED[key] = self._plain.measured(fn, *args, part=part, **kwargs)
        return copy.deepcopy(_MEASURED[key])


@pytest.fixture(scope="module")
def torch_reference():
    """The torch reference, remembering across this module's rooms: a lab draws the same
    inputs at seed 5 for every room, so the reference's calls, the mask ablation's language
    models and the residual ablation's gradients are computed once a lab, bit for bit what a
    fresh run computes (tests/test_memo.py)."""
    memo.enable()
    try:
        with implementations("reference", None) as impls:
            yield Remembering(impls["reference"])
    finally:
        memo.disable()


def judged(lab_id: str, room: GarbageRoom, reference: Implementation):
    lab = registry.get(lab_id)
    params = lab.params(**PARAMS.get(lab_id, {}))
    impls = {"reference": reference, "clean-room": Implementation("clean-room", room)}
    return run_lab(lab, 5, impls, params)


@pytest.mark.parametrize(("lab_id", "kind", "functions"), _rooms())
def test_a_garbage_room_fails_the_lab_and_the_reference_does_not(
    torch_reference, lab_id, kind, functions
):
    room = GarbageRoom(kind, functions)
    result = judged(lab_id, room, torch_reference)
    if not room.changed:
        pytest.skip(f"{kind} of {functions} gives this lab's inputs the right answers")
    assert result.error is None, result.error  # a named row fails, not a crash of the lab
    assert not result.passed
    failing = {(m.name, m.impl) for m in result.metrics if m.decides and not m.passed}
    assert failing and all(impl != "reference" for _, impl in failing), failing
    caught = ONLY_THE_REFERENCE_CATCHES.get((lab_id, kind))
    if caught is not None and len(functions) == len(CALLS[lab_id]):
        assert (caught, "both") in failing, failing


@pytest.mark.parametrize("lab_id", ["scale-ablation", "gqa"])
def test_a_garbage_room_fails_its_rows_without_numpy_s_warnings(torch_reference, lab_id):
    """Zeros reach the labs' own logs and ratios (a log of 0, a norm of 0 divided): the rows
    fail with a NaN or inf they name, and numpy prints no English line on the learner's
    terminal."""
    room = GarbageRoom("zeros", CALLS[lab_id])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = judged(lab_id, room, torch_reference)
    assert room.changed and result.error is None and not result.passed
    assert [w for w in caught if issubclass(w.category, RuntimeWarning)] == []


def test_the_issue_s_kv_cache_room_is_caught_by_the_comparison_alone(torch_reference):
    """Zeros from multi_head_attention and attention_decode: every other row holds."""
    room = GarbageRoom("zeros", ("multi_head_attention", "attention_decode"))
    result = judged("kv-cache", room, torch_reference)
    failing = {(m.name, m.impl) for m in result.metrics if m.decides and not m.passed}
    assert failing == {("decode_reference_max_error", "both")}
    assert rows(result)[("decode_reference_max_error", "both")].actual > 0.1  # O(1) outputs


def test_the_issue_s_positions_room_is_caught_by_the_table_itself(torch_reference):
    """sin and cos swapped: the dot products the lab reads are the same; the table is not."""
    result = judged("positions", GarbageRoom("sin-cos-swapped", ("sinusoidal_positions",)),
                    torch_reference)  # fmt: skip
    failing = {(m.name, m.impl) for m in result.metrics if m.decides and not m.passed}
    assert failing == {("positions_reference_max_error", "both")}


def test_a_room_of_nan_fails_the_differences_it_is_measured_by(torch_reference):
    """Python's max keeps 0.0 past a NaN: an MHA that returned NaN measured a worst future
    influence of 0 and passed future_token_invariance (found grading a hostile class)."""
    room = nan_room("multi_head_attention")
    lab = registry.get("causal-attention")
    impls = {"reference": torch_reference, "clean-room": Implementation("clean-room", room)}
    result = run_lab(lab, 5, impls, lab.params())
    row = next(
        m for m in result.metrics if (m.name, m.impl) == ("future_token_invariance", "clean-room")
    )
    assert math.isnan(row.actual) and not row.passed


def test_the_largest_difference_is_nan_if_any_is_whatever_the_order():
    assert math.isnan(larger(0.0, math.nan)) and math.isnan(larger(math.nan, 0.0))
    assert larger(1.0, 2.0) == 2.0
    for values in ([1.0, math.nan, 2.0], [math.nan, 1.0], [1.0, math.nan]):
        assert math.isnan(largest(values)), values
    assert largest([3.0, 1.0]) == 3.0


# Every call a lab makes, for the odd outputs (which must never crash it). The entropy lab
# judges attention_entropy alone: the weights it feeds it are the room's own (its figure
# shows them), and attention-inspect judges those; so its garbage rooms (CALLS) are
# attention_entropy's.
ODD_CALLS = {
    **CALLS,
    "entropy": (
        "sinusoidal_positions", "causal_mask", "rms_norm", "split_heads",
        "scaled_dot_product_attention", "merge_heads", "swiglu_ffn", "attention_entropy",
        "padding_mask",
    ),
}  # fmt: skip


def test_every_lab_is_driven_with_garbage():
    labs = {lab.id for lab in registry.discover()}
    assert set(CALLS) == set(ODD_CALLS) == labs


def _odd_rooms() -> list:
    return [
        pytest.param(lab_id, kind, chosen, id=f"{lab_id}-{kind}")
        for lab_id, calls in ODD_CALLS.items()
        for kind in ODD_KINDS
        if (chosen := tuple(fn for fn in calls if applies(kind, fn)))
    ]


@pytest.mark.parametrize(("lab_id", "kind", "functions"), _odd_rooms())
def test_an_odd_output_fails_the_room_s_rows_and_never_crashes_the_lab(
    torch_reference, lab_id, kind, functions
):
    """Issue 38: the entropy lab picked the fully blocked rows from the room's weights, and a
    finite mask fill left none: the lab crashed. A list, a float mask or another shape broke
    other labs' arithmetic the same way. Each is now a failing row of the room's, named."""
    room = GarbageRoom(kind, functions)
    result = judged(lab_id, room, torch_reference)
    if not room.changed:
        pytest.skip(f"{kind} of {functions} gives this lab's inputs the right answers")
    assert result.error is None, result.error
    failing = {(m.name, m.impl) for m in result.metrics if m.decides and not m.passed}
    assert all(impl != "reference" for _, impl in failing), failing
    # A finite fill is right wherever no row has every key blocked, and an extra axis on an
    # output the lab never reads (attention's out, where it reads the weights) is unseen.
    if kind not in ("finite-mask-fill", "extra-axis"):
        assert failing and not result.passed


def test_the_entropy_lab_takes_a_finite_mask_fill_as_a_failing_row(torch_reference):
    room = GarbageRoom("finite-mask-fill", ("scaled_dot_product_attention",))
    result = judged("entropy", room, torch_reference)
    assert result.error is None
    row = rows(result)[("entropy_blocked_row_max_abs", "clean-room")]
    # Measured: the rows every key of is blocked come from the masks' definitions, and a
    # finite fill gives them uniform weights, log(T) nats, not 0.
    assert row.measured and not row.passed and row.actual > 1.0


def test_a_list_is_named_as_the_contract_s_form_not_numpy_s_error(torch_reference):
    room = GarbageRoom("list", ("causal_mask",))
    result = judged("causal-attention", room, torch_reference)
    assert result.error is None and not result.passed
    (note,) = [f for f in result.figures if getattr(f, "flag", False)]
    assert str(note.text) == (
        "the clean room's causal_mask returned a list of 8 where the contract says an array "
        "bool (t_q, t_k)"
    )
    row = next(m for m in result.metrics if m.impl == "clean-room")
    assert not row.measured and str(note.text) in row.note


def _hidden(reference: Remembering) -> Implementation:
    """The reference as `--impl clean-room` opens it: run for the comparisons, not shown."""
    plain = reference._plain
    return Remembering(
        Implementation("reference", plain._target, plain._meter, plain._later, hidden=True)
    )


@pytest.mark.parametrize("lab_id", sorted(CALLS))
def test_a_clean_room_run_is_decided_by_the_comparison_too(torch_reference, lab_id):
    """Issue 38: `--impl clean-room` ran no comparison with the reference, so a room of
    zeros passed kv-cache. The reference now runs hidden: its rows are not shown, the
    comparisons decide."""
    room = GarbageRoom("zeros", tuple(fn for fn in CALLS[lab_id] if applies("zeros", fn)))
    lab = registry.get(lab_id)
    params = lab.params(**PARAMS.get(lab_id, {}))
    impls = {
        "reference": _hidden(torch_reference),
        "clean-room": Implementation("clean-room", room),
    }
    result = run_lab(lab, 5, impls, params)
    assert {m.impl for m in result.metrics} <= {"clean-room", "both"}
    assert any(m.impl == "both" for m in result.metrics)
    assert result.error is None and not result.passed


ZEROS_ATTENTION = """
_whole, _step = multi_head_attention, attention_decode

def multi_head_attention(*args, **kwargs):
    return np.zeros_like(_whole(*args, **kwargs))

def attention_decode(*args, **kwargs):
    out, k_all, v_all = _step(*args, **kwargs)
    return np.zeros_like(out), np.zeros_like(k_all), np.zeros_like(v_all)
"""

SIN_COS_SWAPPED = """
_sinusoid = sinusoidal_positions

def sinusoidal_positions(seq_len, d_model):
    pe = _sinusoid(seq_len, d_model).copy()
    n = d_model // 2 * 2
    pe[:, 0:n:2], pe[:, 1:n:2] = pe[:, 1:n:2].copy(), pe[:, 0:n:2].copy()
    return pe
"""


@pytest.mark.parametrize(
    ("lab_id", "module", "source", "caught"),
    [
        ("kv-cache", "transformer_block", ZEROS_ATTENTION, "decode_reference_max_error"),
        ("positions", "primitives", SIN_COS_SWAPPED, "positions_reference_max_error"),
    ],
)
def test_the_issue_s_rooms_fail_a_clean_room_run(tmp_path, lab_id, module, source, caught):
    """`labctl run kv-cache --impl clean-room` passed a room whose attention returns zeros,
    and `run positions --impl clean-room` one with sin and cos swapped."""
    room = learner_room(tmp_path, module, source)
    settings = [f"{k}={v}" for k, v in PARAMS.get(lab_id, {}).items()]
    report = run_labs(
        [lab_id], impl="clean-room", clean_room=room, out=tmp_path / "runs", settings=settings
    )
    (result,) = report.labs
    failing = {(m.name, m.impl) for m in result.metrics if m.decides and not m.passed}
    assert failing == {(caught, "both")}
    assert not report.passed and {m.impl for m in result.metrics} == {"clean-room", "both"}
