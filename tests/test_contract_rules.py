"""The rules in sight (issue 38, item 1): what each function must refuse, and what t_q > t_k
means, shown by `contract show` and the stubs from the very cases verify grades.

A learner who writes a room from `contract show` and the stubs must pass bad-input on the
first try: every rule shown is a case graded (one source, `labctl.verify.rules`), every
case graded is a rule shown, and a case not refused quotes its rule.
"""

from __future__ import annotations

import json

import pytest
from checktools import learner_room
from typer.testing import CliRunner

from labctl import contract
from labctl.cli.main import app
from labctl.i18n import _, set_language
from labctl.verify import bad_input, rules
from labctl.verify import fixtures as fx
from labctl.verify.bad_input import bad_cases
from labctl.verify.stubs import module_source
from labctl.verify.verify import verify_clean_room


def invoke(*args: str, lang: str = "en"):
    result = CliRunner().invoke(app, ["--lang", lang, *args], env={"COLUMNS": "100"})
    assert "Traceback" not in result.output, result.output
    return result


def _every_rule() -> set[rules.Rule]:
    return {v for v in vars(rules).values() if isinstance(v, rules.Rule)}


@pytest.mark.parametrize("version", contract.VERSIONS)
def test_contract_show_json_lists_each_function_s_graded_rules(version):
    document = json.loads(invoke("contract", "show", "--contract", str(version), "--json").stdout)
    shown = document["bad_input"]
    for name in contract.function_names(version):
        cases = bad_cases(name, contract=version)
        if not cases:
            assert name not in shown
            continue
        assert sorted(c for r in shown[name] for c in r["cases"]) == sorted(c.name for c in cases)
        for entry in shown[name]:
            assert entry["raises"] == ["ValueError", "TypeError"]
            assert entry["argument"] in entry["rule"] and entry["condition"] in entry["rule"]
    # The pinned data is there unchanged, the rules beside it.
    assert document["sha256"] == contract.PINS[version]
    assert contract.digest({k: document[k] for k in contract.data(version)}) == document["sha256"]


def test_every_rule_the_contract_lists_is_a_case_verify_grades():
    """v2's Bad input section lists softmax's temperature, RoPE's scaling and positions, the
    decoder's position schemes and head: each was shown nowhere and graded nowhere."""
    graded = {c.rule for name in contract.function_names(2) for c in bad_cases(name, contract=2)}
    assert graded == _every_rule()
    v2_only = {"softmax", "rope", "multi_head_attention", "attention_decode", "decoder_forward"}
    for name in v2_only:
        assert len(bad_cases(name, contract=2)) > len(bad_cases(name, contract=1)), name


def test_the_project_s_room_refuses_every_case_it_is_graded_on():
    import labctl.clean_room as room

    for name in contract.function_names(2):
        for case in bad_cases(name, contract=2):
            args, kwargs = case.call()
            with pytest.raises((ValueError, TypeError)):
                getattr(room, name)(*args, **kwargs)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_contract_show_one_function_says_what_it_must_refuse(lang):
    result = invoke("contract", "show", "multi_head_attention", lang=lang)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    previous = set_language(lang)
    try:
        for rule in bad_input.rules_of("multi_head_attention"):
            assert " ".join(_(rule.said()).split()) in text
        assert _("must refuse") in text
    finally:
        set_language(previous)
    if lang == "zh":
        assert "raise ValueError (or TypeError)" not in text


def test_contract_show_table_has_the_rules_and_the_edges():
    text = " ".join(invoke("contract", "show").output.split())
    assert "window < 1 (the window counts the current token): raise ValueError" in text
    assert "t_q > t_k is valid, never refused" in text


def test_contract_show_one_function_json_and_an_unknown_name():
    document = json.loads(invoke("contract", "show", "causal_mask", "--json").stdout)
    assert document["function"]["name"] == "causal_mask"
    assert document["bad_input"] == [] and "t_q > t_k is valid" in document["edge"]
    result = invoke("contract", "show", "causal", "--json")
    assert result.exit_code == 2
    error = json.loads(result.stdout)
    assert "no function causal in contract v1" in json.dumps(error)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_stub_states_its_rules_and_edges(lang):
    previous = set_language(lang)
    try:
        source = module_source(2)
        for name in contract.function_names(2):
            body = source.split(f"\ndef {name}(")[1].split("\ndef ")[0]
            # Chinese wraps between characters, with no space: compare with no whitespace.
            flat = "".join(body.split())
            for rule in bad_input.rules_of(name, 2):
                assert "".join(_(rule.said()).split()) in flat, (name, rule)
            edge = rules.edge_of(name, 2)
            if edge:
                assert "".join(_(edge).split()) in flat, name
    finally:
        set_language(previous)


def test_every_function_taking_t_q_and_t_k_says_what_t_q_greater_means():
    for version in contract.VERSIONS:
        for fn in contract.functions(version):
            names = {p.name for p in fn.params}
            if {"t_q", "t_k"} <= names or {"q", "k"} <= names:
                assert rules.edge_of(fn.name, version), fn.name


@pytest.mark.parametrize(
    ("function", "version"),
    [
        ("causal_mask", 1),
        ("sliding_window_mask", 1),
        ("scaled_dot_product_attention", 1),
        ("tiled_attention", 1),
        ("alibi_bias", 2),
    ],
)
def test_verify_has_a_fixture_with_more_queries_than_keys(function, version):
    def lengths(f):
        if function == "causal_mask":
            return f.args[0], f.args[1] if len(f.args) > 1 else f.args[0]
        if function == "sliding_window_mask":
            return f.args[0], f.args[2] if len(f.args) > 2 else f.kwargs.get("t_k", f.args[0])
        if function == "alibi_bias":
            return f.args[1], f.args[2] if len(f.args) > 2 else f.args[1]
        return f.args[0].shape[-2], f.args[1].shape[-2]

    for seed in (5, 77):
        found = [f for f in fx.fixtures(function, seed, version) if lengths(f)[0] > lengths(f)[1]]
        assert found, (function, seed)


SQUARE_WHEN_TALL = """
def causal_mask(t_q, t_k=None):
    t_k = t_q if t_k is None else t_k
    n = max(t_q, t_k)
    return np.triu(np.ones((t_q, n), dtype=bool), k=n - t_q + 1)
"""


def test_a_causal_mask_that_gives_more_queries_than_keys_a_square_fails(tmp_path):
    """Issue 38: causal_mask(5, 4) returning a (5, 5) array passed: no fixture had
    t_q > t_k."""
    import numpy as np

    room = learner_room(tmp_path, "primitives", SQUARE_WHEN_TALL)
    report = verify_clean_room(room, 2.0, out=None, measure=False, diagnose_failures=False)
    shape = next(c for c in report.checks if (c.function, c.name) == ("causal_mask", "shape"))
    assert shape.failed and shape.fixture == "tq>tk", shape.message
    assert np.shape(np.triu(np.ones((5, 5), dtype=bool), k=1)) == (5, 5)


WINDOW_UNCHECKED = """
_checked_window_mask = sliding_window_mask

def sliding_window_mask(t_q, window, t_k=None):
    t_k = t_q if t_k is None else t_k
    p = (t_k - t_q) + np.arange(t_q)[:, None]
    j = np.arange(t_k)[None, :]
    return (j > p) | (j < p - window + 1)
"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_bad_input_failure_quotes_the_rule_it_broke(tmp_path, lang):
    room = learner_room(tmp_path, "primitives", WINDOW_UNCHECKED)
    report = verify_clean_room(room, 2.0, out=None, measure=False, diagnose_failures=False)
    bad = next(
        c for c in report.checks if (c.function, c.name) == ("sliding_window_mask", "bad-input")
    )
    assert bad.failed
    assert bad.message == (
        "case window<1: returned a value; the contract's rule: window < 1 (the window counts "
        "the current token) must raise ValueError (or TypeError) naming window"
    )
    previous = set_language(lang)
    try:
        shown = _(bad.shown)
        assert _(rules.WINDOW.condition) in shown
    finally:
        set_language(previous)
    if lang == "zh":
        assert "must raise" not in shown and "returned a value" not in shown


@pytest.mark.parametrize("implementation", ["labctl.clean_room", "labctl.reference.v2"])
@pytest.mark.parametrize("function", ["multi_head_attention", "attention_decode"])
def test_a_positions_error_shows_x_as_it_was_passed(implementation, function):
    """Issue 38: the message showed x as (4, 1, 12, 1), the shape RoPE's positions are
    checked against inside the function, not the (B, T, C) the learner passed."""
    import importlib

    import numpy as np

    module = importlib.import_module(implementation)
    case = next(c for c in bad_cases(function, contract=2) if c.name == "positions-shape")
    args, kwargs = case.call()
    with pytest.raises(ValueError) as raised:
        getattr(module, function)(*args, **kwargs)
    name = "x" if function == "multi_head_attention" else "x_new"
    assert f"to match {name} {tuple(np.shape(args[0]))}" in str(raised.value)
