"""Issue 22's small defects, each shown fixed: file modes, lock files, stubs in `contract
check`, `show all`, `evidence schema --json`, the output path, Ctrl-C in `run`, help defaults
in both languages, and pydantic's refusals worded by type."""

from __future__ import annotations

import json
import os
import stat
import threading
import time

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.evidence.store import locked, replace_atomically, write_new
from labctl.i18n import Msg, _, set_language
from labctl.i18n.validation import explained
from labctl.isolation.loader import is_stub

runner = CliRunner()
ENV = {"LABCTL_LANG": "", "LC_ALL": "", "LC_MESSAGES": "", "LANG": "", "COLUMNS": "200"}


@pytest.fixture(autouse=True)
def english_after():
    yield
    set_language("en")


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str):
    return runner.invoke(app, list(args), env=ENV, prog_name="labctl")


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ---- file modes and locks --------------------------------------------------------------------


def test_records_manifest_and_replaced_files_get_the_umask_mode_and_secrets_stay_private(workdir):
    previous = os.umask(0o022)
    try:
        write_new(workdir / "record.json", b"{}")
        replace_atomically(workdir / "manifest.json", b"{}")
        replace_atomically(workdir / "secret.json", b"{}", private=True)
    finally:
        os.umask(previous)
    assert _mode(workdir / "record.json") == 0o644
    assert _mode(workdir / "manifest.json") == 0o644
    assert _mode(workdir / "secret.json") == 0o600


def test_a_run_leaves_no_lock_file_and_its_records_are_0644(workdir):
    previous = os.umask(0o022)
    try:
        result = invoke("run", "causal-attention", "--impl", "reference", "--out", "ev")
    finally:
        os.umask(previous)
    assert result.exit_code == 0, result.output
    files = [p for p in (workdir / "ev").rglob("*") if p.is_file()]
    assert not [p for p in files if p.name.endswith(".lock")]
    assert {_mode(p) for p in files} == {0o644}, {p.name: oct(_mode(p)) for p in files}


def test_the_lock_still_excludes_while_its_file_comes_and_goes(tmp_path):
    """Threads count under the lock, each opening the lock file anew; the file is removed at
    every release. A lost update (two holders at once) would show as a count short."""
    target = tmp_path / "count"
    target.write_text("0")

    def work() -> None:
        for _round in range(25):
            with locked(target):
                value = int(target.read_text())
                time.sleep(0.0005)
                target.write_text(str(value + 1))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert int(target.read_text()) == 100
    assert not (tmp_path / "count.lock").exists()


# ---- contract check and stubs ----------------------------------------------------------------


def test_is_stub_tells_a_stub_from_a_function_that_may_raise():
    def stub(x):
        """Doc."""
        raise NotImplementedError("write it")

    def bare(x):
        raise NotImplementedError

    def sometimes(x):
        if x:
            raise NotImplementedError
        return x

    assert is_stub(stub) and is_stub(bare)
    assert not is_stub(sometimes) and not is_stub(len) and not is_stub(lambda x: x)


def test_contract_check_counts_stubs_and_does_not_pass_them(workdir):
    room = workdir / "room"
    assert invoke("clean-room", "init", str(room)).exit_code == 0
    text = (room / "transformer_block.py").read_text("utf-8")
    written = "def softmax(x, axis=-1):\n    e = np.exp(x - x.max(axis, keepdims=True))\n"
    written += "    return e / e.sum(axis, keepdims=True)\n"
    start = text.index("def softmax(")
    (room / "transformer_block.py").write_text(
        text[:start] + written + text[text.index("\n\n\ndef causal_mask(") :], "utf-8"
    )
    args = ("contract", "check", "--path", str(room), "--isolation", "process")
    result = invoke(*args)
    assert result.exit_code == 1, result.output
    flat = " ".join(result.output.split())
    assert "pass softmax" in flat and "stub causal_mask" in flat
    assert "19/19 functions match" in flat and "18 of them are stubs" in flat
    assert f"in {room}" in flat  # the path as given, not its last component
    document = json.loads(invoke(*args, "--json").stdout)
    assert document["passed"] is False and document["stubs"] == 18
    by_name = {f["function"]: f for f in document["functions"]}
    assert by_name["softmax"] == {
        "function": "softmax",
        "passed": True,
        "stub": False,
        "deviations": [],
    }
    assert by_name["rope"]["stub"] is True and by_name["rope"]["passed"] is False


def test_contract_check_of_labctls_own_room_passes_with_no_stub(workdir):
    result = invoke("contract", "check", "--isolation", "process", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["stubs"] == 0


# ---- show all, evidence schema --json, the output path ----------------------------------------


def test_show_all_is_refused_without_offering_all():
    result = invoke("show", "all")
    assert result.exit_code == 2
    assert "labctl list" in result.output and "or all" not in result.output
    unknown = invoke("show", "nosuch")
    assert unknown.exit_code == 2 and "or all" not in unknown.output
    # run does take `all` (the line wraps at 80 columns: read it unwrapped)
    assert "or all" in " ".join(invoke("run", "nosuch").output.split())


def test_evidence_schema_json_prints_the_schema_as_the_one_document():
    from labctl.evidence.models import schema_text

    result = invoke("evidence", "schema", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads(schema_text())


def test_run_names_the_output_folder_as_given(workdir, tmp_path_factory):
    out = tmp_path_factory.mktemp("elsewhere") / "deep" / "runs"
    result = invoke("run", "causal-attention", "--impl", "reference", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert f"records under {out}" in " ".join(result.output.split())


# ---- Ctrl-C during run -----------------------------------------------------------------------


def test_ctrl_c_still_prints_the_labs_that_finished(workdir, monkeypatch):
    import threading

    from labctl import runner as lab_runner

    real = lab_runner.run_lab
    first_done = threading.Event()

    def interrupted_on_the_second(lab, *args, **kwargs):
        if lab.id == "gqa":  # computing beside the first: interrupted once that one is done
            assert first_done.wait(60)
            raise KeyboardInterrupt
        result = real(lab, *args, **kwargs)
        first_done.set()
        return result

    monkeypatch.setattr(lab_runner, "run_lab", interrupted_on_the_second)
    result = invoke("run", "causal-attention", "gqa", "--impl", "reference", "--out", "ev")
    assert result.exit_code == 130
    assert "future_token_invariance" in result.stdout  # the finished lab's table
    assert "causal-attention in" in result.stdout  # and its footer
    assert "gqa_reference_max_error" not in result.stdout
    assert "interrupted" in result.output


def test_ctrl_c_prints_the_finished_labs_in_their_order_a_timed_one_too(workdir, monkeypatch):
    """kv-cache times its calls, so it runs (and ends) before entropy: both are printed, in
    the labs' order, when gqa is interrupted after them."""
    import threading

    from labctl import runner as lab_runner

    real = lab_runner.run_lab
    entropy_done = threading.Event()

    def interrupted_after_the_others(lab, *args, **kwargs):
        if lab.id == "gqa":
            assert entropy_done.wait(60)
            raise KeyboardInterrupt
        result = real(lab, *args, **kwargs)
        if lab.id == "entropy":
            entropy_done.set()
        return result

    monkeypatch.setattr(lab_runner, "run_lab", interrupted_after_the_others)
    args = ["run", "entropy", "kv-cache", "gqa", "--impl", "reference", "--out", "ev"]
    result = invoke(*args, "--set", "kv-cache.repeats=1")
    assert result.exit_code == 130, result.output
    entropy, kv_cache = (result.stdout.find(f"{lab} in") for lab in ("entropy", "kv-cache"))
    assert 0 <= entropy < kv_cache, result.stdout
    assert "gqa_reference_max_error" not in result.stdout


# ---- help shows every default, in both languages ---------------------------------------------


@pytest.mark.parametrize(
    ("lang", "written", "typer_default"),
    [
        ("en", "[default: ./clean_room, else labctl's own", "[default: 5]"),
        ("zh", "［默认：./clean_room，否则用 labctl 自带的", "[默认：5]"),
    ],
)
def test_run_help_shows_every_default(lang, written, typer_default):
    result = invoke("--lang", lang, "run", "--help")
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert written in flat and typer_default in flat
    assert "[default: evidence/runs]" in flat or "[默认：evidence/runs]" in flat


def test_english_help_keeps_every_default_written_in_a_help_text():
    """A help text that writes `[default: ...]` shows it (rich took it for markup and
    dropped it: "Clean room to re-measure on .")."""
    import re

    import typer

    written: list[tuple[list[str], str]] = []

    def walk(command, path: list[str]) -> None:
        for param in command.params:
            found = re.search(r"\[default: [^\]]*\]", getattr(param, "help", None) or "")
            if found:
                written.append((path, found.group(0)))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    assert len(written) >= 3, written
    for path, default in written:
        result = invoke(*path, "--help")
        assert result.exit_code == 0, result.output
        assert default in " ".join(result.output.split()), (path, default)


# ---- pydantic's refusals by type ---------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")

    T: int = Field(8, ge=2, le=512)
    name: str = Field("x", min_length=1)


def _errors(**values) -> list[dict]:
    try:
        _Model.model_validate(values)
    except ValidationError as exc:
        return exc.errors()
    raise AssertionError("expected a refusal")


@pytest.mark.parametrize(
    ("values", "english", "chinese"),
    [
        ({"T": 0}, "should be at least 2", "应不小于 2"),
        ({"T": 1000}, "should be at most 512", "应不大于 512"),
        ({"T": "abc"}, "should be an integer", "应是整数"),
        ({"name": ""}, "should not be empty", "不能为空"),
        ({"extra": 1}, "is not a parameter", "不是参数"),
    ],
)
def test_pydantic_errors_are_worded_by_type_in_both_languages(values, english, chinese):
    (error,) = _errors(**values)
    message = explained(error)
    assert str(message) == english
    set_language("zh")
    assert _(message) == chinese


def test_an_unknown_pydantic_error_is_named_by_its_type_never_by_its_sentence():
    message = explained({"type": "url_parsing", "msg": "Input should be a valid URL"})
    assert str(message) == "not accepted (url_parsing)"
    raised = ValueError(Msg("H = {H} must divide C = {C}", H=3, C=64))
    assert explained({"type": "value_error", "ctx": {"error": raised}}) is raised.args[0]


def test_set_and_typer_refusals_are_worded_in_chinese():
    result = invoke("--lang", "zh", "run", "gqa", "--set", "C=0", "--seed", "5")
    assert result.exit_code == 2 and "gqa.C: 应不小于 1" in result.output, result.output
    typer_refusal = invoke("--lang", "zh", "run", "gqa", "--seed", "abc")
    assert typer_refusal.exit_code == 2
    assert "'--seed' 的值无效：应是整数" in typer_refusal.output, typer_refusal.output
    assert "Input should" not in result.output + typer_refusal.output
    document = json.loads(invoke("--lang", "zh", "run", "gqa", "--seed", "abc", "--json").stdout)
    assert document["error"]["message"].startswith("Invalid value for '--seed'")
