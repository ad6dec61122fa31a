"""`labctl.evidence.gitrepo`, the reader of repositories labctl never runs git on.

Its answers are git's own on ordinary repositories (the head commit, an abbreviated
commit, a tag, "dirty" as `git status --porcelain --untracked-files=no` says), and a
named refusal or "cannot tell", never a hang or a traceback, on one that is not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from gittools import git

from labctl.evidence.environment import head_commit, project_root
from labctl.evidence.gitrepo import RepositoryRefused, open_repository


@pytest.fixture
def repo(tmp_path) -> Path:
    root = tmp_path / "learner"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f.txt").write_text("a\n")
    (root / "run.sh").write_text("echo\n")
    (root / "run.sh").chmod(0o755)
    (root / "crlf.txt").write_bytes(b"x\r\n")
    os.symlink("sub/f.txt", root / "link")
    git("init", "-q", cwd=root)
    git("add", ".", cwd=root)
    git("commit", "-q", "-m", "init", cwd=root)
    return root


def _modify(root: Path) -> None:
    (root / "sub" / "f.txt").write_text("b\n")


def _same_bytes_again(root: Path) -> None:
    (root / "sub" / "f.txt").write_text("a\n")


def _mode(root: Path) -> None:
    (root / "run.sh").chmod(0o644)


def _untracked(root: Path) -> None:
    (root / "new.txt").write_text("new\n")


def _staged_add(root: Path) -> None:
    _untracked(root)
    git("add", "new.txt", cwd=root)


def _relink(root: Path) -> None:
    (root / "link").unlink()
    os.symlink("run.sh", root / "link")


def _folder_to_link(root: Path) -> None:
    (root / "sub" / "f.txt").unlink()
    (root / "sub").rmdir()
    os.symlink(root.parent, root / "sub")


def _deleted(root: Path) -> None:
    (root / "crlf.txt").unlink()


def _staged_then_reverted(root: Path) -> None:
    _modify(root)
    git("add", "sub/f.txt", cwd=root)
    _same_bytes_again(root)


CHANGES = {
    "modified": _modify,
    "same-bytes-rewritten": _same_bytes_again,
    "mode": _mode,
    "untracked": _untracked,
    "staged-add": _staged_add,
    "symlink-retargeted": _relink,
    "folder-become-link": _folder_to_link,
    "deleted": _deleted,
    "staged-then-reverted": _staged_then_reverted,
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_dirty_is_what_git_status_says(change, repo):
    CHANGES[change](repo)
    status = git("status", "--porcelain", "--untracked-files=no", cwd=repo)
    found = head_commit(repo)
    assert found.sha == git("rev-parse", "HEAD", cwd=repo)
    assert found.dirty is bool(status), status


def test_commits_are_found_as_git_finds_them(repo):
    head = git("rev-parse", "HEAD", cwd=repo)
    git("tag", "-a", "-m", "v1", "v1", cwd=repo)
    tag = git("rev-parse", "v1", cwd=repo)
    tree = git("rev-parse", "HEAD^{tree}", cwd=repo)
    found = open_repository(repo)
    assert found.has_commit(head) and found.has_commit(head[:7]) and found.has_commit(tag)
    assert not found.has_commit(tree)  # an object, but not a commit
    assert not found.has_commit("0" * 40)
    git("gc", "-q", cwd=repo)  # now packed
    assert open_repository(repo).has_commit(head[:10])
    assert project_root(repo / "sub") == repo


def test_a_pipe_or_corrupt_object_is_named_not_waited_on(repo):
    """A FIFO where HEAD or an object should be would block a plain open forever."""
    head = git("rev-parse", "HEAD", cwd=repo)
    loose = repo / ".git" / "objects" / head[:2] / head[2:]
    loose.unlink()
    os.mkfifo(loose)
    code = (
        "import sys; from pathlib import Path; from labctl.evidence.gitrepo import open_repository;"
        f"print(open_repository(Path({str(repo)!r})).has_commit({head!r}))"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.stdout.strip() == "False", done.stderr
    loose.unlink()
    loose.write_bytes(zlib.compress(b"commit 99999\0garbage"))
    with pytest.raises(RepositoryRefused) as refused:
        open_repository(repo).has_commit(head)
    assert (
        str(refused.value)
        == "learner/.git cannot be read (a file that cannot be read or is corrupt)"
    )
    (repo / ".git" / "HEAD").unlink()
    os.mkfifo(repo / ".git" / "HEAD")
    assert head_commit(repo).sha == "unknown"


def test_an_objects_folder_that_leads_out_is_refused(repo, tmp_path):
    objects = repo / ".git" / "objects"
    objects.rename(tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", objects)
    with pytest.raises(RepositoryRefused) as refused:
        open_repository(repo)
    assert str(refused.value) == "learner/.git has no objects folder of its own"
    assert head_commit(repo).sha == "unknown"
