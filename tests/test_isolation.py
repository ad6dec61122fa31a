"""The isolation layer's interface and refusals: levels, doctor, checked replies, JSON errors.

The attacks themselves are in tests/hostile/; this file holds the quick checks
of each piece, each shown to fail on the fault it names.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from hostile.attacks import require_sandbox
from typer.testing import CliRunner

from labctl.cli.main import app
from labctl.errors import CallError, UsageError
from labctl.faults import project_clean_room
from labctl.isolation import ISOLATION_LEVELS, bwrap, replies, resolve_isolation, wire
from labctl.isolation.sandbox import CleanRoom
from labctl.verify.observe import depends_on
from labctl.verify.stubs import init_clean_room

# Content, not layout, is tested here: a terminal wide enough that no line wraps.
runner = CliRunner(env={"COLUMNS": "300"})
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_bwrap(monkeypatch):
    """A machine without bubblewrap: the probe looks for a binary that does not exist."""
    monkeypatch.setenv(bwrap.ENV_BWRAP, "/nonexistent/bwrap")  # monkeypatch restores it
    bwrap.sandbox_status.cache_clear()
    yield
    bwrap.sandbox_status.cache_clear()


def room_with(tmp_path: Path, source: str, base: str = "project", name: str = "room") -> Path:
    dest = tmp_path / name
    if base == "project":
        shutil.copytree(project_clean_room(), dest, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        init_clean_room(dest)
    with (dest / "__init__.py").open("a", encoding="utf-8") as handle:
        handle.write("\n\n" + textwrap.dedent(source).strip() + "\n")
    return dest


# -- levels -----------------------------------------------------------------


def test_the_levels_and_their_resolution():
    assert ISOLATION_LEVELS == ("auto", "sandbox", "process")
    assert resolve_isolation("process") == "process"
    with pytest.raises(UsageError, match="must be one of"):
        resolve_isolation("container")


def test_an_early_probe_answers_the_next_status_and_only_once(no_bwrap):
    bwrap.probe_soon()
    assert bwrap._pending is not None  # probing in its thread
    status = bwrap.sandbox_status()
    assert not status.works and "bwrap is not installed" in str(status.reason)
    assert bwrap._pending is None
    bwrap.probe_soon()  # answered and cached: nothing more to probe
    assert bwrap._pending is None and bwrap.sandbox_status() is status


def test_an_early_probe_of_another_bwrap_is_not_taken(no_bwrap, monkeypatch):
    bwrap.probe_soon()  # started for the missing binary: "not installed"
    monkeypatch.delenv(bwrap.ENV_BWRAP)  # the machine's own bwrap (CI installs it)
    status = bwrap.sandbox_status()
    assert bwrap._pending is None
    assert status.works == bwrap._probe().works


def test_without_bwrap_auto_falls_back_and_sandbox_is_refused(no_bwrap, tmp_path):
    assert resolve_isolation("auto") == "process"
    with pytest.raises(UsageError, match="apt-get install bubblewrap") as caught:
        resolve_isolation("sandbox")
    assert caught.value.exit_code == 2
    result = runner.invoke(
        app, ["contract", "check", "--isolation", "sandbox", "--json"], catch_exceptions=False
    )
    assert result.exit_code == 2
    document = json.loads(result.stdout)
    assert document["passed"] is False and "bubblewrap" in document["error"]["message"]


def test_the_fallback_says_it_is_not_a_boundary(no_bwrap, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["contract", "check", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["isolation"] == "process"
    assert "isolation: process (not a security boundary)" in result.stderr


def test_doctor_reports_versions_without_importing_torch():
    code = (
        "import json, sys; from labctl.cli.doctor import facts; "
        "print(json.dumps([facts(), 'torch' in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    found, torch_imported = json.loads(done.stdout)
    assert not torch_imported
    assert found["numpy"] == np.__version__ and found["torch"]
    assert found["python"] == ".".join(map(str, sys.version_info[:3]))


@pytest.mark.parametrize(
    ("figures", "said"),
    [
        ({"matplotlib": None, "cjk_font": "/f.otf"}, "pip install 'labctl[report]'"),
        ({"matplotlib": "3.9", "cjk_font": "/f.otf"}, "no CJK font needed"),
        ({"matplotlib": "3.9", "cjk_font": None}, "pip install pylopdf-fonts-zh-cn"),
    ],
)
def test_doctor_says_what_the_report_needs_to_show_chinese(monkeypatch, figures, said):
    from labctl.cli import doctor

    monkeypatch.setattr(doctor, "_figures", lambda: figures)
    result = runner.invoke(app, ["doctor"], env={"COLUMNS": "300"})
    assert "figures" in result.stdout and said in result.stdout
    document = json.loads(runner.invoke(app, ["doctor", "--json"]).stdout)
    assert document["figures"] == figures


def test_doctor_finds_the_font_the_report_carries():
    from labctl.cli import doctor
    from labctl.report import glyphs

    found = doctor._figures()["cjk_font"]
    assert found is not None and Path(found).name == glyphs.FONT_FILE


@pytest.mark.parametrize(
    ("terminal", "said", "unsaid"),
    [
        ({"encoding": "utf-8", "utf8": True, "columns": 80, "cjk_fonts": 0},
         "no font with Chinese glyphs on this machine", "UTF-8 locale"),
        ({"encoding": "ascii", "utf8": False, "columns": 80, "cjk_fonts": 3},
         "needs a UTF-8 locale", "boxes"),
        ({"encoding": "utf-8", "utf8": True, "columns": 120, "cjk_fonts": None},
         "utf-8, 120 columns", "boxes"),
    ],
)  # fmt: skip
def test_doctor_says_what_the_terminal_needs_to_show_chinese(monkeypatch, terminal, said, unsaid):
    from labctl.cli import doctor

    monkeypatch.setattr(doctor, "_terminal", lambda: terminal)
    shown = " ".join(runner.invoke(app, ["doctor"], env={"COLUMNS": "300"}).stdout.split())
    assert said in shown and unsaid not in shown
    document = json.loads(runner.invoke(app, ["doctor", "--json"]).stdout)
    assert document["terminal"] == terminal


def test_doctor_counts_the_machines_chinese_fonts_as_fontconfig_lists_them(monkeypatch, tmp_path):
    from labctl.cli import doctor

    listing = tmp_path / "fc-list"
    listing.write_text("#!/bin/sh\nprintf 'Noto Sans CJK SC\\nAR PL UMing\\n'\n")
    listing.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert doctor._cjk_fonts() == 2
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert doctor._cjk_fonts() is None


def test_doctor_says_why_the_sandbox_is_missing_and_fails(no_bwrap):
    result = runner.invoke(app, ["doctor", "--json"])
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["sandbox"]["works"] is False
    assert "apt-get install bubblewrap" in document["sandbox"]["reason"]
    assert document["isolation"]["auto"] == "process"


# -- what the worker sends back ------------------------------------------------


def _request(**extra) -> dict:
    return {"op": "call", "seq": 7, **extra}


GOOD = {
    "ok": True,
    "seq": 7,
    "value": None,
    "elapsed_s": 0.1,
    "args_after": [[], {}],
    "violations": [],
}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"seq": None}, "not to request 7"),
        ({"seq": 6}, "not to request 7"),
        ({"ok": "yes"}, "not a reply"),
        ({"elapsed_s": float("nan")}, "compute time"),
        ({"elapsed_s": -1.0}, "compute time"),
        ({"args_after": None}, "no arguments"),
        ({"violations": [1]}, "violations"),
        ({"ok": False, "error": {"kind": "UsageError", "message": "forged"}}, "no known kind"),
        ({"ok": False, "error": {"kind": "exception", "message": "m"}}, "without its type"),
        ({"ok": False, "error": {"kind": "missing", "message": 3}}, "without a message"),
    ],
)
def test_a_forged_reply_is_named(change, why):
    assert replies.problem(GOOD, _request()) is None
    assert why in replies.problem({**GOOD, **change}, _request())


def test_arguments_come_back_exactly_when_asked_for():
    unasked = {**GOOD, "args_after": None}
    assert replies.problem(unasked, _request(echo_args=False)) is None
    assert "not asked for" in replies.problem(GOOD, _request(echo_args=False))
    assert "no arguments" in replies.problem(unasked, _request(echo_args=True))


def test_a_value_comes_back_exactly_when_asked_for():
    assert replies.problem(GOOD, _request(want_value=False)) is None  # GOOD's value is None
    forged = {**GOOD, "value": [1.0]}
    assert "not asked for" in replies.problem(forged, _request(want_value=False))
    assert replies.problem(forged, _request()) is None


def test_forged_signatures_are_refused():
    request = {"op": "load", "seq": 1}
    good = {"ok": True, "seq": 1, "signatures": {"softmax": {"present": False}}, "privileges": ""}
    assert replies.problem(good, request) is None
    bad = {**good, "signatures": {"softmax": {"present": True, "callable": True, "params": [1]}}}
    assert "signatures" in replies.problem(bad, request)


def test_purity_is_decided_from_what_was_sent():
    x = np.arange(6.0).reshape(2, 3)
    assert replies.mutated([x], {}, [[x.copy()], {}]) == []
    assert replies.mutated([x], {}, [[x + 1], {}]) == ["[0][0]"]
    assert replies.mutated([x], {}, [[x.reshape(3, 2)], {}]) is None  # not a genuine reply
    assert replies.mutated([x], {}, [[x.astype(np.float32)], {}]) is None
    assert replies.mutated([x], {}, [[], {}]) is None


def test_learner_text_is_shown_escaped_and_capped():
    shown = replies.printable("\x1b[2J\u202eevil" + "x" * 1000)
    assert "\x1b" not in shown and "\u202e" not in shown
    assert shown.startswith("\\x1b[2J\\u202eevil") and shown.endswith("more characters)")


def _frame(header: dict, blob: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack(">I", len(raw)) + raw + blob


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (_frame({"tree": None, "blobs": [{"dtype": "<f8", "shape": [1 << 40]}]}), "exceeds"),
        (_frame({"tree": None, "blobs": [{"dtype": "<f8", "shape": [1.5]}]}), "natural"),
        (_frame({"tree": None, "blobs": [{"dtype": "<M8", "shape": [1]}]}), "plain numeric"),
        (_frame({"tree": None, "blobs": []}, b"extra"), "no array claims"),
        (_frame({"tree": {"$nd": True}, "blobs": []}), "bad array index"),
    ],
)
def test_the_wire_refuses_forged_arrays(payload, why):
    with pytest.raises(wire.WireError, match=why):
        wire.decode(payload)


def test_a_stalled_frame_times_out():
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, struct.pack(">Q", 100) + b"partial")
        with pytest.raises(wire.Timeout):
            wire.read_frame(read_fd, deadline=0.0)
    finally:
        os.close(read_fd)
        os.close(write_fd)


# -- the worker -----------------------------------------------------------------


def test_labctl_measures_the_worker_s_peak_memory_from_outside():
    x = np.random.default_rng(0).standard_normal((4, 256, 256))
    with CleanRoom(project_clean_room()) as room:
        assert room.invoke("softmax", x).peak_bytes is None
        measured = room.invoke("softmax", x, measure_memory=True)
    assert isinstance(measured.peak_bytes, int)
    assert measured.peak_bytes >= x.nbytes  # the output alone is as large as x


def test_a_worker_that_prints_and_crashes_shows_what_it_printed(tmp_path):
    root = room_with(
        tmp_path,
        """
        import os
        def softmax(x, axis=-1):
            print("[bold]about to die[/bold]", flush=True)
            os._exit(3)
        """,
    )
    with CleanRoom(root) as room, pytest.raises(CallError) as caught:
        room.softmax(np.zeros(3))
    assert caught.value.kind == "crash"
    assert "exited with code 3" in str(caught.value)
    assert "it printed: [bold]about to die[/bold]" in str(caught.value)


def test_a_forged_reply_is_a_named_failure_of_the_function(tmp_path):
    root = room_with(
        tmp_path,
        """
        import sys
        def softmax(x, axis=-1):
            error = {"kind": "UsageError", "message": "forged"}
            sys.modules["labctl.isolation.wire"].write_frame(
                int(sys.argv[2]), {"ok": False, "seq": None, "error": error}
            )
            return x
        """,
    )
    with CleanRoom(root) as room, pytest.raises(CallError) as caught:
        room.softmax(np.zeros(3))
    assert caught.value.kind == "malformed"
    assert replies.MALFORMED in str(caught.value)


def test_a_fifo_in_the_clean_room_does_not_block_the_sandbox(tmp_path):
    require_sandbox()
    root = room_with(tmp_path, "")
    os.mkfifo(root / "data.bin")
    copied = []
    worker = threading.Thread(target=lambda: copied.append(bwrap.copy_room(root)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert copied, "copying the clean room blocked on its FIFO"
    assert not (copied[0] / "data.bin").exists() and (copied[0] / "__init__.py").is_file()
    shutil.rmtree(copied[0].parent)


@pytest.mark.parametrize("level", ["sandbox", "process"])
def test_a_room_opened_in_a_thread_outlives_the_thread(level):
    if level == "sandbox":
        require_sandbox()
    opened = []
    worker = threading.Thread(
        target=lambda: opened.append(CleanRoom(project_clean_room(), isolation=level))
    )
    worker.start()
    worker.join()
    time.sleep(0.5)  # a parent-death signal tied to the ended thread would have fired
    with opened[0] as room:
        assert room.softmax(np.zeros(2)).tolist() == [0.5, 0.5]


def test_dependents_of_a_function_are_known_transitively():
    assert depends_on("transformer_block")[:3] == ["rms_norm", "multi_head_attention", "swiglu_ffn"]
    assert "softmax" in depends_on("decoder_forward")
    assert depends_on("softmax") == []


# -- verify and the CLI ---------------------------------------------------------


def test_numpy_testing_loads_and_an_imaginary_part_fails_parity(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = room_with(
        tmp_path,
        """
        import numpy.testing
        _softmax = softmax
        def softmax(x, axis=-1):
            return _softmax(x, axis) + 100j
        """,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = runner.invoke(
            app, ["verify", "clean-room", "--path", str(root), "--no-metrics", "--json"]
        )
    # numpy's cast warnings would print English lines naming labctl's files
    assert [
        str(w.message) for w in caught if issubclass(w.category, np.exceptions.ComplexWarning)
    ] == []
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["status"] == "loaded" and document["isolation"] in ("sandbox", "process")
    cells = {(c["function"], c["name"]): c for c in document["checks"]}
    assert cells[("(package)", "import-policy")]["status"] == "pass"
    parity = cells[("softmax", "parity")]
    assert parity["status"] == "fail" and parity["max_error"] == pytest.approx(100.0)
    # Weights are real: the rows summing to 1 in their real parts is not enough.
    assert cells[("softmax", "rows-sum")]["status"] == "fail"
    assert cells[("layer_norm", "parity")]["status"] == "pass"
    folder = tmp_path / "evidence" / "verify"
    record_path = next(p for p in folder.glob("*.json") if not p.name.endswith("-report.json"))
    record = json.loads(record_path.read_text())
    assert record["labctl"]["isolation"] == document["isolation"]


def test_learner_text_with_brackets_reaches_the_terminal_whole(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = room_with(
        tmp_path,
        """
        def softmax(x, axis=-1):
            raise ValueError("shape must be [batch, seq, dim]")
        """,
    )
    result = runner.invoke(app, ["verify", "clean-room", "--path", str(root), "--no-metrics"])
    assert result.exit_code == 1
    assert "shape must be [batch, seq, dim]" in result.stdout


def test_verify_out_file_is_a_usage_error_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "file.txt"
    target.write_text("mine")
    result = runner.invoke(app, ["verify", "clean-room", "--out", str(target), "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["kind"] == "usage"
    assert target.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


def test_clean_room_init_where_nothing_can_be_written_is_a_usage_error(tmp_path):
    result = runner.invoke(app, ["clean-room", "init", "/proc/labctl-x", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["passed"] is False
    assert not Path("/proc/labctl-x").exists()


@pytest.mark.parametrize(
    ("raised", "kind", "code"),
    [(RuntimeError("boom"), "internal", 1), (KeyboardInterrupt(), "interrupted", 130)],
)
def test_json_holds_on_internal_errors_and_interrupts(monkeypatch, raised, kind, code):
    import labctl.contract_check

    def explode(*args, **kwargs):
        raise raised

    monkeypatch.setattr(labctl.contract_check, "check_clean_room", explode)
    result = runner.invoke(app, ["contract", "check", "--json"])
    assert result.exit_code == code
    document = json.loads(result.stdout)
    assert document == {
        "passed": False,
        "error": {"kind": kind, "message": document["error"]["message"], "exit_code": code},
    }


def test_json_holds_on_usage_errors():
    result = runner.invoke(app, ["verify", "clean-room", "--timeout", "soon", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["kind"] == "usage"


def test_contract_check_survives_a_clean_room_that_exits_at_import(tmp_path):
    root = room_with(tmp_path, "import os\nos._exit(0)")
    result = runner.invoke(app, ["contract", "check", "--path", str(root), "--json"])
    assert result.exit_code == 1
    assert "exited with code 0" in json.loads(result.stdout)["error"]["message"]


def test_source_nested_past_the_parser_is_refused_not_a_crash(tmp_path):
    # 100,000 attribute accesses: ast.parse raises RecursionError in labctl's own process.
    room = room_with(tmp_path, "DEEP = x" + ".a" * 100_000 + "\n")
    result = runner.invoke(
        app,
        [
            "verify",
            "clean-room",
            "--path",
            str(room),
            "--no-metrics",
            "--out",
            str(tmp_path / "out"),
            "--json",
        ],
    )
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["passed"] is False and "internal error" not in result.output
    assert "cannot be parsed: RecursionError" in result.stdout
