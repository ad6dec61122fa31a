"""issue 21's misdiagnoses, each reproduced by a room of `misdiagnosed` and verified end to end.

Each room runs through `labctl verify clean-room` (its worker records what each
fixture call reached); the test reads the sentence verify gives, in `--json`
and in the text a learner reads, and checks that it names the function whose
code is at fault and never a function the failing calls did not reach (the old
diagnosis sent all of these to an unwritten or broken `rope`, or to `softmax`).
"""

from __future__ import annotations

import csv
import json
import re
import xml.etree.ElementTree as ET

import misdiagnosed as m
import numpy as np
import pytest
from clitools import invoke
from gradetools import rubric_without

from labctl import contract, reference
from labctl.verify import verify as verification


@pytest.fixture(autouse=True)
def _records_elsewhere(tmp_path, monkeypatch):
    """verify writes its records under ./evidence: in a folder of the test's, never the repo's."""
    monkeypatch.chdir(tmp_path)


pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

ROOMS = {
    "leaky-mha-decode-zeros": [
        ("primitives", m.ROPE_STUB),
        ("transformer_block", m.LEAKY_MHA),
        ("transformer_block", m.ZEROS_CACHE_DECODE),
    ],
    "maskless-mha": [("transformer_block", m.MASKLESS_MHA)],
    "softmax-fixed-axis": [("primitives", m.SOFTMAX_FIXED_AXIS)],
    "scale-by-d": [("primitives", m.ROPE_STUB), ("transformer_block", m.SCALED_BY_D_MHA)],
    "tri-mask": [("primitives", m.ROPE_STUB), ("transformer_block", m.TRI_MASK_MHA)],
    "no-repeat-kv": [
        ("primitives", m.ROPE_HALF_SPLIT),
        ("transformer_block", m.NO_REPEAT_KV_MHA),
    ],
    "zeros-block": [("primitives", m.ROPE_STUB), ("transformer_block", m.ZEROS_BUFFER_BLOCK)],
    "rope-float32": [("primitives", m.ROPE_FLOAT32_TABLES)],
    "rms-float32": [("primitives", m.RMS_NORM_RETURNS_FLOAT32)],
    "half-split-float32": [("primitives", m.ROPE_HALF_SPLIT_FLOAT32_TABLES)],
    "float-mask": [("primitives", m.FLOAT_CAUSAL_MASK), ("transformer_block", m.MASKS_JOINED_MHA)],
    "whole-blocks-only": [("attention", m.WHOLE_BLOCKS_ONLY_TILED)],
    "rms-exits": [("primitives", m.RMS_NORM_EXITS)],
    "nan-shift-reversed": [("attention", m.NAN_SHIFT_TILED)],
    "top-left-tiled": [("attention", m.TOP_LEFT_TILED)],
}
_verified: dict[str, dict] = {}


def verified(name: str, tmp_path_factory) -> dict:
    """`verify --json` on the room, run once per session; the document, by function, with the
    report it was printed from (for `text_of`)."""
    if name not in _verified:
        room = m.room(tmp_path_factory.mktemp(name), *ROOMS[name])
        kept = []
        real = verification.verify_clean_room

        def keeping(*args, **kwargs):
            kept.append(real(*args, **kwargs))
            return kept[-1]

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(verification, "verify_clean_room", keeping)
            result = invoke("verify", "clean-room", "--path", str(room), "--no-metrics", "--json")
        assert result.exit_code == 1, result.output
        document = json.loads(result.stdout)
        document["by_function"] = {d["function"]: d for d in document["diagnosis"]}
        document["room"], (document["report"],) = room, kept
        _verified[name] = document
    return _verified[name]


def named(message: str) -> set[str]:
    return {f for f in contract.function_names() if re.search(rf"\b{f}\b", message)}


def text_of(document: dict, monkeypatch) -> str:
    """The text a learner reads of the run `verified` read as JSON: the command renders that
    run's report (its seed given, as a rerun with --seed draws the same inputs), so the
    sentences compared are one diagnosis shown two ways, not a second verify of the room."""
    monkeypatch.setattr(verification, "verify_clean_room", lambda *a, **k: document["report"])
    seed = str(document["seed"])
    result = invoke("verify", "clean-room", "--path", str(document["room"]), "--no-metrics",
                    "--seed", seed)  # fmt: skip
    assert result.exit_code == 1
    return " ".join(result.output.split())


def test_an_mha_that_leaks_the_future_beside_a_stub_rope_is_named_for_its_causality(
    tmp_path_factory, monkeypatch
):
    document = verified("leaky-mha-decode-zeros", tmp_path_factory)
    mha = document["by_function"]["multi_head_attention"]
    assert mha["kind"] == "unmatched"
    assert mha["message"].startswith(
        "multi_head_attention: the future leaks: an earlier output changes when a later token "
        "changes: apply the causal mask, so that each position sees only itself and the "
        "positions before it; "
    )
    assert named(mha["message"]) == {"multi_head_attention"}  # never rope
    # An odd D with RoPE reaches the stub, which raises NotImplementedError: rope's to write,
    # not a bad input this MHA failed to refuse.
    assert "bad-input" not in mha["message"]
    # What is built on it is sent to it; decode, which reaches the stub, to the stub.
    assert document["by_function"]["transformer_block"]["chain"] == [
        "transformer_block",
        "multi_head_attention",
    ]
    # The same sentences reach the text a learner reads.
    shown = text_of(document, monkeypatch)
    assert mha["message"] in shown
    assert document["by_function"]["attention_decode"]["message"] in shown


def test_an_mha_that_calls_sdpa_without_a_mask_is_not_sdpas_fault_inlined(tmp_path_factory):
    """An MHA that passes no mask (a window's neither) matched `mask-adds-zero` "(a fault of
    scaled_dot_product_attention, inlined here)": its outputs are those of an SDPA whose mask
    adds 0, but it calls the room's SDPA, which passes; nothing of SDPA is inlined (found by a
    tester, in a room of its own)."""
    mha = verified("maskless-mha", tmp_path_factory)["by_function"]["multi_head_attention"]
    assert mha["kind"] == "unmatched" and "fault" not in mha
    assert mha["message"].startswith(
        "multi_head_attention: the future leaks: an earlier output changes when a later token "
        "changes: apply the causal mask"
    )
    assert named(mha["message"]) == {"multi_head_attention"}


def test_a_softmax_that_ignores_its_axis_is_told_to_use_it(tmp_path_factory):
    """It was told its "attention weights do not sum to 1 over each row", words for SDPA's
    weights, and nothing of what to change (found by a tester)."""
    softmax = verified("softmax-fixed-axis", tmp_path_factory)["by_function"]["softmax"]
    assert "attention weights" not in softmax["message"]
    assert "do not sum to 1 along the axis it is given" in softmax["message"]
    assert named(softmax["message"]) == {"softmax"}


def test_a_decode_whose_zeros_cache_is_float64_is_named_with_its_cache(tmp_path_factory):
    """Beside a stub rope (what fails where it calls it is the stub's), its own float64 cache
    is the catalogued fault's: named, with what to change (issue 38: a second cause no longer
    hides a fault)."""
    decode = verified("leaky-mha-decode-zeros", tmp_path_factory)["by_function"]["attention_decode"]
    assert (decode["kind"], decode["fault"]) == ("fault", "decode-float64-cache")
    assert "cache" in decode["message"] and "np.zeros" in decode["message"]
    assert "NotImplementedError" not in decode["message"]


def test_an_mha_with_a_scale_bug_beside_a_stub_rope_is_named_itself(tmp_path_factory):
    mha = verified("scale-by-d", tmp_path_factory)["by_function"]["multi_head_attention"]
    assert mha["kind"] in ("unmatched", "fault")
    assert mha["message"].startswith("multi_head_attention: ")
    assert named(mha["message"]) == {"multi_head_attention"}


def test_an_mha_with_an_np_tri_mask_that_never_calls_rope_is_named_for_its_mask(
    tmp_path_factory, monkeypatch
):
    document = verified("tri-mask", tmp_path_factory)
    mha = document["by_function"]["multi_head_attention"]
    # the learner's bug is catalogued (a float64 mask), and named at the MHA itself
    assert (mha["kind"], mha["fault"]) == ("fault", "mha-float64-mask")
    assert mha["message"].startswith(
        "multi_head_attention: matches fault `mha-float64-mask`: the mask is a float64 array of "
        "0 and -inf added to the scores: float32 inputs come back float64; keep the mask boolean"
    )
    assert named(mha["message"]) == {"multi_head_attention"}  # no rope, no softmax
    assert mha["message"] in text_of(document, monkeypatch)


def test_a_gqa_crash_without_repeat_kv_is_named_at_the_mha_not_at_a_broken_rope(
    tmp_path_factory,
):
    document = verified("no-repeat-kv", tmp_path_factory)
    assert document["by_function"]["rope"]["fault"] == "rope-half-split"
    mha = document["by_function"]["multi_head_attention"]
    assert mha["kind"] == "unmatched"
    # It crashes on every GQA fixture, with and without RoPE, and only there: what to change
    # is said (issue 38), and nothing of the broken rope it calls.
    assert "it fails wherever Hkv < H (GQA, MQA), and only there" in mha["message"]
    assert "call repeat_kv(k, H // Hkv)" in mha["message"]
    assert "rope" not in mha["message"].replace("repeat_kv", "")


def test_a_float_causal_mask_is_told_to_be_bool_and_the_mha_it_crashes_is_sent_to_it(
    tmp_path_factory,
):
    by_function = verified("float-mask", tmp_path_factory)["by_function"]
    mask = by_function["causal_mask"]
    assert mask["message"].startswith(
        "causal_mask: it returns a float mask where the contract keeps bool, True where a key "
        "is blocked: build the mask from a comparison (the causal one is "
        "np.arange(t_k)[None, :] > (t_k - t_q) + np.arange(t_q)[:, None])"
    )
    assert "float32 input" not in mask["message"]  # a mask has no float input
    # The comparison it gives is the contract's causal mask (it gave one True where visible).
    said = re.search(r"the causal one is (.+?)\) or pass", mask["message"]).group(1)
    for t_q, t_k in [(4, 4), (2, 5), (5, 3)]:
        mine = eval(said, {"np": np, "t_q": t_q, "t_k": t_k})  # labctl's own sentence
        assert np.array_equal(mine, reference.causal_mask(t_q, t_k)), (t_q, t_k)
    # The MHA raises TypeError at `mask | near` only because the mask it got is float.
    mha = by_function["multi_head_attention"]
    assert (mha["kind"], mha["chain"]) == ("dependency", ["multi_head_attention", "causal_mask"])


def test_a_tiled_attention_that_drops_the_last_short_block_is_told_so(tmp_path_factory):
    tiled = verified("whole-blocks-only", tmp_path_factory)["by_function"]["tiled_attention"]
    assert tiled["message"].startswith(
        "tiled_attention: its values are wrong only where block_size does not divide the "
        "sequence (or is longer than it): the last, shorter block is dropped or mishandled; "
        "loop over range(0, T, block_size)"
    )


def test_a_causal_mask_aligned_top_left_is_not_told_it_drops_a_block(tmp_path_factory):
    """It fails only the ragged fixture whose Tq < Tk; the other ragged fixtures pass, so no
    last block is dropped: the phrase sent the learner to the wrong line."""
    tiled = verified("top-left-tiled", tmp_path_factory)["by_function"]["tiled_attention"]
    assert tiled["kind"] in ("unmatched", "fault"), tiled
    assert "block_size does not divide" not in tiled["message"]


def test_an_online_softmax_nan_is_named_whatever_order_the_blocks_go_in(tmp_path_factory):
    """Blocks from the last: the catalogued fault (first to last) gives NaN elsewhere, so it
    does not match; the NaN is still said as the online softmax's."""
    tiled = verified("nan-shift-reversed", tmp_path_factory)["by_function"]["tiled_attention"]
    assert tiled["message"].startswith(
        "tiled_attention: its output holds NaN where the reference's does not: in an online "
        "softmax, -inf - (-inf) is NaN while every score seen so far is blocked; shift by 0"
    )
    assert "block_size does not divide" not in tiled["message"]  # a NaN spoils, says nothing


def test_a_bad_input_that_meets_a_broken_callee_first_is_the_callee_s(tmp_path_factory):
    """The block's C % n_heads case reaches an RMSNorm that exits before the block checks it,
    and the decoder's reaches the block: each is sent down to rms_norm, not told to refuse."""
    by_function = verified("rms-exits", tmp_path_factory)["by_function"]
    assert by_function["transformer_block"]["chain"] == ["transformer_block", "rms_norm"]
    assert by_function["decoder_forward"]["chain"][-1] == "rms_norm"
    assert not any("does not refuse bad input" in d["message"] for d in by_function.values())


def test_a_block_whose_zeros_buffer_is_float64_is_named_itself(tmp_path_factory):
    block = verified("zeros-block", tmp_path_factory)["by_function"]["transformer_block"]
    assert block["kind"] == "unmatched"
    assert block["message"].startswith(
        "transformer_block: it returns float64 for float32 input (first seen in the x it passes "
        "to rms_norm)"
    )
    assert named(block["message"]) == {"transformer_block", "rms_norm"}


def test_float32_rope_tables_are_named_as_the_catalogued_fault_and_what_calls_rope_sent_there(
    tmp_path_factory,
):
    by_function = verified("rope-float32", tmp_path_factory)["by_function"]
    rope = by_function["rope"]
    # the learner's bug is catalogued: matched at the precision the room computes in
    assert (rope["kind"], rope["fault"]) == ("fault", "rope-float32-tables")
    assert rope["message"].startswith(
        "rope: matches fault `rope-float32-tables`: RoPE's angles, cos and sin are computed in "
        "float32: float64 inputs lose precision, large positions most; compute the tables in "
        "float64"
    )
    assert by_function["multi_head_attention"]["chain"] == ["multi_head_attention", "rope"]


def test_float32_rounding_in_a_block_names_the_first_call_whose_dtype_dropped(tmp_path_factory):
    by_function = verified("rms-float32", tmp_path_factory)["by_function"]
    assert by_function["rms_norm"]["kind"] == "precision"
    block = by_function["transformer_block"]
    assert block["kind"] == "precision"
    assert (
        "computes in float32 inside a float64 path, first in rms_norm, which it calls"
        in (block["message"])
    )
    assert "multi_head_attention" not in block["message"]


def test_rope_half_split_with_float32_tables_matches_the_catalogued_fault(tmp_path_factory):
    rope = verified("half-split-float32", tmp_path_factory)["by_function"]["rope"]
    assert (rope["kind"], rope["fault"]) == ("fault", "rope-half-split")
    assert rope["message"].startswith("rope: matches fault `rope-half-split`: ")


def test_rope_half_split_with_float32_tables_matches_where_float32_errs_most(tmp_path):
    """Seed 12 puts position 3483 with theta 100 in the fixture `2-d-theta`: float32 tables
    leave the output 1.4e-5 (relative) from the float64 fault, past the 1e-5 that float32
    rounding stays within for O(1) arguments (matched within 1e-4 since)."""
    room = m.room(tmp_path, *ROOMS["half-split-float32"])
    args = ["--path", str(room), "--no-metrics", "--json", "--seed", "12"]
    result = invoke("verify", "clean-room", *args)
    assert result.exit_code == 1, result.output
    (rope,) = [d for d in json.loads(result.stdout)["diagnosis"] if d["function"] == "rope"]
    assert (rope["kind"], rope["fault"]) == ("fault", "rope-half-split")


@pytest.mark.parametrize("name", sorted(ROOMS))
def test_no_sentence_has_internal_words_or_numbers_and_chains_do_not_loop(name, tmp_path_factory):
    document = verified(name, tmp_path_factory)
    for d in document["diagnosis"]:
        assert not re.search(r"margin|tolerance|\de-\d", d["message"]), d["message"]
        # A dependency is named only along a chain of calls that were made.
        if d["kind"] == "dependency":
            assert d["chain"][0] == d["function"] and len(set(d["chain"])) == len(d["chain"])


def test_correct_rooms_written_otherwise_pass_with_no_diagnosis(tmp_path):
    """Heads in a loop with einsum and softmax inline; RoPE tables in the input's dtype; tiled
    attention over key blocks from the last to the first."""
    room = m.room(
        tmp_path,
        ("attention", m.EINSUM_LOOP_SDPA),
        ("primitives", m.ROPE_TABLES_IN_INPUT_DTYPE),
        ("attention", m.REVERSED_TILED),
    )
    result = invoke("verify", "clean-room", "--path", str(room), "--no-metrics", "--json")
    document = json.loads(result.stdout)
    failed = [(c["function"], c["name"]) for c in document["checks"] if c["status"] == "fail"]
    assert (result.exit_code, failed, document["diagnosis"]) == (0, [], [])


def test_the_gradebook_feedback_and_junit_carry_verify_s_sentence(tmp_path, tmp_path_factory):
    """One sentence, produced once: grade shows the diagnosis verify gives, word for word."""
    sentence = verified("rope-float32", tmp_path_factory)["by_function"]["rope"]["message"]
    klass = tmp_path / "class"
    m.room(klass / "tri", *ROOMS["rope-float32"])
    out = tmp_path / "grades"
    rubric = rubric_without(tmp_path, "metric", "submission")
    result = invoke("grade", str(klass), "--out", str(out), "--rubric", str(rubric), "--json")
    assert result.exit_code == 0, result.output
    with (out / "gradebook.csv").open(encoding="utf-8") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["diagnosis"].startswith(sentence + "; ")  # root causes first
    items = json.loads((out / "feedback" / "tri.json").read_text("utf-8"))["items"]
    (mha,) = [i for i in items if i["target"] == "rope"]
    assert mha["message"].splitlines()[0] == sentence
    cases = ET.parse(out / "junit.xml").getroot().iter("testcase")
    (case,) = [c for c in cases if c.get("name") == mha["id"]]
    assert case.find("failure").get("message") == sentence[:200]
