"""The inputs `labctl verify` derives from its fixtures: the float32 probes, the future-token
variants, and the reference's outputs computed once (issue 13's mutation runs)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from fixturetools import INT_ONLY, arrays

from labctl import contract
from labctl.verify import fixtures as fx
from labctl.verify.functions import CAUSAL_FUNCTIONS


@pytest.fixture(autouse=True)
def _built_anew():
    """Build the derived inputs again in each test: a copy cached earlier (by another test,
    or in mutmut's fork server) would hide a change to how they are built."""
    for cached in (fx.fixtures, fx.probes, fx.causal_variants):
        cached.cache_clear()


@pytest.mark.parametrize("function", contract.function_names())
def test_every_fixture_has_a_probe_in_float32(function):
    """Issue 21: the probe of the first fixture alone missed an upcast on another path."""
    probes = fx.probes(function)
    if function in INT_ONLY:
        assert probes == ()
        return
    fixtures = fx.fixtures(function)
    assert len(probes) == len(fixtures) > 0
    for fixture, probe in zip(fixtures, probes, strict=True):
        assert (probe.function, probe.name) == (function, f"{fixture.name}-float32")
        assert str(probe.note) == "float32 inputs: the output must stay float32"
        before = list(arrays((fixture.args, dict(fixture.kwargs))))
        after = list(arrays((probe.args, dict(probe.kwargs))))
        assert len(before) == len(after) > 0
        for old, new in zip(before, after, strict=True):
            expected = np.float32 if old.dtype == np.float64 else old.dtype
            assert new.dtype == expected and np.array_equal(new, old.astype(expected))
        assert type(probe.args) is type(fixture.args)
        assert probe.kwargs.keys() == fixture.kwargs.keys()


def test_float32_converts_inside_tuples_lists_and_mappings_and_keeps_the_rest():
    value = (np.zeros(2), [np.ones(1), 3], {"w": np.zeros(1), "n": np.arange(2)}, "x")
    out = fx._float32(value)
    assert isinstance(out, tuple) and isinstance(out[1], list) and isinstance(out[2], dict)
    assert out[0].dtype == np.float32 and out[1][0].dtype == np.float32
    assert out[2]["w"].dtype == np.float32 and out[2]["n"].dtype == np.arange(2).dtype
    assert out[1][1] == 3 and out[3] == "x"


def test_the_causal_base_is_the_function_s_first_fixture():
    for function in CAUSAL_FUNCTIONS:
        assert fx.causal_base(function) is fx.fixtures(function)[0]


def test_the_decoder_s_future_variants_replace_every_later_token_with_another_valid_one():
    base = fx.causal_base("decoder_forward")
    ids = base.args[0]
    V = base.args[1]["embed"].shape[0]
    T = ids.shape[1]
    variants = fx.causal_variants("decoder_forward")
    assert [t for t, _ in variants] == list(range(T - 1))
    for t, variant in variants:
        changed = variant.args[0]
        assert variant.name == f"future-after-{t}" and variant.function == "decoder_forward"
        assert changed.dtype == ids.dtype and changed.shape == ids.shape
        assert np.array_equal(changed[:, : t + 1], ids[:, : t + 1])
        assert np.all(changed[:, t + 1 :] != ids[:, t + 1 :])
        assert changed.min() >= 0 and changed.max() < V
        assert variant.args[1:] == base.args[1:] and variant.kwargs == base.kwargs


def test_future_variants_are_the_same_in_every_process():
    """Seeded by the function's name: a rerun perturbs the same way."""
    for function in CAUSAL_FUNCTIONS:
        first = fx._causal_variants(function)
        again = fx._causal_variants(function)
        for (t1, a), (t2, b) in zip(first, again, strict=True):
            assert t1 == t2 and np.array_equal(a.args[0], b.args[0])


def test_a_reference_output_is_computed_once_per_fixture():
    fixture = fx.fixtures("softmax")[0]
    first = fx.reference_output(fixture)
    assert fx.reference_output(fixture) is first
    x = fixture.args[0]
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(first, e / e.sum(axis=-1, keepdims=True), rtol=0, atol=1e-15)


def test_warm_reference_fills_and_writes_the_cache_where_one_is_named(tmp_path, monkeypatch):
    from labctl.verify import reference_cache

    monkeypatch.setenv(reference_cache.ENV, str(tmp_path))
    monkeypatch.setenv(reference_cache.KEY_ENV, "ab" * 32)
    monkeypatch.setattr(fx, "_REFERENCE", {})
    fx.warm_reference(("softmax", "rope"))
    wanted = {
        (5, f.function, f.name)
        for fn in ("softmax", "rope")
        for f in (*fx.fixtures(fn), *fx.probes(fn))
    }
    assert set(fx._REFERENCE) == wanted
    assert len(list(tmp_path.glob("reference-*.bin"))) == 1
    # Another process reads them back instead of computing them.
    read: dict = {}
    assert reference_cache.load(read, 5) == len(wanted)
    # Nothing new computed: the cache is not written again.
    stamp = next(tmp_path.glob("reference-*.bin")).stat().st_mtime_ns
    monkeypatch.setattr(fx, "_REFERENCE", {})
    fx.warm_reference(("softmax",))
    assert next(tmp_path.glob("reference-*.bin")).stat().st_mtime_ns == stamp


def test_warming_again_reads_the_file_only_when_it_changed(tmp_path, monkeypatch):
    """A grading worker warms the reference before every learner: the file it read, unchanged,
    is not read again; a file replaced since (edited, or written by another process) is."""
    from labctl.verify import reference_cache

    monkeypatch.setenv(reference_cache.ENV, str(tmp_path))
    monkeypatch.setenv(reference_cache.KEY_ENV, "cd" * 32)
    monkeypatch.setattr(fx, "_REFERENCE", {})
    reads = []
    real_read = reference_cache._read
    monkeypatch.setattr(reference_cache, "_read", lambda *a: reads.append(a) or real_read(*a))
    fx.warm_reference(("softmax",), 7)
    assert len(reads) == 1  # absent: computed and written
    fx.warm_reference(("softmax",), 7)
    fx.warm_reference(("softmax",), 7)
    assert len(reads) == 1
    # Edited after labctl wrote it: read again, found edited, and its outputs not taken.
    cache = next(tmp_path.glob("reference-*.bin"))
    data = bytearray(cache.read_bytes())
    data[-40] ^= 0xFF
    cache.write_bytes(bytes(data))
    held = dict(fx._REFERENCE)
    fx.warm_reference(("softmax",), 7)
    assert len(reads) == 2
    assert all(np.array_equal(held[k], fx._REFERENCE[k]) for k in held)
    # Outputs this process does not hold are read, even from the file it knows.
    monkeypatch.setattr(fx, "_REFERENCE", {})
    fx.warm_reference(("softmax",), 7)
    assert len(reads) == 3


def _digest(*values) -> str:
    h = hashlib.sha256()

    def feed(value):
        if isinstance(value, np.ndarray):
            h.update(f"{value.dtype}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        elif isinstance(value, (tuple, list)):
            h.update(f"[{len(value)}".encode())
            for item in value:
                feed(item)
        elif isinstance(value, dict):
            for key in sorted(value):
                h.update(f"{key}=".encode())
                feed(value[key])
        else:
            h.update(repr(value).encode())

    for value in values:
        feed(value)
    return h.hexdigest()


# The inputs of fixtures v6 (v5's: v4, and a window with causal=False in
# multi_head_attention; v6: scale=0.0 in the attention functions, and for contract v2 a
# factor without scaling and batched positions with a 3-d x in RoPE, (T,) positions in the
# attention functions, T = Tmax and ALiBi with a window in the decoder, weights that do not
# sum to 1 in attention_entropy), as bytes, v1's and v2's. A change to any of them must come
# with a new FIXTURES_VERSION (it keys the reference cache): then update this digest.
FIXTURES_V6_DIGEST = "f481389fd084c2556724d5c8f10358bb03299ffa10c8c51f8ccb363096b73657"


def test_the_inputs_of_fixtures_v6_do_not_change_unversioned():
    parts = []
    for version in (1, 2):
        for function in contract.function_names(version):
            fixtures = fx.fixtures(function, fx.SEED, version)
            for f in (*fixtures, *fx.probes(function, fx.SEED, version)):
                parts.append((version, f.function, f.name, f.args, dict(f.kwargs), str(f.note)))
    for function in CAUSAL_FUNCTIONS:
        for t, f in fx.causal_variants(function):
            parts.append((t, f.function, f.name, f.args, dict(f.kwargs)))
    assert fx.FIXTURES_VERSION == "v6"
    assert _digest(parts) == FIXTURES_V6_DIGEST


def test_each_later_token_is_replaced_on_its_own():
    base = fx.causal_base("decoder_forward")
    ids, V = base.args[0], base.args[1]["embed"].shape[0]
    t, variant = fx.causal_variants("decoder_forward")[0]
    shifts = (variant.args[0][:, t + 1 :] - ids[:, t + 1 :]) % V
    assert len(np.unique(shifts)) > 1  # not one shift for the whole future


def test_a_reference_output_is_computed_with_the_fixture_s_keyword_arguments(monkeypatch):
    monkeypatch.setattr(fx, "_REFERENCE", {})
    axis0 = next(f for f in fx.fixtures("softmax") if f.name == "axis-0")
    assert axis0.kwargs == {"axis": 0}
    x = axis0.args[0]
    e = np.exp(x - x.max(axis=0, keepdims=True))
    np.testing.assert_allclose(
        fx.reference_output(axis0), e / e.sum(axis=0, keepdims=True), rtol=0, atol=1e-15
    )
