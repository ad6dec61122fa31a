"""`labctl --help|--version` and `labctl contract show|check`, through the CLI's own handler."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import labctl
from labctl import contract
from labctl.cli.main import app

REPO = Path(__file__).resolve().parents[1]
N_FUNCTIONS = 19
# Starting Python and the CLI takes well under a second; a minute means a hang.
SUBPROCESS_TIMEOUT_S = 60


def invoke(*args: str):
    # A wide terminal, so that rich does not fold names inside table cells.
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def flat(text: str) -> str:
    """Whitespace collapsed, so a line that rich wrapped still matches."""
    return " ".join(text.split())


def copy_clean_room(tmp_path: Path, name: str = "room") -> Path:
    target = tmp_path / name
    shutil.copytree(REPO / "clean_room", target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def append_to_init(room: Path, source: str) -> Path:
    with (room / "__init__.py").open("a", encoding="utf-8") as f:
        f.write("\n\n" + source + "\n")
    return room


@pytest.fixture
def fresh_contract_cache():
    contract.functions.cache_clear()
    yield
    contract.functions.cache_clear()


# --------------------------------------------------------------------------
# help and version
# --------------------------------------------------------------------------


def test_help():
    result = invoke("--help")
    assert result.exit_code == 0
    assert "contract" in result.output and "Usage" in result.output


def test_contract_help():
    result = invoke("contract", "--help")
    assert result.exit_code == 0
    assert "show" in result.output and "check" in result.output


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.output.strip() == f"labctl {labctl.__version__}"


@pytest.mark.parametrize("args", [["frobnicate"], ["contract", "frobnicate"]])
def test_unknown_subcommand_is_a_usage_error(args):
    result = invoke(*args)
    assert result.exit_code == 2
    assert "frobnicate" in result.output


# --------------------------------------------------------------------------
# contract show
# --------------------------------------------------------------------------


def test_contract_show():
    result = invoke("contract", "show")
    assert result.exit_code == 0
    text = flat(result.output)
    assert contract.CONTRACT_ID in text
    for fn in contract.functions():
        assert fn.name in text


def test_contract_show_json():
    result = invoke("contract", "show", "--json")
    assert result.exit_code == 0
    document = json.loads(result.stdout)  # exactly one JSON document on stdout
    assert document["id"] == contract.CONTRACT_ID
    assert document["sha256"] == contract.CONTRACT_V1_SHA256
    assert len(document["functions"]) == N_FUNCTIONS
    assert [f["number"] for f in document["functions"]] == list(range(1, N_FUNCTIONS + 1))
    rope = next(f for f in document["functions"] if f["name"] == "rope")
    assert [p["name"] for p in rope["params"]] == ["x", "positions", "theta"]
    assert rope["params"][2]["default"] == 10000.0


# --------------------------------------------------------------------------
# contract check: passing
# --------------------------------------------------------------------------


def test_contract_check_default_path_is_clean_room_in_cwd(monkeypatch):
    monkeypatch.chdir(REPO)
    result = invoke("contract", "check")
    assert result.exit_code == 0, result.output
    assert f"{N_FUNCTIONS}/{N_FUNCTIONS} functions match" in flat(result.output)


def test_contract_check_default_path_follows_cwd(tmp_path, monkeypatch):
    room = copy_clean_room(tmp_path, "clean_room")
    append_to_init(room, "del softmax")
    monkeypatch.chdir(tmp_path)
    result = invoke("contract", "check")
    assert result.exit_code == 1
    assert "softmax missing" in flat(result.output)


def test_contract_check_path(tmp_path):
    result = invoke("contract", "check", "--path", str(copy_clean_room(tmp_path)))
    assert result.exit_code == 0, result.output
    text = flat(result.output)
    assert f"{N_FUNCTIONS}/{N_FUNCTIONS} functions match {contract.CONTRACT_ID}" in text
    assert "FAIL" not in text


def test_contract_check_json_passing(tmp_path):
    room = copy_clean_room(tmp_path)
    result = invoke("contract", "check", "--path", str(room), "--json")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert document["passed"] is True
    assert (
        document["path"] == room.name
    )  # outside the working directory: its name, no absolute path
    assert document["contract"] == {
        "id": contract.CONTRACT_ID,
        "sha256": contract.CONTRACT_V1_SHA256,
    }
    assert [f["function"] for f in document["functions"]] == list(contract.function_names())
    assert all(f["passed"] and f["deviations"] == [] for f in document["functions"])


# --------------------------------------------------------------------------
# contract check: deviations
# --------------------------------------------------------------------------

DEVIATIONS = {
    # id: (source appended to __init__.py, function, fragment of the message)
    "missing": ("del softmax", "softmax", "missing: the package does not expose it"),
    "renamed": (
        "def rope(x, pos, theta=10000.0):\n    return x",
        "rope",
        "parameters: missing positions; unexpected pos",
    ),
    "reordered": (
        "def sliding_window_mask(window, t_q, t_k=None):\n    return None",
        "sliding_window_mask",
        "parameters: order is (window, t_q, t_k), contract is (t_q, window, t_k)",
    ),
    "default-changed": (
        "def rope(x, positions, theta=1000.0):\n    return x",
        "rope",
        "parameter theta defaults to 1000.0; contract: 10000.0",
    ),
    "keyword-only": (
        "def causal_mask(t_q, *, t_k=None):\n    return None",
        "causal_mask",
        "parameter t_k is keyword-only; it must be positional-or-keyword",
    ),
    "star-args": (
        "def merge_heads(x, *rest):\n    return x",
        "merge_heads",
        "takes variadic *rest",
    ),
    "default-dropped": (
        "def softmax(x, axis):\n    return x",
        "softmax",
        "parameter axis needs default -1",
    ),
    "default-added": (
        "def padding_mask(lengths, t=0):\n    return None",
        "padding_mask",
        "parameter t has a default; the contract has none",
    ),
    "bool-default-as-int": (
        "def multi_head_attention(x, wq, wk, wv, wo, n_heads, n_kv_heads=None, causal=1,"
        " window=None, rope_theta=None):\n    return x",
        "multi_head_attention",
        "parameter causal defaults to 1; contract: True",
    ),
    "not-callable": ("split_heads = 3", "split_heads", "not callable"),
}


@pytest.mark.parametrize("case", list(DEVIATIONS))
def test_contract_check_names_each_deviation(tmp_path, case):
    source, function, fragment = DEVIATIONS[case]
    room = append_to_init(copy_clean_room(tmp_path), source)
    result = invoke("contract", "check", "--path", str(room))
    assert result.exit_code == 1
    text = flat(result.output)
    assert f"FAIL {function} {fragment}" in text
    assert f"{N_FUNCTIONS - 1}/{N_FUNCTIONS} functions match" in text
    assert text.count("FAIL") == 2  # the function's line and the summary


@pytest.mark.parametrize("case", list(DEVIATIONS))
def test_contract_check_json_names_each_deviation(tmp_path, case):
    source, function, fragment = DEVIATIONS[case]
    room = append_to_init(copy_clean_room(tmp_path), source)
    result = invoke("contract", "check", "--path", str(room), "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["passed"] is False
    by_name = {f["function"]: f for f in document["functions"]}
    assert len(by_name) == N_FUNCTIONS
    assert by_name[function]["passed"] is False
    assert any(fragment in m for m in by_name[function]["deviations"])
    assert [n for n, f in by_name.items() if not f["passed"]] == [function]


def test_contract_check_reports_several_deviations_together(tmp_path):
    room = copy_clean_room(tmp_path)
    for source, _, _ in (
        DEVIATIONS["missing"],
        DEVIATIONS["keyword-only"],
        DEVIATIONS["star-args"],
    ):
        append_to_init(room, source)
    result = invoke("contract", "check", "--path", str(room))
    assert result.exit_code == 1
    text = flat(result.output)
    assert f"{N_FUNCTIONS - 3}/{N_FUNCTIONS} functions match" in text
    for name in ("softmax", "causal_mask", "merge_heads"):
        assert f"FAIL {name}" in text


def test_contract_check_names_an_import_failure(tmp_path):
    room = append_to_init(copy_clean_room(tmp_path), "raise RuntimeError('half written')")
    result = invoke("contract", "check", "--path", str(room))
    assert result.exit_code == 1
    assert "room/__init__.py:" in result.output and "half written" in result.output


# --------------------------------------------------------------------------
# contract check: usage errors and the pin
# --------------------------------------------------------------------------


def test_contract_check_missing_path_is_a_usage_error(tmp_path):
    result = invoke("contract", "check", "--path", str(tmp_path / "nowhere"))
    assert result.exit_code == 2
    assert "no such directory" in result.output


def test_contract_check_path_without_init(tmp_path):
    (tmp_path / "room").mkdir()
    result = invoke("contract", "check", "--path", str(tmp_path / "room"))
    assert result.exit_code == 1
    assert "__init__.py" in result.output


def _edited_contract() -> dict:
    raw = json.loads(contract._raw_text())
    rope = next(f for f in raw["functions"] if f["name"] == "rope")
    next(p for p in rope["params"] if p["name"] == "theta")["default"] = 1000.0
    return raw


@pytest.mark.parametrize("patched", ["_raw_text", "raw_contract"])
@pytest.mark.parametrize(
    "command", [["contract", "check"], ["contract", "show"], ["contract", "show", "--json"]]
)
def test_edited_contract_data_fails_the_pin(
    tmp_path, monkeypatch, fresh_contract_cache, patched, command
):
    edited = _edited_contract()
    if patched == "_raw_text":
        monkeypatch.setattr(contract, "_raw_text", lambda: json.dumps(edited, indent=2))
    else:
        monkeypatch.setattr(contract, "raw_contract", lambda: edited)
    # Even a clean room written to the edited data does not pass: the pin catches the edit.
    room = append_to_init(copy_clean_room(tmp_path), DEVIATIONS["default-changed"][0])
    args = [*command, "--path", str(room)] if command[1] == "check" else command
    result = invoke(*args)
    assert result.exit_code == 1
    text = flat(result.output)
    assert "pinned" in text and "v2" in text
    if "--json" in command:
        # One document on stdout, the error's, and nothing else.
        document = json.loads(result.stdout)
        assert document["passed"] is False and document["error"]["kind"] == "refused"
        assert "pinned" in document["error"]["message"]
    else:
        assert result.stdout == ""  # the error goes to stderr
    with pytest.raises(labctl.errors.ContractError):
        contract.functions()


def test_reformatted_contract_data_still_matches_the_pin(
    tmp_path, monkeypatch, fresh_contract_cache
):
    raw = json.loads(contract._raw_text())
    monkeypatch.setattr(contract, "_raw_text", lambda: json.dumps(raw, indent=7, sort_keys=True))
    result = invoke("contract", "check", "--path", str(copy_clean_room(tmp_path)))
    assert result.exit_code == 0, result.output


# --------------------------------------------------------------------------
# torch stays out of the CLI
# --------------------------------------------------------------------------


def test_importing_labctl_and_the_cli_does_not_import_torch():
    code = (
        "import sys, labctl, labctl.cli.main, labctl.contract_check, labctl.isolation.sandbox; "
        "print('torch' in sys.modules, 'labctl.reference' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["contract", "show"]])
def test_console_script_runs_without_torch(args):
    script = Path(sys.executable).parent / "labctl"
    if not script.exists():
        pytest.skip(f"no console script at {script} (labctl not installed in this environment)")
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    done = subprocess.run(
        [str(script), *args],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    imported = [
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    ]
    assert "labctl.cli.entry" in imported  # the profile really covers the CLI
    assert not [m for m in imported if m == "torch" or m.startswith("torch.")]


@pytest.mark.parametrize("version", [1, 2])
def test_contract_document_prints_the_shipped_text_and_where_it_lies(version):
    text = invoke("contract", "document", "--contract", str(version))
    assert text.exit_code == 0
    assert text.stdout == contract.document_text(version)
    assert str(contract.document_path(version)) in text.stderr
    document = json.loads(
        invoke("contract", "document", "--contract", str(version), "--json").stdout
    )
    assert document["text"] == contract.document_text(version)
    assert document["sha256"] == contract.DOCUMENT_SHA256[version]
    assert Path(document["path"]).read_text("utf-8") == document["text"]


def test_an_import_error_s_newlines_forge_no_lines_of_labctl_s(tmp_path):
    """The room's message printed its newlines as they were: lines that read as labctl's."""
    room = append_to_init(copy_clean_room(tmp_path), 'raise RuntimeError("one\\nerror: forged")')
    result = invoke("contract", "check", "--path", str(room))
    assert result.exit_code == 1
    assert "one\\x0aerror: forged" in flat(result.output)
    assert not any(line.startswith("error: forged") for line in result.output.splitlines())
    # The one error handler does it, for every command: with --json too, stderr keeps one
    # line, and the JSON document the exact text.
    as_json = invoke("contract", "check", "--path", str(room), "--json")
    assert as_json.exit_code == 1
    assert not any(line.startswith("error: forged") for line in as_json.stderr.splitlines())
    assert "one\nerror: forged" in json.loads(as_json.stdout)["error"]["message"]


def test_a_keyboard_interrupt_at_import_is_a_failed_import(tmp_path):
    """It ended the worker, and the output shown was labctl's traceback, many lines of it."""
    room = append_to_init(copy_clean_room(tmp_path), "raise KeyboardInterrupt")
    result = invoke("contract", "check", "--path", str(room))
    assert result.exit_code == 1
    assert "importing the clean room failed at room/__init__.py:" in result.output
    assert "KeyboardInterrupt" in result.output and "worker.py" not in result.output
