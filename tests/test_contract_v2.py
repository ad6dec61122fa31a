"""Contract v2 beside v1: both pinned, `contract show|check --contract 2`, `clean-room init
--contract 2`, a room's declared version read as text, v1 untouched."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labctl import contract
from labctl.cli.main import app
from labctl.contract_check import declared_version
from labctl.errors import ContractError

REPO = Path(__file__).resolve().parents[1]
V1_SHA256 = "8ff7564d095da2cccf09e2bb3346fb17df434fdc805313c461c8cbba1e9582df"
NEW = ("alibi_slopes", "alibi_bias", "learned_positions", "gelu", "glu_ffn", "geglu_ffn")
NEW += ("attention_entropy",)


def invoke(*args: str):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def test_v1_is_untouched_and_v2_is_pinned():
    assert contract.CONTRACT_V1_SHA256 == V1_SHA256 == contract.verify_pin()
    assert contract.verify_pin(version=2) == contract.CONTRACT_V2_SHA256
    for version in contract.VERSIONS:
        raw = (REPO / contract.document_name(version)).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == contract.DOCUMENT_SHA256[version]
        title = f"# Clean-room contract, version {version} (`{contract.contract_id(version)}`)"
        assert contract.document_text(version).startswith(title)
    assert contract.document_text() == contract.document_text(2)
    assert len(contract.functions(1)) == 19 and len(contract.functions(2)) == 26
    assert contract.added_in(2) == NEW


def test_v2_keeps_every_v1_function_and_adds_parameters_last():
    v1 = {f.name: f for f in contract.functions(1)}
    v2 = {f.name: f for f in contract.functions(2)}
    widened = set()
    for name, old in v1.items():
        new = v2[name]
        assert new.params[: len(old.params)] == tuple(
            contract.Param(p.name, p.default, q.shape)
            for p, q in zip(old.params, new.params, strict=False)
        ), name
        for added in new.params[len(old.params) :]:
            assert not added.required, f"{name}.{added.name} must default to v1's behaviour"
            widened.add(name)
    assert widened == {"softmax", "rope", "multi_head_attention", "attention_decode"}
    # The document gives the signature of every function v2 adds or widens; the decoder's
    # widening is in what its parameters accept.
    document = contract.document_text()
    for name in (*NEW, *widened):
        assert f"`{v2[name].signature()}`".replace("'", '"') in document, name
    assert "`lm_head (C, V)`" in document and '`"alibi"`' in document


def test_every_reference_to_a_contract_document_is_inside_the_package():
    """The JSON's `source` and v2's mention of v1 name the documents that ship with labctl."""
    for version in contract.VERSIONS:
        source = contract.data(version)["source"]
        assert source == contract.document_name(version)
        assert (REPO / source).is_file() and contract.document_path(version).is_file()
    assert f"(`{contract.document_name(1)}`)" in contract.document_text(2)


def test_v1s_document_states_the_bad_input_every_function_refuses():
    document = contract.document_text(1)
    bad_input = document[document.index("## Bad input") :]
    for rule in ("C % n_heads != 0", "n_heads % n_kv_heads != 0", "block_size < 1", "window < 1"):
        assert rule in bad_input
    for fn in contract.functions(1):
        assert f"`{fn.name}(" in document, fn.name


def test_an_edit_of_a_contract_document_is_detected(monkeypatch, tmp_path):
    edited = tmp_path / "contract-v1.md"
    edited.write_text(contract.document_text(1).replace("window < 1", "window < 0"), "utf-8")
    monkeypatch.setattr(contract, "document_path", lambda version=2: edited)
    with pytest.raises(ContractError, match="v1 is frozen"):
        contract.document_text(1)


def test_an_edit_of_v2_is_detected():
    raw = contract.raw_contract(2)
    raw["functions"][0]["params"][-1]["default"] = 2.0  # softmax's temperature
    with pytest.raises(ContractError, match="v2 is frozen"):
        contract.verify_pin(raw, version=2)
    with pytest.raises(ContractError, match="no contract version 3"):
        contract.functions(3)


def test_contract_show_v2_text_and_json():
    text = invoke("contract", "show", "--contract", "2")
    assert text.exit_code == 0
    assert "transformer-block-v2" in text.output and "26. attention_entropy(" in text.output
    document = json.loads(invoke("contract", "show", "--contract", "2", "--json").stdout)
    assert document["id"] == "transformer-block-v2"
    assert document["sha256"] == contract.CONTRACT_V2_SHA256
    assert len(document["functions"]) == 26
    v1 = json.loads(invoke("contract", "show", "--json").stdout)
    assert v1["id"] == "transformer-block-v1" and len(v1["functions"]) == 19
    bad = invoke("contract", "show", "--contract", "3")
    assert bad.exit_code == 2


def _init(tmp_path: Path, version: str | None, name: str) -> Path:
    args = ["clean-room", "init", str(tmp_path / name), "--json"]
    result = invoke(*args, *(["--contract", version] if version else []))
    assert result.exit_code == 0, result.output
    return tmp_path / name


def test_init_v2_writes_26_stubs_and_declares_v2(tmp_path):
    room = _init(tmp_path, "2", "v2room")
    source = (room / "transformer_block.py").read_text("utf-8")
    assert "def rope(x, positions, theta=10000.0, scaling=None, factor=1.0):" in source
    assert "def attention_entropy(weights, axis=-1):" in source
    assert declared_version(room) == 2
    assert declared_version(_init(tmp_path, None, "v1room")) == 1


def _check(path: Path, *extra: str) -> tuple[int, dict]:
    result = invoke("contract", "check", "--path", str(path), "--json", *extra)
    return result.exit_code, json.loads(result.stdout)


def test_a_v1_room_checked_against_v2_fails_by_name(tmp_path):
    room = _init(tmp_path, None, "v1room")
    code, report = _check(room, "--contract", "2")
    assert code == 1 and report["contract"]["id"] == "transformer-block-v2"
    assert report["declared"] == "transformer-block-v1"
    failed = {f["function"]: f["deviations"] for f in report["functions"] if f["deviations"]}
    assert set(failed) == {*NEW, "softmax", "rope", "multi_head_attention", "attention_decode"}
    assert failed["gelu"] == ["missing: the package does not expose it"]
    assert failed["rope"] == ["parameters: missing scaling, factor"]
    # the rest have v2's signatures: stubs, counted as not written yet
    assert all(f["stub"] for f in report["functions"] if f["function"] not in failed)
    # Undeclared, it is checked against v1: every signature matches, every body is a stub.
    code, report = _check(room)
    assert report["contract"]["id"] == "transformer-block-v1"
    assert code == 1 and all(f["stub"] and not f["deviations"] for f in report["functions"])


def test_a_v2_room_passes_both(tmp_path):
    room = _init(tmp_path, "2", "v2room")
    for extra, version in (((), 2), (("--contract", "1"), 1), (("--contract", "2"), 2)):
        code, report = _check(room, *extra)
        # every signature matches either version; the bodies are stubs, not written yet
        assert code == 1 and all(f["stub"] and not f["deviations"] for f in report["functions"])
        assert report["contract"]["id"] == f"transformer-block-v{version}"
        assert report["declared"] == "transformer-block-v2"
    # labctl's own room implements v2 (declaring nothing, it is checked as v1 by default).
    code, report = _check(REPO / "clean_room", "--contract", "2")
    assert code == 0 and len(report["functions"]) == 26


def test_the_text_report_names_the_contract(tmp_path):
    room = _init(tmp_path, None, "v1room")
    result = invoke("contract", "check", "--path", str(room), "--contract", "2")
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "15/26 functions match transformer-block-v2" in text
    assert "gelu missing: the package does not expose it" in text


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('CONTRACT = "transformer-block-v2"', 2),
        ('CONTRACT = "transformer-block-v1"', 1),
        ("", 1),
        ('if False:\n    CONTRACT = "transformer-block-v2"', 1),  # not top level
        ('CONTRACT = "transformer-block-" + "v2"', 1),  # not a literal: never evaluated
        ('CONTRACT = "transformer-block-v2"\nCONTRACT = "transformer-block-v1"', 1),
        ("def broken(:", 1),  # a syntax error is verify's to report
    ],
)
def test_the_declaration_is_read_as_text(tmp_path, line, expected):
    room = tmp_path / "room"
    room.mkdir()
    (room / "__init__.py").write_text(f"import os\n{line}\n", encoding="utf-8")
    assert declared_version(room) == expected


def test_an_unknown_declaration_is_refused_by_name(tmp_path):
    room = tmp_path / "room"
    shutil.copytree(REPO / "clean_room", room, ignore=shutil.ignore_patterns("__pycache__"))
    with (room / "__init__.py").open("a", encoding="utf-8") as handle:
        handle.write('\nCONTRACT = "transformer-block-v9"\n')
    with pytest.raises(ContractError, match="transformer-block-v9"):
        declared_version(room)
    result = invoke("contract", "check", "--path", str(room), "--json")
    assert result.exit_code == 1
    assert "transformer-block-v9" in json.loads(result.stdout)["error"]["message"]


# -- the rubric and the records ---------------------------------------------------------


def test_the_v2_default_rubric_targets_v2():
    from labctl.grade.rubric import load_rubric

    rubric = load_rubric(version=2)
    assert rubric.contract == 2 and rubric.max_score == 100
    targets = {i.target for i in rubric.items if i.kind == "function"}
    assert targets == set(contract.function_names(2))
    assert [i.id for i in rubric.items if i.hidden] == ["check.bad-input"]
    # The v1 default is unchanged: no contract key in what it dumps (so its digest stays).
    assert load_rubric().contract == 1 and "contract" not in load_rubric().dump()
    assert rubric.dump()["contract"] == 2


@pytest.mark.parametrize(
    ("head", "reason"),
    [
        ("", "alibi_slopes is not a function of contract v1"),
        ("contract: 3\n", "contract"),
    ],
)
def test_a_rubric_target_outside_its_contract_is_refused(head, reason):
    from labctl.grade.rubric import RubricError, parse_rubric

    text = (
        f"schema: labctl.rubric.v1\nname: a\n{head}items:\n"
        "  - {id: x, kind: function, target: alibi_slopes, points: 1}\n"
    )
    with pytest.raises(RubricError, match=reason):
        parse_rubric(text)


def test_grade_verifies_against_the_rubrics_contract(tmp_path):
    from labctl.grade.rubric import load_rubric
    from labctl.grade.runner import _job

    class Learner:
        id = "a"
        folder = clean_room = tmp_path
        submission = None

    class Options:
        timeout_s, memory_mb, isolation, seed = 1.0, 512, "process", 5

    assert _job(Learner(), load_rubric(version=2), Options())["contract"] == 2
    assert _job(Learner(), load_rubric(), Options())["contract"] == 1


def test_records_say_which_contract_the_room_declares(tmp_path):
    from labctl.evidence.models import CleanRoomInfo
    from labctl.evidence.room import identify, room_json

    own = identify(REPO / "clean_room")
    assert own.contract == 1 and room_json(own)["contract"] == 1
    v2 = _init(tmp_path, "2", "v2room")
    assert identify(v2).contract == 2
    # A record written before rooms declared a contract stays valid, as v1.
    old = own.model_dump(exclude={"contract"})
    assert CleanRoomInfo.model_validate(old).contract == 1
