"""git for the tests that build a learner's repository: a fixed identity, no signing."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

GIT = ["git", "-c", "user.name=labctl-test", "-c", "user.email=t@example.invalid"]
GIT += ["-c", "commit.gpgsign=false"]


def git(*args: str, cwd: Path) -> str:
    """`git ARGS` in `cwd`, which must succeed; its stdout, stripped."""
    done = subprocess.run([*GIT, *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@contextlib.contextmanager
def working_directory(path: Path):
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)
