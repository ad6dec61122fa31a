"""The fault catalogue proves the checks, and the diagnosis names each fault.

Each catalogued fault, built as a faulty clean room, must fail verify at the
faulty function and be diagnosed there by its own name; `labctl faults` must
show every fault caught by some check and every check catching some fault
(or justified), with the project's clean room as a clean baseline.
"""

from __future__ import annotations

import collections
import json

import pytest
from checktools import HF_ROPE_WITHOUT_ODD_CHECK, learner_room
from typer.testing import CliRunner

from labctl import contract, faults
from labctl.cli.main import app
from labctl.evidence.models import EvidenceRecord
from labctl.verify.builders import fresh_seed
from labctl.verify.checks import CHECK_NAMES, JUSTIFIED
from labctl.verify.verify import verify_clean_room

runner = CliRunner()
COURSE_TABLE = {
    "residual-dropped",
    "residual-post-norm",
    "no-sqrt-dk",
    "mask-adds-zero",
    "mask-reversed",
    "head-seq-confused",
}


def test_the_catalogue_is_large_named_and_spread_over_the_contract():
    names = [f.name for f in faults.CATALOGUE]
    assert len(names) >= 12
    assert len(set(names)) == len(names)
    # The first eight keep their names (other tests and labs use them).
    assert names[:8] == [
        "residual-dropped",
        "residual-post-norm",
        "no-sqrt-dk",
        "mask-adds-zero",
        "mask-reversed",
        "head-seq-confused",
        "gqa-tiled",
        "decode-rope-offset",
    ]
    assert set(names) >= COURSE_TABLE
    by_function = collections.Counter(f.function for f in faults.CATALOGUE)
    assert set(by_function) == set(contract.function_names())
    for fault in faults.CATALOGUE:
        assert fault.description and fault.course
        assert fault.signal in CHECK_NAMES, fault.name
        assert fault.function in contract.function_names()
    # Every check but the justified ones is some fault's signal.
    assert {f.signal for f in faults.CATALOGUE} | set(JUSTIFIED) == set(CHECK_NAMES)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The matrix, built once (this also fills the diagnosis's cache of fault rooms), and
    each fault's room as the matrix observed it, by name: every function in a worker. The
    tests that verify rooms ask for it, not for `matrix` (the command's rendering, which
    they do not read, once a test)."""
    from labctl.isolation.sandbox import DEFAULT_MEMORY_MB
    from labctl.verify.diagnosis import ROOMS
    from labctl.verify.matrix import build_matrix

    out = tmp_path_factory.mktemp("matrix") / "ev" / "faults"
    matrix = build_matrix(2.0, out=out)
    observed = {}
    for fault in faults.CATALOGUE:
        # Kept under the room's declared contract at the matrix's seed and limits: read back.
        declared = contract.declared_version(ROOMS.path(fault))
        names = contract.function_names(declared)
        observed[fault.name] = ROOMS.observe(
            fault, names, 2.0, DEFAULT_MEMORY_MB, contract=declared
        )
    return matrix, out, observed


@pytest.fixture
def matrix(built, monkeypatch):
    """`labctl faults --json` on the built matrix (the command's own rendering and exit code)."""
    import labctl.verify.matrix

    monkeypatch.setattr(labctl.verify.matrix, "build_matrix", lambda *a, **k: built[0])
    result = runner.invoke(app, ["faults", "--json", "--out", str(built[1])])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), built[1]


def test_labctl_faults_prints_and_keeps_the_matrix(matrix):
    document, out = matrix
    assert document["passed"] is True
    assert document["uncaught"] == [] and document["unproven"] == []
    assert document["problems"] == []
    assert set(document["justified"]) == {"loads"}
    assert document["baseline"]["caught_by"] == []
    rows = {row["name"]: row for row in document["faults"]}
    assert set(rows) == {f.name for f in faults.CATALOGUE}
    for fault in faults.CATALOGUE:
        row = rows[fault.name]
        assert row["caught_by"], fault.name
        assert fault.signal in row["caught_by"]
        assert row["fails_at_function"] and row["diagnosed_as"] == fault.name
    for name in CHECK_NAMES:
        if name not in JUSTIFIED:
            assert any(name in row["caught_by"] for row in rows.values()), name
    # The course table's faults are caught by the signals the course names for them.
    assert "causal" in rows["mask-reversed"]["caught_by"]
    assert "causal" in rows["mask-adds-zero"]["caught_by"]
    assert "parity" in rows["no-sqrt-dk"]["caught_by"]
    assert rows["sinusoidal-hang"]["caught_by"] == ["runs"]
    assert rows["merge-heads-imports-torch"]["caught_by"] == ["import-policy"]

    records = [p for p in out.glob("*.json") if not p.name.endswith("-matrix.json")]
    assert len(records) == 1
    record = EvidenceRecord.model_validate(json.loads(records[0].read_text("utf-8")))
    assert record.module == "fault-matrix"
    assert {m.name: m.actual for m in record.metrics}["faults_uncaught"] == 0
    assert len(record.artifacts) == 2
    csv_text = next(out.glob("*-matrix.csv")).read_text("utf-8")
    assert csv_text.splitlines()[0].startswith("fault,function,signal,loads,")


def test_no_catalogued_fault_ends_its_process(built):
    """The diagnosis relies on it: a function whose call ended the learner's process
    matches no catalogued fault, so no fault room is observed for it. Each room as the
    matrix observed it, in a worker (in labctl's process, where the diagnosis observes most
    rooms, no call could end the process)."""
    for fault in faults.CATALOGUE:
        seen = built[2][fault.name]
        assert seen.isolation != "in-process", fault.name
        ended = [
            (function, o.message)
            for function, run in seen.runs.items()
            for o in (*run.fixtures.values(), *run.probes.values())
            if o.kind == "crash"
        ]
        assert ended == [], fault.name


@pytest.fixture(scope="module")
def fresh():
    """One seed nobody knew in advance for every room verified here (printed, to rerun a
    failure): the diagnosis observes each fault room once at that seed, not once per room."""
    seed = fresh_seed()
    print(f"fault catalogue verified at seed {seed}")
    return seed


@pytest.mark.parametrize("fault", faults.CATALOGUE, ids=lambda f: f.name)
def test_each_fault_fails_at_its_function_and_is_diagnosed_by_name(tmp_path, fault, built, fresh):
    room = fault.materialize(tmp_path / "clean_room")
    # The hang is stopped sooner here; the rest get the time a busy machine needs, and a
    # fault room that ran out of the diagnosis's 2 s on such a machine gets it too.
    timeout = 1.0 if fault.signal == "runs" else 10.0
    report = verify_clean_room(room, timeout, out=None, measure=False, seed=fresh)
    assert not report.passed
    at_function = [c for c in report.checks if c.function == fault.function and c.failed]
    assert at_function, f"{fault.name}: nothing fails at {fault.function}"
    assert fault.signal in {c.name for c in report.checks if c.failed}
    named = [d for d in report.diagnosis if d.function == fault.function]
    assert len(named) == 1
    assert named[0].kind == "fault", named[0].message
    assert named[0].fault == fault.name
    assert f"matches fault `{fault.name}`" in named[0].message
    assert fault.course in named[0].message
    # A failing composition is traced back to the faulty function, not diagnosed on its own.
    for d in report.diagnosis:
        if d.function != fault.function:
            assert d.kind == "dependency", d.message
            assert d.chain[-1] == fault.function


def test_labctl_faults_human_output(built, monkeypatch):
    import labctl.verify.matrix

    monkeypatch.setattr(labctl.verify.matrix, "build_matrix", lambda *a, **k: built[0])
    result = runner.invoke(app, ["faults", "--out", str(built[1])])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "which checks catch which fault" in text
    assert "mask-reversed" in text and "sinusoidal-hang" in text
    n = len(faults.CATALOGUE)
    assert f"{n}/{n} faults caught, {n}/{n} diagnosed by name" in text
    assert "loads: no catalogued fault, justified" in text


def test_a_learners_own_code_with_a_catalogued_bug_is_diagnosed(tmp_path, built, fresh):
    room = learner_room(
        tmp_path,
        "primitives",
        """
        def causal_mask(t_q, t_k=None):
            t_k = t_q if t_k is None else t_k
            return np.tril(np.ones((t_q, t_k), dtype=bool), k=t_k - t_q - 1)
        """,
    )
    report = verify_clean_room(room, 2.0, out=None, measure=False, seed=fresh)
    named = next(d for d in report.diagnosis if d.function == "causal_mask")
    assert named.fault == "mask-reversed"
    assert (
        "see 第8章 · Attention 与 Transformer Block 故障注入与预期信号: mask 上下三角写反"
        in named.message
    )


def test_a_matching_bug_with_an_extra_symptom_is_still_named(tmp_path, built, fresh):
    """HF's rotate_half layout, written without the odd-D check the contract asks for."""
    room = learner_room(tmp_path, "primitives", HF_ROPE_WITHOUT_ODD_CHECK)
    report = verify_clean_room(room, 2.0, out=None, measure=False, seed=fresh)
    failed = {c.name for c in report.checks if c.function == "rope" and c.failed}
    assert failed == {"parity", "bad-input"}
    named = next(d for d in report.diagnosis if d.function == "rope")
    assert named.fault == "rope-half-split"
    assert "(it also fails bad-input)" in named.message


def test_an_unknown_bug_is_said_to_match_nothing(tmp_path, built, fresh):
    room = learner_room(
        tmp_path,
        "primitives",
        """
        def relu_ffn(x, w1, b1, w2, b2):
            return np.maximum(x @ w1 + b1, 0.0) @ w2  # forgets b2
        """,
    )
    report = verify_clean_room(room, 2.0, out=None, measure=False, seed=fresh)
    named = next(d for d in report.diagnosis if d.function == "relu_ffn")
    assert named.kind == "unmatched"
    assert "no catalogued fault matches" in named.message
