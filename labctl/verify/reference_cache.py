"""The reference's outputs on the verify fixtures, kept on disk across processes.

`labctl.verify.fixtures` computes the reference's output on every fixture once
per process. A grading batch starts several processes (local workers, Dask
workers), so the outputs are also kept in one `.npz` file (arrays only, read
with `allow_pickle=False`) beside a JSON index. The file is used only when its
key matches this process's: the contract's digest, the fixtures' version (their
seeds are derived from their names), labctl's version and the numpy and torch
versions that computed it; and its bytes match the sha256 the index holds. A
stale or damaged cache is ignored and written again.

The cache is on only where `LABCTL_REFERENCE_CACHE` names a folder (set by
`labctl grade` for its workers); everywhere else nothing changes.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

ENV = "LABCTL_REFERENCE_CACHE"
SCHEMA = "labctl.reference-cache.v1"


def cache_key() -> str:
    import labctl
    from labctl import contract
    from labctl.verify.fixtures import FIXTURES_VERSION

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "none"
    parts = {
        "contract_sha256": contract.CONTRACT_V1_SHA256,
        "fixtures": FIXTURES_VERSION,
        "labctl": labctl.__version__,
        "numpy": np.__version__,
        "torch": torch_version,
    }
    text = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def folder() -> Path | None:
    where = os.environ.get(ENV)
    return Path(where) if where else None


def _paths(where: Path, key: str) -> tuple[Path, Path]:
    stem = f"reference-{key[:16]}"
    return where / f"{stem}.npz", where / f"{stem}.json"


def load(into: dict[tuple[str, str], Any], where: Path | None = None) -> int:
    """Add the cached outputs to `into`; return how many were read (0: no usable cache)."""
    where = where or folder()
    if where is None:
        return 0
    key = cache_key()
    data_path, index_path = _paths(where, key)
    try:
        index = json.loads(index_path.read_text("utf-8"))
        blob = data_path.read_bytes()
    except (OSError, ValueError):
        return 0
    if (
        not isinstance(index, dict)
        or index.get("schema") != SCHEMA
        or index.get("key") != key
        or index.get("sha256") != hashlib.sha256(blob).hexdigest()
    ):
        return 0
    read: dict[tuple[str, str], Any] = {}
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as arrays:
            for entry in index["entries"]:
                values = [arrays[name] for name in entry["arrays"]]
                read[(entry["function"], entry["fixture"])] = (
                    tuple(values) if entry["tuple"] else values[0]
                )
    except (OSError, ValueError, KeyError, TypeError):
        return 0  # a cache written by something else: computed again instead
    into.update(read)
    return len(read)


def save(outputs: dict[tuple[str, str], Any], where: Path | None = None) -> Path | None:
    """Write `outputs` (arrays, or tuples of arrays) as the cache; atomic, last writer wins."""
    from labctl.evidence.store import replace_atomically

    where = where or folder()
    if where is None:
        return None
    key = cache_key()
    data_path, index_path = _paths(where, key)
    arrays: dict[str, np.ndarray] = {}
    entries = []
    for (function, fixture), value in sorted(outputs.items()):
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
    index = {
        "schema": SCHEMA,
        "key": key,
        "sha256": hashlib.sha256(blob).hexdigest(),
        "entries": entries,
    }
    where.mkdir(parents=True, exist_ok=True)
    replace_atomically(data_path, blob)
    replace_atomically(index_path, (json.dumps(index, indent=1) + "\n").encode("utf-8"))
    return data_path
