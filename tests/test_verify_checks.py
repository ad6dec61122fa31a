"""`labctl verify clean-room`: the checks pass honest clean rooms and name what is wrong.

A clean room that is right must pass, whoever wrote it: the project's own, and
a second one written here from contract v1 alone in another style (einsum,
complex RoPE, np.triu masks, a -inf-safe softmax by another route), which
proves the fixtures follow the contract and not the project's quirks.
"""

from __future__ import annotations

import json
import math
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from checktools import learner_room

from labctl import contract
from labctl.evidence.models import EvidenceRecord
from labctl.faults import project_clean_room
from labctl.isolation import wire
from labctl.verify import checks, compare
from labctl.verify import fixtures as fx
from labctl.verify.bad_input import bad_cases
from labctl.verify.functions import CAUSAL_FUNCTIONS, RETURNS
from labctl.verify.observe import Outcome, accepted_refusal, observe
from labctl.verify.record import read_history
from labctl.verify.verify import verify_clean_room

ALT_ROOM = '''
"""A second clean room, written from contract v1 alone, in another style than the project's."""

import math

import numpy as np


def _need(ok, arg, message):
    if not ok:
        raise ValueError(f"{arg}: {message}")


def _ftype(a):
    return np.float32 if np.asarray(a).dtype == np.float32 else np.float64


def softmax(x, axis=-1):
    x = np.asarray(x)
    top = np.max(x, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    shifted = np.exp(x - top)
    total = shifted.sum(axis=axis, keepdims=True)
    return (shifted / np.where(total == 0, 1.0, total)).astype(_ftype(x))


def causal_mask(t_q, t_k=None):
    t_k = t_q if t_k is None else t_k
    return np.triu(np.ones((t_q, t_k), dtype=bool), k=t_k - t_q + 1)


def sliding_window_mask(t_q, window, t_k=None):
    _need(window >= 1, "window", "must be >= 1")
    t_k = t_q if t_k is None else t_k
    return causal_mask(t_q, t_k) | np.tril(np.ones((t_q, t_k), dtype=bool), k=t_k - t_q - window)


def padding_mask(lengths, t):
    return np.arange(t).reshape(1, 1, 1, t) >= np.asarray(lengths).reshape(-1, 1, 1, 1)


def repeat_kv(x, n_rep):
    x = np.asarray(x)
    return x[:, np.arange(x.shape[1] * n_rep) // n_rep]


def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    q, k, v = (np.asarray(a) for a in (q, k, v))
    _need(q.shape[0] == k.shape[0] == v.shape[0], "k", "batch sizes differ")
    _need(q.shape[3] == k.shape[3], "k", "head widths differ")
    _need(q.shape[1] % k.shape[1] == 0, "k", "H % Hkv != 0")
    k, v = repeat_kv(k, q.shape[1] // k.shape[1]), repeat_kv(v, q.shape[1] // k.shape[1])
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.einsum("bhqd,bhkd->bhqk", q, k) * s
    if mask is not None:
        scores = np.where(np.asarray(mask), -np.inf, scores)
    w = softmax(scores, -1)
    return np.einsum("bhqk,bhkd->bhqd", w, v).astype(_ftype(q)), w.astype(_ftype(q))


def split_heads(x, n_heads):
    B, T, C = np.shape(x)
    _need(C % n_heads == 0, "n_heads", "does not divide C")
    return np.asarray(x).reshape(B, T, n_heads, C // n_heads).transpose(0, 2, 1, 3).copy()


def merge_heads(x):
    B, H, T, D = np.shape(x)
    return np.asarray(x).transpose(0, 2, 1, 3).reshape(B, T, H * D)


def rope(x, positions, theta=10000.0):
    x = np.asarray(x)
    D = x.shape[-1]
    _need(D % 2 == 0, "x", "odd head width")
    freq = 1.0 / theta ** (np.arange(0, D, 2) / D)
    turn = np.exp(1j * np.outer(np.asarray(positions, dtype=np.float64), freq))
    rotated = (x[..., 0::2] + 1j * x[..., 1::2]) * turn
    return np.stack([rotated.real, rotated.imag], axis=-1).reshape(x.shape).astype(x.dtype)


def sinusoidal_positions(seq_len, d_model):
    pe = np.zeros((seq_len, d_model))
    for col in range(d_model):
        angle = np.arange(seq_len) / 10000.0 ** ((col - col % 2) / d_model)
        pe[:, col] = np.sin(angle) if col % 2 == 0 else np.cos(angle)
    return pe


def rms_norm(x, weight, eps=1e-6):
    x = np.asarray(x)
    return (x * (1.0 / np.sqrt((x**2).mean(-1, keepdims=True) + eps)) * weight).astype(x.dtype)


def layer_norm(x, weight, bias, eps=1e-5):
    x = np.asarray(x)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return ((x - mu) / np.sqrt(var + eps) * weight + bias).astype(x.dtype)


def relu_ffn(x, w1, b1, w2, b2):
    x = np.asarray(x)
    return (np.maximum(0, x @ w1 + b1) @ w2 + b2).astype(x.dtype)


def swiglu_ffn(x, w_gate, w_up, w_down):
    x = np.asarray(x)
    g = x @ w_gate
    return (((g / (1.0 + np.exp(-g))) * (x @ w_up)) @ w_down).astype(x.dtype)


def _heads(C, n_heads, n_kv_heads, rope_theta, window):
    kv = n_heads if n_kv_heads is None else n_kv_heads
    _need(C % n_heads == 0, "n_heads", "does not divide C")
    _need(n_heads % kv == 0, "n_kv_heads", "does not divide n_heads")
    _need(rope_theta is None or (C // n_heads) % 2 == 0, "n_heads", "odd D with RoPE")
    _need(window is None or window >= 1, "window", "must be >= 1")
    return kv


def _attend(x, past_k, past_v, w, n_heads, kv, causal, window, rope_theta):
    wq, wk, wv, wo = (np.asarray(a, dtype=x.dtype) for a in w)
    T, Tp = x.shape[1], 0 if past_k is None else past_k.shape[2]
    q, k, v = split_heads(x @ wq, n_heads), split_heads(x @ wk, kv), split_heads(x @ wv, kv)
    if rope_theta is not None:
        q, k = rope(q, np.arange(Tp, Tp + T), rope_theta), rope(k, np.arange(Tp, Tp + T), rope_theta)
    if past_k is not None:
        k = np.concatenate([np.asarray(past_k, dtype=x.dtype), k], axis=2)
        v = np.concatenate([np.asarray(past_v, dtype=x.dtype), v], axis=2)
    if window is not None:
        mask = sliding_window_mask(T, window, Tp + T)
    else:
        mask = causal_mask(T, Tp + T) if causal else None
    return merge_heads(scaled_dot_product_attention(q, k, v, mask)[0]) @ wo, k, v


def multi_head_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=True, window=None, rope_theta=None):
    x = np.asarray(x)
    kv = _heads(x.shape[2], n_heads, n_kv_heads, rope_theta, window)
    return _attend(x, None, None, (wq, wk, wv, wo), n_heads, kv, causal, window, rope_theta)[0]


def attention_decode(x_new, past_k, past_v, wq, wk, wv, wo, n_heads, n_kv_heads=None, window=None, rope_theta=None):
    x = np.asarray(x_new)
    kv = _heads(x.shape[2], n_heads, n_kv_heads, rope_theta, window)
    return _attend(x, past_k, past_v, (wq, wk, wv, wo), n_heads, kv, True, window, rope_theta)


def tiled_attention(q, k, v, block_size, causal=True, scale=None):
    q, k, v = (np.asarray(a) for a in (q, k, v))
    _need(block_size >= 1, "block_size", "must be >= 1")
    _need(q.shape[0] == k.shape[0] == v.shape[0], "k", "batch sizes differ")
    _need(q.shape[1] % k.shape[1] == 0, "k", "H % Hkv != 0")
    k, v = repeat_kv(k, q.shape[1] // k.shape[1]), repeat_kv(v, q.shape[1] // k.shape[1])
    Tq, Tk = q.shape[2], k.shape[2]
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    m = np.full(q.shape[:3] + (1,), -np.inf)
    total = np.zeros(q.shape[:3] + (1,))
    acc = np.zeros(q.shape[:3] + (v.shape[-1],))
    rows = np.arange(Tq)[:, None] + (Tk - Tq)
    for lo in range(0, Tk, block_size):
        hi = min(lo + block_size, Tk)
        sc = np.einsum("bhqd,bhkd->bhqk", q, k[:, :, lo:hi]) * s
        if causal:
            sc = np.where(np.arange(lo, hi)[None, :] > rows, -np.inf, sc)
        m_new = np.maximum(m, sc.max(-1, keepdims=True))
        base = np.where(np.isinf(m_new), 0.0, m_new)
        p, corr = np.exp(sc - base), np.exp(m - base)
        total = total * corr + p.sum(-1, keepdims=True)
        acc = acc * corr + np.einsum("bhqk,bhkd->bhqd", p, v[:, :, lo:hi])
        m = m_new
    return np.where(total > 0, acc / np.where(total > 0, total, 1.0), 0.0).astype(_ftype(q))


def transformer_block(x, params, n_heads, n_kv_heads=None, eps=1e-6, rope_theta=None, window=None):
    p = params
    h = x + multi_head_attention(rms_norm(x, p["norm1"], eps), p["wq"], p["wk"], p["wv"], p["wo"], n_heads, n_kv_heads, True, window, rope_theta)
    return h + swiglu_ffn(rms_norm(h, p["norm2"], eps), p["w_gate"], p["w_up"], p["w_down"])


def decoder_forward(token_ids, params, n_heads, n_kv_heads=None, eps=1e-6, positional="sinusoidal", rope_theta=10000.0, window=None):
    embed, ids = np.asarray(params["embed"]), np.asarray(token_ids)
    _need(embed.shape[1] % n_heads == 0, "n_heads", "does not divide C")
    x = embed[ids]
    if positional == "sinusoidal":
        x = x + sinusoidal_positions(ids.shape[1], embed.shape[1]).astype(x.dtype)
    for block in params["blocks"]:
        x = transformer_block(x, block, n_heads, n_kv_heads, eps, rope_theta if positional == "rope" else None, window)
    return rms_norm(x, params["final_norm"], eps) @ embed.T
'''


def write_room(root: Path, source: str) -> Path:
    root.mkdir(parents=True)
    (root / "__init__.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return root


def statuses(report) -> dict[tuple[str, str], str]:
    return {(c.function, c.name): c.status for c in report.checks}


# --------------------------------------------------------------------------
# Honest clean rooms pass
# --------------------------------------------------------------------------


def test_the_repos_clean_room_passes_every_check(tmp_path):
    report = verify_clean_room(project_clean_room(), 20.0, out=tmp_path / "verify", measure=False)
    failed = [f"{c.function} {c.name}: {c.message}" for c in report.checks if not c.passed]
    assert report.passed, failed
    assert report.diagnosis == []
    names = {c.function for c in report.checks}
    assert set(contract.function_names()) <= names
    parity = [c for c in report.checks if c.name == "parity"]
    assert len(parity) == 19
    # The worst is a float32 probe's now (tiled attention's large logits: 1.6e-3 of float32's
    # bound, twelve seeds); float64's are ~1e-4 of theirs.
    assert all(c.margin is not None and c.margin < 1e-2 for c in parity)
    assert report.wall_time_s < 30


# Rooms that found their answers somewhere other than the function, each passing before.
ANSWERS_BY_SHAPE = {
    # Functions keep no state: this one answers from a cache keyed by the inputs' shapes, so
    # the causal check's inputs (the base's shapes, its future changed) got the base's output.
    "cached by shape": (
        "transformer_block",
        """
_block, _seen = transformer_block, {}

def transformer_block(x, params, n_heads, n_kv_heads=None, eps=1e-6, rope_theta=None, window=None):
    key = (np.shape(x), np.asarray(x).dtype.str, n_heads, n_kv_heads, eps, rope_theta, window)
    if key not in _seen:
        _seen[key] = _block(x, params, n_heads, n_kv_heads, eps, rope_theta, window)
    return _seen[key]
""",
        "transformer_block",
        "future-after-",
    ),
    # float32 in, float32 out, and nothing else of the float32 path was checked: zeros passed.
    "float32 zeros": (
        "primitives",
        """
_softmax = softmax

def softmax(x, axis=-1, temperature=1.0):
    x = np.asarray(x)
    if x.dtype == np.float32:
        return np.zeros_like(x)
    return _softmax(x, axis, temperature)
""",
        "softmax",
        "-float32",
    ),
}


@pytest.mark.parametrize("case", sorted(ANSWERS_BY_SHAPE))
def test_a_room_that_answers_from_elsewhere_fails_parity_on_the_calls_it_got_wrong(tmp_path, case):
    module, source, function, named = ANSWERS_BY_SHAPE[case]
    room = learner_room(tmp_path, module, textwrap.dedent(source))
    seen = observe(room, 20.0, 1024, functions=(function,), seed=5)
    parity = next(r for r in checks.evaluate(seen) if r.function == function and r.name == "parity")
    assert parity.status == "fail", parity.message
    assert named in parity.fixture and parity.margin > 10, parity


def test_a_clean_room_written_from_the_contract_alone_passes(tmp_path):
    room = write_room(tmp_path / "alt_room", ALT_ROOM)
    report = verify_clean_room(room, 20.0, out=None, measure=False)
    failed = [f"{c.function} {c.name}: {c.message}" for c in report.checks if not c.passed]
    assert report.passed, failed


def test_every_function_gets_every_applicable_check(tmp_path):
    report = verify_clean_room(project_clean_room(), 20.0, out=None, measure=False)
    seen = statuses(report)
    for fn in contract.function_names():
        for name in ("contract", "runs", "shape", "dtype", "parity"):
            assert seen[(fn, name)] == "pass", (fn, name)
    for fn in CAUSAL_FUNCTIONS:
        assert seen[(fn, "causal")] == "pass"
    assert seen[("softmax", "rows-sum")] == "pass"
    assert seen[("scaled_dot_product_attention", "rows-sum")] == "pass"
    assert seen[("(package)", "loads")] == "pass"
    assert seen[("(package)", "import-policy")] == "pass"
    with_bad_input = {fn for (fn, name) in seen if name == "bad-input"}
    assert with_bad_input == {fn for fn in contract.function_names() if bad_cases(fn)}


# --------------------------------------------------------------------------
# Fixtures follow the contract
# --------------------------------------------------------------------------


@pytest.mark.parametrize("function", contract.function_names())
def test_fixture_outputs_match_the_contracts_returns(function):
    """Every reference output is finite and has as many arrays as the contract's returns."""
    returns = next(f.returns for f in contract.functions() if f.name == function)
    for fixture in (*fx.fixtures(function), *fx.probes(function)):
        value = fx.reference_output(fixture)
        arrays = compare.elements(value)
        assert len(arrays) == len(RETURNS[function])
        for spec, array in zip(RETURNS[function], arrays, strict=True):
            assert spec in returns, (spec, returns)
            if array.dtype != np.bool_:
                assert np.all(np.isfinite(array)), (function, fixture.name)
    import labctl.reference as reference

    for case in bad_cases(function):
        args, kwargs = case.call()
        with pytest.raises((ValueError, TypeError)):
            getattr(reference, function)(*args, **kwargs)


def test_fixtures_include_the_adversarial_cases():
    names = {(f.function, f.name) for fn in contract.function_names() for f in fx.fixtures(fn)}
    assert ("softmax", "large-logits") in names
    assert ("softmax", "blocked-slices") in names
    assert ("rope", "non-consecutive") in names
    assert ("scaled_dot_product_attention", "gqa-tq<tk") in names
    assert ("scaled_dot_product_attention", "mqa-padding") in names
    assert ("causal_mask", "tq<tk") in names
    large = fx.fixtures("softmax")[3].args[0]
    assert np.max(np.abs(large)) > 1e3
    positions = fx.fixtures("rope")[0].args[1]
    assert positions.dtype == np.int64 and np.any(np.diff(positions) != 1)


# --------------------------------------------------------------------------
# Comparing: tolerance v1, NaN, shapes and types
# --------------------------------------------------------------------------


def test_parity_tolerance_v1_scales_with_the_output():
    assert compare.parity_tolerance(np.ones(3)) == pytest.approx(1e-10)
    assert compare.parity_tolerance(np.array([0.5, -2e3])) == pytest.approx(2e-7)
    assert compare.parity_tolerance(np.array([True, False])) == 0.5
    assert compare.TOLERANCE_VERSION == "v1"


def test_compare_reports_error_fraction_and_margin():
    ref = np.zeros(4)
    result = compare.compare(np.array([0.0, 0.0, 3e-10, 1e-9]), ref, 1e-10)
    assert result.max_error == pytest.approx(1e-9)
    assert result.mismatch_fraction == 0.5
    assert result.margin == pytest.approx(10.0)
    assert not result.ok
    nan = compare.compare(np.array([np.nan, 0.0]), np.array([0.0, 0.0]), 1e-10)
    assert math.isinf(nan.max_error) and nan.mismatch_fraction == 0.5
    same_nan = compare.compare(np.array([np.nan]), np.array([np.nan]), 1e-10)
    assert same_nan.ok


def test_complex_values_are_compared_by_both_parts():
    """An element's error is the larger of its real and imaginary errors, on either side."""
    ref = np.array([1.0, 2.0])
    assert compare.compare(np.array([1 + 100j, 2.0]), ref, 1e-10).max_error == 100.0
    both = compare.compare(np.array([3 + 1j, 2 - 0.5j]), np.array([1 + 0j, 2 + 0j]), 1.0)
    assert both.max_error == 2.0 and both.mismatch_fraction == 0.5
    assert compare.compare(ref, np.array([1.0, 2 + 3j]), 1e-10).max_error == 3.0


def test_a_dependency_s_imaginary_part_is_an_error_where_its_calls_are_judged():
    """The diagnosis judges a dependency on the inputs it received by `relative_error`: an
    imaginary part counts as `compare` counts it, and is not cast away with a warning."""
    from labctl.verify.calls import relative_error

    ref = np.array([1.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert relative_error(np.array([1 + 100j, 2.0]), ref) == pytest.approx(100.0 / 2.0)
        assert relative_error(np.array([3 + 1j, 2 - 0.5j]), ref) == pytest.approx(2.0 / 2.0)
        assert relative_error(np.array([1.0, 2.0]), ref) == 0.0


def test_a_wrong_shape_is_named_with_the_contracts_letters():
    reference = np.zeros((2, 4, 8))
    problem = compare.structure_problem("transformer_block", np.zeros((2, 8, 4)), reference)
    assert problem == ("returned shape (2, 8, 4) where the contract says (B, T, C) = (2, 4, 8)")


@pytest.mark.parametrize(
    ("function", "value", "reference", "expected"),
    [
        (
            "multi_head_attention",
            [[1.0]],
            np.zeros((1, 1)),
            "returned a list instead of an ndarray ((B, T, C) = (1, 1))",
        ),
        (
            "multi_head_attention",
            (np.zeros((1, 1)), np.zeros((1, 1))),
            np.zeros((1, 1)),
            "returned a tuple of 2 where the contract says one array (B, T, C) = (1, 1)",
        ),
        (
            "scaled_dot_product_attention",
            np.zeros((1, 1, 1, 1)),
            (np.zeros((1, 1, 1, 1)), np.zeros((1, 1, 1, 1))),
            "returned one array of shape (1, 1, 1, 1) where the contract says a tuple (out, weights)",
        ),
        (
            "softmax",
            wire.Unsupported("generator"),
            np.zeros(3),
            "returned as a generator (not an array) where the contract says an ndarray "
            "(the same shape as x, (3,))",
        ),
        (
            "softmax",
            wire.Unsupported("ndarray of dtype float128"),
            np.zeros(3),
            "returned as an ndarray of dtype float128 (a dtype no contract function returns) "
            "where the contract says an ndarray (the same shape as x, (3,))",
        ),
        (
            "softmax",
            np.float64(1.0),
            np.zeros(3),
            "returned as a numpy scalar (float64) where the contract says an ndarray "
            "(the same shape as x, (3,))",
        ),
        (
            "attention_decode",
            (np.zeros((1, 1, 4)), np.zeros((1, 1, 1, 2)), np.zeros((1, 1, 3, 2))),
            (np.zeros((1, 1, 4)), np.zeros((1, 1, 3, 2)), np.zeros((1, 1, 3, 2))),
            "returned k_all shape (1, 1, 1, 2) where the contract says k_all (B, Hkv, Tp+Tn, D) "
            "= (1, 1, 3, 2)",
        ),
    ],
)
def test_wrong_types_and_structures_are_named(function, value, reference, expected):
    assert compare.structure_problem(function, value, reference) == expected


def test_every_check_has_a_docstring_saying_what_it_catches():
    for check in checks.CHECKS:
        assert "Catches:" in check.doc, check.name
        assert check.justified or "Fault" in check.doc, check.name
    assert set(checks.JUSTIFIED) == {"loads"}


# --------------------------------------------------------------------------
# Evidence: a record per run, and a history that keeps failure-before / fix-after
# --------------------------------------------------------------------------


def test_each_run_writes_a_record_and_appends_to_the_history(tmp_path):
    from labctl.faults import get as get_fault

    out = tmp_path / "ev" / "verify"
    broken = get_fault("mask-reversed").materialize(tmp_path / "room")
    before = verify_clean_room(broken, 20.0, out=out, measure=False)
    assert not before.passed
    fixed = verify_clean_room(project_clean_room(), 20.0, out=out, measure=False)
    assert fixed.passed

    history = read_history(out)
    assert [h["passed"] for h in history] == [False, True]
    assert "causal_mask" in history[0]["failing_functions"]
    assert any("mask-reversed" in line for line in history[0]["diagnosis"])
    assert not Path(history[0]["path"]).is_absolute()
    assert history[1]["failing_functions"] == []

    records = sorted(p for p in out.glob("*.json") if not p.name.endswith("-report.json"))
    assert len(records) == 2
    for path in records:
        record = EvidenceRecord.model_validate(json.loads(path.read_text("utf-8")))
        assert record.schema_id == "learn-llm.evidence.v1"
        assert record.module == "verify-clean-room"
        assert record.labctl.tolerances == "v1"
        assert any(m.name == "verify_failed_checks" for m in record.metrics)
        artifact = record.artifacts[0]
        assert artifact.path.endswith("-report.json") and artifact.sha256
    failing = EvidenceRecord.model_validate(json.loads(records[0].read_text("utf-8")))
    assert failing.labctl.passed is False
    assert any("causal_mask parity" in line for line in failing.known_failures)
    manifest = json.loads((out.parent / "module-manifest-v1.json").read_text("utf-8"))
    assert manifest["modules"]["verify-clean-room"]["passed"] is True


def test_the_report_artifact_stays_strict_json_when_outputs_are_nan(tmp_path):
    from labctl.faults import get as get_fault

    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    room = get_fault("softmax-no-max").materialize(tmp_path / "room")
    report = verify_clean_room(room, 20.0, out=tmp_path / "verify", measure=False)
    parity = next(c for c in report.checks if c.function == "softmax" and c.name == "parity")
    assert math.isinf(parity.max_error)
    artifact = next((tmp_path / "verify").glob("*-report.json"))
    document = json.loads(artifact.read_text("utf-8"), parse_constant=refuse)
    row = next(
        c for c in document["checks"] if c["function"] == "softmax" and c["name"] == "parity"
    )
    assert row["max_error"] is None and row["passed"] is False


# --------------------------------------------------------------------------
# The rules each check decides by, on observations built here (issue 13): no worker, so
# each test states exactly the one thing a clean room did wrong.
# --------------------------------------------------------------------------


def _observed(function: str, outcome_of, **extra) -> checks.RoomObservation:
    """An observation of `function` whose every fixture returned `outcome_of(fixture)`."""
    run = checks.FunctionRun(function)
    for fixture in fx.fixtures(function):
        run.fixtures[fixture.name] = outcome_of(fixture)
    for name, value in extra.items():
        setattr(run, name, value)
    return checks.RoomObservation(root=Path("room"), runs={function: run})


def _returns(value_of):
    return lambda fixture: Outcome("value", value=value_of(fixture))


def test_inf_in_the_clean_room_against_a_finite_reference_is_an_infinite_error():
    for bad in (np.inf, -np.inf):
        result = compare.compare(np.array([bad, 0.0]), np.array([1.0, 0.0]), 1e-10)
        assert math.isinf(result.max_error) and not result.ok
        assert result.mismatch_fraction == 0.5
    # The same special value on both sides is agreement; opposite signs are not.
    assert compare.compare(np.array([-np.inf]), np.array([-np.inf]), 1e-10).max_error == 0.0
    assert not compare.compare(np.array([np.inf]), np.array([-np.inf]), 1e-10).ok
    assert not compare.compare(np.array([1.0]), np.array([np.inf]), 1e-10).ok


def test_causal_variants_perturb_after_every_position_from_the_first():
    for function in CAUSAL_FUNCTIONS:
        base = fx.causal_base(function)
        T = base.args[0].shape[1]
        variants = fx.causal_variants(function)
        assert [t for t, _ in variants] == list(range(T - 1))
        for t, variant in variants:
            before, after = base.args[0], variant.args[0]
            assert np.array_equal(after[:, : t + 1], before[:, : t + 1])  # the prefix is kept
            assert np.all(after[:, t + 1 :] != before[:, t + 1 :])  # every later input moves


def test_a_leak_only_into_the_first_position_fails_the_causal_check():
    """Position 0 reads position 1: only the variant perturbing after t = 0 can see it."""
    function = "multi_head_attention"

    def leaky(fixture):
        out = np.array(fx.reference_output(fixture), copy=True)
        x = fixture.args[0]
        if x.shape[1] > 1:  # a one-token fixture has no next token to read
            out[:, 0] += 1e-6 * x[:, 1]  # (B, C)
        return out

    causal = {
        t: Outcome("value", value=leaky(variant)) for t, variant in fx.causal_variants(function)
    }
    seen = _observed(function, _returns(leaky), causal=causal)
    result = checks.check_causal(seen, function)
    assert result.status == checks.FAIL
    assert "after position 0 moved the outputs at positions <= 0" in result.message
    assert 1e-7 < result.max_error < 1e-4


def test_weights_with_negatives_that_still_sum_to_one_fail_rows_sum():
    function = "softmax"

    def shifted(fixture):
        weights = np.array(fx.reference_output(fixture), copy=True)
        axis = fixture.kwargs.get("axis", -1)
        moved = np.moveaxis(weights, axis, -1)  # a view: slices along the softmax axis
        live = moved.sum(axis=-1) > 0.5  # leave fully blocked slices (all 0) alone
        moved[..., 0] += np.where(live, 0.75, 0.0)
        moved[..., 1] -= np.where(live, 0.75, 0.0)  # sums unchanged, some weights below 0
        return weights

    seen = _observed(function, _returns(shifted))
    result = checks.check_rows_sum(seen, function)
    assert result.status == checks.FAIL
    assert result.max_error > 0.25  # the most negative weight, not a sum's rounding
    assert "from summing to 1" in result.message


@pytest.mark.parametrize(
    "exc_type", ["IndexError", "KeyError", "ZeroDivisionError", "RuntimeError"]
)
def test_a_bad_input_refused_with_the_wrong_exception_fails(exc_type):
    function = "sliding_window_mask"
    seen = _observed(function, _returns(fx.reference_output))
    run = seen.runs[function]
    for case in bad_cases(function):
        run.bad[case.name] = Outcome("exception", message="boom", exc_type=exc_type)
    result = checks.check_bad_input(seen, function)
    assert result.status == checks.FAIL
    first = bad_cases(function)[0].name
    assert result.message == (
        f"case {first}: raised {exc_type}; the contract's rule: window < 1 (the window counts "
        "the current token) must raise ValueError (or TypeError) naming window"
    )


@pytest.mark.parametrize(
    ("exc_type", "accepted"),
    [
        ("ValueError", True),
        ("TypeError", True),
        ("AxisError", True),
        ("UnicodeDecodeError", True),  # a builtin subclass of ValueError
        ("ShapeError", True),  # the clean room's own class: taken on trust
        ("IndexError", False),
        ("KeyError", False),
        ("AssertionError", False),
        ("ForbiddenImport", False),
        (None, False),
    ],
)
def test_which_exceptions_count_as_refusing_bad_input(exc_type, accepted):
    assert accepted_refusal(exc_type) is accepted


def test_a_function_only_partly_not_implemented_is_not_called_a_stub():
    function = "rms_norm"
    names = [f.name for f in fx.fixtures(function)]
    assert len(names) > 1

    def partly(fixture):
        if fixture.name == names[0]:
            return Outcome("not-implemented", exc_type="NotImplementedError")
        return Outcome("value", value=fx.reference_output(fixture))

    seen = _observed(function, partly)
    run = seen.runs[function]
    assert not run.not_implemented
    runs = checks.check_runs(seen, function)
    assert runs.status == checks.FAIL
    assert runs.message == f"fixture {names[0]}: not implemented (raises NotImplementedError)"
    # The fixtures that returned are still checked: parity runs and passes on them.
    assert checks.check_parity(seen, function).status == checks.PASS
    # Every call raising it is a stub: nothing else is checked.
    stub = _observed(function, lambda f: Outcome("not-implemented"))
    assert stub.runs[function].not_implemented
    assert checks.check_parity(stub, function).status == checks.NOT_RUN


# -- comparison details mutmut found unguarded ------------------------------------------------


def test_integer_and_empty_references_get_their_own_tolerances():
    assert compare.parity_tolerance(np.array([1, 2], dtype=np.int64)) == 0.5  # exact
    assert compare.parity_tolerance(np.zeros(0)) == pytest.approx(1e-10)
    empty = compare.compare(np.zeros(0), np.zeros(0), 1e-10)
    assert (empty.max_error, empty.tolerance, empty.mismatch_fraction) == (0.0, 1e-10, 0.0)


def test_an_error_exactly_at_the_tolerance_is_no_mismatch():
    result = compare.compare(np.array([0.5, 0.0]), np.array([0.0, 0.0]), 0.5)
    assert result.ok and result.mismatch_fraction == 0.0


def test_special_values_compare_without_a_numpy_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = compare.compare(
            np.array([np.inf, np.nan, -np.inf, 1e308]), np.array([np.inf, 1.0, 0.0, -1e308]), 1e-10
        )
    assert math.isinf(result.max_error) and result.mismatch_fraction == 0.75


def test_the_mismatch_share_counts_every_element_of_every_array():
    out = np.zeros((1, 1, 2, 3))  # (B, H, Tq, Dv): 6 elements
    weights = np.full((1, 1, 2, 2), 0.5)  # (B, H, Tq, Tk): 4 elements
    wrong_out = out.copy()
    wrong_out[0, 0, 0, :2] = 1.0  # 2 of the 6 wrong
    result = compare.compare_value(
        "scaled_dot_product_attention", (wrong_out, weights), (out, weights)
    )
    assert result.max_error == 1.0 and result.tolerance == pytest.approx(1e-10)
    assert result.mismatch_fraction == pytest.approx(2 / 10)
    # Equal margins: the first array's error is the one reported.
    ref_out = np.zeros((1, 1, 2, 3))
    ref_out[0, 0, 1, 2] = 2.0  # scales out's tolerance to 2e-10
    got_out = ref_out.copy()
    got_out[0, 0, 0, 0] = 2e-10  # margin 1
    got_weights = np.zeros((1, 1, 2, 2))
    got_weights[0, 0, 0, 0] = 1e-10  # margin 1 too
    tied = compare.compare_value(
        "scaled_dot_product_attention", (got_out, got_weights), (ref_out, np.zeros((1, 1, 2, 2)))
    )
    assert tied.max_error == 2e-10 and tied.margin == 1.0


def test_a_wrong_structure_is_a_reason_not_a_comparison():
    reference = (np.zeros((1, 1, 2, 3)), np.zeros((1, 1, 2, 2)))
    assert compare.compare_value("scaled_dot_product_attention", np.zeros(3), reference) == (
        "returned one array of shape (3,) where the contract says a tuple (out, weights)"
    )


@pytest.mark.parametrize(
    ("function", "value", "reference", "expected"),
    [
        (
            "softmax",
            np.zeros((2, 4)),
            np.zeros((2, 3)),
            "returned shape (2, 4) where the contract says the same shape as x, (2, 3)",
        ),
        (
            "scaled_dot_product_attention",
            2.5,
            (np.zeros((1, 1, 2, 3)), np.zeros((1, 1, 2, 2))),
            "returned a float where the contract says a tuple (out, weights)",
        ),
        (
            "scaled_dot_product_attention",
            [np.zeros((1, 1, 2, 3))],
            (np.zeros((1, 1, 2, 3)), np.zeros((1, 1, 2, 2))),
            "returned a list of 1 where the contract says (out, weights)",
        ),
        (
            "scaled_dot_product_attention",
            (np.zeros((1, 1, 2, 3)), np.zeros((1, 1, 2, 3))),
            (np.zeros((1, 1, 2, 3)), np.zeros((1, 1, 2, 2))),
            "returned weights shape (1, 1, 2, 3) where the contract says "
            "weights (B, H, Tq, Tk) = (1, 1, 2, 2)",
        ),
        (
            "scaled_dot_product_attention",
            (np.zeros((1, 1, 2, 3)), 0.5),
            (np.zeros((1, 1, 2, 3)), np.zeros((1, 1, 2, 2))),
            "returned weights as a float where the contract says an ndarray "
            "(weights (B, H, Tq, Tk) = (1, 1, 2, 2))",
        ),
    ],
)
def test_structure_problems_name_the_type_the_array_and_the_contract_s_shape(
    function, value, reference, expected
):
    assert compare.structure_problem(function, value, reference) == expected


def test_an_empty_return_value_matches_an_empty_reference():
    result = compare.compare_value("softmax", np.zeros((0, 3)), np.zeros((0, 3)))
    assert (result.max_error, result.mismatch_fraction) == (0.0, 0.0) and result.ok


# -- which checks apply, and how a result reads (mutmut survivors of checks.py) ---------------

_INT_ONLY = {"causal_mask", "sliding_window_mask", "sinusoidal_positions"}
_BOOL_OUT = {"causal_mask", "sliding_window_mask", "padding_mask"}


@pytest.mark.parametrize("function", contract.function_names())
def test_purity_and_finiteness_apply_exactly_where_they_can_fail(function):
    names = {c.name for c in checks.applicable(function)}
    assert ("pure" in names) == (function not in _INT_ONLY)  # no array input to modify
    assert ("finite" in names) == (function not in _BOOL_OUT)  # a boolean cannot be NaN


@pytest.mark.parametrize(("scanned", "files"), [(1, "1 file"), (3, "3 files"), (0, "0 files")])
def test_the_import_policy_counts_the_files_it_scanned(scanned, files):
    seen = checks.RoomObservation(root=Path("room"), files_scanned=scanned)
    result = checks.check_import_policy(seen, "(package)")
    assert result.status == checks.PASS and f"static scan of {files} or" in result.message


@pytest.mark.parametrize(
    ("status", "says"),
    [
        ("refused", "not run: refused by the import policy"),
        ("unloadable", "not run: the clean room does not load"),
    ],
)
def test_checks_of_a_room_that_did_not_load_say_why_they_did_not_run(status, says):
    seen = checks.RoomObservation(root=Path("room"), status=status)
    for check_fn in (checks.check_parity, checks.check_shape, checks.check_rows_sum):
        result = check_fn(seen, "softmax")
        assert (result.status, result.message) == (checks.NOT_RUN, says)


def test_the_reference_is_warmed_once_the_room_loads_and_never_for_one_that_does_not(
    tmp_path, monkeypatch
):
    """verify computes the reference (torch) while the room's calls run: `on_load` is
    called once the room has loaded, before any call; a room that does not load calls
    nothing and warms no reference."""
    from labctl.verify import observe as observe_module
    from labctl.verify import verify as verify_module

    loaded = []
    observe_module.observe(
        project_clean_room(),
        10.0,
        1024,
        functions=("softmax",),
        isolation="process",
        on_load=lambda seen: loaded.append((seen.status, dict(seen.runs))),
    )
    assert loaded == [("loaded", {})]
    warmed = []
    monkeypatch.setattr(verify_module, "_warm_quietly", lambda *args: warmed.append(args))
    broken = write_room(tmp_path / "broken", "def softmax(x, axis=-1):\n    return (\n")
    report = verify_clean_room(broken, 10.0, out=None, measure=False, isolation="process")
    assert not report.passed and warmed == []
    report = verify_clean_room(
        project_clean_room(), 10.0, out=None, measure=False, isolation="process", seed=7
    )
    assert report.passed and warmed == [(7, 1)]
