"""`evidence submit`'s re-measurement rules, one at a time, on made-up labs and results.

No lab runs here: `implementations` and `run_lab` are replaced by fakes that return the
rows a test asks for, so each rule (which claims are re-measured, on which row, with which
tolerance, what a refusal says, where an accepted file is kept) is checked exactly and
quickly. tests/test_evidence_submit.py drives the same code end to end on real labs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from clitools import filled_record

import labctl
from labctl import registry
from labctl.contract import CONTRACT_ID, CONTRACT_V1_SHA256
from labctl.errors import CleanRoomError, StoreError
from labctl.evidence import modules
from labctl.evidence import receipt as rc
from labctl.evidence import submit as sub
from labctl.evidence.findings import Report
from labctl.evidence.models import EvidenceRecord
from labctl.evidence.modules import MODULES
from labctl.evidence.room import identify
from labctl.evidence.store import EvidenceStore
from labctl.evidence.times import parse_time
from labctl.lab import Lab, Metric
from labctl.runner import LabResult, MetricResult

PER_IMPL = Metric("fake_error", "abs", "<=1e-10", "an error", reproduce_abs=0.5, reproduce_rel=0.1)
BOTH = Metric("fake_gap", "abs", "<=1e-10", "a comparison", impls=("both",))
REF_ONLY = Metric("fake_ref", "abs", "<=1e-10", "reference only", impls=("reference",))
TIMING = Metric("fake_seconds", "ratio-of-times", ">1", "a timing", timing=True)
LAB = Lab("fake", "fake", "?", (), None, (PER_IMPL, BOTH, REF_ONLY, TIMING), None)  # type: ignore[arg-type]
OTHER = Lab("other", "other", "?", (), None, (), None)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def table(monkeypatch):
    """The fake lab's metrics are the whole tolerance table, and the only lab."""
    metrics = {m.name: (LAB, m) for m in LAB.metrics}
    monkeypatch.setattr(registry, "metric_table", lambda: metrics)
    monkeypatch.setattr(registry, "discover", lambda: [OTHER, LAB])


def report(*rows: dict, seed: object = 5, **data) -> Report:
    found = Report(path=Path("claims.yaml"))
    found.data = {"seed": seed, "module": MODULES[0].id, "metrics": list(rows), **data}
    return found


def row(name: str, actual: object, impl: str | None = None) -> dict:
    return {
        "name": name,
        "expected": "<=1e-10",
        "actual": actual,
        **({"impl": impl} if impl else {}),
    }


def result(*values: tuple[str, str, float], error: str | None = None) -> LabResult:
    rows = [MetricResult(n, i, v, "<=1e-10", True, "abs", False) for n, i, v in values]
    return LabResult(lab=LAB, metrics=rows, error=error)


class Runs:
    """Stands in for `implementations` and `run_lab`: records which modes and labs ran."""

    def __init__(self, measured: LabResult, broken: set[str] = frozenset()):
        self.measured, self.broken = measured, broken
        self.modes: list[str] = []
        self.how: list[tuple] = []  # (clean_room, timeout_s, isolation) of each run
        self.labs: list[tuple[str, tuple[str, ...], int]] = []

    def install(self, monkeypatch) -> Runs:
        monkeypatch.setattr(sub, "implementations", self.implementations)
        monkeypatch.setattr(sub, "run_lab", self.run_lab)
        return self

    @contextlib.contextmanager
    def implementations(self, mode, clean_room, timeout_s, isolation):
        self.modes.append(mode)
        self.how.append((clean_room, timeout_s, isolation))
        if mode in self.broken:
            raise CleanRoomError("the room does not import")
        yield {"reference": None, "clean-room": None} if mode == "both" else {mode: None}

    def run_lab(self, lab, seed, impls):
        self.labs.append((lab.id, tuple(impls), seed))
        return self.measured


ROOM = Path("their_room")


def compare(found: Report, runs: Runs, monkeypatch) -> list[rc.Reproduction]:
    runs.install(monkeypatch)
    done = sub._compare(sub._claims(found), 5, ROOM, 1.5, found, "process")
    assert all(how == (ROOM, 1.5, "process") for how in runs.how)
    return done


# -- which claims are re-measured, and on which row ---------------------------------------


def test_a_claim_speaks_for_its_impl_else_the_clean_room_else_the_comparison():
    found = report(
        row("fake_error", 0.0, "reference"),
        row("fake_error", 0.0),
        row("fake_gap", 0.0),
        row("fake_ref", 0.0),
        row("fake_error", 0.0, "nonsense"),
    )
    claims = sub._claims(found)
    assert [(c.index, c.impl, c.metric.name) for c in claims] == [
        (0, "reference", "fake_error"),
        (1, "clean-room", "fake_error"),
        (2, "both", "fake_gap"),
        (3, "reference", "fake_ref"),
        (4, "clean-room", "fake_error"),
    ]
    assert all(c.lab is LAB and c.claimed == 0.0 for c in claims)
    assert found.problems == [] and found.warnings == []


def test_an_unknown_metric_is_refused_by_name_and_replaces_its_warning():
    found = report(row("nobody_measures_this", 1.0), row("fake_error", 0.0))
    found.warn("metrics[0].name", "a warning about the name")
    found.warn("metrics[1]", "kept")
    assert [c.index for c in sub._claims(found)] == [1]
    assert [(p.field, p.reason) for p in found.problems] == [
        (
            "metrics[0].name",
            "'nobody_measures_this' is not in the tolerance table v4: no lab measures it, so "
            "it is not reproducible",
        )
    ]
    assert [w.field for w in found.warnings] == ["metrics[1]"]


def test_a_timing_claim_is_a_warning_and_never_re_measured():
    found = report(row("fake_seconds", 3.0), row("fake_error", 0.0))
    assert [c.index for c in sub._claims(found)] == [1]
    assert found.problems == []
    assert [(w.field, w.reason) for w in found.warnings] == [
        ("metrics[0]", "fake_seconds is a timing metric: not re-measured, timings do not reproduce")
    ]


@pytest.mark.parametrize("actual", [True, "0.0", None, math.nan, math.inf, -math.inf])
def test_a_claim_without_a_finite_number_is_left_to_validation(actual):
    found = report(row("fake_error", actual), row("fake_error", 0.25))
    assert [(c.index, c.claimed) for c in sub._claims(found)] == [(1, 0.25)]
    assert found.problems == []


@pytest.mark.parametrize("flagged", ["metrics[0].name", "metrics[0].actual", "metrics[0].impl"])
def test_a_claim_refused_already_is_not_re_measured_again(flagged):
    found = report(row("fake_error", 0.0), row("fake_error", 0.0))
    found.refuse(flagged, "refused by validation")
    assert [c.index for c in sub._claims(found)] == [1]
    assert len(found.problems) == 1


def test_rows_that_are_not_claims_are_skipped():
    found = report("text", {"name": 3, "actual": 0.0}, row("fake_error", 0.0))
    assert [c.index for c in sub._claims(found)] == [2]
    assert sub._claims(report(metrics="not a list")) == []


@pytest.mark.parametrize(
    ("needed", "mode"),
    [
        ({"both"}, "both"),
        ({"both", "reference"}, "both"),
        ({"both", "clean-room"}, "both"),
        ({"reference", "clean-room"}, "both"),
        ({"reference"}, "reference"),
        ({"clean-room"}, "clean-room"),
    ],
)
def test_a_lab_runs_on_just_the_implementations_its_claims_need(needed, mode):
    for _ in range(8):  # a set's order must not decide
        assert sub._mode(set(needed)) == mode


# -- the comparison -------------------------------------------------------------------


def test_each_claim_is_compared_with_its_own_row_within_the_metrics_spread(monkeypatch):
    # spread: 0.5 + 0.1 * |measured| = 0.5 + 0.1 * 10 = 1.5 around the clean room's 10.0
    runs = Runs(result(("fake_error", "reference", 0.0), ("fake_error", "clean-room", 10.0)))
    found = report(
        row("fake_error", 11.5),
        row("fake_error", 8.5),
        row("fake_error", 11.6),
        row("fake_error", 0.0),
    )
    done = compare(found, runs, monkeypatch)
    assert runs.modes == ["clean-room"] and runs.labs == [("fake", ("clean-room",), 5)]
    assert [(r.field, r.name, r.impl, r.claimed, r.measured, r.reproduced) for r in done] == [
        ("metrics[0]", "fake_error", "clean-room", 11.5, 10.0, True),
        ("metrics[1]", "fake_error", "clean-room", 8.5, 10.0, True),
        ("metrics[2]", "fake_error", "clean-room", 11.6, 10.0, False),
        ("metrics[3]", "fake_error", "clean-room", 0.0, 10.0, False),
    ]
    assert [(p.field, p.reason) for p in found.problems] == [
        (
            "metrics[2].actual",
            "not reproduced: claimed 11.6, labctl measured 10.0 (clean-room, seed 5); a "
            "re-measurement may differ by at most 0.5 + 0.1·|measured|",
        ),
        (
            "metrics[3].actual",
            "not reproduced: claimed 0.0, labctl measured 10.0 (clean-room, seed 5); a "
            "re-measurement may differ by at most 0.5 + 0.1·|measured|",
        ),
    ]
    assert (found.problems[0].metric, found.problems[0].impl) == ("fake_error", "clean-room")


def test_claims_on_both_rows_run_the_lab_once_on_both(monkeypatch):
    runs = Runs(
        result(
            ("fake_error", "reference", 1.0),
            ("fake_error", "clean-room", 2.0),
            ("fake_gap", "both", 3.0),
        )
    )
    found = report(
        row("fake_error", 1.0, "reference"), row("fake_error", 2.0), row("fake_gap", 3.0)
    )
    done = compare(found, runs, monkeypatch)
    assert runs.modes == ["both"] and runs.labs == [("fake", ("reference", "clean-room"), 5)]
    assert [(r.impl, r.measured, r.reproduced) for r in done] == [
        ("reference", 1.0, True),
        ("clean-room", 2.0, True),
        ("both", 3.0, True),
    ]
    assert found.problems == []


def test_a_row_the_lab_did_not_measure_is_not_reproduced(monkeypatch):
    runs = Runs(result(("fake_error", "reference", 0.0), ("fake_error", "clean-room", math.nan)))
    found = report(row("fake_error", 0.0), row("fake_ref", 0.0))
    done = compare(found, Runs(result(), set()), monkeypatch)
    assert [r.note for r in done] == [
        "fake measured no fake_error (clean-room) on seed 5",
        "fake measured no fake_ref (reference) on seed 5",
    ]
    found = report(row("fake_error", 0.0))
    (nan,) = compare(found, runs, monkeypatch)
    assert (nan.reproduced, nan.measured) == (False, None)
    assert (
        found.problems[0].reason
        == "not reproduced: fake measured no fake_error (clean-room) on seed 5"
    )


@pytest.mark.parametrize("rows", [[("fake_error", "clean-room", 0.0)], []])
def test_a_lab_that_failed_when_re_measured_refuses_its_claims(monkeypatch, rows):
    runs = Runs(result(*rows, error="ValueError: boom"))
    found = report(row("fake_error", 0.0))
    (done,) = compare(found, runs, monkeypatch)
    why = "fake failed when re-measured: ValueError: boom"
    assert (done.reproduced, done.measured, done.note) == (False, None, why)
    assert [p.reason for p in found.problems] == [f"not reproduced: {why}"]


def test_a_room_that_does_not_load_refuses_its_rows_but_the_reference_is_still_measured(
    monkeypatch,
):
    runs = Runs(result(("fake_error", "reference", 0.0)), broken={"both", "clean-room"})
    found = report(
        row("fake_error", 0.0, "reference"), row("fake_error", 0.0), row("fake_gap", 0.0)
    )
    done = compare(found, runs, monkeypatch)
    assert runs.modes == ["both", "reference"]
    assert [(r.impl, r.reproduced) for r in done] == [
        ("reference", True),
        ("clean-room", False),
        ("both", False),
    ]
    why = "the clean room could not be loaded: the room does not import"
    assert done[1].note == done[2].note == why
    assert [p.field for p in found.problems] == ["metrics[1].actual", "metrics[2].actual"]


def test_a_room_that_does_not_load_for_a_clean_room_run_refuses_only_its_rows(monkeypatch):
    runs = Runs(result(), broken={"clean-room"})
    found = report(row("fake_error", 0.0))
    (done,) = compare(found, runs, monkeypatch)
    assert runs.modes == ["clean-room"] and runs.labs == []
    assert done.note == "the clean room could not be loaded: the room does not import"


def test_no_claims_run_nothing(monkeypatch):
    runs = Runs(result()).install(monkeypatch)
    assert sub._compare([], 5, None, 1.0, report(), "process") == []
    assert runs.modes == []


# -- remeasure: the seed decides whether anything runs ---------------------------------


@pytest.mark.parametrize("seed", [None, -1, 2.0, True, "5"])
def test_without_a_usable_seed_nothing_is_re_measured_but_claims_are_still_checked(
    seed, monkeypatch
):
    runs = Runs(result()).install(monkeypatch)
    found = report(row("fake_error", 0.0), row("unknown_metric", 0.0), seed=seed)
    assert sub.remeasure(found, None, 1.0) == (None, None, [])
    assert runs.modes == []
    assert [p.field for p in found.problems] == ["metrics[1].name"]


def test_a_flagged_seed_is_not_used(monkeypatch):
    runs = Runs(result()).install(monkeypatch)
    found = report(row("fake_error", 0.0), seed=7)
    found.refuse("seed", "refused")
    assert sub.remeasure(found, None, 1.0) == (None, None, [])
    assert runs.modes == []


def test_seed_zero_is_a_seed(monkeypatch):
    runs = Runs(result(("fake_error", "clean-room", 0.0))).install(monkeypatch)
    found = report(row("fake_error", 0.0), seed=0)
    seed, level, done = sub.remeasure(found, ROOM, 2.5, isolation="process")
    assert (seed, level) == (0, "process")
    assert runs.labs == [("fake", ("clean-room",), 0)] and runs.how == [(ROOM, 2.5, "process")]
    assert [r.reproduced for r in done] == [True]


def test_the_isolation_asked_for_is_resolved_before_anything_runs(monkeypatch):
    runs = Runs(result(("fake_error", "clean-room", 0.0))).install(monkeypatch)
    _, level, _ = sub.remeasure(report(row("fake_error", 0.0)), Path("room"), 1.0)
    assert level in ("sandbox", "process") and runs.how == [(Path("room"), 1.0, level)]


def test_no_room_named_means_nothing_is_re_measured_and_every_claim_is_named(monkeypatch):
    runs = Runs(result(("fake_error", "clean-room", 0.0))).install(monkeypatch)
    found = report(row("fake_error", 0.0))
    assert sub.remeasure(found, None, 1.0) == (None, None, [])
    assert runs.how == []  # nothing ran: no room was named


def test_a_submission_for_something_that_is_not_a_course_module_is_refused(monkeypatch):
    two = (*MODULES, modules.Module(id="t-other", title="t", section="t", required=()))
    monkeypatch.setattr(modules, "MODULES", two)
    found = report(module="causal-attention")
    found.warn("module", "a warning about the module")
    sub._submission_module(found)
    (problem,) = found.problems
    assert problem.field == "module"
    known = f"{MODULES[0].id}, t-other"
    assert problem.reason == (
        f"'causal-attention' is not a course module; submissions are for: {known}"
    )
    assert found.warnings == []


@pytest.mark.parametrize("module", [7, None])
def test_a_module_that_is_not_text_is_left_to_validation(module):
    found = report(module=module)
    sub._submission_module(found)
    assert found.problems == []


def test_a_module_refused_already_is_not_refused_twice():
    found = report(module="nope")
    found.refuse("module", "refused by the schema")
    sub._submission_module(found)
    assert len(found.problems) == 1


# -- what is kept, and where ------------------------------------------------------------


def test_the_room_is_named_in_the_receipt_only_when_a_claim_ran_on_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    outcome = rc.Submission(report())
    assert rc._room_shown(outcome, tmp_path / "mine") is None
    outcome.reproductions = [rc.Reproduction("metrics[0]", "fake_ref", "reference", 0.0)]
    assert rc._room_shown(outcome, tmp_path / "mine") is None
    for impl in ("clean-room", "both"):
        outcome.reproductions = [
            rc.Reproduction("metrics[0]", "fake_ref", "reference", 0.0),
            rc.Reproduction("metrics[1]", "fake_error", impl, 0.0),
        ]
        assert rc._room_shown(outcome, tmp_path / "mine") == "mine"
    assert rc._room_shown(outcome, None) == "clean_room"  # the project's own, by its name


def test_a_stored_submission_is_found_as_yaml_then_json(tmp_path):
    assert rc.stored(tmp_path, "abc") is None
    (tmp_path / "abc.json").write_text("{}")
    assert rc.stored(tmp_path, "abc") == tmp_path / "abc.json"
    (tmp_path / "abc.yaml").write_text("{}")
    assert rc.stored(tmp_path, "abc") == tmp_path / "abc.yaml"
    (tmp_path / "abd.yaml").mkdir()
    assert rc.stored(tmp_path, "abd") is None


def test_a_reproduction_reads_back_as_json_with_its_note_only_when_there_is_one():
    plain = rc.Reproduction("metrics[0]", "fake_error", "clean-room", 0.5, 0.25, True)
    assert plain.to_json() == {
        "field": "metrics[0]",
        "name": "fake_error",
        "impl": "clean-room",
        "claimed": 0.5,
        "measured": 0.25,
        "reproduced": True,
    }
    noted = rc.Reproduction("metrics[1]", "fake_gap", "both", 0.0, None, False, "why")
    assert noted.to_json() == {
        "field": "metrics[1]",
        "name": "fake_gap",
        "impl": "both",
        "claimed": 0.0,
        "measured": None,
        "reproduced": False,
        "note": "why",
    }
    assert json.dumps(noted.to_json())  # plain JSON types


def _record(**fields) -> EvidenceRecord:
    return EvidenceRecord.model_validate(filled_record(**fields))


def test_the_digest_follows_the_content_not_the_layout():
    record = _record()
    assert rc.digest(record) == rc.digest(_record())
    assert len(rc.digest(record)) == 64
    assert rc.digest(record) != rc.digest(_record(seed=6))
    reordered = EvidenceRecord.model_validate(dict(reversed(list(record.dump().items()))))
    assert rc.digest(reordered) == rc.digest(record)


def test_the_digest_is_of_the_canonical_json_so_every_labctl_names_a_record_alike():
    """The stored name is a content address: sorted keys, no spaces, UTF-8 text as is.
    Another form would store a record twice under two names across labctl versions."""
    record = _record(environment="python 3.11, 中文 locale")
    canonical = json.dumps(
        record.dump(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")
    assert rc.digest(record) == hashlib.sha256(canonical).hexdigest()
    assert list(record.dump()) != sorted(record.dump())  # sorting is not a no-op here


@pytest.mark.parametrize(
    ("name", "kept_as"),
    [
        ("e.json", ".json"),
        ("E.JSON", ".json"),
        ("e.yaml", ".yaml"),
        ("e.yml", ".yaml"),
        ("e", ".yaml"),
    ],
)
def test_an_accepted_file_is_kept_byte_for_byte_with_a_receipt(
    tmp_path, monkeypatch, name, kept_as
):
    monkeypatch.chdir(tmp_path)
    record = _record(labctl=_labctl({"params_default": False}))
    found = Report(path=tmp_path / name, raw=b"the learner's bytes\n")
    found.warn("labctl.params_default", "用非默认参数")  # kept as UTF-8, not \u escapes
    outcome = rc.Submission(found, seed=5, isolation="process")
    outcome.reproductions = [
        rc.Reproduction("metrics[0]", "future_weight_max", "clean-room", 0.0, 0.0, True)
    ]
    store = EvidenceStore(tmp_path / "evidence")
    rc.keep(outcome, store, record, tmp_path / "room")
    stem = rc.digest(record)[: rc.DIGEST_CHARS]
    folder = tmp_path / "evidence" / "submissions" / "t-module"
    assert outcome.stored == folder / f"{stem}{kept_as}"
    assert outcome.stored.read_bytes() == b"the learner's bytes\n"
    text = (folder / f"{stem}.receipt.json").read_text("utf-8")
    assert text.startswith('{\n  "schema": ') and text.endswith("\n}\n")  # indented by 2
    assert "用非默认参数" in text
    receipt = json.loads(text)
    accepted_at = receipt.pop("accepted_at")
    assert parse_time(accepted_at) is not None
    assert receipt == {
        "schema": "labctl.submission-receipt.v1",
        "submission": f"{stem}{kept_as}",
        "record_sha256": rc.digest(record),
        "file_sha256": hashlib.sha256(b"the learner's bytes\n").hexdigest(),
        "module": "t-module",
        "seed": 5,
        "labctl_version": labctl.__version__,
        "tolerances": registry.TOLERANCE_TABLE_VERSION,
        "clean_room": "room",
        "clean_room_sha256": None,  # the record names no room identity
        "isolation": "process",
        "params_default": False,
        "reproduced": [outcome.reproductions[0].to_json()],
        "warnings": [{"field": "labctl.params_default", "reason": "用非默认参数"}],
    }
    manifest = json.loads(store.manifest_path.read_text("utf-8"))
    assert manifest["modules"]["t-module"] == {
        "record": f"submissions/t-module/{stem}{kept_as}",
        "verified_at": "2026-05-01T10:00:00Z",
        "accepted_at": accepted_at,
        "kind": "submission",
        "passed": True,
        "seed": 5,
        "sha256": rc.digest(record),
    }
    # Kept again: the file is there, so nothing is written and the earlier one is named.
    again = rc.Submission(Report(path=tmp_path / name, raw=b"other bytes"))
    rc.keep(again, store, record, None)
    assert again.stored is None and again.already == outcome.stored
    assert outcome.stored.read_bytes() == b"the learner's bytes\n"


def test_a_file_stored_meanwhile_is_named_yaml_first(tmp_path, monkeypatch):
    """Another submit stored the same record between the check and the write."""
    monkeypatch.chdir(tmp_path)
    record = _record()
    stem = rc.digest(record)[: rc.DIGEST_CHARS]
    folder = tmp_path / "evidence" / "submissions" / "t-module"
    folder.mkdir(parents=True)
    (folder / f"{stem}.json").write_bytes(b"{}")
    outcome = rc.Submission(Report(path=tmp_path / "e.json", raw=b"{}"))
    rc.keep(outcome, EvidenceStore(tmp_path / "evidence"), record, None)
    assert outcome.already == folder / f"{stem}.json" and outcome.stored is None
    (folder / f"{stem}.yaml").write_bytes(b"{}")
    rc.keep(outcome, EvidenceStore(tmp_path / "evidence"), record, None)
    assert outcome.already == folder / f"{stem}.yaml"
    assert not (folder / f"{stem}.receipt.json").exists()


def test_a_store_that_cannot_be_written_is_a_named_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evidence" / "submissions").mkdir(parents=True)
    (tmp_path / "evidence" / "submissions" / "t-module").write_text("a file, not a folder")
    outcome = rc.Submission(Report(path=tmp_path / "e.yaml", raw=b"x"))
    with pytest.raises(StoreError) as caught:
        rc.keep(outcome, EvidenceStore(tmp_path / "evidence"), _record(), None)
    stem = rc.digest(_record())[: rc.DIGEST_CHARS]
    target = tmp_path / "evidence" / "submissions" / "t-module" / f"{stem}.yaml"
    assert str(caught.value) == f"cannot write {target}: File exists"  # mkdir's, of the folder


def test_a_write_error_without_an_errno_text_is_named_by_its_message(tmp_path, monkeypatch):
    def refused(path, data):
        raise OSError("the disk said no")

    monkeypatch.setattr(rc, "write_new", refused)
    outcome = rc.Submission(Report(path=tmp_path / "e.yaml", raw=b"x"))
    with pytest.raises(StoreError, match=r": the disk said no$"):
        rc.keep(outcome, EvidenceStore(tmp_path / "evidence"), _record(), None)
    assert outcome.stored is None


def _labctl(info: dict) -> dict:
    pinned = {"contract_id": CONTRACT_ID, "contract_sha256": CONTRACT_V1_SHA256}
    return {"version": "0.1", **pinned, "tolerances": "v2", **info}


def test_another_labctl_s_defaults_are_named_one_by_one(monkeypatch):
    from labctl.labs.kv_cache import LAB as KV

    monkeypatch.setattr(registry, "discover", lambda: [OTHER, KV])
    info = {"lab": "kv-cache", "params": {"B": 2, "T": 16, "repeats": 5, "gone": 1}}
    record = _record(labctl=_labctl(info))
    assert sub._older_defaults(record) == "repeats=5 (now 3)"
    info = {"lab": "kv-cache", "params": {"B": 4, "T": 16, "repeats": 5}}
    assert sub._older_defaults(_record(labctl=_labctl(info))) == "B=4 (now 2), repeats=5 (now 3)"
    assert (
        sub._older_defaults(_record(labctl=_labctl({"lab": "kv-cache", "params": {"T": 16}}))) == ""
    )
    assert (
        sub._older_defaults(_record(labctl=_labctl({"lab": "no-such-lab", "params": {"T": 1}})))
        == ""
    )
    assert sub._older_defaults(_record()) == ""


# -- submit: validate, re-measure, keep -----------------------------------------------------


PASSING = SimpleNamespace(passed=True)


def _validated(tmp_path: Path, monkeypatch, record: EvidenceRecord, name: str = "e.yaml"):
    """`submit` on a file whose validation gives `record` (a valid one)."""
    path = tmp_path / name
    path.write_bytes(b"the file\n")
    data = record.dump()
    data["module"] = MODULES[0].id  # a course module, as validation requires
    # The learner's room, named as `template --fill` names it, and passing verify.
    room = tmp_path / "mine"
    room.mkdir(exist_ok=True)
    (room / "__init__.py").write_text("# mine\n")
    monkeypatch.chdir(tmp_path)
    data["labctl"] = {**data.get("labctl", _labctl({})), "clean_room": identify(room).model_dump()}
    monkeypatch.setattr(sub, "project_root", lambda: tmp_path.resolve())
    monkeypatch.setattr(sub, "verify_room", lambda room, timeout_s, isolation: PASSING)

    def validate_file(given, now=None):
        assert given == path and now == NOW
        found = Report(path=path, raw=b"the file\n")
        found.data = data
        found.record = EvidenceRecord.model_validate(data)
        return found

    monkeypatch.setattr(sub, "validate_file", validate_file)
    monkeypatch.chdir(tmp_path)
    return path


NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
FAKE_CLAIM = [{"name": "fake_error", "expected": "<=1e-10", "actual": 10.0}]


def test_a_valid_submission_is_re_measured_then_kept(tmp_path, monkeypatch):
    runs = Runs(result(("fake_error", "clean-room", 10.0))).install(monkeypatch)
    path = _validated(tmp_path, monkeypatch, _record(metrics=FAKE_CLAIM))
    outcome = sub.submit(path, tmp_path / "evidence", now=NOW, isolation="process")
    assert outcome.accepted and outcome.already is None
    assert (outcome.seed, outcome.isolation) == (5, "process")
    assert [(r.impl, r.measured, r.reproduced) for r in outcome.reproductions] == [
        ("clean-room", 10.0, True)
    ]
    assert outcome.stored.parent == tmp_path / "evidence" / "submissions" / MODULES[0].id
    assert outcome.stored.read_bytes() == b"the file\n"
    assert runs.labs == [("fake", ("clean-room",), 5)]
    # The same record again: already recorded, nothing re-measured or written.
    again = sub.submit(path, tmp_path / "evidence", now=NOW, isolation="process")
    assert again.already == outcome.stored and again.stored is None
    assert again.reproductions == [] and len(runs.labs) == 1


def test_the_room_and_time_limit_given_are_the_ones_used_and_named(tmp_path, monkeypatch):
    runs = Runs(result(("fake_error", "clean-room", 10.0))).install(monkeypatch)
    path = _validated(tmp_path, monkeypatch, _record(metrics=FAKE_CLAIM))
    outcome = sub.submit(path, tmp_path / "evidence", 7.0, now=NOW, isolation="process")
    assert runs.how == [((tmp_path / "mine").resolve(), 7.0, "process")]
    receipt = outcome.stored.with_name(outcome.stored.stem + ".receipt.json")
    assert json.loads(receipt.read_text("utf-8"))["clean_room"] == "mine"


def test_a_refused_record_is_never_taken_for_one_kept_before(tmp_path, monkeypatch):
    Runs(result(("fake_error", "clean-room", 10.0))).install(monkeypatch)
    path = _validated(tmp_path, monkeypatch, _record(metrics=FAKE_CLAIM))
    kept = sub.submit(path, tmp_path / "evidence", now=NOW, isolation="process").stored
    validated = sub.validate_file

    def refused(given, now=None):
        found = validated(given, now)
        found.refuse("commit", "not in the repository")
        return found

    monkeypatch.setattr(sub, "validate_file", refused)
    outcome = sub.submit(path, tmp_path / "evidence", now=NOW, isolation="process")
    assert outcome.already is None and outcome.stored is None and not outcome.accepted
    assert [p.field for p in outcome.report.problems] == ["commit"]
    assert kept.is_file()


def test_without_an_isolation_asked_for_the_best_that_works_is_used(tmp_path, monkeypatch):
    runs = Runs(result(("fake_error", "clean-room", 10.0))).install(monkeypatch)
    path = _validated(tmp_path, monkeypatch, _record(metrics=FAKE_CLAIM))
    outcome = sub.submit(path, tmp_path / "evidence", now=NOW)
    assert outcome.accepted and outcome.isolation in ("sandbox", "process")
    assert runs.how == [((tmp_path / "mine").resolve(), sub.DEFAULT_TIMEOUT_S, outcome.isolation)]


def test_a_room_that_fails_verify_keeps_nothing_and_names_its_functions(tmp_path, monkeypatch):
    Runs(result(("fake_error", "clean-room", 10.0))).install(monkeypatch)
    path = _validated(tmp_path, monkeypatch, _record(metrics=FAKE_CLAIM))
    asked = []
    failing = SimpleNamespace(
        passed=False, failing_functions=lambda: ["(package)", "rope", "softmax"], shown="x"
    )
    monkeypatch.setattr(
        sub, "verify_room", lambda room, timeout_s, isolation: asked.append(room) or failing
    )
    outcome = sub.submit(path, tmp_path / "evidence", now=NOW, isolation="process")
    assert asked == [(tmp_path / "mine").resolve()]
    assert not outcome.accepted and outcome.stored is None
    assert [(p.field, p.reason) for p in outcome.report.problems] == [
        (
            "labctl.clean_room",
            "the clean room fails verify (rope, softmax): a submission is accepted only for a "
            "room that passes `labctl verify clean-room`",
        )
    ]


def test_a_submission_refused_before_verify_never_runs_verify(tmp_path, monkeypatch):
    Runs(result(("fake_error", "clean-room", 12.0))).install(monkeypatch)
    path = _validated(tmp_path, monkeypatch, _record(metrics=FAKE_CLAIM))
    monkeypatch.setattr(sub, "verify_room", lambda *a: pytest.fail("verify ran"))
    assert not sub.submit(path, tmp_path / "evidence", now=NOW, isolation="process").accepted


def test_a_claim_that_does_not_reproduce_keeps_nothing(tmp_path, monkeypatch):
    Runs(result(("fake_error", "clean-room", 12.0))).install(monkeypatch)
    path = _validated(tmp_path, monkeypatch, _record(metrics=FAKE_CLAIM))
    outcome = sub.submit(path, tmp_path / "evidence", now=NOW, isolation="process")
    assert not outcome.accepted and outcome.stored is None
    assert [p.field for p in outcome.report.problems] == ["metrics[0].actual"]
    assert not (tmp_path / "evidence" / "submissions").exists()


@pytest.mark.parametrize(
    ("params_default", "warning"),
    [
        (
            False,
            (
                "labctl.params_default",
                "made with non-default lab parameters; labctl re-measures with the labs' defaults",
            ),
        ),
        (
            True,
            (
                "labctl.params",
                "made with another labctl's default parameters (repeats=5 (now 3)); labctl "
                "re-measures with this version's defaults",
            ),
        ),
    ],
    ids=["non-default", "another-labctl-s-defaults"],
)
def test_a_record_made_with_other_parameters_is_kept_with_a_warning(
    tmp_path, monkeypatch, params_default, warning
):
    from labctl.labs.kv_cache import LAB as KV

    Runs(result(("fake_error", "clean-room", 10.0))).install(monkeypatch)
    monkeypatch.setattr(registry, "discover", lambda: [KV, LAB])
    info = {"lab": "kv-cache", "params": {"repeats": 5}, "params_default": params_default}
    record = _record(metrics=FAKE_CLAIM, labctl=_labctl(info))
    path = _validated(tmp_path, monkeypatch, record)
    outcome = sub.submit(path, tmp_path / "evidence", now=NOW, isolation="process")
    assert outcome.accepted
    assert [(w.field, w.reason) for w in outcome.report.warnings] == [warning]


def test_a_file_that_is_not_a_mapping_stops_at_validation(tmp_path, monkeypatch):
    runs = Runs(result()).install(monkeypatch)
    found = Report(path=tmp_path / "e.yaml")
    found.data = ["a", "list"]
    found.refuse("(document)", "not a mapping")
    monkeypatch.setattr(sub, "validate_file", lambda path, now=None: found)
    outcome = sub.submit(tmp_path / "e.yaml", tmp_path / "evidence")
    assert not outcome.accepted and outcome.seed is None and runs.modes == []
    assert not (tmp_path / "evidence").exists()
