"""Isolation: whatever a clean room does, verify names it as a failure of that function.

A hang is stopped at the timeout, a crash ends only the worker, an exception,
a wrong shape or type is a named failure; an import of torch (however it is
spelled) is refused with file and line; a syntax error is reported with file
and line; labctl itself never shows a traceback.
"""

from __future__ import annotations

import json
import shutil
import textwrap
import time
from pathlib import Path

import pytest
from hostile.attacks import at_level
from typer.testing import CliRunner

from labctl import contract
from labctl.cli.main import app
from labctl.faults import project_clean_room
from labctl.isolation.guard import RULE
from labctl.verify import observe as observing
from labctl.verify.stubs import init_clean_room
from labctl.verify.verify import verify_clean_room

runner = CliRunner()


def variant(tmp_path: Path, module: str, source: str, name: str = "room") -> Path:
    """The project's clean room with `source` appended to `module` (a learner's edit)."""
    dest = tmp_path / name
    shutil.copytree(project_clean_room(), dest, ignore=shutil.ignore_patterns("__pycache__"))
    with (dest / f"{module}.py").open("a", encoding="utf-8") as handle:
        handle.write("\n\n" + textwrap.dedent(source).strip() + "\n")
    return dest


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def check(report, function: str, name: str):
    return next(c for c in report.checks if c.function == function and c.name == name)


def failing(report) -> set[str]:
    return {c.function for c in report.checks if c.failed}


def test_a_fresh_init_fails_every_function_as_not_implemented(tmp_path):
    room = tmp_path / "mine"
    written = init_clean_room(room)
    assert sorted(p.name for p in written) == ["__init__.py", "transformer_block.py"]
    report = verify_clean_room(room, 20.0, out=None, measure=False)
    assert report.status == "loaded"
    assert not report.passed
    for fn in contract.function_names():
        assert check(report, fn, "contract").passed, fn
        runs = check(report, fn, "runs")
        assert runs.failed and runs.message == "not implemented (raises NotImplementedError)"
        assert check(report, fn, "parity").status == "not-run"
        assert not any("crash" in c.message for c in report.checks if c.function == fn)
    assert {d.kind for d in report.diagnosis} == {"not-implemented"}
    assert len(report.diagnosis) == 19


def test_init_refuses_a_non_empty_directory(tmp_path):
    room = tmp_path / "mine"
    room.mkdir()
    (room / "notes.txt").write_text("my work")
    result = runner.invoke(app, ["clean-room", "init", str(room)])
    assert result.exit_code == 1
    assert "not empty" in result.output
    assert sorted(p.name for p in room.iterdir()) == ["notes.txt"]


def test_init_stubs_carry_the_signature_shapes_and_formula(tmp_path):
    room = tmp_path / "mine"
    result = runner.invoke(app, ["clean-room", "init", str(room)])
    assert result.exit_code == 0, result.output
    text = (room / "transformer_block.py").read_text("utf-8")
    assert "def rms_norm(x, weight, eps=1e-06):" in text
    assert "x / sqrt(mean(x**2, axis=-1) + eps) * weight" in text
    assert "weight: (C,)" in text
    assert "raise NotImplementedError" in text
    assert "def decoder_forward(token_ids, params, n_heads, n_kv_heads=None, eps=1e-06, " in text


def test_a_clean_room_that_hangs_is_stopped_within_the_timeout(tmp_path):
    room = variant(
        tmp_path,
        "primitives",
        """
        def swiglu_ffn(x, w_gate, w_up, w_down):
            while True:
                pass
        """,
    )
    start = time.perf_counter()
    report = verify_clean_room(room, 1.0, out=None, measure=False, diagnose_failures=False)
    elapsed = time.perf_counter() - start
    runs = check(report, "swiglu_ffn", "runs")
    assert runs.failed and "no answer within 1 s (stopped)" in runs.message
    # The block and the model call it too: each hangs once, and nothing else does.
    assert failing(report) == {"swiglu_ffn", "transformer_block", "decoder_forward"}
    assert check(report, "rms_norm", "parity").passed
    assert elapsed < 15


def test_a_function_built_from_one_that_hangs_is_tried_and_observed_when_it_returns(tmp_path):
    """The package's sliding_window_mask hangs; the room's attention masks its window with a
    helper of its own and never reaches it. The four functions built on it were skipped, as
    built from a function that hung, and lost every point: each is tried once (0.5 s), returns,
    and passes; sliding_window_mask alone fails."""
    room = variant(
        tmp_path,
        "primitives",
        """
        _own_window = sliding_window_mask

        def sliding_window_mask(t_q, window, t_k=None):
            while True:
                pass
        """,
    )
    with (room / "transformer_block.py").open("a", encoding="utf-8") as handle:
        handle.write("\nfrom .primitives import _own_window as sliding_window_mask  # noqa\n")
    report = verify_clean_room(room, 1.0, out=None, measure=False, diagnose_failures=False)
    assert failing(report) == {"sliding_window_mask"}
    assert check(report, "multi_head_attention", "parity").passed


def test_what_a_hung_function_s_first_try_reached_is_not_tried_again(tmp_path, monkeypatch):
    """softmax hangs and attention reaches it: the first function built on it (SDPA) is tried
    once and hangs; the four above it are skipped untried (each try cost 0.5 s and a restart
    of the room: 3 s more for every learner whose softmax hangs)."""
    tried: list[str] = []
    real = observing._tried

    def counted(room, deadline, name, *args):
        tried.append(name)
        return real(room, deadline, name, *args)

    monkeypatch.setattr(observing, "_tried", counted)
    room = variant(
        tmp_path,
        "primitives",
        """
        def softmax(x, axis=-1):
            while True:
                pass
        """,
    )
    seen = observing.observe(room.resolve(), 1.0, 1024)
    assert seen.runs["softmax"].timed_out
    assert tried == ["scaled_dot_product_attention"]
    for function in ("multi_head_attention", "attention_decode", "transformer_block"):
        outcomes = seen.runs[function].fixtures.values()
        assert all(o.skipped_for == "softmax" for o in outcomes), function


@pytest.mark.parametrize("isolation", ["sandbox", "process"])
def test_a_room_whose_import_never_returns_has_the_time_of_one_call(tmp_path, isolation):
    """The worker's own start (Python, numpy) has at least 10 s; the room's import, learner
    code, has `--timeout` like any call: a hang at import cost every run 10 s at `--timeout 1`."""
    room = variant(tmp_path, "primitives", "import time\nwhile True:\n    time.sleep(1)")
    report = verify_clean_room(
        room, 1.0, out=None, measure=False, diagnose_failures=False, isolation=at_level(isolation)
    )
    assert report.status == "unloadable", report.message
    assert "loading the clean room: no answer within 1 s (stopped)" in report.message


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("import torch", "imports torch"),
        ("from labctl import reference", "imports from labctl"),
        ("import scipy", "imports scipy"),
        ("from sklearn import svm", "imports from sklearn"),
        ('import importlib\nimportlib.import_module("torch")', "imports torch"),
        ('__import__("scipy.special")', "imports scipy.special"),
    ],
)
def test_a_clean_room_that_imports_another_package_is_refused_by_name(tmp_path, source, what):
    room = variant(
        tmp_path,
        "primitives",
        "def softmax(x, axis=-1):\n" + textwrap.indent(source, "    ") + "\n    return x\n",
    )
    report = verify_clean_room(room, 20.0, out=None, measure=False)
    assert report.status == "refused"
    assert not report.passed
    policy = check(report, "softmax", "import-policy")
    assert policy.failed
    line = line_of(room / "primitives.py", source.splitlines()[-1])
    assert f"room/primitives.py:{line}" in policy.message
    assert what in policy.message
    assert RULE in report.message  # the one rule, stated where the room is refused
    # Nothing of the clean room ran.
    assert check(report, "softmax", "parity").status == "not-run"


def test_an_unused_standard_library_import_no_longer_refuses_a_room(tmp_path):
    """Issue 21: `import pickle` refused a correct room; the standard library is allowed."""
    room = variant(tmp_path, "primitives", "import pickle, socket, subprocess, importlib")
    report = verify_clean_room(room, 20.0, out=None, measure=False, diagnose_failures=False)
    assert report.status == "loaded"
    assert check(report, "(package)", "import-policy").passed
    assert report.passed


def test_a_module_of_the_room_imported_by_its_bare_name_is_told_how_to_import_it(tmp_path):
    """`import helpers` for the room's own helpers.py is refused (Python would not find it
    either), and the refusal now says to write `from . import helpers`; torch is not."""
    room = variant(tmp_path, "primitives", "import helpers\nimport torch")
    (room / "helpers.py").write_text("X = 1\n")
    report = verify_clean_room(room, 20.0, out=None, measure=False, diagnose_failures=False)
    assert report.status == "refused"
    assert "imports helpers, one of this clean room's own modules" in report.message
    assert "import it as `from . import helpers`" in report.message
    assert "imports torch;" not in report.message and report.message.endswith("imports torch")


def test_an_import_that_evades_the_scan_is_caught_by_the_runtime_guard(tmp_path):
    room = variant(
        tmp_path,
        "primitives",
        """
        def repeat_kv(x, n_rep):
            table = __builtins__ if isinstance(__builtins__, dict) else vars(__builtins__)
            try:
                table["__imp" + "ort__"]("tor" + "ch")
            except ImportError:
                pass
            return np.repeat(np.asarray(x), n_rep, axis=1)
        """,
    )
    report = verify_clean_room(room, 20.0, out=None, measure=False, diagnose_failures=False)
    policy = check(report, "repeat_kv", "import-policy")
    assert policy.failed
    line = line_of(room / "primitives.py", 'table["__imp" + "ort__"]')
    assert f"room/primitives.py:{line}: imports torch" in policy.message
    assert not report.passed


def test_a_syntax_error_is_reported_with_file_and_line(tmp_path):
    room = variant(
        tmp_path,
        "primitives",
        """
        def padding_mask(lengths, t):
            return (np.arange(t)[None, :] >= lengths[:, None]
        """,
    )
    report = verify_clean_room(room, 20.0, out=None, measure=False)
    assert report.status == "unloadable"
    assert not report.passed
    loads = check(report, "(package)", "loads")
    assert loads.failed
    assert "syntax error in room/primitives.py:" in loads.message
    assert check(report, "padding_mask", "loads").failed
    assert report.diagnosis and report.diagnosis[0].kind == "load"


def test_an_exception_at_import_is_reported_with_file_and_line(tmp_path):
    room = variant(tmp_path, "attention", "_SCALE = 1 / 0")
    report = verify_clean_room(room, 20.0, out=None, measure=False)
    assert report.status == "unloadable"
    line = line_of(room / "attention.py", "_SCALE = 1 / 0")
    loads = check(report, "(package)", "loads")
    assert loads.failed
    assert f"room/attention.py:{line}: ZeroDivisionError" in loads.message


def test_an_import_outside_the_policy_is_refused_before_it_runs(tmp_path):
    room = variant(tmp_path, "attention", "import no_such_module_anywhere")
    report = verify_clean_room(room, 20.0, out=None, measure=False)
    assert report.status == "refused"
    policy = check(report, "(package)", "import-policy")
    line = line_of(room / "attention.py", "import no_such_module_anywhere")
    assert f"room/attention.py:{line}: imports no_such_module_anywhere" in policy.message


def test_a_crash_exception_and_malformed_returns_are_named_failures(tmp_path):
    room = variant(
        tmp_path,
        "primitives",
        """
        import os as _os
        import signal as _signal


        def merge_heads(x):
            _os.kill(_os.getpid(), _signal.SIGKILL)


        def repeat_kv(x, n_rep):
            raise RuntimeError("my bug")


        def rms_norm(x, weight, eps=1e-6):
            return np.asarray(x).tolist()


        def layer_norm(x, weight, bias, eps=1e-5):
            return iter([])


        def split_heads(x, n_heads):
            x = np.asarray(x)
            B, T, C = x.shape
            return x.reshape(B, n_heads, C // n_heads, T)
        """,
    )
    report = verify_clean_room(room, 20.0, out=None, measure=False, diagnose_failures=False)
    assert "died with SIGKILL" in check(report, "merge_heads", "runs").message
    runs = check(report, "repeat_kv", "runs").message
    assert "raised RuntimeError: my bug at room/primitives.py:" in runs
    assert "returned a list instead of an ndarray (the same shape as x, (" in (
        check(report, "rms_norm", "shape").message
    )
    assert "list_iterator (not an array)" in check(report, "layer_norm", "shape").message
    shape = check(report, "split_heads", "shape").message
    assert "where the contract says (B, H, T, C // H) = (" in shape
    # A crash ends only the worker: the functions after it still ran and passed.
    assert check(report, "rope", "parity").passed
    assert check(report, "sinusoidal_positions", "parity").passed


def test_the_memory_limit_is_a_named_failure(tmp_path):
    room = variant(
        tmp_path,
        "primitives",
        """
        def relu_ffn(x, w1, b1, w2, b2):
            return np.ones((1 << 31,)) @ np.ones((1 << 31,))
        """,
    )
    report = verify_clean_room(room, 20.0, 1024, out=None, measure=False, diagnose_failures=False)
    runs = check(report, "relu_ffn", "runs")
    assert runs.failed
    assert "MemoryError" in runs.message or "memory limit" in runs.message


def test_the_cli_never_shows_a_traceback(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    room = variant(
        tmp_path,
        "primitives",
        """
        def softmax(x, axis=-1):
            raise ZeroDivisionError("boom")
        """,
    )
    result = runner.invoke(
        app, ["verify", "clean-room", "--path", str(room), "--no-metrics", "--json"]
    )
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    document = json.loads(result.stdout)
    assert document["passed"] is False
    runs = next(c for c in document["checks"] if c["function"] == "softmax" and c["name"] == "runs")
    assert "raised ZeroDivisionError: boom" in runs["message"]
    assert (tmp_path / "evidence" / "verify" / "history.jsonl").exists()
