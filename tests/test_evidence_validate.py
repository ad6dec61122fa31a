"""`labctl.evidence.validate` on records built here, in a small git repository made here: each
of its checks (placeholders, the schema's messages, unions, module, verified_at, seed, the
labctl block, known failures) asserted word for word (issue 13's mutation runs)."""

from __future__ import annotations

import copy
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
from clitools import filled_record

from labctl import contract
from labctl.errors import UsageError
from labctl.evidence import modules
from labctl.evidence.findings import Report
from labctl.evidence.validate import validate_data, validate_file

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
MODULE = modules.Module(
    id="t-one-metric", title="test module", section="tests", required=("future_weight_max",)
)
GIT = ["git", "-c", "user.name=labctl-test", "-c", "user.email=t@example.invalid"]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("learner")
    (where / "README.md").write_text("x\n")
    for args in (["init", "-q"], ["add", "README.md"], ["commit", "-q", "-m", "init"]):
        subprocess.run([*GIT, *args], cwd=where, check=True, capture_output=True)
    return where


@pytest.fixture
def record(root, monkeypatch) -> dict:
    monkeypatch.setattr(modules, "MODULES", (*modules.MODULES, MODULE))
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True, text=True
    ).stdout.strip()
    return filled_record(module=MODULE.id, commit=commit)


def problems(data, root) -> list[str]:
    return [str(p) for p in validate_data(data, Report(path=Path("e.yaml")), root, NOW).problems]


def warnings(data, root) -> list[str]:
    return [str(p) for p in validate_data(data, Report(path=Path("e.yaml")), root, NOW).warnings]


def with_(record: dict, **fields) -> dict:
    data = copy.deepcopy(record)
    for key, value in fields.items():
        if value is _DROP:
            del data[key]
        else:
            data[key] = value
    return data


_DROP = object()


def test_a_good_record_is_valid_and_parsed(record, root):
    report = validate_data(record, Report(path=Path("e.yaml")), root, NOW)
    assert (report.problems, report.warnings) == ([], [])
    assert report.record is not None and report.record.seed == 5
    assert report.module is MODULE and report.data is record


@pytest.mark.parametrize(
    ("document", "kind"),
    [
        ([1], "a list"),
        ("text", "a string"),
        (3, "an integer"),
        (1.5, "a number"),
        (True, "a boolean"),
        (None, "null"),
        (b"x", "binary data"),
        ({1}, "a set"),
        (datetime(2026, 1, 1).date(), "date"),
    ],
)
def test_a_document_that_is_not_a_mapping_is_named_by_its_kind(root, document, kind):
    assert problems(document, root) == [f"(document): must be a mapping of fields, not {kind}"]


def test_placeholders_are_found_in_values_and_field_names_and_silence_the_schema(record, root):
    long = "<" + "x" * 70 + ">"
    data = with_(
        record,
        commit="<learner-commit-sha>",
        commands=["labctl run <lab>", "fine", long],
        cost={"<currency>": 1, "gross_usd": 0, "credit_usd": 0},
    )
    assert problems(data, root) == [
        "commit: placeholder <learner-commit-sha> left",
        "commands[0]: placeholder <lab> left",
        "commands[2]: placeholder <" + "x" * 56 + "...> left",
        "cost.<currency>: placeholder <currency> left in a field name",
    ]
    exact = "<" + "y" * 58 + ">"  # 60 characters: shown whole
    assert problems(with_(record, commands=[exact]), root) == [
        f"commands[0]: placeholder {exact} left"
    ]
    # Not placeholders: a tolerance, a comparison.
    assert problems(with_(record, commands=["a <= b", "x < y > z", "<=1e-12"]), root) == []


def test_a_field_name_that_is_not_text_is_named_by_its_kind(record, root):
    data = with_(record, cost={3: 1, "gross_usd": 0, "credit_usd": 0})
    assert problems(data, root)[0] == "cost: field name 3 is an integer, not text"


def test_schema_errors_read_as_one_line_each(record, root):
    data = with_(record, extra=1, seed=_DROP)
    assert problems(data, root) == [
        "seed: missing; learn-llm.evidence.v1 requires it",
        "extra: unknown field; learn-llm.evidence.v1 has no field 'extra'",
    ]
    assert problems(with_(record, schema="learn-llm.evidence.v9"), root) == [
        "schema: unknown schema version 'learn-llm.evidence.v9'; labctl reads "
        "learn-llm.evidence.v1 only"
    ]
    assert problems(with_(record, schema=2), root) == [
        "schema: unknown schema version 'an integer'; labctl reads learn-llm.evidence.v1 only"
    ]
    assert problems(with_(record, commit="xyz"), root) == [
        "commit: must be a git commit sha (7 to 64 hex digits) or 'unknown'"
    ]
    assert problems(with_(record, seed="5"), root) == ["seed: should be an integer (got a string)"]
    assert problems(with_(record, seed=1.5), root) == ["seed: should be an integer (got a number)"]
    assert problems(with_(record, cost={"gross_usd": -1, "credit_usd": 0}), root) == [
        "cost.gross_usd: should be at least 0"
    ]
    rows = [{"name": "future_weight_max", "expected": "==0", "actual": 0.0, "impl": "mine"}]
    assert problems(with_(record, metrics=rows), root) == [
        "metrics[0] (future_weight_max, mine): impl should be one of 'reference', "
        "'clean-room', 'both' (got 'mine')"
    ]


def test_union_fields_are_judged_by_the_member_their_value_can_be(record, root):
    assert problems(with_(record, environment=["linux"]), root) == [
        "environment: must be a mapping or a string, not a list"
    ]
    assert problems(with_(record, environment={"python": "3.11"}), root) == [
        f"environment.{name}: missing; learn-llm.evidence.v1 requires it"
        for name in ("numpy", "torch", "platform", "device")
    ]
    assert problems(with_(record, environment="built in /home/ana"), root) == [
        "environment: must not hold a path, user or host name"
    ]
    assert problems(with_(record, artifacts=[5, {"path": ""}, "README.md"]), root) == [
        "artifacts[0]: must be a mapping or a string, not an integer",
        "artifacts[1].path: should not be empty",
    ]


def test_the_module_must_be_a_course_module(record, root):
    known = ", ".join(m.id for m in modules.MODULES)
    assert problems(with_(record, module="nope"), root) == [
        f"module: unknown module 'nope'; known modules: {known}"
    ]
    data = with_(record, module="causal-attention")
    assert problems(data, root) == []
    assert warnings(data, root) == [
        "module: 'causal-attention' is a lab: this is a run record; a submission is for a "
        f"course module ({known})"
    ]


def test_verified_at_may_not_be_in_the_future(record, root):
    assert problems(with_(record, verified_at="2026-06-01T12:00:00Z"), root) == []
    assert problems(with_(record, verified_at="2026-06-01T12:00:01Z"), root) == [
        "verified_at: 2026-06-01T12:00:01Z is in the future (now 2026-06-01T12:00:00Z)"
    ]
    # A later string is not a later moment: 07:30 at -05:00 is 12:30 UTC.
    assert problems(with_(record, verified_at="2026-06-01T07:30:00-05:00"), root)[0].startswith(
        "verified_at: 2026-06-01T07:30:00-05:00 is in the future"
    )
    assert problems(with_(record, verified_at="yesterday"), root) == [
        "verified_at: must be an ISO 8601 date-time"
    ]


def test_a_negative_seed_is_refused(record, root):
    assert problems(with_(record, seed=-1), root) == [
        "seed: -1 is negative; seeds are non-negative integers"
    ]
    assert problems(with_(record, seed=0), root) == []


def test_a_seed_beyond_what_labctl_runs_is_refused(record, root):
    """A 20-digit seed was accepted, then re-measured as if a run could have used it."""
    assert problems(with_(record, seed=2**32 - 1), root) == []
    assert problems(with_(record, seed=10**20), root) == [
        f"seed: {10**20} is above {2**32 - 1}, the largest seed labctl runs"
    ]


def test_the_labctl_block_must_name_the_pinned_contract(record, root):
    info = {
        "version": "1",
        "contract_id": contract.CONTRACT_ID,
        "contract_sha256": contract.CONTRACT_V1_SHA256,
        "tolerances": "v2",
    }
    assert problems(with_(record, labctl=info), root) == []
    # a record made while v1's data named its document outside the package: the same interface
    (earlier,) = contract.CONTRACT_V1_EARLIER_SHA256
    assert problems(with_(record, labctl={**info, "contract_sha256": earlier}), root) == []
    wrong = {**info, "contract_id": "other-v1", "contract_sha256": "0" * 64}
    assert problems(with_(record, labctl=wrong), root) == [
        f"labctl.contract_id: 'other-v1' is not {contract.CONTRACT_ID}",
        f"labctl.contract_sha256: not the digest of {contract.CONTRACT_ID} as labctl pins it",
    ]


def test_known_failures_other_than_none_are_a_warning(record, root):
    answers = ["none", " N/A ", "无", "-"]
    assert warnings(with_(record, known_failures=answers), root) == []
    listed = with_(record, known_failures=["softmax overflows", "none", "rope is off"])
    assert warnings(listed, root) == ["known_failures: the record lists 2 known failure(s)"]
    refused = with_(record, known_failures=["<sanitized-failure-or-none>"])
    assert warnings(refused, root) == []


def test_a_file_is_read_then_checked(tmp_path, record, root):
    import json

    path = tmp_path / "e.json"
    path.write_text(json.dumps(with_(record, seed=-2)))
    report = validate_file(path, root, NOW)
    assert [str(p) for p in report.problems] == [
        "seed: -2 is negative; seeds are non-negative integers"
    ]
    assert report.raw == path.read_bytes() and report.path == path
    broken = tmp_path / "b.yaml"
    broken.write_bytes(b"\xff")
    report = validate_file(broken, root, NOW)
    assert [str(p) for p in report.problems] == ["file: not UTF-8 text (byte 0xff at offset 0)"]
    assert report.data is None
    with pytest.raises(UsageError):
        validate_file(tmp_path / "missing.yaml", root, NOW)


def test_fields_are_read_by_the_course_s_names_only(record, root):
    data = with_(record, schema=_DROP, schema_id="learn-llm.evidence.v1")
    assert problems(data, root) == [
        "schema: missing; learn-llm.evidence.v1 requires it",
        "schema_id: unknown field; learn-llm.evidence.v1 has no field 'schema_id'",
    ]


def test_more_schema_messages_name_the_kind_given(record, root):
    assert problems(with_(record, seed={"a": 1}), root) == [
        "seed: should be an integer (got a mapping)"
    ]
    # The module's own schema problem is the only one: it is not looked up as well.
    assert problems(with_(record, module=""), root) == ["module: should not be empty"]
    assert problems(with_(record, module=5), root) == ["module: should be text (got an integer)"]


def test_placeholders_past_a_field_name_that_is_not_text_and_beside_schema_errors(record, root):
    data = with_(record, cost={3: 1, "<x>": 1, "gross_usd": 0, "credit_usd": 0}, seed=_DROP)
    assert problems(data, root)[:3] == [
        "seed: missing; learn-llm.evidence.v1 requires it",
        "cost: field name 3 is an integer, not text",
        "cost.<x>: placeholder <x> left in a field name",
    ]
    with_both = with_(record, commit="<learner-commit-sha>", seed=_DROP)
    assert problems(with_both, root) == [
        "commit: placeholder <learner-commit-sha> left",
        "seed: missing; learn-llm.evidence.v1 requires it",
    ]


def test_a_placeholder_of_61_characters_is_shortened(record, root):
    long = "<" + "z" * 59 + ">"
    assert problems(with_(record, commands=[long]), root) == [
        "commands[0]: placeholder <" + "z" * 56 + "...> left"
    ]


def test_a_file_is_judged_at_the_moment_given(tmp_path, record, root):
    import json

    path = tmp_path / "e.json"
    path.write_text(json.dumps(record))
    long_ago = datetime(2000, 1, 1, tzinfo=timezone.utc)
    report = validate_file(path, root, long_ago)
    assert [str(p) for p in report.problems] == [
        "verified_at: 2026-05-01T10:00:00Z is in the future (now 2000-01-01T00:00:00Z)"
    ]


def test_a_verified_at_the_schema_refused_is_not_judged_again(record, root):
    assert problems(with_(record, verified_at=5), root) == [
        "verified_at: should be text (got an integer)"
    ]


def test_without_a_moment_given_the_clock_decides(record, root):
    # Recorded before this test was written, so before any moment it runs at.
    report = validate_data(record, Report(path=Path("e.yaml")), root)
    assert report.problems == []
    tomorrow = with_(record, verified_at="2999-01-01T00:00:00Z")
    found = validate_data(tomorrow, Report(path=Path("e.yaml")), root).problems
    assert [p.reason.split(" (now ")[0] for p in found] == ["2999-01-01T00:00:00Z is in the future"]
