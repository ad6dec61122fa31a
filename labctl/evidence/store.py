"""The evidence store: records written atomically, never overwritten, indexed by a manifest.

Layout under the evidence root (default `evidence/`):

    runs/<lab>/<stamp>-seed<seed>-<id>.yaml|.json   one record per lab run
    verify/...                                        verify records and history
    submissions/...                                   accepted learner submissions
    module-manifest-v1.json                           newest record per module

A file is written to a temporary name and hard-linked into place, so a reader
never sees half a file and an existing file is never replaced. The manifest is
read, updated and replaced under an exclusive lock, so two runs at once both
land.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import secrets
import stat
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import yaml

from labctl.errors import StoreError, UsageError
from labctl.evidence.environment import project_root
from labctl.evidence.models import EvidenceRecord
from labctl.evidence.times import not_older
from labctl.i18n import Msg, declared
from labctl.inputfile import kind, read_regular
from labctl.textsafe import valid

MANIFEST_NAME = "module-manifest-v1.json"
MANIFEST_SCHEMA = "labctl.module-manifest.v1"
# One entry per module is a few KiB; past this a manifest is not one labctl wrote.
MANIFEST_MAX_BYTES = 16 << 20


def _shared_mode() -> int:
    """The mode `open()` gives a new file here: 0644 under the usual umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def _temporary(path: Path, data: bytes, private: bool) -> Iterator[str]:
    """`data` flushed to disk in a temporary file beside `path`, removed after the block.

    mkstemp creates the file 0600; a record or a report is for reading like any other
    file labctl writes, so it gets the umask's mode unless `private` (a secret) keeps 0600.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        if not private:
            os.fchmod(fd, _shared_mode())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        yield tmp
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_new(path: Path, data: bytes) -> None:
    """Create `path` with `data` atomically; refuse if it exists."""
    with _temporary(path, data, private=False) as tmp:
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise StoreError(
                Msg("{path} already exists; evidence is never overwritten", path=str(path))
            ) from None


def replace_atomically(path: Path, data: bytes, private: bool = False) -> None:
    """Write `path` atomically, replacing it; `private` keeps it 0600 (a secret). Only a
    regular file is replaced: a link, a FIFO or a device at `path` (`--out /dev/stdout`, run
    as root, replaced the system's /dev/stdout link with a report) is refused, untouched."""
    _replaceable(path)
    with _temporary(path, data, private) as tmp:
        os.replace(tmp, path)


def _replaceable(path: Path) -> None:
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise StoreError(
            Msg(
                "{path} is not a regular file (a link, a FIFO or a device): labctl replaces "
                "only a file, and wrote nothing",
                path=str(path),
            )
        )


def _appendable(path: Path) -> None:
    """`path` is absent or a regular file: appending to a FIFO waits for a reader forever,
    and a device or a directory is no history."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(
            Msg("cannot write {path}: {error}", path=str(path), error=exc.strerror or str(exc))
        ) from None
    if not stat.S_ISREG(mode):
        raise UsageError(
            Msg("{path}: is {kind}, not a regular file", path=str(path), kind=declared(kind(mode)))
        )


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on `path`.lock for the length of the block.

    The lock file is removed when the lock is released, so no empty `.lock` stays
    behind. A waiter may then hold a lock on the removed file: it checks, once it
    has the lock, that the file it locked is still the one at the path, and else
    tries again on the new one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = f"{path}.lock"
    while True:
        fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            current = os.stat(lock)
        except FileNotFoundError:
            current = None
        if current is not None and current.st_ino == os.fstat(fd).st_ino:
            break
        os.close(fd)
    try:
        yield
    finally:
        # removed while still held: a waiter that wakes on it sees it gone and retries
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def record_stem(seed: int) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{stamp}-seed{seed}-{secrets.token_hex(4)}"


# libyaml's emitter where PyYAML was built with it: the same text, five times faster.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def yaml_text(data: dict, width: int = 80) -> str:
    """`data` as YAML; a long text folded near `width` characters (at a space)."""
    return yaml.dump(data, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, width=width)


class EvidenceStore:
    """An evidence root directory and the manifest beside its record folders."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.manifest_path = self.root / MANIFEST_NAME

    @functools.cached_property
    def project(self) -> Path:
        """The repository artifacts are named relative to, found once per store:
        `run all` writes some 60 artifacts."""
        return project_root()

    def write_record(self, folder: Path, stem: str, record: EvidenceRecord) -> list[Path]:
        """Write `record` as YAML and JSON under `folder` (relative to the root)."""
        # valid: a name that is not UTF-8 (a room's folder) is kept escaped, never a crash.
        data = valid(record.dump())
        target = self.root / folder
        paths = [target / f"{stem}.yaml", target / f"{stem}.json"]
        write_new(paths[0], yaml_text(data).encode("utf-8"))
        write_new(paths[1], (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode())
        return paths

    def write_artifact(self, folder: Path, name: str, data: bytes) -> Path:
        path = self.root / folder / name
        write_new(path, data)
        return path

    def read_manifest(self) -> dict:
        path = self.manifest_path
        if not path.exists() and not path.is_symlink():
            return {"schema": MANIFEST_SCHEMA, "modules": {}}
        try:
            # a FIFO, a link to /dev/zero or a directory is refused (UsageError), never read
            raw = read_regular(path, MANIFEST_MAX_BYTES)
        except OSError as exc:
            raise self._unreadable(exc.strerror or str(exc)) from None
        if raw is None:
            raise self._unreadable(
                Msg("larger than the {limit} byte limit", limit=MANIFEST_MAX_BYTES)
            )
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            raise self._unreadable(str(exc)) from None
        if (
            not isinstance(data, dict)
            or data.get("schema") != MANIFEST_SCHEMA
            or not isinstance(data.get("modules"), dict)
        ):
            raise StoreError(
                Msg("{path}: not a {schema} manifest", path=str(path), schema=MANIFEST_SCHEMA)
            )
        return data

    def _unreadable(self, error: str | Msg) -> StoreError:
        return StoreError(
            Msg(
                "{path}: unreadable manifest ({error}); move it aside and run again "
                "(labctl starts a new one)",
                path=str(self.manifest_path),
                error=error,
            )
        )

    def check_writable(self, *appended: Path) -> None:
        """Refuse, before a record is written, a manifest that cannot be read or replaced and
        a history (`appended`, relative to the root) that cannot take a line: what is refused
        after the record would leave it written without its manifest entry or history line."""
        self.read_manifest()
        _replaceable(self.manifest_path)
        for relative in appended:
            _appendable(self.root / relative)

    def point_manifest(self, module: str, entry: dict) -> None:
        """Point `module` at `entry` (with `record` and `verified_at`) unless a newer one is there."""
        with locked(self.manifest_path):
            manifest = self.read_manifest()
            current = manifest["modules"].get(module)
            if current is None or not_older(entry["verified_at"], current.get("verified_at")):
                manifest["modules"][module] = entry
                text = (
                    json.dumps(valid(manifest), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
                )
                replace_atomically(self.manifest_path, text.encode("utf-8"))

    def append_line(self, relative: Path, entry: dict) -> Path:
        """Append one JSON line to a history file under the lock."""
        path = self.root / relative
        with locked(path):
            _appendable(path)
            try:
                # O_NONBLOCK: a FIFO put there after the check is refused (ENXIO), not waited on
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
                fd = os.open(path, flags, 0o666)
            except OSError as exc:
                raise StoreError(
                    Msg(
                        "cannot write {path}: {error}",
                        path=str(path),
                        error=exc.strerror or str(exc),
                    )
                ) from None
            with os.fdopen(fd, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(valid(entry), ensure_ascii=False, sort_keys=True) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        return path

    def relative(self, path: Path) -> str:
        """`path` relative to the manifest's folder, for pointers that survive a move."""
        return os.path.relpath(path, self.root)
