"""The reference's outputs on the verify fixtures, kept on disk across processes.

`labctl.verify.fixtures` computes the reference's output on every fixture once
per process. A grading batch starts several processes (local workers, Dask
workers), so the outputs of the batch's seed are also kept in one file: a
line of JSON (the index) followed by an `.npz` (arrays only, read with
`allow_pickle=False`). The file is used only when its key matches this
process's: the seed, the contract's digest, the fixtures' version, labctl's
version, the numpy and torch versions that computed it, and which key signed it.

The file is signed: an HMAC-SHA256 over the index and the arrays, with a
secret (`LABCTL_REFERENCE_KEY`, hex) that `labctl grade` keeps outside the
cache folder and hands only to labctl's own processes (learner code runs in
a sandbox with a cleared environment and never sees it). A file of the right
key whose signature does not hold was edited after labctl wrote it: it is
never used, `discard_edited` names and removes it, and the outputs are
computed again. A file of another key is stale, ignored and written anew.

The cache is on only where `LABCTL_REFERENCE_CACHE` names a folder and
`LABCTL_REFERENCE_KEY` holds the secret (both set by `labctl grade` for its
workers); everywhere else nothing changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

ENV = "LABCTL_REFERENCE_CACHE"
KEY_ENV = "LABCTL_REFERENCE_KEY"
SCHEMA = "labctl.reference-cache.v2"


def cache_key(seed: int) -> str:
    import labctl
    from labctl import contract
    from labctl.verify.builders import FIXTURES_VERSION

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "none"
    key = secret()
    parts = {
        # A file signed with another key (a batch's secrets lost) is another file, not an edit.
        "signed_by": hashlib.sha256(key).hexdigest()[:16] if key else None,
        "contract_sha256": contract.CONTRACT_V1_SHA256,
        "fixtures": FIXTURES_VERSION,
        "seed": seed,
        "labctl": labctl.__version__,
        "numpy": np.__version__,
        "torch": torch_version,
    }
    text = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def folder() -> Path | None:
    where = os.environ.get(ENV)
    return Path(where) if where else None


def secret() -> bytes | None:
    try:
        return bytes.fromhex(os.environ.get(KEY_ENV, "")) or None
    except ValueError:
        return None


def path_of(where: Path, seed: int) -> Path:
    return where / f"reference-{cache_key(seed)[:16]}.bin"


def _mac(key: bytes, index: dict, blob: bytes) -> str:
    text = json.dumps(index, sort_keys=True).encode("utf-8")
    return hmac.new(key, text + b"\n" + blob, hashlib.sha256).hexdigest()


# The file at each path as this process last read it signed or wrote it: its identity
# (device, inode, size, modification time) and the outputs it holds. A grading worker warms the
# reference before every learner; reading the unchanged file again (~25 ms, twice a learner)
# would only give it what it already holds.
_KNOWN: dict[Path, tuple[tuple[int, ...], frozenset]] = {}


def _identity(stat: os.stat_result) -> tuple[int, ...]:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def held(seed: int, where: Path | None = None) -> frozenset:
    """The outputs the cache file of `seed` holds, where it is still the very file this process
    last read signed or wrote; empty otherwise (absent, replaced, edited: it must be read)."""
    where = where or folder()
    if where is None or secret() is None:
        return frozenset()
    path = path_of(where, seed)
    known = _KNOWN.get(path)
    try:
        now = _identity(path.stat())
    except OSError:
        return frozenset()
    return known[1] if known is not None and known[0] == now else frozenset()


def _read(
    path: Path, seed: int, key: bytes
) -> tuple[str, dict | None, bytes, tuple[int, ...] | None]:
    """("absent" | "stale" | "edited" | "signed", index, arrays' bytes, the file's identity as
    read: `_identity`) of the file at `path`."""
    try:
        with path.open("rb") as handle:
            identity = _identity(os.fstat(handle.fileno()))
            data = handle.read()
    except OSError:
        return "absent", None, b"", None
    head, _, blob = data.partition(b"\n")
    try:
        index = json.loads(head.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "edited", None, b"", identity
    if not isinstance(index, dict) or index.get("schema") != SCHEMA:
        return "edited", None, b"", identity
    if index.get("key") != cache_key(seed):
        return "stale", None, b"", identity
    mac = index.pop("mac", None)
    if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(key, index, blob)):
        return "edited", None, b"", identity
    return "signed", index, blob, identity


def discard_edited(seed: int, where: Path | None = None) -> Path | None:
    """Remove the cache of `seed` if it was edited after labctl signed it; return its path."""
    where, key = where or folder(), secret()
    if where is None or key is None:
        return None
    path = path_of(where, seed)
    state = _read(path, seed, key)[0]
    if state != "edited":
        return None
    path.unlink(missing_ok=True)
    return path


def load(into: dict[tuple[int, str, str], Any], seed: int, where: Path | None = None) -> int:
    """Add the cached outputs of `seed` to `into`; return how many were read (0: none usable)."""
    where, key = where or folder(), secret()
    if where is None or key is None:
        return 0
    path = path_of(where, seed)
    state, index, blob, identity = _read(path, seed, key)
    if state != "signed" or index is None or identity is None:
        return 0
    read: dict[tuple[int, str, str], Any] = {}
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as arrays:
            for entry in index["entries"]:
                values = [arrays[name] for name in entry["arrays"]]
                read[(seed, entry["function"], entry["fixture"])] = (
                    tuple(values) if entry["tuple"] else values[0]
                )
    except (OSError, ValueError, KeyError, TypeError):
        return 0  # signed by us but not readable here: computed again instead
    into.update(read)
    _KNOWN[path] = (identity, frozenset(read))
    return len(read)


def save(
    outputs: dict[tuple[int, str, str], Any], seed: int, where: Path | None = None
) -> Path | None:
    """Write the outputs of `seed` (arrays, or tuples of arrays) as the signed cache; atomic,
    last writer wins."""
    from labctl.evidence.store import replace_atomically

    where, key = where or folder(), secret()
    if where is None or key is None:
        return None
    arrays: dict[str, np.ndarray] = {}
    entries = []
    for (drawn_with, function, fixture), value in sorted(outputs.items()):
        if drawn_with != seed:
            continue
        values = value if isinstance(value, tuple) else (value,)
        names = []
        for value_ in values:
            name = f"a{len(arrays)}"
            arrays[name] = np.asarray(value_)
            names.append(name)
        entries.append(
            {
                "function": function,
                "fixture": fixture,
                "tuple": isinstance(value, tuple),
                "arrays": names,
            }
        )
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    blob = buffer.getvalue()
    index = {"schema": SCHEMA, "key": cache_key(seed), "seed": seed, "entries": entries}
    index["mac"] = _mac(key, index, blob)
    where.mkdir(parents=True, exist_ok=True)
    path = path_of(where, seed)
    data = json.dumps(index, sort_keys=True).encode("utf-8") + b"\n" + blob
    replace_atomically(path, data)
    written = frozenset((seed, e["function"], e["fixture"]) for e in entries)
    with contextlib.suppress(OSError):
        stat = path.stat()
        # Another process may have replaced it since (last writer wins): only a file of this
        # size is taken for ours, and a wrong guess only costs the next read.
        if stat.st_size == len(data):
            _KNOWN[path] = (_identity(stat), written)
    return path
