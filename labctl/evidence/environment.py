"""Where a record was made, sanitized: versions, platform, device, commit. Never a host,
user name or absolute path."""

from __future__ import annotations

import platform
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import numpy as np

from labctl.evidence.models import Environment


def environment() -> Environment:
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "not installed"
    return Environment(
        python=platform.python_version(),
        numpy=np.__version__,
        torch=torch_version,
        platform=f"{platform.system()}-{platform.machine()}",
        # Every lab runs on the CPU: the course's experiments are sized for it.
        device="cpu",
    )


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def git(args: list[str], cwd: Path) -> str | None:
    """The stripped output of a git command, or None when git fails or is missing."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@dataclass(frozen=True)
class Commit:
    sha: str
    dirty: bool | None


def head_commit(cwd: Path | None = None) -> Commit:
    """HEAD of the repository holding `cwd`, or `unknown`; dirty ignores untracked files."""
    where = cwd or Path.cwd()
    sha = git(["rev-parse", "HEAD"], where)
    if not sha:
        return Commit("unknown", None)
    status = git(["status", "--porcelain", "--untracked-files=no"], where)
    return Commit(sha, None if status is None else bool(status))


def project_root(cwd: Path | None = None) -> Path:
    """The repository holding `cwd` (its git top level), or `cwd` outside any repository."""
    where = (cwd or Path.cwd()).resolve()
    top = git(["rev-parse", "--show-toplevel"], where)
    return Path(top).resolve() if top else where


def commit_exists(sha: str, root: Path) -> bool:
    return git(["cat-file", "-e", f"{sha}^{{commit}}"], root) is not None
