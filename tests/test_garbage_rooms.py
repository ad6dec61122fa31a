"""No lab passes garbage: every garbage room (tests/garbage.py) fails the lab that drives it.

For each lab, the contract functions it calls (`CALLS`, the audit's rows) are made
garbage of each kind together (a room whose multi_head_attention and
attention_decode both return zeros, as issue 20 found passing kv-cache), and, for
the labs that run in well under a second, one at a time. The reference's rows must
still pass: the lab fails because of the room. Run in this process on labctl's own
clean room (test code, not a learner's), with the torch reference.
"""

from __future__ import annotations

import math
import warnings

import pytest
from garbage import KINDS, GarbageRoom, applies, nan_room
from labtools import rows

from labctl import registry
from labctl.lab import Implementation, larger, largest
from labctl.runner import implementations, run_lab

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


@pytest.fixture(scope="module")
def torch_reference():
    with implementations("reference", None) as impls:
        yield impls["reference"]


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
