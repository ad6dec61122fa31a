"""verify against contract v2: the version a room declares is the one used, and said; a v2
room passes v2 and v1; a v1 room asked for v2 fails by name; every v2 fault is caught."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labctl import contract
from labctl.cli.main import app
from labctl.faults.v2 import DECLARATION, V2
from labctl.faults.v2_named import V2_NAMED
from labctl.verify.checks import evaluate
from labctl.verify.fixtures_v2 import EXTENDED, NEW
from labctl.verify.observe import observe
from labctl.verify.verify import verify_clean_room

REPO = Path(__file__).resolve().parents[1]


def v2_room(tmp_path: Path) -> Path:
    """labctl's own room, declaring v2."""
    room = tmp_path / "room"
    shutil.copytree(REPO / "clean_room", room, ignore=shutil.ignore_patterns("__pycache__"))
    with (room / "__init__.py").open("a", encoding="utf-8") as handle:
        handle.write(DECLARATION)
    return room


def test_every_v2_function_and_widened_parameter_has_fixtures():
    assert set(NEW) == set(contract.added_in(2))
    assert set(EXTENDED) == {
        "softmax",
        "rope",
        "multi_head_attention",
        "attention_decode",
        "decoder_forward",
    }
    from labctl.verify import fixtures as fx

    keywords = {
        key
        for function in EXTENDED
        for f in fx.fixtures(function, 5, 2)
        if f.name.startswith("v2-")
        for key, value in f.kwargs.items()
    }
    assert {"temperature", "positions", "scaling", "factor", "positional"} <= keywords
    # A v1 room is never asked for v2's fixtures.
    assert not any(f.name.startswith("v2-") for f in fx.fixtures("rope", 5))


def test_a_declared_v2_room_is_verified_against_v2_and_says_so(tmp_path):
    room = v2_room(tmp_path)
    report = verify_clean_room(room, 5.0, out=tmp_path / "ev", measure=False, seed=5)
    assert report.passed, report.failures()
    assert report.contract == 2 and report.functions_passed() == (26, 26)
    document = report.to_json()
    assert document["contract"]["id"] == "transformer-block-v2"
    assert document["contract"]["sha256"] == contract.CONTRACT_V2_SHA256
    parity = {c.function for c in report.checks if c.name == "parity" and c.passed}
    assert parity == set(contract.function_names(2))
    # The record and the history line keep the version.
    from labctl.verify.record import read_history

    line = read_history(tmp_path / "ev")[-1]
    assert line["contract"] == "transformer-block-v2"
    assert line["contract_sha256"] == contract.CONTRACT_V2_SHA256
    record = json.loads((tmp_path / "ev" / Path(line["record"]).name).read_text("utf-8"))
    assert record["labctl"]["clean_room"]["contract"] == 2


def test_the_cli_says_which_contract_it_used(tmp_path):
    room = v2_room(tmp_path)
    base = ["verify", "clean-room", "--path", str(room), "--no-metrics", "--seed", "5"]
    base += ["--out", str(tmp_path / "ev")]
    result = CliRunner().invoke(app, [*base, "--contract", "1", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["contract"]["id"] == "transformer-block-v1"
    assert document["declared"] == "transformer-block-v2"
    assert {c["function"] for c in document["checks"]} - {"(package)"} == set(
        contract.function_names(1)
    )


def test_a_v1_room_verified_against_v2_fails_by_name(tmp_path):
    room = tmp_path / "v1room"
    init = CliRunner().invoke(app, ["clean-room", "init", str(room)])
    assert init.exit_code == 0, init.output
    args = ["verify", "clean-room", "--path", str(room), "--no-metrics", "--contract", "2"]
    args += ["--seed", "5", "--out", str(tmp_path / "ev")]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "250"})
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "0/26 functions pass every check (transformer-block-v2" in text
    assert "gelu · contract: missing: the package does not expose it" in text
    assert "rope · contract: parameters: missing scaling, factor" in text


# v2's faults and those appended after every other (stop 58).
EVERY_V2 = (*V2, *V2_NAMED)


@pytest.fixture(scope="module")
def clean_seen(tmp_path_factory):
    """labctl's own v2 room observed at seed 5, once, on every function a v2 fault breaks:
    each function's fixture calls are the ones its faults' rooms receive."""
    room = v2_room(tmp_path_factory.mktemp("clean")).resolve()
    return observe(room, 5.0, 4096, tuple(sorted({f.function for f in EVERY_V2})), seed=5)


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory):
    """verify at seed 3 of a v2 fault's room, once a fault: two tests read alibi's report."""

    @functools.cache
    def report(fault):
        room = fault.materialize(tmp_path_factory.mktemp(fault.name) / "clean_room")
        return verify_clean_room(room, 5.0, out=None, measure=False, seed=3)

    return report


@pytest.mark.parametrize("fault", EVERY_V2, ids=lambda f: f.name)
def test_each_v2_fault_is_caught_by_its_signal(tmp_path, fault, clean_seen):
    room = fault.materialize(tmp_path / "clean_room").resolve()
    seen = observe(room, 5.0, 4096, functions=(fault.function,), seed=5)
    assert seen.contract == 2
    failed = {c.name for c in evaluate(seen, (fault.function,)) if c.failed}
    assert fault.signal in failed, failed
    # The same calls on the room without the fault pass: the check is the fault's doing.
    assert not [c for c in evaluate(clean_seen, (fault.function,)) if c.failed]


def test_every_new_function_has_a_v2_fault():
    assert {f.function for f in V2} >= set(contract.added_in(2))
    for fault in EVERY_V2:
        assert fault.description and fault.course


@pytest.mark.parametrize("fault", EVERY_V2, ids=lambda f: f.name)
def test_a_v2_room_is_diagnosed_with_v2_s_faults(fault, diagnosed):
    """The diagnosis compares a v2 room with v2's catalogue too (it knew only v1's: every v2
    bug was "no catalogued fault matches it"), each fault room checked against v2."""
    report = diagnosed(fault)
    (own,) = [d for d in report.diagnosis if d.function == fault.function]
    assert (own.kind, own.fault) == ("fault", fault.name), own.message


def test_a_v2_function_built_on_a_wrong_v2_function_is_sent_to_it(diagnosed):
    """alibi_bias calls the room's alibi_slopes: judged against v2's reference on the inputs
    it received, the slopes are wrong, so the bias (and the decoder) are sent there."""
    report = diagnosed(next(f for f in V2 if f.name == "alibi-slopes-off-by-one"))
    by_function = {d.function: d for d in report.diagnosis}
    assert by_function["alibi_bias"].chain == ("alibi_bias", "alibi_slopes")
    assert by_function["decoder_forward"].chain[-1] == "alibi_slopes"


def test_a_bad_input_not_refused_is_said_with_its_cases(tmp_path):
    room = v2_room(tmp_path)
    with (room / "positions.py").open("a", encoding="utf-8") as handle:
        handle.write(
            "\n\ndef learned_positions(positions, table):\n"
            "    return np.asarray(table)[np.asarray(positions)]  # no range check\n"
        )
    report = verify_clean_room(room, 5.0, out=None, measure=False, seed=3)
    (said,) = [d for d in report.diagnosis if d.function == "learned_positions"]
    assert str(said.message).startswith("learned_positions: it does not refuse bad input (")
    assert "raise ValueError (or TypeError) for a position < 0 or >= Tmax" in str(said.message)


def test_a_decode_positions_refusal_names_the_new_tokens_shapes():
    """attention_decode's positions are its new tokens' (Tn,) or (B, Tn): the rule a learner
    reads for a wrong shape says so, not multi-head attention's (T,) or (B, T)."""
    import numpy as np

    from labctl.verify.bad_input_v2 import widened_cases

    def said(function: str) -> str:
        (case,) = [
            c
            for c in widened_cases(function, np.random.default_rng(0))
            if c.name == "positions-shape"
        ]
        return case.rule.condition

    assert said("attention_decode") == "positions of the wrong shape (not (Tn,) or (B, Tn))"
    assert said("multi_head_attention") == "positions of the wrong shape (not (T,) or (B, T))"
