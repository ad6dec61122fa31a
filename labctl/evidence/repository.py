"""The checks of an evidence record against the repository it speaks for.

The commit exists in the repository (its own `.git` in the root, read without
running git: `labctl.evidence.gitrepo`); a dirty working tree is a warning. Each
artifact is a repository-relative path that stays inside the repository (no
absolute path, no `..`, no symlink leading out), is a file, and matches its
sha256 when the record gives one. `labctl.evidence.validate` runs these
with the rest of its checks.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING

from labctl.evidence.gitrepo import RepositoryRefused, open_repository
from labctl.i18n import N_, Msg, declared

if TYPE_CHECKING:
    from labctl.evidence.findings import Report

_HEX_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")


def check_commit(data: dict, root: Path, report: Report) -> None:
    commit = data.get("commit")
    if data.get("commit_dirty") is True:
        report.warn(
            "commit_dirty",
            N_(
                "the working tree had uncommitted changes when this was recorded; "
                "the commit alone may not reproduce it"
            ),
        )
    if not isinstance(commit, str) or report.flagged("commit"):
        return
    if commit == "unknown":
        report.refuse("commit", N_("unknown; name the commit the results were measured on"))
    elif _HEX_COMMIT.match(commit):
        _check_commit_exists(commit, root, report)


def _check_commit_exists(commit: str, root: Path, report: Report) -> None:
    """The repository is `root`'s own `.git`, read as files: git never runs on it."""
    try:
        repo = open_repository(root)
        found = repo is not None and repo.has_commit(commit)
    except RepositoryRefused as exc:
        report.refuse("commit", Msg("cannot be checked: {reason}", reason=exc.message))
        return
    if repo is None:
        report.refuse(
            "commit",
            Msg("cannot be checked: {root} is not a git repository", root=str(root.name or root)),
        )
    elif not found:
        report.refuse("commit", Msg("{commit} is not a commit of this repository", commit=commit))


def resolve_inside(text: str, root: Path) -> tuple[Path | None, str | None]:
    """The path `text` names inside the repository `root`, resolved, or why it is not
    acceptable: a record's paths are the learner's text and must stay inside."""
    if "\x00" in text:
        return None, N_("path holds a NUL character")
    if (
        PurePosixPath(text).is_absolute()
        or PureWindowsPath(text).is_absolute()
        or PureWindowsPath(text).drive
    ):
        return None, N_("absolute path; give a path relative to the repository")
    if text.startswith("~"):
        return None, N_("path starts with ~; give a path relative to the repository")
    if ".." in re.split(r"[\\/]", text):
        return None, N_("path has a '..' component; it must stay inside the repository")
    try:
        resolved = (root / text).resolve()
    except (OSError, RuntimeError):
        return None, N_("path cannot be resolved (a symlink loop?)")
    if not resolved.is_relative_to(root):
        return None, N_("path escapes the repository (a symlink leads out)")
    return resolved, None


def check_artifact_path(text: str, root: Path) -> tuple[Path | None, str | None]:
    """The file `text` names inside `root`, or why it is not acceptable."""
    resolved, reason = resolve_inside(text, root)
    if reason:
        return None, reason
    if not resolved.exists():
        return None, N_("no such file in the repository")
    if not resolved.is_file():
        return None, N_("not a regular file")
    return resolved, None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_artifacts(data: dict, root: Path, report: Report) -> None:
    items = data.get("artifacts")
    if not isinstance(items, list):
        return
    if not items:
        report.warn("artifacts", N_("none listed"))
    for index, item in enumerate(items):
        here = f"artifacts[{index}]"
        if isinstance(item, str):
            where, text, sha = here, item, None
        elif isinstance(item, dict) and isinstance(item.get("path"), str):
            where, text, sha = f"{here}.path", item["path"], item.get("sha256")
        else:
            continue
        if report.flagged(where) or (where == here and report.flagged(here)):
            continue
        resolved, reason = check_artifact_path(text, root)
        if reason:
            report.refuse(where, Msg("{path!r}: {reason}", path=text, reason=declared(reason)))
            continue
        if isinstance(sha, str) and not report.flagged(f"{here}.sha256"):
            try:
                actual = file_sha256(resolved)
            except OSError as exc:
                report.refuse(
                    where,
                    Msg("{path!r}: cannot be read ({error})", path=text, error=exc.strerror or exc),
                )
                continue
            if actual != sha:
                report.refuse(
                    f"{here}.sha256",
                    Msg(
                        "{path!r} has sha256 {actual}, not {sha}", path=text, actual=actual, sha=sha
                    ),
                )
