"""A reader gone before labctl writes (`labctl … | head -c 0`) ends every command quietly with
exit 1, whether Python buffers stdout (a user's shell) or not (PYTHONUNBUFFERED=1, as on the
machines the suite was first run on): never "Exception ignored … BrokenPipeError", never 120.
A command that writes nothing on stdout keeps its own exit code.

The console script runs, as a user runs it, with stdout a pipe whose reader has closed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
