"""The smaller verbs (`clean-room init`, `contract check`, `faults`, `doctor`) as a careless
or hostile user drives them: names the filesystem refuses, names that are not text, folders
that are links in a loop, a bwrap that lies, a write cut short. Each gets one line naming
what is wrong and the right exit code; nothing a learner wrote is lost."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.faults import project_clean_room
from labctl.isolation import bwrap
from labctl.verify import stubs
from labctl.verify.stubs import init_clean_room

runner = CliRunner(env={"COLUMNS": "300", "LABCTL_LANG": "en", "NO_COLOR": "1"})
TOO_LONG = "n" * 300  # past NAME_MAX (255): the filesystem refuses to even look it up


def _one_error(result, code: int, *words: str) -> None:
    assert result.exit_code == code, result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    for word in words:
        assert word in result.output, result.output


def _json_error(result, code: int, *words: str) -> None:
    _one_error(result, code)
    document = json.loads(result.stdout)
    assert document["passed"] is False and document["error"]["exit_code"] == code
    for word in words:
        assert word in document["error"]["message"]


# -- a learner's text quoted in an error --------------------------------------------


@pytest.mark.parametrize(
    ("lab", "quoted"),
    [("\x1b[31mred", "'\\x1b[31mred'"), ("a\nb", "'a\\nb'"), ("it's", '"it\'s"')],
    ids=["escape", "newline", "quote"],
)
def test_a_quoted_name_is_escaped_once(lab, quoted):
    result = runner.invoke(app, ["show", lab])
    _one_error(result, 2, f"error: unknown lab {quoted}; known labs:")
    assert "\x1b" not in result.output and "\\\\" not in result.output


# -- contract show, document, check: which version ----------------------------------


@pytest.mark.parametrize(
    ("command", "default"),
    [
        (["contract", "show"], "[default: 1]."),
        (["contract", "document"], "[default: 1]."),
        (["clean-room", "init"], "[default: 1]."),
        (["contract", "check"], "[default: the one the clean room declares, else 1]."),
    ],
    ids=["show", "document", "init", "check"],
)
def test_the_contract_option_says_the_default_the_command_takes(command, default):
    result = CliRunner(env={"COLUMNS": "300", "LABCTL_LANG": "en"}).invoke(
        app, [*command, "--help"]
    )
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if "--contract" in x)
    assert f"Contract version, 1 or 2 {default}" in line, line


def test_contract_show_of_a_later_function_names_its_version():
    result = runner.invoke(app, ["contract", "show", "attention_entropy"])
    _one_error(result, 2, "it came with v2", "labctl contract show attention_entropy --contract 2")
    shown = runner.invoke(app, ["contract", "show", "attention_entropy", "--contract", "2"])
    assert shown.exit_code == 0, shown.output


def test_contract_check_without_a_room_says_whose_room_it_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["contract", "check", "--isolation", "process"])
    assert result.exit_code == 0, result.output
    assert "checks labctl's own clean room, not yours" in result.output
    (tmp_path / "clean_room").mkdir()
    (tmp_path / "clean_room" / "__init__.py").write_text("", encoding="utf-8")
    result = runner.invoke(app, ["contract", "check", "--isolation", "process"])
    assert "labctl's own" not in result.output


# -- clean-room init ------------------------------------------------------------------


def test_init_shows_the_folder_name_as_written_and_quotes_the_next_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["clean-room", "init", "[red]my room"])
    assert result.exit_code == 0, result.output
    # rich markup in the name is the name, not a colour; the command copies as one argument
    assert "to [red]my room/__init__.py" in result.output
    assert "next: labctl verify clean-room --path '[red]my room'" in result.output


def test_init_escapes_controls_in_the_folder_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["clean-room", "init", "a\x1b[31mb\nc"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert "a\\x1b[31mb\\x0ac/__init__.py" in result.output
    assert len(result.output.strip().splitlines()) == 2


def test_init_refuses_a_name_too_long_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["clean-room", "init", TOO_LONG])
    _one_error(result, 2, "File name too long", "nothing was written")
    _json_error(runner.invoke(app, ["clean-room", "init", TOO_LONG, "--json"]), 2, "too long")


def test_init_cut_short_takes_back_what_it_wrote(tmp_path, monkeypatch):
    dest = tmp_path / "room"
    opened = pathlib.Path.open

    def interrupted(self, *args, **kwargs):
        if self.name == "transformer_block.py":
            raise KeyboardInterrupt  # Ctrl-C between the two files
        return opened(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", interrupted)
    with pytest.raises(KeyboardInterrupt):
        init_clean_room(dest)
    monkeypatch.undo()
    assert not dest.exists()  # a second init finds nothing in its way
    init_clean_room(dest)


def test_init_never_replaces_a_file_that_appeared_after_the_check(tmp_path, monkeypatch):
    dest = tmp_path / "room"
    dest.mkdir()
    (dest / "transformer_block.py").write_text("# the learner's work\n", encoding="utf-8")
    # the folder was empty when it was looked at; the learner's editor saved just after
    monkeypatch.setattr(pathlib.Path, "iterdir", lambda self: iter(()))
    with pytest.raises(stubs.UsageError, match="File exists"):
        init_clean_room(dest)
    monkeypatch.undo()
    assert (dest / "transformer_block.py").read_text(encoding="utf-8") == "# the learner's work\n"
    assert sorted(p.name for p in dest.iterdir()) == ["transformer_block.py"]


# -- rooms and --out names the filesystem refuses -------------------------------------


def test_contract_check_of_a_loop_of_links_or_a_name_too_long(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    result = runner.invoke(app, ["contract", "check", "--path", "loop1"])
    _one_error(result, 2, "clean room loop1: cannot be read", "symbolic links")
    result = runner.invoke(app, ["contract", "check", "--path", TOO_LONG, "--json"])
    _json_error(result, 2, "File name too long")


def test_verify_of_a_loop_of_links(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop1").symlink_to("loop1")
    result = runner.invoke(app, ["verify", "clean-room", "--path", "loop1", "--no-metrics"])
    _one_error(result, 2, "clean room loop1: cannot be read")


@pytest.mark.parametrize(
    "args",
    [
        ["faults", "--out", TOO_LONG],
        ["report", "--out", f"{TOO_LONG}/report.html"],
        ["verify", "clean-room", "--no-metrics", "--out", TOO_LONG],
    ],
    ids=["faults", "report", "verify"],
)
def test_an_out_name_too_long_is_a_usage_error(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, [*args, "--json"])
    _json_error(result, 2, "--out", "cannot be used (File name too long)")


def test_an_out_that_is_a_loop_of_links_is_not_called_dangling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    (tmp_path / "gone").symlink_to("nowhere")
    result = runner.invoke(app, ["faults", "--out", "loop1"])
    _one_error(result, 2, "--out loop1: cannot be used (Too many levels of symbolic links)")
    result = runner.invoke(app, ["faults", "--out", "gone"])
    _one_error(result, 2, "--out gone: a dangling symbolic link")


def test_faults_refuses_an_out_that_is_not_utf8_before_running(tmp_path, monkeypatch):
    from labctl.verify import matrix

    def ran(*args, **kwargs):
        raise AssertionError("the faults ran with an --out no record can name")

    monkeypatch.setattr(matrix, "build_matrix", ran)
    monkeypatch.chdir(tmp_path)
    name = os.fsdecode(b"out\xff")
    result = runner.invoke(app, ["faults", "--out", name, "--json"])
    _json_error(result, 2, "not UTF-8", "nothing was written")
    assert list(tmp_path.iterdir()) == []


# -- doctor and a bwrap that does not do what it says ---------------------------------


@pytest.fixture
def fake_bwrap(tmp_path, monkeypatch):
    """Point labctl at a `bwrap` of the test's choosing (a script), probed afresh."""

    def install(script: str) -> Path:
        binary = tmp_path / "bwrap"
        binary.write_text(f"#!/bin/sh\n{script}\n", encoding="utf-8")
        binary.chmod(0o755)
        monkeypatch.setenv(bwrap.ENV_BWRAP, str(binary))
        bwrap.sandbox_status.cache_clear()
        return binary

    yield install
    bwrap.sandbox_status.cache_clear()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the probe runs on Linux")
def test_a_bwrap_that_runs_nothing_is_no_sandbox(fake_bwrap, tmp_path, monkeypatch):
    fake_bwrap("echo garbage; exit 0")
    status = bwrap.sandbox_status()
    assert not status.works and "reported nothing readable" in str(status.reason)
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["sandbox"]["works"] is False
    assert document["isolation"]["auto"] == "process"
    # verify believes doctor: the project's own room passes, run as a process
    monkeypatch.chdir(tmp_path)
    room = str(project_clean_room())
    args = ["verify", "clean-room", "--path", room, "--no-metrics", "--out", "v"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "process (not a security boundary)" in result.output


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the probe runs on Linux")
def test_a_bwrap_that_hangs_is_said_in_one_line(fake_bwrap, monkeypatch):
    fake_bwrap("exit 0")

    def hangs(command, **kwargs):
        raise subprocess.TimeoutExpired(command, kwargs["timeout"])

    monkeypatch.setattr(bwrap.subprocess, "run", hangs)
    status = bwrap.sandbox_status()
    assert not status.works
    reason = str(status.reason)
    assert reason.startswith("bwrap did not finish the probe in 30 s;")
    assert "--unshare" not in reason and "--ro-bind" not in reason


# -- the terminal's width -------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["--help"], ["show", "--help"], ["show", "gqa"], ["contract", "show", "rope"], ["show"]],
    ids=["help", "show-help", "show", "contract-show", "usage-error"],
)
def test_a_huge_columns_is_the_widest_terminal_not_a_crash(args):
    wide = CliRunner(env={"COLUMNS": "99999999999", "LABCTL_LANG": "en"})
    result = wide.invoke(app, args)
    assert result.exit_code in (0, 2), result.output
    assert "internal error" not in result.output and "MemoryError" not in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 10_000


@pytest.mark.parametrize(
    "args", [("list",), ("verify", "clean-room"), ("grade", "class"), ("contract", "check")]
)
def test_help_with_json_is_one_json_document_holding_the_help(args):
    """`--json` is one JSON document on stdout in every case: `--help` too, its text inside."""
    result = runner.invoke(app, [*args, "--help", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert list(document) == ["help"]
    assert " ".join(args) + " [OPTIONS]" in document["help"]
    assert "Usage:" in document["help"]
    assert "--json" in document["help"]


def test_the_faults_record_names_every_setting_its_matrix_was_run_with(tmp_path, monkeypatch):
    """The record's `command` repeats the run: a matrix measured under another memory limit or
    at the process level is not the one `labctl faults --timeout T` alone would give."""
    import labctl.verify.matrix as matrix_module
    from labctl.verify.checks import CHECK_NAMES
    from labctl.verify.matrix import FaultMatrix, FaultRow

    baseline = FaultRow(None, dict.fromkeys(CHECK_NAMES, "pass"), [], [], [], 0.1)
    built = FaultMatrix(baseline, [], 3.0, isolation="process", memory_mb=2048)
    monkeypatch.setattr(matrix_module, "build_matrix", lambda *a, **k: built)
    out = tmp_path / "faults"
    result = runner.invoke(
        app,
        ["faults", "--timeout", "3", "--memory-mb", "2048", "--isolation", "process", "--json",
         "--out", str(out)],
    )  # fmt: skip
    assert json.loads(result.stdout)["memory_mb"] == 2048
    matrix_module.write_evidence(built, out)
    record = next(p for p in out.glob("*.json") if not p.name.endswith("-matrix.json"))
    commands = json.loads(record.read_text("utf-8"))["commands"]
    assert commands == ["labctl faults --timeout 3 --memory-mb 2048 --isolation process"]
