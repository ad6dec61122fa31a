"""A learner's git repository is hostile: nothing in it runs, nothing outside it is followed.

Each attack builds its own repository in tmp_path with real git (the setup is the
test's own), arms one attack whose payload would create a marker file, then runs
what reads a learner's repository: `evidence validate` and `evidence submit` with
the repository as the working directory, the head commit labctl writes into its
records (`head_commit` with the repository as the working directory) and, for the
promisor attack, `labctl grade`. The marker is never created, and the verdict is
still right: a commit the repository holds is found, one it does not hold (or holds
only through an alternate or a `gitdir:` pointer out of the folder) is not.
"""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import tracemalloc
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from clitools import filled_record, invoke
from gradetools import rubric_without

from labctl.evidence import gitrepo
from labctl.evidence.environment import head_commit
from labctl.verify.stubs import init_clean_room

GIT = ["git", "-c", "user.name=labctl-test", "-c", "user.email=t@example.invalid"]
GIT += ["-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null"]
MISSING = "0123456789abcdef0123456789abcdef01234567"


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run([*GIT, *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def config(repo: Path, *pairs: tuple[str, str]) -> None:
    for key, value in pairs:
        git("config", key, value, cwd=repo)


def committed_repo(root: Path, text: str = "learner repository\n") -> tuple[Path, str]:
    """A repository with one commit of README.md, and that commit."""
    root.mkdir(parents=True)
    (root / "README.md").write_text(text)
    git("init", "-q", cwd=root)
    git("add", "README.md", cwd=root)
    git("commit", "-q", "-m", "init", cwd=root)
    return root, git("rev-parse", "HEAD", cwd=root)


def script(path: Path, marker: Path) -> str:
    """An executable that creates `marker`; its path."""
    path.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    path.chmod(0o755)
    return str(path)


def promisor(repo: Path, marker: Path, url: str) -> None:
    """A partial clone whose promisor remote git fetches from when an object is missing."""
    config(
        repo,
        ("core.repositoryformatversion", "1"),
        ("extensions.partialClone", "origin"),
        ("remote.origin.url", url),
        ("remote.origin.promisor", "true"),
        ("remote.origin.partialclonefilter", "blob:none"),
    )


def arm_promisor_ext(repo: Path, marker: Path, tmp: Path) -> None:
    promisor(repo, marker, f"ext::sh -c touch% {marker}")
    config(repo, ("protocol.ext.allow", "always"))


def arm_ssh_command(repo: Path, marker: Path, tmp: Path) -> None:
    promisor(repo, marker, "ssh://grader.invalid/learner.git")
    config(repo, ("core.sshCommand", script(tmp / "ssh.sh", marker)))


def arm_fsmonitor(repo: Path, marker: Path, tmp: Path) -> None:
    config(repo, ("core.fsmonitor", script(tmp / "fsmonitor.sh", marker)))


HOOKS = (
    "post-index-change",
    "reference-transaction",
    "post-checkout",
    "pre-auto-gc",
    "fsmonitor-watchman",
    "post-rewrite",
    "pre-commit",
)


def arm_hooks_path(repo: Path, marker: Path, tmp: Path) -> None:
    hooks = tmp / "hooks"
    hooks.mkdir()
    for name in HOOKS:
        script(hooks / name, marker)
    config(repo, ("core.hooksPath", str(hooks)))


def arm_filter(repo: Path, marker: Path, tmp: Path) -> None:
    (repo / ".gitattributes").write_text("* filter=x\n")
    git("add", ".gitattributes", cwd=repo)
    git("commit", "-q", "-m", "attributes", cwd=repo)
    run = script(tmp / "filter.sh", marker)
    config(
        repo,
        ("filter.x.clean", f"{run}; cat"),
        ("filter.x.smudge", f"{run}; cat"),
        ("filter.x.process", run),
        ("filter.x.required", "true"),
    )
    # Stat information that no longer matches the index: git re-reads the file through
    # the filter to tell whether it changed.
    (repo / "README.md").write_text((repo / "README.md").read_text())


def arm_pager(repo: Path, marker: Path, tmp: Path) -> None:
    run = script(tmp / "pager.sh", marker)
    config(
        repo,
        ("core.pager", run),
        ("pager.status", run),
        ("pager.cat-file", run),
        ("pager.rev-parse", run),
        ("core.editor", run),
        ("credential.helper", f"!{run}"),
    )


def arm_include(repo: Path, marker: Path, tmp: Path) -> None:
    included = tmp / "included.config"
    included.write_text(f"[core]\n\tfsmonitor = {script(tmp / 'fsmonitor.sh', marker)}\n")
    config(repo, ("include.path", str(included)), ('includeIf."gitdir:/".path', str(included)))


@dataclass(frozen=True)
class Attack:
    name: str
    arm: Callable[[Path, Path, Path], None]


COMMAND_ATTACKS = [
    Attack("promisor-ext", arm_promisor_ext),
    Attack("core-sshcommand", arm_ssh_command),
    Attack("core-fsmonitor", arm_fsmonitor),
    Attack("core-hookspath", arm_hooks_path),
    Attack("filter-driver", arm_filter),
    Attack("core-pager", arm_pager),
    Attack("include-path", arm_include),
]


def record(path: Path, commit: str) -> Path:
    """A record naming `commit`, without a seed: submit then re-measures nothing."""
    path.write_text(yaml.safe_dump(filled_record(commit=commit, seed=None)))
    return path


def commit_problems(*args: str) -> list[str]:
    result = invoke(*args, "--json")
    assert result.exit_code == 1, result.output
    return [p["reason"] for p in json.loads(result.stdout)["problems"] if p["field"] == "commit"]


@pytest.mark.parametrize("attack", COMMAND_ATTACKS, ids=lambda a: a.name)
def test_git_runs_nothing_the_learner_configured(attack, tmp_path, monkeypatch):
    repo, _ = committed_repo(tmp_path / "learner")
    marker = tmp_path / "pwned"
    attack.arm(repo, marker, tmp_path)
    head = git("rev-parse", "HEAD", cwd=repo)
    assert not marker.exists()  # the setup itself did not fire it
    monkeypatch.chdir(repo)
    present = record(tmp_path / "present.yaml", head)
    missing = record(tmp_path / "missing.yaml", MISSING)

    validated = commit_problems("evidence", "validate", str(present))
    refused = commit_problems("evidence", "validate", str(missing))
    submitted = commit_problems("evidence", "submit", str(missing))
    found = head_commit()
    assert not marker.exists(), f"{attack.name}: the learner's command ran"
    assert validated == []
    assert refused == submitted == [f"{MISSING} is not a commit of this repository"]
    assert (found.sha, found.dirty) == (head, False)


def test_an_alternate_outside_the_folder_is_not_read(tmp_path, monkeypatch):
    outside, theirs = committed_repo(tmp_path / "outside", "someone else's work\n")
    repo, head = committed_repo(tmp_path / "learner")
    alternates = repo / ".git" / "objects" / "info" / "alternates"
    alternates.write_text(f"{outside / '.git' / 'objects'}\n")
    assert git("cat-file", "-t", theirs, cwd=repo) == "commit"  # git itself follows it
    monkeypatch.chdir(repo)

    assert commit_problems("evidence", "validate", str(record(tmp_path / "t.yaml", theirs))) == [
        f"{theirs} is not a commit of this repository"
    ]
    assert commit_problems("evidence", "validate", str(record(tmp_path / "h.yaml", head))) == []
    assert head_commit().sha == head


def test_a_gitdir_pointer_out_of_the_folder_is_refused_not_followed(tmp_path, monkeypatch):
    outside, theirs = committed_repo(tmp_path / "outside", "someone else's work\n")
    marker = tmp_path / "pwned"
    arm_fsmonitor(outside, marker, tmp_path)
    learner = tmp_path / "learner"
    learner.mkdir()
    (learner / "README.md").write_text("someone else's work\n")
    (learner / ".git").write_text(f"gitdir: {outside / '.git'}\n")
    monkeypatch.chdir(learner)

    assert commit_problems("evidence", "validate", str(record(tmp_path / "t.yaml", theirs))) == [
        "cannot be checked: learner/.git leads outside learner; "
        "only the folder's own repository is read"
    ]
    found = head_commit()
    assert (found.sha, found.dirty) == ("unknown", None)
    assert not marker.exists()


def test_grade_fetches_nothing_through_a_learners_promisor_remote(tmp_path):
    learner, head = committed_repo(tmp_path / "class" / "ann")
    init_clean_room(learner / "clean_room")
    marker = tmp_path / "pwned"
    arm_promisor_ext(learner, marker, tmp_path)
    record(learner / "submission.yaml", MISSING)
    rubric = rubric_without(tmp_path, "metric")
    out = tmp_path / "grades"
    result = invoke(
        "grade",
        str(tmp_path / "class"),
        "--out",
        str(out),
        "--rubric",
        str(rubric),
        "--jobs",
        "1",
        "--isolation",
        "process",
        "--json",
    )
    assert result.exit_code == 0, result.output
    items = json.loads((out / "records" / "ann.json").read_text())["items"]
    (submission,) = [i for i in items if i["kind"] == "submission"]
    assert submission["passed"] is False
    assert f"commit: {MISSING} is not a commit of this repository" in submission["message"]
    assert not marker.exists()


# -- objects that inflate past the bound ------------------------------------------------------

BLOB, REF_DELTA = 3, 7
BOMB = 4 << 20  # what each bomb inflates to: four times the bound the tests set (1 MiB)


def _entry(kind: int, data: bytes, base: bytes = b"") -> bytes:
    """A pack entry: its type and inflated size, a delta's base, then the data deflated."""
    size = len(data)
    head = bytearray([(kind << 4) | (size & 0x0F) | (0x80 if size >> 4 else 0)])
    size >>= 4
    while size:
        head.append((size & 0x7F) | (0x80 if size >> 7 else 0))
        size >>= 7
    return bytes(head) + base + zlib.compress(data)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n >> 7 else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _blob_sha(content: bytes) -> bytes:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).digest()


def packed_bomb(repo: Path, *, delta: bool) -> str:
    """A pack of a few KiB whose object inflates to BOMB bytes: a blob of zeros, or a delta
    that copies a 64 KiB base 64 times (one byte an instruction: 2 GiB would be 32 KiB of
    delta). Indexed by git; HEAD names the object. Returns its sha."""
    target = bytes(BOMB)
    if delta:
        base = bytes(1 << 16)
        instructions = _varint(len(base)) + _varint(BOMB) + b"\x80" * (BOMB // len(base))
        entries = [_entry(BLOB, base), _entry(REF_DELTA, instructions, _blob_sha(base))]
    else:
        entries = [_entry(BLOB, target)]
    body = b"PACK" + struct.pack(">II", 2, len(entries)) + b"".join(entries)
    pack = body + hashlib.sha1(body).digest()
    assert len(pack) < 64 << 10
    folder = repo / ".git" / "objects" / "pack"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"pack-{hashlib.sha1(pack).hexdigest()}.pack"
    path.write_bytes(pack)
    git("index-pack", str(path), cwd=repo)
    sha = _blob_sha(target).hex()
    (repo / ".git" / "refs" / "heads" / "bomb").write_text(sha + "\n")
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/bomb\n")
    return sha


@pytest.mark.parametrize("delta", [False, True], ids=["blob", "delta"])
def test_a_packed_object_past_the_bound_is_refused_before_it_is_inflated(
    tmp_path, monkeypatch, delta
):
    """The bound lowered to 1 MiB, the object 4 MiB: labctl never holds it (a 2 MB pack of a
    2 GiB object took `validate` to 4.3 GB)."""
    monkeypatch.setattr(gitrepo, "OBJECT_BYTES", 1 << 20)
    repo, _ = committed_repo(tmp_path / "learner")
    sha = packed_bomb(repo, delta=delta)
    assert git("cat-file", "-s", sha, cwd=repo) == str(BOMB)  # git itself inflates it
    opened = gitrepo.open_repository(repo)
    tracemalloc.start()
    try:
        with pytest.raises(gitrepo.RepositoryRefused, match="past labctl's bounds"):
            opened.head()
        with pytest.raises(gitrepo.RepositoryRefused, match="past labctl's bounds"):
            opened.has_commit(sha)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < BOMB // 2, peak
    monkeypatch.chdir(repo)
    assert head_commit().sha == "unknown"
