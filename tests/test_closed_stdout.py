"""A reader gone before labctl writes (`labctl … | head -c 0`) ends every command quietly with
exit 1, whether Python buffers stdout (a user's shell) or not (PYTHONUNBUFFERED=1, as on the
machines the suite was first run on): never "Exception ignored … BrokenPipeError", never 120.
A command that writes nothing on stdout keeps its own exit code.

The console script runs, as a user runs it, with stdout a pipe whose reader has closed; and
with stdin, stdout or stderr closed outright (`<&-`, `>&-`, `2>&-`), which labctl fills with
/dev/null before it opens anything.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from labctl.faults import project_clean_room
from labctl.isolation import limits

COMMANDS = [
    ("list",),
    ("list", "--json"),
    ("show", "causal-attention", "--json"),
    ("contract", "show"),
    ("contract", "document"),
    ("--lang", "zh", "contract", "show", "--json"),
]


def closed_stdout(args: tuple[str, ...], buffered: bool, cwd: Path) -> tuple[int, str]:
    labctl = shutil.which("labctl", path=str(Path(sys.executable).parent))
    assert labctl, "the labctl console script is not installed beside this Python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONUNBUFFERED", "PYTHONPATH")}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    # The reader is gone before labctl starts: closed just after, a loaded machine could let
    # `labctl list` (50 ms) write its whole text into the pipe first and end with 0.
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.Popen(
            [labctl, *args], stdout=write, stderr=subprocess.PIPE, env=env, cwd=cwd
        )
    finally:
        os.close(write)
    stderr = proc.stderr.read().decode("utf-8", "replace")
    return proc.wait(timeout=120), stderr


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_closed_stdout_ends_the_command_quietly_with_exit_1(args, buffered, tmp_path):
    code, stderr = closed_stdout(args, buffered, tmp_path)
    assert code == 1, stderr
    assert "BrokenPipe" not in stderr and "Exception ignored" not in stderr, stderr


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_a_command_that_writes_nothing_on_stdout_keeps_its_exit_code(buffered, tmp_path):
    code, stderr = closed_stdout(("show", "no-such-lab"), buffered, tmp_path)
    assert code == 2, stderr
    assert "no-such-lab" in stderr and "BrokenPipe" not in stderr


def _without(closed: tuple[int, ...], args: tuple[str, ...], cwd: Path):
    """The console script run with the descriptors `closed` closed, as `<&-`, `>&-`, `2>&-`
    leave them; stdout and stderr captured unless closed."""
    labctl = shutil.which("labctl", path=str(Path(sys.executable).parent))
    assert labctl
    script = " ".join(f"{fd}>&-" if fd else "<&-" for fd in closed)
    quoted = " ".join(f"'{a}'" for a in (labctl, *args))
    return subprocess.run(
        ["bash", "-c", f"exec {quoted} {script}"], capture_output=True, text=True, cwd=cwd
    )


@pytest.mark.parametrize("closed", [(0,), (2,), (0, 2)], ids=["stdin", "stderr", "both"])
def test_a_closed_stdin_or_stderr_does_not_reach_a_clean_room_s_worker(closed, tmp_path):
    """The clean room's socket took the closed descriptor, which its worker's start replaced:
    labctl's own room was `unloadable`, its worker's traceback shown as the room's output."""
    result = _without(closed, ("contract", "check", "--path", str(project_clean_room()), "--json"),
                      tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:]
    assert json.loads(result.stdout)["passed"] is True


@pytest.mark.parametrize("args", [("list",), ("doctor",), ("show", "gqa")], ids=" ".join)
def test_a_closed_stdout_is_no_traceback(args, tmp_path):
    """Python left sys.stdout None: every command's first write raised AttributeError."""
    result = _without((1,), args, tmp_path)
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr, result.stderr


LABCTL = shutil.which("labctl", path=str(Path(sys.executable).parent))
# where labctl stages what its worker reads (as root: a folder uid 65534 reaches)
STAGED_IN = Path(limits.staging_parent() or tempfile.gettempdir())


def _verify_until_staged(cwd: Path, kind: str) -> tuple[subprocess.Popen, list[Path]]:
    """`labctl verify` of the project's room, started, and the first of its staged folders of
    `kind` (`*`: any) once one shows."""
    command = [LABCTL, "verify", "clean-room", "--path", str(project_clean_room()), "--json"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        found = list(STAGED_IN.glob(f"labctl-{kind}-{proc.pid}-*"))
        if found:
            return proc, found
        time.sleep(0.005)
    return proc, []


def test_sigterm_ends_labctl_as_ctrl_c_does_with_nothing_left_behind(tmp_path):
    """SIGTERM (a job's time limit, `kill`) ended labctl at once: no JSON on stdout, and each
    clean room's copy and staged worker left behind (`labctl-room-<pid>-…`)."""
    proc, staged = _verify_until_staged(tmp_path, "*")
    assert staged, "no clean room started"
    proc.send_signal(signal.SIGTERM)
    out, _err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert json.loads(out)["error"]["kind"] == "interrupted"
    assert list(STAGED_IN.glob(f"labctl-*-{proc.pid}-*")) == []


def test_the_probe_folder_of_a_labctl_killed_outright_is_swept_by_the_next(tmp_path):
    """The sandbox probe runs in a thread while the command imports (`bwrap.probe_soon`); a
    labctl killed then (SIGKILL: a job's hard limit, an OOM) left `labctl-probe-…` in /tmp,
    eleven of them on this machine in a day, and no labctl ever removed them. The probe's
    folder is a staged folder now: named for its process, swept by the next labctl once that
    process is gone (which swept only where root staged outside the temporary folder)."""
    proc, left = _verify_until_staged(tmp_path, "probe")
    assert left, "no probe started"
    proc.kill()
    proc.communicate(timeout=60)
    assert all(folder.exists() for folder in left)  # nothing of a SIGKILLed labctl runs
    # the next labctl sweeps before it stages anything (`doctor` probes the sandbox)
    subprocess.run([LABCTL, "doctor", "--json"], capture_output=True, cwd=tmp_path, timeout=120)
    assert not any(folder.exists() for folder in left)


KILLED_AS_IT_APPEARS = """
import os, signal, tempfile
from labctl.isolation import limits

def ended(signum, frame):
    raise SystemExit(130)

signal.signal(signal.SIGTERM, ended)
made = tempfile.mkdtemp

def mkdtemp(*args, **kwargs):
    path = made(*args, **kwargs)
    print(path, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    return path

tempfile.mkdtemp = mkdtemp
limits.staged_folder("room")
"""


def test_a_kill_just_as_a_staged_folder_appears_leaves_nothing_behind():
    """The test above kills labctl once a folder shows; in a fresh clone's run the kill fell
    between making the worker's folder and marking it for removal, and the folder stayed.
    Here the kill comes at exactly that moment, every time: it waits until the folder is
    marked, and the folder goes as the process ends."""
    done = subprocess.run(
        [sys.executable, "-c", KILLED_AS_IT_APPEARS], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 130, done.stderr
    folder = Path(done.stdout.strip())
    assert folder.name.startswith("labctl-room-"), folder
    assert not folder.exists()
