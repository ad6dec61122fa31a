"""A read-only reader of git repositories that labctl does not trust.

A learner's folder, and any repository labctl happens to run in, is hostile:
git itself would read its configuration and run what it names (a promisor
remote's `ext::` command, `core.fsmonitor`, hooks, filter drivers, a pager),
follow `objects/info/alternates` and `gitdir:` pointers out of the folder, and
fetch a missing object. So labctl never runs git. This module reads HEAD, refs,
the index and objects as files, with dulwich's parsers and no configuration:

- the repository is a `.git` folder in the top folder itself (a `.git` file's
  `gitdir:` pointer, or a symbolic link, is followed only when it stays inside
  that folder); the top folder is found walking up no further than a ceiling;
- objects are the repository's own: never an alternate, never fetched, never a
  file that is not a plain file inside its objects folder; a missing object is
  simply not there;
- "dirty" hashes the working tree's bytes as git blobs (a symbolic link as its
  target, never followed), with no filter, attribute, line-ending conversion
  or fsmonitor: the tracked files against HEAD's tree, and the index against it;
- the work is bounded (files, entries, bytes, seconds): past a bound, or on a
  corrupt repository, the answer is "cannot tell", never a hang or a traceback;
- an object is inflated only when what it inflates to is within OBJECT_BYTES: a
  loose object by its header, a packed one by its pack entry's size, and a delta by
  the size it builds and, down its chain, every base it is built on (a 2 MB pack held
  a 2 GiB object, which cost labctl 4.3 GB in `validate`).
"""

from __future__ import annotations

import io
import os
import re
import stat
import time
import zlib
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from dulwich.index import cleanup_mode, read_cache_entry, read_index_header
from dulwich.object_format import SHA1, SHA256, ObjectFormat
from dulwich.object_store import DiskObjectStore
from dulwich.objects import Commit, Tag, Tree, hex_to_sha, sha_to_hex
from dulwich.pack import OFS_DELTA, REF_DELTA

from labctl.errors import LabctlError
from labctl.i18n import N_, Msg, declared

REF_BYTES = 4096
PACKED_REFS_BYTES = 16 << 20
INDEX_BYTES = 64 << 20
OBJECT_BYTES = 16 << 20  # commits, trees and tags only: blobs are never read
DELTA_DEPTH = 1000  # git makes chains of 50 (250 with --aggressive)
_ENTRY_HEAD = 4096  # bytes read at a pack entry: its header and the start of its data
PACK_FILES = 10_000
ENTRIES = 200_000  # tree and index entries, all together
HASHED_BYTES = 2 << 30
SECONDS = 60.0
TREE_DEPTH = 64
LINK_DEPTH = 5  # symbolic refs and tags peeled
PREFIX_CANDIDATES = 64

_HEX = re.compile(rb"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_REF_NAME = re.compile(r"^refs/(?:[A-Za-z0-9_+-][A-Za-z0-9._+-]*/)*[A-Za-z0-9_+-][A-Za-z0-9._+-]*$")
_GITLINK = 0o160000
_PAST_BOUNDS = N_("a file that is not a plain file, or past labctl's bounds")
_CORRUPT = N_("a file that cannot be read or is corrupt")


class RepositoryRefused(LabctlError):
    """The repository cannot be read safely or within bounds; the message says why."""


class _Unreadable(Exception):
    """Past a bound, or a file that is not what git would have written: no answer."""


def find_top(start: Path, ceiling: Path | None = None) -> Path | None:
    """The nearest folder from `start` up to `ceiling` (included) that holds `.git`, or None."""
    here = start.resolve()
    stop = ceiling.resolve() if ceiling is not None else None
    for folder in (here, *here.parents):
        if os.path.lexists(folder / ".git"):
            return folder
        if folder == stop:
            break
    return None


def open_repository(top: Path) -> Repository | None:
    """The repository whose `.git` is in `top`, None when there is none; RepositoryRefused when
    its `.git` leads out of `top` or is not a folder, a file or a link."""
    top = top.resolve()
    dotgit = top / ".git"
    try:
        mode = os.lstat(dotgit).st_mode
    except OSError:
        return None
    name = top.name or str(top)
    if stat.S_ISREG(mode):
        try:
            text = _read_plain(dotgit, REF_BYTES, top)
        except (_Unreadable, OSError):
            text = None
        if text is None or not text.startswith(b"gitdir: "):
            raise RepositoryRefused(
                Msg("{name}/.git is a file but not a gitdir: pointer", name=name)
            )
        pointed = os.fsdecode(text[len(b"gitdir: ") :].strip())
        gitdir = (top / pointed).resolve()
    elif stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
        gitdir = dotgit.resolve()
    else:
        raise RepositoryRefused(Msg("{name}/.git is not a folder", name=name))
    if not gitdir.is_relative_to(top) or gitdir == top:
        raise RepositoryRefused(
            Msg(
                "{name}/.git leads outside {name}; only the folder's own repository is read",
                name=name,
            )
        )
    objects = (gitdir / "objects").resolve()
    if not objects.is_relative_to(gitdir) or not objects.is_dir():
        raise RepositoryRefused(Msg("{name}/.git has no objects folder of its own", name=name))
    packs = objects / "pack"
    if packs.exists() and (packs.resolve() != packs or not _plain_packs(packs)):
        raise RepositoryRefused(
            Msg("{name}/.git has a pack folder that is not plain files", name=name)
        )
    return Repository(top, gitdir, objects)


def _plain_packs(packs: Path) -> bool:
    with os.scandir(packs) as entries:
        listed = list(islice(entries, PACK_FILES + 1))
    if len(listed) > PACK_FILES:
        return False
    return all(
        e.is_file(follow_symlinks=False) for e in listed if e.name.endswith((".pack", ".idx"))
    )


def _read_plain(path: Path, limit: int, inside: Path) -> bytes | None:
    """The bytes of `path` when it is a plain file (not a link, a pipe or a device) of at most
    `limit` bytes in a folder under `inside`; None when it is absent."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise _Unreadable(path.name)
    except FileNotFoundError:
        return None
    if not Path(os.path.realpath(path.parent)).is_relative_to(inside):
        raise _Unreadable(path.name)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise _Unreadable(path.name)
    return data


class _OwnObjects(DiskObjectStore):
    """The repository's own objects: no alternates, no multi-pack index or commit graph,
    a loose object only as a plain file inside the objects folder, and a packed one only
    when what it inflates to is within OBJECT_BYTES (`get_raw`)."""

    @property
    def alternates(self) -> list:
        return []

    def _get_loose_object(self, sha):
        hex_sha = sha if len(sha) == self.object_format.hex_length else sha_to_hex(sha)
        path = Path(self._get_shafile_path(hex_sha))
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return None
        except OSError:
            return None
        if Path(os.path.realpath(path.parent)).parent != Path(self.path):
            return None
        return super()._get_loose_object(sha)

    def get_raw(self, name):
        self._bounded(name, 0)
        return super().get_raw(name)

    def _bounded(self, name: bytes, depth: int) -> None:
        """Raise _Unreadable unless the packed object `name`, and every delta base it is
        built on, inflates to at most OBJECT_BYTES (a loose one is bounded as it is read)."""
        if depth > DELTA_DEPTH:
            raise _Unreadable("too deep")
        raw = name if len(name) == self.object_format.oid_length else hex_to_sha(name)
        for pack in self.packs:
            try:
                offset = pack.index.object_offset(raw)
            except KeyError:
                continue
            self._bounded_at(pack, offset, depth)
            return

    def _bounded_at(self, pack, offset: int, depth: int) -> None:
        if depth > DELTA_DEPTH:
            raise _Unreadable("too deep")
        with open(pack._basename + ".pack", "rb") as handle:
            handle.seek(offset)
            head = handle.read(_ENTRY_HEAD)
        kind, size, at = _entry_header(head)
        if size > OBJECT_BYTES:
            raise _Unreadable("too large")
        if kind == OFS_DELTA:
            back, at = _offset(head, at)
            if not 0 < back <= offset:
                raise _Unreadable("bad delta")
            _bounded_delta(head[at:])
            self._bounded_at(pack, offset - back, depth + 1)
        elif kind == REF_DELTA:
            base = head[at : at + self.object_format.oid_length]
            _bounded_delta(head[at + len(base) :])
            self._bounded(base, depth + 1)


def _entry_header(head: bytes) -> tuple[int, int, int]:
    """(type, size, bytes read) of a pack entry's header."""
    try:
        byte = head[0]
        kind, size, shift, at = (byte >> 4) & 7, byte & 0x0F, 4, 1
        while byte & 0x80:
            if shift > 63:
                raise _Unreadable("bad entry")
            byte = head[at]
            size |= (byte & 0x7F) << shift
            shift, at = shift + 7, at + 1
    except IndexError:
        raise _Unreadable("bad entry") from None
    return kind, size, at


def _offset(head: bytes, at: int) -> tuple[int, int]:
    """An OFS_DELTA's distance back to its base, and the bytes read."""
    try:
        byte = head[at]
        back, at = byte & 0x7F, at + 1
        while byte & 0x80:
            if back > 1 << 63:
                raise _Unreadable("bad entry")
            byte = head[at]
            back, at = ((back + 1) << 7) | (byte & 0x7F), at + 1
    except IndexError:
        raise _Unreadable("bad entry") from None
    return back, at


def _bounded_delta(data: bytes) -> None:
    """A delta's start inflated (a few bytes, never more): the size of the object it builds,
    within OBJECT_BYTES."""
    try:
        start = zlib.decompressobj().decompress(data, 32)
    except zlib.error:
        raise _Unreadable("bad delta") from None
    at = 0
    for _ in range(2):  # the base's size, then the size of the object built
        size, shift = 0, 0
        while True:
            if at >= len(start) or shift > 63:
                raise _Unreadable("bad delta")
            byte = start[at]
            size |= (byte & 0x7F) << shift
            shift, at = shift + 7, at + 1
            if not byte & 0x80:
                break
    if size > OBJECT_BYTES:
        raise _Unreadable("too large")


class _Budget:
    def __init__(self) -> None:
        self.entries = 0
        self.hashed = 0
        self.deadline = time.monotonic() + SECONDS

    def entry(self) -> None:
        self.entries += 1
        if self.entries > ENTRIES or time.monotonic() > self.deadline:
            raise _Unreadable("too large")

    def read(self, size: int) -> None:
        self.hashed += size
        if self.hashed > HASHED_BYTES or time.monotonic() > self.deadline:
            raise _Unreadable("too large")


class Repository:
    """A repository read as files (see the module docstring)."""

    def __init__(self, top: Path, gitdir: Path, objects: Path):
        self.top, self.gitdir, self.objects = top, gitdir, objects
        self._stores: dict[str, _OwnObjects] = {}

    def _store(self, fmt: ObjectFormat) -> _OwnObjects:
        if fmt.name not in self._stores:
            store = _OwnObjects(
                str(self.objects), object_format=fmt, loose_object_size_limit=OBJECT_BYTES
            )
            store._use_commit_graph = store._use_midx = False
            self._stores[fmt.name] = store
        return self._stores[fmt.name]

    def _object(self, sha: bytes):
        """The object `sha` names, or None when this repository does not hold it."""
        store = self._store(SHA256 if len(sha) == 64 else SHA1)
        try:
            return store[sha]
        except KeyError:
            return None

    def _ref(self, name: str, depth: int = 0) -> bytes | None:
        if depth > LINK_DEPTH or (name != "HEAD" and not _REF_NAME.match(name)):
            return None
        if any(part.startswith(".") or part.endswith(".lock") for part in name.split("/")):
            return None
        text = _read_plain(self.gitdir / name, REF_BYTES, self.gitdir)
        if text is None and name != "HEAD":
            text = self._packed_ref(name)
        if text is None:
            return None
        text = text.strip()
        if text.startswith(b"ref: "):
            return self._ref(os.fsdecode(text[len(b"ref: ") :].strip()), depth + 1)
        return text if _HEX.match(text) else None

    def _packed_ref(self, name: str) -> bytes | None:
        data = _read_plain(self.gitdir / "packed-refs", PACKED_REFS_BYTES, self.gitdir)
        wanted = os.fsencode(name)
        for line in (data or b"").splitlines():
            sha, _, ref = line.partition(b" ")
            if ref == wanted:
                return sha
        return None

    def _peeled_commit(self, sha: bytes) -> bytes | None:
        for _ in range(LINK_DEPTH):
            found = self._object(sha)
            if isinstance(found, Commit):
                return sha
            if not isinstance(found, Tag):
                return None
            sha = found.object[1]
        return None

    def head(self) -> str | None:
        """HEAD's commit, or None when HEAD names no commit this repository holds."""
        try:
            sha = self._ref("HEAD")
            found = sha is not None and self._object(sha)
        except Exception as exc:  # a corrupt file can fail any parser
            raise _refused(self.top, exc) from exc
        return sha.decode() if isinstance(found, Commit) else None

    def has_commit(self, text: str) -> bool:
        """Whether `text` (a full or abbreviated hex sha) names one commit of this repository,
        or a tag of one, as `git cat-file -e TEXT^{commit}` would say without fetching."""
        wanted = text.lower().encode()
        try:
            if len(wanted) in (40, 64):
                candidates = [wanted]
            else:
                head = self._ref("HEAD")
                store = self._store(SHA256 if head is not None and len(head) == 64 else SHA1)
                candidates = list(islice(store.iter_prefix(wanted), PREFIX_CANDIDATES))
            commits = {self._peeled_commit(c) for c in candidates} - {None}
        except Exception as exc:  # a corrupt file can fail any parser
            raise _refused(self.top, exc) from exc
        return len(commits) == 1

    def dirty(self, head: str) -> bool | None:
        """Whether the index or a tracked file differs from commit `head`; None: cannot tell."""
        budget = _Budget()
        try:
            commit = self._object(head.encode())
            if not isinstance(commit, Commit):
                return None
            fmt = SHA256 if len(head) == 64 else SHA1
            folders: list[bytes] = []
            files: dict[bytes, tuple[int, bytes]] = {}
            self._walk(commit.tree, b"", folders, files, budget, 0)
            index = self._index(fmt, budget)
            if index is None:
                return None
            if index != files:
                return True
            return self._worktree_differs(folders, files, fmt, budget)
        except Exception:  # a corrupt file can fail any parser
            return None

    def _walk(self, sha, prefix, folders, files, budget, depth) -> None:
        if depth > TREE_DEPTH:
            raise _Unreadable("too deep")
        tree = self._object(sha)
        if not isinstance(tree, Tree):
            raise _Unreadable("not a tree")
        for entry in tree.iteritems():
            budget.entry()
            name = entry.path
            if name in (b"", b".", b"..") or b"/" in name or b"\0" in name:
                raise _Unreadable("bad name")
            if name.lower() == b".git":
                raise _Unreadable("bad name")
            path = prefix + name
            if stat.S_ISDIR(entry.mode):
                folders.append(path)
                self._walk(entry.sha, path + b"/", folders, files, budget, depth + 1)
            else:
                files[path] = (cleanup_mode(entry.mode), entry.sha)

    def _index(self, fmt: ObjectFormat, budget: _Budget) -> dict[bytes, tuple[int, bytes]] | None:
        """The index's stage-0 entries; {} without an index; None with a conflict in it."""
        data = _read_plain(self.gitdir / "index", INDEX_BYTES, self.gitdir)
        if data is None:
            return {}
        stream = io.BytesIO(data)
        version, count = read_index_header(stream)
        if count > ENTRIES:
            raise _Unreadable("too large")
        entries: dict[bytes, tuple[int, bytes]] = {}
        previous = b""
        for _ in range(count):
            budget.entry()
            entry = read_cache_entry(stream, version, previous, fmt)
            previous = entry.name
            if entry.flags & 0x3000:  # a merge stage: a conflict is a change
                return None
            entries[entry.name] = (cleanup_mode(entry.mode), entry.sha)
        return entries

    def _worktree_differs(self, folders, files, fmt, budget) -> bool:
        top = os.fsencode(self.top)
        for folder in folders:
            budget.entry()
            try:
                if not stat.S_ISDIR(os.lstat(os.path.join(top, folder)).st_mode):
                    return True
            except OSError:
                return True
        for path, (mode, sha) in files.items():
            budget.entry()
            if mode == _GITLINK:
                continue
            if _blob_sha(os.path.join(top, path), mode, fmt, budget) != sha:
                return True
        return False


def _blob_sha(path: bytes, mode: int, fmt: ObjectFormat, budget: _Budget) -> bytes | None:
    """The git blob sha of the file at `path` as it would be committed with `mode`, read as
    bytes only (a link's target, never what it points to); None when it is not such a file."""
    try:
        found = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(found):
        if mode != stat.S_IFLNK:
            return None
        data = os.readlink(path)
        budget.read(len(data))
        digest = fmt.new_hash()
        digest.update(b"blob %d\0" % len(data) + data)
        return digest.hexdigest().encode()
    if not stat.S_ISREG(found) or cleanup_mode(found) != mode:
        return None
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        budget.read(size)
        digest = fmt.new_hash()
        digest.update(b"blob %d\0" % size)
        for block in _blocks(handle, size):
            digest.update(block)
    return digest.hexdigest().encode()


def _blocks(handle, size: int) -> Iterator[bytes]:
    left = size
    while left > 0:
        block = handle.read(min(left, 1 << 20))
        if not block:
            raise _Unreadable("changed while read")
        left -= len(block)
        yield block


def _refused(top: Path, exc: Exception) -> RepositoryRefused:
    return RepositoryRefused(
        Msg(
            "{name}/.git cannot be read ({kind})",
            name=top.name or str(top),
            kind=declared(_PAST_BOUNDS if isinstance(exc, _Unreadable) else _CORRUPT),
        )
    )
