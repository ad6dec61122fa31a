"""A batch's seed and the key that signs its reference cache: the grader's, never a learner's.

One seed per batch: every learner of the batch is verified on inputs drawn
from it, so their rows compare, and no learner knows it in advance. It is
kept with the key in `OUT/.batch-secrets.json` (mode 0600), beside the
records and outside every learner-facing folder (`feedback/`,
`gradescope/`), and outside `OUT/.reference-cache/`, whose file the key
signs. A batch resumed in the same `--out` reuses both (its records keep
their verdicts); `--seed` replaces the seed, and then every learner is
graded again, since the seed is part of each record's key.

The batch's workers are given the cache's folder and the key (`worker_env`); the batch's
process checks the cache before any of them reads it (`warm_reference_cache`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from labctl.evidence.store import replace_atomically
from labctl.i18n import Msg, language
from labctl.verify.builders import MAX_SEED, fresh_seed

SECRETS = ".batch-secrets.json"
CACHE = ".reference-cache"
SCHEMA = "labctl.grade-batch-secrets.v1"


@dataclass(frozen=True)
class BatchSecrets:
    seed: int
    reference_key: str  # hex: the HMAC key of `labctl.verify.reference_cache`


def _kept(path: Path) -> BatchSecrets | None:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    seed, key = data.get("seed"), data.get("reference_key")
    valid_seed = isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= MAX_SEED
    if not valid_seed or not isinstance(key, str) or len(key) != 64:
        return None
    try:
        bytes.fromhex(key)
    except ValueError:
        return None
    return BatchSecrets(seed, key)


def kept_seed(out: Path) -> int | None:
    """The seed the batch in `out` was graded at, or None where none is kept."""
    kept = _kept(out / SECRETS)
    return kept.seed if kept else None


def batch_secrets(out: Path, seed: int | None) -> BatchSecrets:
    """The batch's seed (`seed`, else the one kept in `out`, else a fresh one) and its key."""
    path = out / SECRETS
    kept = _kept(path)
    chosen = BatchSecrets(
        seed if seed is not None else (kept.seed if kept else fresh_seed()),
        kept.reference_key if kept else secrets.token_hex(32),
    )
    if chosen != kept:
        document = {"schema": SCHEMA, "seed": chosen.seed, "reference_key": chosen.reference_key}
        # private: the file is 0600 from its first byte.
        replace_atomically(path, (json.dumps(document) + "\n").encode("utf-8"), private=True)
    return chosen


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def warm_reference_cache(cache: Path, seed: int, key: str, compute: bool = True) -> list[Msg]:
    """The reference's outputs on every fixture at `seed`, computed (or read) once for the
    batch; a cache edited since it was signed is named in the warnings and computed again.
    Without `compute`, only the edited cache is named and removed: the workers compute it."""
    from labctl import contract
    from labctl.verify import fixtures, reference_cache

    with _environment(reference_cache.ENV, str(cache)), _environment(reference_cache.KEY_ENV, key):
        edited = reference_cache.discard_edited(seed)
        if compute:
            fixtures.warm_reference(contract.function_names(), seed)
    if edited is None:
        return []
    return [
        Msg("{path} was edited after labctl wrote it: not used, computed again", path=str(edited))
    ]


def worker_env(out: Path, reference_key: str, labs: bool) -> dict[str, str]:
    """What a batch's workers are started with: the reference's cache, the language, and
    for labs, torch imported as the worker starts."""
    env = {
        "LABCTL_REFERENCE_CACHE": str((out / CACHE).resolve()),
        "LABCTL_REFERENCE_KEY": reference_key,
        "LABCTL_LANG": language(),
    }
    if labs:
        env["LABCTL_WORKER_TORCH"] = "1"
    return env
