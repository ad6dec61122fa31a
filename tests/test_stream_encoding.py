"""A terminal or pipe that cannot encode Chinese (PYTHONIOENCODING=ascii, a Latin-1 locale)
still gets every command's whole text: a character it cannot encode is written as its JSON
escape (`\\u56e0`), so a `--json` document parses to the same document as in UTF-8, and no
command ends in a UnicodeEncodeError traceback.

The console script runs as a user runs it, on the fast path (`list`) and through the command
tree (`show`, an error), in both languages.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def labctl(args: tuple[str, ...], encoding: str | None, cwd: Path) -> subprocess.CompletedProcess:
    script = shutil.which("labctl", path=str(Path(sys.executable).parent))
    assert script, "the labctl console script is not installed beside this Python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "PYTHONUTF8")}
    if encoding:
        env["PYTHONIOENCODING"] = encoding
    env["LANG"] = "C.UTF-8"
    return subprocess.run(
        [script, *args], capture_output=True, env=env, cwd=cwd, timeout=120, check=False
    )


@pytest.mark.parametrize(
    "args",
    [
        ("--lang", "zh", "list", "--json"),
        ("--lang", "zh", "show", "causal-attention", "--json"),
        ("--lang", "en", "show", "causal-attention", "--json"),
    ],
)
@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_json_document_is_the_same_document_in_any_encoding(tmp_path, args, encoding):
    utf8 = labctl(args, None, tmp_path)
    narrow = labctl(args, encoding, tmp_path)
    assert utf8.returncode == narrow.returncode == 0, narrow.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in narrow.stderr
    narrow.stdout.decode(encoding)  # every byte is the stream's own encoding
    assert json.loads(narrow.stdout.decode(encoding)) == json.loads(utf8.stdout.decode("utf-8"))


@pytest.mark.parametrize(
    "args, code",
    [
        (("--lang", "zh", "list"), 0),
        (("--lang", "zh", "show", "causal-attention"), 0),
        (("--lang", "zh", "run", "no-such-lab"), 2),
    ],
)
def test_text_in_ascii_is_written_whole_with_escapes_and_its_exit_code(tmp_path, args, code):
    done = labctl(args, "ascii", tmp_path)
    assert done.returncode == code, done.stderr.decode("ascii", "replace")
    text = (done.stdout + done.stderr).decode("ascii")
    assert "Traceback" not in text and "UnicodeEncodeError" not in text
    # 因果 (causal) or 实验 (lab), written as escapes a reader can decode
    assert "\\u56e0\\u679c" in text or "\\u5b9e\\u9a8c" in text
