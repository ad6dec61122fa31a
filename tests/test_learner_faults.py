"""The bugs learners write (issue 21, items 3 and 4): each is caught, and its sentence says
what to change; the fixtures reach the paths that used to hide them.

Each catalogued learner fault, built as a faulty clean room, fails verify at its own
function on the check it is there for. The coverage tests are rooms that passed verify
before the fixtures grew (a float32 probe for every fixture; tiled blocks that do not
divide Tq or Tk, or are longer than T, causal and not; a query that sees no key).
"""

from __future__ import annotations

import re

import pytest
from checktools import learner_room

from labctl import faults
from labctl.faults.learner import LEARNER
from labctl.i18n import _, set_language
from labctl.isolation.sandbox import DEFAULT_MEMORY_MB
from labctl.verify.builders import fresh_seed
from labctl.verify.checks import evaluate
from labctl.verify.diagnosis import describe
from labctl.verify.observe import observe
from labctl.verify.verify import verify_clean_room

# The catalogued faults the issue lists that were there before the learner set.
ALREADY_CATALOGUED = ("no-sqrt-dk", "rms-eps-outside-sqrt", "head-seq-confused")
# Words of labctl's own, not a learner's.
INTERNAL = ("margin", "fixture", "tolerance", "parity", "probe", "catalogue")
# A sentence ends with what to change, said as an instruction.
FIX_VERBS = (
    "add",
    "allocate",
    "call",
    "compute",
    "divide",
    "fill",
    "keep",
    "loop",
    "multiply",
    "reshape",
    "shift",
    "take",
    "transpose",
    "use",
)


def _failed_at(report, function: str) -> set[str]:
    return {c.name for c in report.checks if c.function == function and c.failed}


@pytest.mark.parametrize("fault", LEARNER, ids=lambda f: f.name)
def test_each_learner_fault_fails_at_its_function_on_its_check(tmp_path, fault):
    """Verify's calls and checks of the fault's function alone (the only ones read here), on
    inputs of a fresh seed as verify draws them."""
    room = fault.materialize(tmp_path / "clean_room").resolve()
    seen = observe(room, 2.0, DEFAULT_MEMORY_MB, (fault.function,), seed=fresh_seed())
    failed = {c.name for c in evaluate(seen, (fault.function,)) if c.failed}
    assert fault.signal in failed, fault.name


def test_the_learner_faults_are_in_the_catalogue_once_each():
    names = [f.name for f in faults.CATALOGUE]
    assert len(set(names)) == len(names)
    assert {f.name for f in LEARNER} <= set(names)
    assert len(LEARNER) == 16


@pytest.mark.parametrize(
    "fault",
    [*LEARNER, *(faults.get(name) for name in ALREADY_CATALOGUED)],
    ids=lambda f: f.name,
)
def test_each_sentence_says_what_to_change_in_the_learner_s_words(fault):
    sentence = str(fault.description)
    assert not [w for w in INTERNAL if w in sentence.lower()], sentence
    # What is wrong, then (after the last ';' or ':') the change, as an instruction.
    fix = re.split(r"[;:] ", sentence)[-1]
    assert fix.split()[0] in FIX_VERBS or fix.startswith("when scale is None, multiply"), fix


# -- coverage: rooms that passed verify before the fixtures grew ----------------------------

RESHAPING_TILED = """
_correct_tiled = tiled_attention

def tiled_attention(q, k, v, block_size, causal=True, scale=None):
    if causal:
        return _correct_tiled(q, k, v, block_size, causal, scale)
    q, k, v, n_rep = _check_qkv(q, k, v)
    block_size = _as_size(block_size, "block_size", minimum=1)
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
    B, H, Tk, D = k.shape
    k_blocks = k.reshape(B, H, Tk // block_size, block_size, D)
    v_blocks = v.reshape(B, H, Tk // block_size, block_size, v.shape[-1])
    s = _scale(scale, D)
    m = np.full(q.shape[:-1] + (1,), -np.inf)
    total = np.zeros(q.shape[:-1] + (1,))
    acc = np.zeros(q.shape[:-1] + (v.shape[-1],))
    for b in range(Tk // block_size):
        scores = (q @ k_blocks[:, :, b].swapaxes(-1, -2)) * s
        new_m = np.maximum(m, scores.max(axis=-1, keepdims=True))
        p = np.exp(scores - new_m)
        total = total * np.exp(m - new_m) + p.sum(axis=-1, keepdims=True)
        acc = acc * np.exp(m - new_m) + p @ v_blocks[:, :, b]
        m = new_m
    return (acc / total).astype(q.dtype, copy=False)
"""


def test_a_tiled_attention_that_needs_the_block_to_divide_tk_when_not_causal_fails(tmp_path):
    """Issue 21: non-causal fixtures all had blocks dividing Tk; this passed verify."""
    room = learner_room(tmp_path, "attention", RESHAPING_TILED)
    report = verify_clean_room(room, 2.0, out=None, measure=False, diagnose_failures=False)
    runs = next(c for c in report.checks if c.function == "tiled_attention" and c.name == "runs")
    assert runs.failed
    assert "fixture bidirectional-ragged: raised ValueError" in runs.message
    assert _failed_at(report, "tiled_attention") == {"runs"}


UPCASTING_WHEN_NOT_CAUSAL = """
_correct_mha = multi_head_attention

def multi_head_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=True, window=None, rope_theta=None):
    if causal or window is not None:
        return _correct_mha(x, wq, wk, wv, wo, n_heads, n_kv_heads, causal, window, rope_theta)
    x = np.asarray(x)
    B, T, C = x.shape
    H = n_heads
    Hkv = H if n_kv_heads is None else n_kv_heads
    q = split_heads(x @ wq, H)
    k = np.repeat(split_heads(x @ wk, Hkv), H // Hkv, axis=1)
    v = np.repeat(split_heads(x @ wv, Hkv), H // Hkv, axis=1)
    if rope_theta is not None:
        q = rope(q, np.arange(T), rope_theta)
        k = rope(k, np.arange(T), rope_theta)
    no_mask = np.zeros((T, T))  # float64, whatever x is
    scores = (q @ k.swapaxes(-1, -2)) / np.sqrt(C // H) + no_mask
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return merge_heads((e / e.sum(axis=-1, keepdims=True)) @ v) @ wo
"""


def test_a_float64_upcast_on_the_non_causal_path_alone_fails_the_dtype_check(tmp_path):
    """Issue 21: the float32 probe ran on the first (causal) fixture only; this passed."""
    room = learner_room(tmp_path, "transformer_block", UPCASTING_WHEN_NOT_CAUSAL)
    report = verify_clean_room(room, 2.0, out=None, measure=False, diagnose_failures=False)
    dtype = next(
        c for c in report.checks if c.function == "multi_head_attention" and c.name == "dtype"
    )
    assert dtype.failed
    assert dtype.message == (
        "fixture odd-d-bidirectional-float32: returned float64 for float32 inputs where the "
        "contract keeps float32"
    )
    assert _failed_at(report, "multi_head_attention") == {"dtype"}


# A learner's MHA (from a room written from the contract alone, stop 56) that keeps the window
# for causal attention only.
WINDOW_ONLY_WHEN_CAUSAL = """
def _mask(t_q, t_k, causal, window):
    if window is not None and causal:
        return sliding_window_mask(t_q, window, t_k)
    return causal_mask(t_q, t_k) if causal else None
"""


def test_a_window_dropped_when_not_causal_fails_the_window_fixture(tmp_path):
    """It passed every check: no fixture gave multi_head_attention a window with causal=False
    (fixtures v5 add one; the window's mask holds the causal one, so it still applies)."""
    room = learner_room(tmp_path, "transformer_block", WINDOW_ONLY_WHEN_CAUSAL)
    report = verify_clean_room(room, 2.0, out=None, measure=False, diagnose_failures=False)
    failing = [c for c in report.checks if c.failed]
    assert {c.function for c in failing} == {"multi_head_attention"}
    assert _failed_at(report, "multi_head_attention") == {"parity"}
    assert any("window-not-causal" in c.message for c in failing)


@pytest.mark.parametrize("name", ["tiled-mask-fill-finite", "tiled-nan-first-blocked"])
def test_a_query_that_sees_no_key_is_in_the_tiled_fixtures(tmp_path, name):
    """Issue 21: no tiled fixture had a fully blocked row, so -1e9 and NaN there passed."""
    room = faults.get(name).materialize(tmp_path / "clean_room")
    report = verify_clean_room(room, 2.0, out=None, measure=False, diagnose_failures=False)
    failing = [c for c in report.checks if c.failed]
    assert failing and {c.function for c in failing} == {"tiled_attention"}
    assert all(c.fixture in (None, "causal-tq>tk") for c in failing)
    assert any("causal-tq>tk" in c.message for c in failing)


_ENGLISH_PROSE = re.compile(r"\b(the|is|are|of|and|or|where|when|never|uses|gets|before|beyond)\b")


@pytest.mark.parametrize(
    "fault",
    faults.for_contract(2),
    ids=lambda f: f.name,
)
def test_a_matched_fault_reads_in_chinese_its_contract_citation_too(fault):
    """The course is cited as it is (its headings mix Chinese and English); the contract's
    words quoted beside it are translated, never left in English on a Chinese terminal."""
    previous = set_language("zh")
    try:
        text = _(describe(fault, fault.function))
    finally:
        set_language(previous)
    # a command to type (`labctl contract document --contract 1`, where to open the contract)
    # is code, the same in every language
    prose = re.sub(r"`[^`]*`", "", text)
    assert "contract" not in prose, text
    citation = prose.rpartition("参见")[2]
    assert not _ENGLISH_PROSE.search(citation), citation
