"""Where a record was made, sanitized: versions, platform, device, commit. Never a host,
user name or absolute path."""

from __future__ import annotations

import platform
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


@dataclass(frozen=True)
class Commit:
    sha: str
    dirty: bool | None


def head_commit(cwd: Path | None = None) -> Commit:
    """HEAD of the repository holding `cwd`, or `unknown`; dirty ignores untracked files.

    Read as files (`labctl.evidence.gitrepo`), never by running git: the repository
    labctl runs in may be a learner's, whose configuration names commands."""
    from labctl.evidence.gitrepo import RepositoryRefused, find_top, open_repository

    top = find_top(cwd or Path.cwd())
    repo = sha = None
    try:
        repo = open_repository(top) if top is not None else None
        sha = repo.head() if repo is not None else None
    except RepositoryRefused:
        pass
    if repo is None or sha is None:
        return Commit("unknown", None)
    return Commit(sha, repo.dirty(sha))


def project_root(cwd: Path | None = None) -> Path:
    """The repository holding `cwd` (the nearest folder with a `.git`), or `cwd` outside any."""
    from labctl.evidence.gitrepo import find_top

    where = (cwd or Path.cwd()).resolve()
    return find_top(where) or where
