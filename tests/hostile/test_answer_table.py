"""The answer-table attack (issue 20): a room of `clean-room init` stubs whose every function
looks up a digest of its inputs in a table of answers, built from labctl's public fixtures,
probes, causal variants, memory call and template-metric calls at the published seed. It
passes verify at that seed (the attack is real) and fails at a fresh one, and an honest room
outscores it."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest
from clitools import invoke
from gradetools import copy_room, submission_repo

from labctl import contract, reference
from labctl.verify import fixtures as fx
from labctl.verify import verify as verify_module
from labctl.verify.builders import SEED
from labctl.verify.functions import CAUSAL_FUNCTIONS
from labctl.verify.observe import MEASURED, measured_call
from labctl.verify.stubs import init_clean_room
from labctl.verify.verify import template_metrics

# Written into the room and run here too, so both sides digest a call alike.
DIGEST = """
import hashlib

import numpy as np


def _canon(value, out):
    if isinstance(value, np.ndarray):
        out.append(f"a{value.dtype.str}{value.shape}".encode())
        out.append(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, (bool, np.bool_)):
        out.append(f"b{bool(value)}".encode())
    elif isinstance(value, (int, np.integer)):
        out.append(f"i{int(value)}".encode())
    elif isinstance(value, (float, np.floating)):
        out.append(f"f{float(value)!r}".encode())
    elif value is None:
        out.append(b"n")
    elif isinstance(value, str):
        out.append(b"s" + value.encode())
    elif isinstance(value, (list, tuple)):
        out.append(f"l{len(value)}".encode())
        for item in value:
            _canon(item, out)
    elif isinstance(value, dict):
        out.append(f"d{len(value)}".encode())
        for key in sorted(value):
            out.append(str(key).encode())
            _canon(value[key], out)
    else:
        out.append(repr(value).encode())


def digest(function, params):
    parts = [function.encode()]
    for name in sorted(params):
        parts.append(name.encode())
        _canon(params[name], parts)
    return hashlib.sha256(b"|".join(parts)).hexdigest()
"""

LOOKUP = """
import json
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_TABLE = []


def _answer(function, params):
    if not _TABLE:
        with open(os.path.join(_HERE, "answers.json"), encoding="utf-8") as handle:
            _TABLE.append(json.load(handle))
        _TABLE.append(dict(np.load(os.path.join(_HERE, "answers.npz"))))
    index, arrays = _TABLE
    key = digest(function, params)
    if key not in index:
        # Bad input is never in the table: refusing what it does not know passes bad-input.
        raise ValueError(f"{function}: no answer for these inputs")
    n = index[key]
    if n < 0:
        return arrays[key + "_0"].copy()
    return tuple(arrays[f"{key}_{i}"].copy() for i in range(n))
"""


class Recorder:
    """Stands where the clean room would in the template metrics' labs: the reference's
    answers, every call kept."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def __getattr__(self, name: str):
        function = getattr(reference, name)

        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return function(*args, **kwargs)

        return call


def _stub_signatures() -> dict[str, inspect.Signature]:
    from labctl.verify.stubs import module_source

    space: dict = {}
    exec(module_source(), space)  # the stubs' exact v1 signatures
    return {name: inspect.signature(space[name]) for name in contract.function_names()}


def build_table_room(where: Path) -> tuple[Path, int]:
    """The stub room with a table of answers at the published seed; (room, answers)."""
    space: dict = {}
    exec(DIGEST, space)
    digest = space["digest"]
    signatures = _stub_signatures()
    calls: list[tuple[str, tuple, dict]] = []
    for function in contract.function_names():
        for fixture in (*fx.fixtures(function, SEED), *fx.probes(function, SEED)):
            calls.append((function, *fixture.call()))
    for function in CAUSAL_FUNCTIONS:
        for _, fixture in fx.causal_variants(function, SEED):
            calls.append((function, *fixture.call()))
    for function in MEASURED:  # the call verify measures memory by: public, at this seed
        args, _ = measured_call(function, SEED)
        calls.append((function, args, {}))
    from_fixtures = len(calls)
    recorder = Recorder()
    template_metrics(recorder, seed=SEED)  # the labs' own calls at the published seed
    calls += recorder.calls
    assert len(recorder.calls) > 0 and from_fixtures > 90
    index: dict[str, int] = {}
    arrays: dict[str, np.ndarray] = {}
    for function, args, kwargs in calls:
        bound = signatures[function].bind(*args, **kwargs)
        bound.apply_defaults()
        key = digest(function, dict(bound.arguments))
        value = getattr(reference, function)(*args, **kwargs)
        values = value if isinstance(value, tuple) else (value,)
        index[key] = len(values) if isinstance(value, tuple) else -1
        for i, item in enumerate(values):
            arrays[f"{key}_{i}"] = np.asarray(item)
    room = where / "clean_room"
    init_clean_room(room)
    module = room / "transformer_block.py"
    source = re.sub(
        r"raise NotImplementedError\('(\w+): [^']*'\)",
        r'return _answer("\1", dict(locals()))',
        module.read_text("utf-8"),
    )
    module.write_text(source + DIGEST + LOOKUP, encoding="utf-8")
    (room / "answers.json").write_text(json.dumps(index), encoding="utf-8")
    np.savez(room / "answers.npz", **arrays)
    return room, len(index)


@pytest.fixture(scope="module")
def table_room(tmp_path_factory) -> Path:
    room, answers = build_table_room(tmp_path_factory.mktemp("answer-table"))
    assert answers > 150  # fixtures, probes, causal variants and the labs' calls
    return room


def _verify(room: Path, out: Path, *args: str):
    return invoke("verify", "clean-room", "--path", str(room), "--out", str(out), "--json", *args)


def test_the_table_passes_verify_at_the_published_seed(table_room, tmp_path):
    """The attack is real: knowing seed 5's answers is enough to pass every check there."""
    result = _verify(table_room, tmp_path, "--seed", str(SEED))
    document = json.loads(result.stdout)
    failed = [f"{c['function']}:{c['name']}" for c in document["checks"] if not c["passed"]]
    assert result.exit_code == 0 and document["passed"], failed
    assert document["seed"] == SEED
    # The template metrics are forged too: every one measured and passing.
    assert [m.get("passed") for m in document["metrics"]] == [True] * len(document["metrics"])


def test_the_table_fails_verify_at_a_fresh_seed(table_room, tmp_path, monkeypatch):
    # The verdict is the checks' (`VerifyReport.passed`); the diagnosis, which observes the
    # catalogue's fault rooms for each of the table's failing functions at this new seed (most
    # of this verify's time), only explains it, and runs none of the room's code.
    monkeypatch.setattr(verify_module, "diagnose", lambda *args, **kwargs: [])
    result = _verify(table_room, tmp_path, "--no-metrics")
    document = json.loads(result.stdout)
    assert result.exit_code == 1 and not document["passed"]
    assert document["seed"] != SEED
    failing = {c["function"] for c in document["checks"] if c["status"] == "fail"}
    # Every function with a float input meets values it has no answer for.
    floats = set(contract.function_names()) - {
        "causal_mask",
        "sliding_window_mask",
        "padding_mask",
        "sinusoidal_positions",
    }
    assert floats <= failing


@pytest.fixture(scope="module")
def graded(table_room, tmp_path_factory) -> tuple[dict, dict[str, dict]]:
    """One batch under the default rubric: an honest room with no submission, and the table
    with a submission whose claims are the labs' runs at seed 5; (--json, {learner: record})."""
    base = tmp_path_factory.mktemp("answer-table-grade")
    klass = base / "class"
    copy_room(klass / "honest" / "clean_room")
    submission_repo(klass / "table", table_room)
    result = invoke(
        "grade", "class", str(klass), "--out", str(base / "grades"), "--jobs", "1", "--json"
    )
    assert result.exit_code == 0, result.output
    records = {
        learner: json.loads((base / "grades" / "records" / f"{learner}.json").read_text())
        for learner in ("honest", "table")
    }
    return json.loads(result.stdout), records


def test_an_honest_room_outscores_the_table_in_grade(graded):
    """The template metrics are scored; the honest room handed in no submission, so the
    submission item is the one it lacks."""
    document, records = graded
    assert document["seed"] != SEED
    honest, table = records["honest"], records["table"]
    missing = next(i for i in honest["items"] if i["id"] == "submission")
    assert not missing["passed"] and missing["points"] == 0
    assert honest["score"] == honest["max_score"] - missing["max_points"]
    assert table["score"] < honest["score"] / 2, (table["score"], honest["score"])


def test_a_submission_claiming_the_published_seed_earns_nothing_for_the_table(graded):
    """Issue 42: the answer table with a submission whose claims are the labs' runs at seed 5
    scored 14/100 (the 8 submission points among them): grade re-measured the claims at the
    seed the learner wrote, the one seed the table answers. Its claims do reproduce there;
    at labctl's own seed the room fails verify and the claimed metrics, so the item is 0."""
    record = graded[1]["table"]
    facts = record["facts"]
    assert facts["submission"]["accepted"]  # the claims reproduce at seed 5: the attack is real
    assert facts["verify"]["seed"] != SEED and not facts["verify"]["passed"]
    items = {i["id"]: i for i in record["items"]}
    assert items["submission"]["points"] == 0, items["submission"]
    assert "not labctl's own seed" in items["submission"]["message"]
    functions = sum(i["points"] for i in record["items"] if i["kind"] == "function")
    metrics = sum(i["points"] for i in record["items"] if i["kind"] == "metric")
    assert record["score"] == round(functions + items["check.bad-input"]["points"] + metrics, 2)
